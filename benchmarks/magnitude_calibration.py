# Copyright 2026 The veckm_flow_ros Authors
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""
Whether a calibration of the flow magnitudes lowers the egomotion and time-to-contact errors.

    OMP_NUM_THREADS=1 python3 benchmarks/magnitude_calibration.py --work-dir DIR
        [--cache-dir DIR ...] [--train-cache DIR] [--train-2d 200] [--train-3d 12]

Flows are the node's (stream.pipeline.node_default_estimator: automatic block, min_validity
and the second look at flows slower than long_context_below_px_s). Each sequence is run
twice, with the second look off and with it for every kept flow, so that every variant below
is formed from the two without running the model again (the node's flow: the first,
replaced by the second below the threshold). Flows are cached in --work-dir/flows; 3D
sequences are read from (or simulated into) the first --cache-dir that has them
(`evaluate-egomotion --cache-dir` names: TRAJECTORY-SEED_0.5s.npz).

Sets. Held out: the 2D held-out set (offline/evaluate.py, 1 Hz/px background activity), the
eight mixed 3D sequences (simulate3d.heldout_3d_specs(8)) and twelve approaches
(heldout_3d_specs(12, ('approach',))) plus the two of the mixed set. Training, never held
out: the first --train-2d sequences of the full recipe (train.training_sequence; cached in
--train-cache) and --train-3d scenes of 346 x 260 px, 0.5 s, trajectories in turn, seeds
train.TRAIN_3D_SEED + 900,000 + i.

Tables: (1) the magnitude bias of each set by true and by estimated speed: median of |n| /
(n_hat . u) over the flows of the right sign (n the flow, u the exact optical flow), share of
right signs; (2) calibrations fitted on the training sets only: per bin of estimated speed
the scale 1 / median ratio, placed at the bin's median speed, made monotone (the corrected
speed never falls as the estimated one rises), interpolated in log speed, flows below
50 px/s left alone; (3) per variant: 2D held-out %Pos / relative PEE, the eight
3D sequences with gyro (direction error median / p90 over all windows, median over the
turning and over the other windows, time to contact per region / minimum) and the 14
approaches (direction median, time to contact per region / minimum). Variants: the node's
flows (baseline), constant scales, the calibrations, the geometric mean of the plain and the
long-context speed for 150-400 px/s, and the exact magnitudes on the estimated normals times
1, 1.05 and 0.95 (how much a common scale error costs the egomotion estimator).
"""

import argparse
import json
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SPEED_EDGES_PX_S = (0, 50, 100, 150, 250, 400, 700, 1000, 1500, 1e9)
CALIBRATION_EDGES_PX_S = (50, 100, 150, 250, 400, 700, 1000, 1500, 3000)
CALIBRATION_BELOW_PX_S = 50.0
TRAIN_3D_OFFSET = 900_000
_SEQUENCES = {}


def _log(message):
    print(message, flush=True)


def sequence3d(spec, cache_dirs, duration_s=0.5):
    """Load a 3D sequence from the first cache dir that has it, else simulate it there."""
    from veckm_flow_ros.learning import simulate3d
    name = f'{spec["trajectory"]}-{spec["seed"]}_{duration_s:g}s.npz'
    for directory in cache_dirs:
        if (pathlib.Path(directory) / name).is_file():
            return simulate3d.load_npz3d(pathlib.Path(directory) / name)
    _log(f'  simulating {name}')
    sequence = simulate3d.simulate3d(simulate3d.make_scene3d(**spec), duration_s,
                                     seed=spec['seed'])
    path = pathlib.Path(cache_dirs[0]) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    simulate3d.save_npz3d(sequence, path)
    return sequence


def set_sources(args):
    """{set: [(name, loader)]}; a loader returns the sequence."""
    from veckm_flow_ros.learning import simulate, simulate3d, train
    from veckm_flow_ros.offline import evaluate
    sources = {'heldout2d': [], 'ego3d': [], 'approach': [], 'train2d': [], 'train3d': []}
    for spec in evaluate.heldout_specs(12):
        def load(spec=spec):
            scene = simulate.make_scene(spec['motion'], spec['texture'], seed=spec['seed'],
                                        width=346, height=260)
            scene.sensor.noise_rate_hz_per_px = 1.0
            return simulate.simulate(scene, 0.15, seed=spec['seed'])
        sources['heldout2d'].append(
            (f'{spec["motion"]}-{spec["texture"]}-{spec["seed"] - evaluate.HELDOUT_SEED}', load))
    caches = args.cache_dir or [str(pathlib.Path(args.work_dir) / 'sequences')]
    mixed = simulate3d.heldout_3d_specs(8)
    approaches = simulate3d.heldout_3d_specs(12, ('approach',)) + [
        spec for spec in mixed if spec['trajectory'] == 'approach']
    for key, specs in (('ego3d', mixed), ('approach', approaches)):
        for spec in specs:
            sources[key].append((f'{spec["trajectory"]}-{spec["seed"]}',
                                 lambda spec=spec: sequence3d(spec, caches)))
    recipe = train.Recipe(**train.FULL_RECIPE)
    train_cache = pathlib.Path(args.train_cache or pathlib.Path(args.work_dir) / 'train')
    for index in range(args.train_2d):
        sources['train2d'].append((f'seed{index}', lambda index=index: train.training_sequence(
            recipe, index, train_cache)))
    for index in range(args.train_3d):
        spec = {'trajectory': simulate3d.TRAJECTORIES[index % len(simulate3d.TRAJECTORIES)],
                'seed': train.TRAIN_3D_SEED + TRAIN_3D_OFFSET + index}
        sources['train3d'].append((f'{spec["trajectory"]}-{spec["seed"]}',
                                   lambda spec=spec: sequence3d(spec, caches)))
    return sources


def two_flows(model, sequence):
    """Plain and long-context flows of every kept flow at the node's defaults (a dict)."""
    from veckm_flow_ros.stream.pipeline import node_default_estimator
    result = {}
    for key, below_px_s in (('plain', 0.0), ('long', 1e6)):
        estimator = node_default_estimator(
            model, sequence.width, sequence.height, long_context_below_px_s=below_px_s,
            max_buffered_events=max(8_000_000, len(sequence.events) + 1))
        result[key] = estimator.estimate_all(sequence.events)
    plain, long = result['plain'], result['long']
    index = np.asarray(plain.event_index, np.int64)
    return {'index': index, 'plain': np.stack([plain.u_px_s, plain.v_px_s], 1),
            'long': np.stack([long.u_px_s, long.v_px_s], 1), 'validity': plain.validity,
            'truth': sequence.flow_px_s[index].astype(np.float32),
            'noise': np.asarray(sequence.is_noise, bool)[index]}


def load_flows(model, sources, work_dir):
    """{set: {name: flows dict}}, computed once and cached as npz under work_dir/flows."""
    flows = {}
    for key, items in sources.items():
        flows[key] = {}
        for number, (name, load) in enumerate(items, 1):
            path = pathlib.Path(work_dir) / 'flows' / f'{key}_{name}.npz'
            if not path.is_file():
                start = time.perf_counter()
                path.parent.mkdir(parents=True, exist_ok=True)
                np.savez(path, **two_flows(model, load()))
                _log(f'  flows {key} [{number}/{len(items)}] {name}: '
                     f'{time.perf_counter() - start:.0f} s')
            flows[key][name] = dict(np.load(path))
    return flows


def node_flow(flows, below_px_s):
    """Return the node's flow: the plain one, replaced by the long-context one below the speed."""
    plain = flows['plain'].astype(np.float64)
    slow = np.hypot(plain[:, 0], plain[:, 1]) < below_px_s
    result = plain.copy()
    result[slow] = flows['long'][slow]
    return result


def projected_truth(flow, truth):
    """(n_hat . u, |n|): the exact flow on the estimated normal, and the estimated speed."""
    speed = np.hypot(flow[:, 0], flow[:, 1])
    direction = flow / np.maximum(speed, 1e-12)[:, None]
    return np.einsum('ij,ij->i', np.nan_to_num(truth.astype(np.float64)), direction), speed


def pooled(flow_sets, variant):
    """Signal flows of a set pooled: (flow, truth) float64."""
    flows, truths = [], []
    for flows_dict in flow_sets.values():
        signal = ~flows_dict['noise'] & np.all(np.isfinite(flows_dict['truth']), axis=1)
        flows.append(variant(flows_dict)[signal])
        truths.append(flows_dict['truth'][signal].astype(np.float64))
    return np.concatenate(flows), np.concatenate(truths)


def bias_table(name, flow, truth):
    along, speed = projected_truth(flow, truth)
    true_speed = np.hypot(truth[:, 0], truth[:, 1])
    valid = (speed > 0) & (true_speed > 0)
    _log(f'\n{name}: {int(valid.sum()):,} signal flows; ratio |n| / (n_hat . u) (median, right '
         'signs only), %Pos')
    _log(f'{"speed bin px/s":<15} | {"by true |u|: flows":>18} {"%Pos":>6} {"ratio":>6} | '
         f'{"by estimated |n|: flows":>23} {"%Pos":>6} {"ratio":>6}')
    for low, high in zip(SPEED_EDGES_PX_S[:-1], SPEED_EDGES_PX_S[1:]):
        cells = []
        for key in (true_speed, speed):
            inside = valid & (key >= low) & (key < high)
            right = inside & (along > 0)
            ratio = np.median(speed[right] / along[right]) if right.sum() >= 100 else np.nan
            cells.append(f'{int(inside.sum()):>{18 if not cells else 23},} '
                         f'{100 * right.sum() / max(inside.sum(), 1):>6.1f} {ratio:>6.3f}')
        _log(f'{low:>6g}-{high:<8g} | {cells[0]} | {cells[1]}')
    right = valid & (along > 0)
    _log(f'{"all":<15} | {int(valid.sum()):>18,} {100 * right.sum() / valid.sum():>6.1f} '
         f'{np.median(speed[right] / along[right]):>6.3f} |')


def fit_calibration(flow, truth):
    """Knots [px/s] and scales: 1 / median ratio per estimated-speed bin (see docstring)."""
    along, speed = projected_truth(flow, truth)
    right = (speed > 0) & (along > 0)
    knots, scales = [], []
    for low, high in zip(CALIBRATION_EDGES_PX_S[:-1], CALIBRATION_EDGES_PX_S[1:]):
        inside = right & (speed >= low) & (speed < high)
        if inside.sum() < 1000:
            continue
        knots.append(float(np.median(speed[inside])))
        scales.append(float(1.0 / np.median(speed[inside] / along[inside])))
    knots, scales = np.array(knots), np.array(scales)
    # Monotone: the corrected speed at the knots must not fall as the estimated one rises
    # (pool adjacent violators on knot x scale, equal weights).
    blocks = []
    for value in knots * scales:
        blocks.append([value, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            value, count = blocks.pop()
            mean, weight = blocks[-1]
            blocks[-1] = [(mean * weight + value * count) / (weight + count), weight + count]
    corrected = np.concatenate([[value] * count for value, count in blocks])
    return knots, corrected / knots


def calibrated(base, knots, scales):
    def variant(flows):
        flow = base(flows)
        speed = np.hypot(flow[:, 0], flow[:, 1])
        scale = np.interp(np.log(np.maximum(speed, 1e-6)), np.log(knots), scales)
        return flow * np.where(speed < CALIBRATION_BELOW_PX_S, 1.0, scale)[:, None]
    return variant


def geometric_mean(base, low_px_s, high_px_s):
    """Plain flows in [low, high) px/s get the geometric mean of the plain and long speeds."""
    def variant(flows):
        flow = base(flows)
        plain, long = flows['plain'].astype(np.float64), flows['long'].astype(np.float64)
        speed, long_speed = np.hypot(*plain.T), np.hypot(*long.T)
        chosen = (speed >= low_px_s) & (speed < high_px_s) & \
            (np.einsum('ij,ij->i', plain, long) > 0)
        flow[chosen] = plain[chosen] * np.sqrt(long_speed[chosen] / speed[chosen])[:, None]
        return flow
    return variant


def exact_magnitudes(base, factor):
    """Return a variant: the exact flow projected on the estimated normals, times factor."""
    def variant(flows):
        flow = base(flows)
        along, speed = projected_truth(flow, flows['truth'])
        known = np.all(np.isfinite(flows['truth']), axis=1) & (speed > 0)
        magnitude = np.where(known, factor * along, speed)
        return flow / np.maximum(speed, 1e-12)[:, None] * magnitude[:, None]
    return variant


def egomotion_rows(flow_sets, sources, variant, config):
    """Summary rows (offline/evaluate_egomotion.summary_row) of the 3D sets for a variant."""
    from veckm_flow_ros.offline import evaluate_egomotion
    loaders = dict(sources)
    results = []
    for name, flows in flow_sets.items():
        if name not in _SEQUENCES:  # read once: every variant runs on the same sequences
            _SEQUENCES[name] = loaders[name]()
        sequence = _SEQUENCES[name]
        flow = variant(flows)
        index = flows['index']
        data = (sequence.events.t_ns[index] * 1e-9, sequence.events.x[index],
                sequence.events.y[index], flow[:, 0], flow[:, 1],
                flows['validity'].astype(np.float64))
        results.append(evaluate_egomotion.evaluate_sequence(sequence, name, data, config))
    turning = [r for r in results if r.trajectory == 'turning']
    others = [r for r in results if r.trajectory != 'turning']
    rows = {'all': evaluate_egomotion.summary_row(results)}
    if turning and others:
        rows['turning'] = evaluate_egomotion.summary_row(turning)
        rows['others'] = evaluate_egomotion.summary_row(others)
    return rows


def main():
    from veckm_flow_ros.runtime import set_omp_wait_policy
    set_omp_wait_policy()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument('--work-dir', required=True, help='cache of flows (and sequences)')
    parser.add_argument('--cache-dir', nargs='+', default=None,
                        help='folders of simulated 3D sequences (TRAJECTORY-SEED_0.5s.npz); '
                        'new ones are written to the first (default: WORK_DIR/sequences)')
    parser.add_argument('--train-cache', default=None,
                        help='cache of the 2D training sequences (train.training_sequence; '
                        'default WORK_DIR/train)')
    parser.add_argument('--train-2d', type=int, default=200,
                        help='2D training sequences of the full recipe (first N seeds)')
    parser.add_argument('--train-3d', type=int, default=12, help='3D training scenes')
    args = parser.parse_args()
    for name in ('train_2d', 'train_3d'):
        if getattr(args, name) < 1:
            parser.error(f'--{name.replace("_", "-")} must be at least 1, got '
                         f'{getattr(args, name)}')
    import torch
    torch.set_num_threads(1)
    from veckm_flow_ros.core.egomotion import EgomotionConfig
    from veckm_flow_ros.core.metrics import flow_metrics
    from veckm_flow_ros.core.model import load_model
    from veckm_flow_ros.stream.parameters import parameter_default
    model = load_model(None)
    below_px_s = parameter_default('long_context_below_px_s')
    _log(f'model {model.name}, node defaults (second look below {below_px_s:g} px/s), '
         f'torch {torch.__version__}, 1 thread')
    sources = set_sources(args)
    start = time.perf_counter()
    flows = load_flows(model, sources, args.work_dir)
    _log(f'flows ready ({time.perf_counter() - start:.0f} s)')

    def base(flows_dict):
        return node_flow(flows_dict, below_px_s)
    for key in ('heldout2d', 'ego3d', 'approach', 'train2d', 'train3d'):
        bias_table(key, *pooled(flows[key], base))

    variants = {'node flows (baseline)': base}
    for factor in (0.95, 0.9):
        variants[f'constant x {factor:g}'] = \
            lambda flows_dict, factor=factor: base(flows_dict) * factor
    _log('\ncalibrations fitted on training sets (knots px/s: scale)')
    for label, keys in (('2D training', ('train2d',)), ('3D training', ('train3d',)),
                        ('2D + 3D training', ('train2d', 'train3d'))):
        parts = [pooled(flows[key], base) for key in keys]
        knots, scales = fit_calibration(np.concatenate([p[0] for p in parts]),
                                        np.concatenate([p[1] for p in parts]))
        fitted = dict(zip((f'{knot:.0f}' for knot in knots), np.round(scales, 3).tolist()))
        _log(f'  {label}: ' + json.dumps(fitted))
        variants[f'calibrated on {label}'] = calibrated(base, knots, scales)
    variants['geometric mean 150-400 px/s'] = geometric_mean(base, 150.0, 400.0)
    for factor in (1.0, 1.05, 0.95):
        variants[f'exact magnitudes x {factor:g}'] = exact_magnitudes(base, factor)

    config = EgomotionConfig().check()
    _log('\n| variant | 2D held-out %Pos / rel. PEE | 3D gyro direction median / p90 | '
         'turning / other windows, median | 3D TTC per region / min | approaches: direction '
         'median, TTC per region / min |')
    _log('|---|---|---|---|---|---|')
    for label, variant in variants.items():
        flow, truth = pooled(flows['heldout2d'], variant)
        scores = flow_metrics(flow, truth)
        ego = egomotion_rows(flows['ego3d'], sources['ego3d'], variant, config)
        approach = egomotion_rows(flows['approach'], sources['approach'], variant, config)
        mixed, near = ego['all'], approach['all']
        _log(f'| {label} | {100 * scores["pos"]:.2f} / {scores["rel_pee"]:.3f} | '
             f'{mixed["gyro_dir_med"]:.2f}° / {mixed["gyro_dir_p90"]:.2f}° | '
             f'{ego["turning"]["gyro_dir_med"]:.2f}° / {ego["others"]["gyro_dir_med"]:.2f}° | '
             f'{mixed["gyro_ttc_med"]:.3f} / {mixed["gyro_min_ttc_med"]:.3f} | '
             f'{near["gyro_dir_med"]:.2f}°, {near["gyro_ttc_med"]:.3f} / '
             f'{near["gyro_min_ttc_med"]:.3f} |')
    _log(f'\ntotal {time.perf_counter() - start:.0f} s')


if __name__ == '__main__':
    main()
