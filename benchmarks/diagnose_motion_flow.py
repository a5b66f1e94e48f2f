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
Where the flow model's flows lose the egomotion of the motion suite (learning/motion_suite.py).

    nice python3 benchmarks/diagnose_motion_flow.py --kinds sideways drone --split tuning \
        --count 2 --duration 0.24 --cache-dir DIR [--tolerance] \
        [--estimator-option NAME=VALUE ...] [--setting NAME=VALUE ...]

Per sequence: the events simulated by learning/simulate3d (cached in --cache-dir), the flows
the flow node would publish (stream.pipeline.node_default_estimator, options changed by
--estimator-option; computed with min_validity 0, the node's filter applied afterwards so
that its share is measured) and per flow the exact optical flow u of its event, the event's
depth and the exact normal direction (the log-intensity gradient of the scene rendered every
--render-ms at the event's pixel; signed along u). Printed per sequence: the time check
(flows in time order, median |t_flow - t_event|; the windows are cut by the flows' times),
the share kept and per cell of a 4 x 4 grid the share of the published flows against that of
the exact flows motion_suite.window_flows draws (event-rate weighted) with the median
|m| / |e|. Tables over the published flows of a kind:

1. per exact normal speed |e| = |n . u| [px/s]: flows, share kept by the validity filter,
   median angle between the model flow and the exact normal flow [deg] (a wrong sign counts
   as 180), share with the sign of e (m . e > 0), median |m| / |e| and |m| / (m_hat . u)
   (quartiles; the model's magnitude against the exact flow along its own direction);
2. the same per depth [m];
3. wrong signs and |m| / (m_hat . u) per local event density (events per pixel and second in
   the 8 x 8 px, DENSITY_BIN_NS bin of the flow's event);
4. the egomotion direction error (median over the windows, with gyro / without; the solver
   settings changed by --setting) for the flows and hybrids at the same events (hybrids()),
   and 'exact, drawn' (motion_suite's exact normal flow at its own pixels), with the node's
   weights (validity, or the confidence where computed).
"""

import argparse
import dataclasses
import os
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from veckm_flow_ros.offline.evaluate_egomotion import _median  # noqa: E402
from veckm_flow_ros.offline.evaluate_motions import _angle_deg  # noqa: E402

SPEED_EDGES_PX_S = (0, 25, 50, 100, 150, 250, 400, 700, 1000, 1e9)
DEPTH_EDGES_M = (0, 2, 3, 4, 6, 8, 12, np.inf)
GRID = 4
# Local event density: events per pixel and second in 8 x 8 px bins of this duration.
DENSITY_BIN_NS = 12_000_000
DENSITY_EDGES = (0, 5, 10, 20, 40, 80, 160, np.inf)


def simulated(kind, seed, duration_s, cache_dir):
    """(scene, SimulatedSequence3D) of a motion-suite sequence, cached as an npz."""
    from veckm_flow_ros.learning import motion_suite, simulate3d
    scene = motion_suite.make_motion_scene(kind, seed)
    path = pathlib.Path(cache_dir) / f'seq-{kind}-{seed}-{duration_s:g}.npz'
    if path.is_file():
        return scene, simulate3d.load_npz3d(path)
    sequence = simulate3d.simulate3d(scene, duration_s, seed=seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    simulate3d.save_npz3d(sequence, path)
    return scene, sequence


def model_flows(sequence, options, cache_path):
    """Return the node's flows with min_validity 0 (dict: index, u, v, validity; cached)."""
    if cache_path.is_file():
        with np.load(cache_path) as data:
            return {k: data[k] for k in data.files}
    from veckm_flow_ros.core.estimator import FlowBlock
    from veckm_flow_ros.core.model import load_model
    from veckm_flow_ros.stream.pipeline import node_default_estimator
    options = dict(options)
    model = load_model(options.pop('model', None))
    estimator = node_default_estimator(model, sequence.width, sequence.height, min_validity=0.0,
                                       max_buffered_events=4_000_000, **options)
    blocks = []
    for start in range(0, len(sequence.events), 200_000):
        blocks += estimator.push(sequence.events[start:start + 200_000])
    flows = FlowBlock.concatenate(blocks + estimator.flush())
    out = {'index': np.asarray(flows.event_index, np.int64),
           't_ns': np.asarray(flows.t_ns, np.int64),
           'u': np.asarray(flows.u_px_s, np.float64), 'v': np.asarray(flows.v_px_s, np.float64),
           'validity': np.asarray(flows.validity, np.float64)}
    if flows.confidence is not None:
        out['confidence'] = np.asarray(flows.confidence, np.float64)
    np.savez_compressed(cache_path, **out)
    return out


def exact_normals(scene, sequence, index, render_s, cache_path):
    """Return the unit log-intensity gradient (N, 2) at the events `index` (render_s apart)."""
    if cache_path.is_file():
        with np.load(cache_path) as data:
            return data['normal']
    t_s = sequence.events.t_ns[index] * 1e-9
    x = sequence.events.x[index].astype(np.int64)
    y = sequence.events.y[index].astype(np.int64)
    normal = np.full((len(index), 2), np.nan)
    slot = np.floor(t_s / render_s).astype(np.int64)
    for k in np.unique(slot):
        inside = np.flatnonzero(slot == k)
        level, _, _ = scene.render((k + 0.5) * render_s)
        gy, gx = np.gradient(level.astype(np.float64))
        normal[inside] = np.stack([gx[y[inside], x[inside]], gy[y[inside], x[inside]]], 1)
    normal /= np.linalg.norm(normal, axis=1, keepdims=True)
    np.savez_compressed(cache_path, normal=normal)
    return normal


def paired(kind, seed, args):
    """Per published flow: model flow, exact flow, exact normal flow, depth, time, kept."""
    from veckm_flow_ros.stream.parameters import parameter_default
    cache = pathlib.Path(args.cache_dir)
    scene, sequence = simulated(kind, seed, args.duration, cache)
    tag = ''.join(f'-{o}' for o in args.estimator_option)
    flows = model_flows(sequence, parse_options(args.estimator_option),
                        cache / f'flows-{kind}-{seed}-{args.duration:g}{tag}.npz')
    index = flows['index']
    normal = exact_normals(scene, sequence, index, args.render_ms * 1e-3,
                           cache / f'normals-{kind}-{seed}-{args.duration:g}{tag}.npz')
    exact = sequence.flow_px_s[index].astype(np.float64)
    along = np.sum(normal * exact, axis=1)
    # The exact normal flow e = (n . u) n; its direction signed along u.
    e = along[:, None] * normal
    m = np.stack([flows['u'], flows['v']], 1)
    min_validity = parameter_default('min_validity')
    return {'scene': scene, 'sequence': sequence, 'index': index, 'm': m, 'e': e, 'u': exact,
            'depth': sequence.depth_m[index].astype(np.float64),
            'occlusion': sequence.at_occlusion[index],
            'noise': np.asarray(sequence.is_noise, bool)[index],
            't_s': flows['t_ns'] * 1e-9, 't_event_s': sequence.events.t_ns[index] * 1e-9,
            'x': sequence.events.x[index].astype(np.float64),
            'y': sequence.events.y[index].astype(np.float64),
            'validity': flows['validity'], 'kept': flows['validity'] >= min_validity,
            # The node's weight: the confidence where computed, else the validity.
            'weight': flows.get('confidence', flows['validity'])}


def parse_options(pairs):
    """{name: value} of NAME=VALUE strings: true/false, numbers, else the string."""
    options = {}
    for pair in pairs:
        name, value = pair.split('=', 1)
        if value.lower() in ('true', 'false'):
            options[name] = value.lower() == 'true'
            continue
        try:
            options[name] = float(value) if '.' in value or 'e' in value else int(value)
        except ValueError:
            options[name] = value
    return options


def _quartiles(values):
    values = np.asarray(values, np.float64)
    values = values[np.isfinite(values)]
    if not len(values):
        return '-'
    return '{:.2f} ({:.2f}-{:.2f})'.format(*np.percentile(values, [50, 25, 75]))


def binned_table(pairs, key, edges, label):
    """Markdown table per bin of pairs[key] (speed or depth) (module doc, tables 1-2)."""
    lines = [f'| {label} | flows (all) | kept | angle deg | right sign | |m|/|e| | '
             '|m|/(m_hat.u) (p25-p75) | at occlusion |', '|---|---|---|---|---|---|---|---|']

    def row(name, inside):
        kept = inside & pairs['kept']
        m, e, u = pairs['m'][kept], pairs['e'][kept], pairs['u'][kept]
        speed = np.linalg.norm(m, axis=1)
        hat = m / np.maximum(speed, 1e-12)[:, None]
        projected = np.sum(hat * u, axis=1)
        lines.append(
            f'| {name} | {int(inside.sum())} | {kept.sum() / max(inside.sum(), 1):.0%} | '
            f'{_median(_angle_deg(m, e)):.1f} | '
            f'{np.mean(np.sum(m * e, axis=1) > 0) if len(m) else np.nan:.0%} | '
            f'{_median(speed / np.linalg.norm(e, axis=1)):.2f} | '
            f'{_quartiles(np.where(projected > 0, speed / projected, np.nan))} | '
            f'{np.mean(pairs["occlusion"][kept]) if kept.any() else np.nan:.0%} |')
    value = pairs[key]
    for lo, hi in zip(edges[:-1], edges[1:]):
        row(f'{lo:g}-{hi:g}', (value >= lo) & (value < hi))
    row('all', np.isfinite(value) | np.isinf(value))
    return '\n'.join(lines)


def density_table(pairs_list, edges=DENSITY_EDGES):
    """Wrong signs and |m| / (m_hat . u) per local event density (module doc, table 3)."""
    density, wrong, ratio, speed = [], [], [], []
    for pairs in pairs_list:
        events = pairs['sequence'].events
        key = ((events.t_ns // DENSITY_BIN_NS).astype(np.int64) * 4096 + events.y // 8) \
            * 4096 + events.x // 8
        _, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
        per_event = counts[inverse] / (64 * DENSITY_BIN_NS * 1e-9)
        kept = pairs['kept']
        m, u = pairs['m'][kept], pairs['u'][kept]
        norm = np.linalg.norm(m, axis=1)
        projected = np.sum(m * u, axis=1) / np.maximum(norm, 1e-12)
        density.append(per_event[pairs['index'][kept]])
        wrong.append(projected < 0)
        ratio.append(np.where(projected > 0, norm / np.where(projected > 0, projected, 1.0),
                              np.nan))
        speed.append(np.linalg.norm(u, axis=1))
    density, wrong = np.concatenate(density), np.concatenate(wrong)
    ratio, speed = np.concatenate(ratio), np.concatenate(speed)
    lines = ['| local events/px/s | flows | wrong sign | |m|/(m_hat.u) (p25-p75) | median |u| '
             'px/s |', '|---|---|---|---|---|']
    for lo, hi in zip(edges[:-1], edges[1:]):
        inside = (density >= lo) & (density < hi)
        if inside.any():
            lines.append(f'| {lo:g}-{hi:g} | {int(inside.sum())} | {wrong[inside].mean():.1%} | '
                         f'{_quartiles(ratio[inside])} | {_median(speed[inside]):.0f} |')
    return '\n'.join(lines)


def cell_table(pairs, drawn):
    """Per cell of a GRID x GRID grid: share of published vs drawn exact flows, ratio."""
    width, height = pairs['width'], pairs['height']

    def cells(x, y):
        return (np.asarray(y, np.int64) * GRID // height) * GRID + \
            np.asarray(x, np.int64) * GRID // width
    kept = pairs['kept']
    model_cell = cells(pairs['x'][kept], pairs['y'][kept])
    drawn_cell = cells(drawn['x_px'], drawn['y_px'])
    ratio = np.linalg.norm(pairs['m'][kept], axis=1) / np.linalg.norm(pairs['e'][kept], axis=1)
    lines = ['| row | ' + ' | '.join(f'col {c}: model / exact, |m|/|e|' for c in range(GRID))
             + ' |', '|---|' + '---|' * GRID]
    for r in range(GRID):
        parts = []
        for c in range(GRID):
            cell = r * GRID + c
            parts.append(f'{np.mean(model_cell == cell):.0%} / {np.mean(drawn_cell == cell):.0%}'
                         f', {_median(ratio[model_cell == cell]):.2f}')
        lines.append(f'| {r} | ' + ' | '.join(parts) + ' |')
    return '\n'.join(lines)


def hybrids(pairs, tolerance=False):
    """
    Flow variants at the published flows' events (module doc, table 4).

    tolerance: also the model's flows with the wrong signs (p = m_hat . u < 0) flipped, the
    model's directions and signs with the exact magnitudes |p|, and with p times
    (|m| / p)^k (the model's own magnitude errors, scaled in log by k) and times a random
    log-normal factor of sigma s (magnitude noise without structure).
    """
    kept = pairs['kept']
    m, e, u = pairs['m'][kept], pairs['e'][kept], pairs['u'][kept]
    speed = np.linalg.norm(m, axis=1)
    m_hat = m / np.maximum(speed, 1e-12)[:, None]
    e_hat = e / np.maximum(np.linalg.norm(e, axis=1), 1e-12)[:, None]
    projected = np.sum(m_hat * u, axis=1)
    variants = {'model': m, 'model dir, exact mag': projected[:, None] * m_hat,
                'exact dir, model mag': speed[:, None] * e_hat, 'exact at model events': e}
    if tolerance:
        wrong = projected < 0
        variants['model, wrong signs flipped'] = np.where(wrong[:, None], -m, m)
        variants["model dir, |exact mag| (the model's signs)"] = \
            np.abs(projected)[:, None] * m_hat
        # Wrong signs keep the model's flow in the variants below: only magnitudes scaled.
        right = projected > 0
        ratio = np.where(right, speed / np.where(right, projected, 1.0), 1.0)
        for k in (0.25, 0.5):
            scaled = np.where(right, projected * ratio ** k, speed)
            variants[f'model dir, exact mag x (model error)^{k:g}'] = scaled[:, None] * m_hat
        rng = np.random.default_rng(0)
        for share in (0.01, 0.05):
            flip = rng.random(len(m)) < share
            variants[f'model dir, exact mag, {share:.0%} signs flipped at random'] = \
                np.where(flip, -projected, projected)[:, None] * m_hat
        for sigma in (0.05, 0.1, 0.2):
            scaled = np.where(right, projected * np.exp(rng.normal(0, sigma, len(m))), speed)
            variants[f'model dir, exact mag x lognormal({sigma:g})'] = scaled[:, None] * m_hat
    return variants


def egomotion_rows(pairs, variants, config, duration_s, window_s, drawn):
    """(variant, gyro median deg, free median deg, free omega deg/s) of one sequence."""
    from veckm_flow_ros.offline import evaluate_motions
    kept = pairs['kept']
    ok = np.all(np.isfinite(pairs['e'][kept]), axis=1)
    rows = []
    for name, flow in variants.items():
        flows = (pairs['t_s'][kept][ok], pairs['x'][kept][ok], pairs['y'][kept][ok],
                 flow[ok, 0], flow[ok, 1], pairs['weight'][kept][ok])
        data = evaluate_motions.flow_windows(pairs['scene'], pairs['sequence'], flows,
                                             duration_s, window_s)
        rows.append((name, data))
    rows.append(('exact, drawn', drawn))
    out = []
    for name, data in rows:
        errors = {}
        for mode in evaluate_motions.MODES:
            result = evaluate_motions.run_sequence(data, mode, config)
            error = _angle_deg(result['direction'], data['v_m_s'])
            errors[mode] = error
            if mode == 'free':
                errors['omega'] = np.degrees(np.linalg.norm(
                    result['omega'] - data['omega_rad_s'], axis=1))
        out.append((name, errors, data['ratio']))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--kinds', nargs='+', default=['sideways', 'drone'])
    parser.add_argument('--split', default='tuning', choices=('tuning', 'heldout'))
    parser.add_argument('--count', type=int, default=2)
    parser.add_argument('--seeds', type=int, nargs='*', default=None,
                        help='these seeds instead of the first --count of the split')
    parser.add_argument('--duration', type=float, default=0.24)
    parser.add_argument('--render-ms', type=float, default=2.0)
    parser.add_argument('--cache-dir', required=True)
    parser.add_argument('--estimator-option', action='append', default=[],
                        metavar='NAME=VALUE', help='NormalFlowEstimator option (model=NAME too)')
    parser.add_argument('--setting', action='append', default=[], metavar='NAME=VALUE',
                        help='EgomotionConfig field (e.g. sign_start=0)')
    parser.add_argument('--no-egomotion', action='store_true')
    parser.add_argument('--tolerance', action='store_true',
                        help='also the magnitude-error tolerance variants (hybrids)')
    args = parser.parse_args(argv)
    from veckm_flow_ros.core.egomotion import EgomotionConfig
    from veckm_flow_ros.learning import motion_suite
    from veckm_flow_ros.offline import evaluate_motions
    config = dataclasses.replace(EgomotionConfig(), **parse_options(args.setting)).check()
    os.makedirs(args.cache_dir, exist_ok=True)
    for kind in args.kinds:
        seeds = args.seeds or motion_suite.split_seeds(args.split, args.count)
        all_pairs, drawn_all, ego = [], [], []
        for seed in seeds:
            pairs = paired(kind, seed, args)
            pairs['width'], pairs['height'] = pairs['scene'].width, pairs['scene'].height
            drawn = evaluate_motions.load_sequence(kind, seed, args.duration, 'normal',
                                                   args.cache_dir, config.window_s)
            t = pairs['t_s'][pairs['kept']]
            print(f'## {kind} {seed} ({pairs["width"]} x {pairs["height"]}): '
                  f'{len(pairs["sequence"].events):,} events, {len(pairs["m"]):,} flows, '
                  f'{pairs["kept"].mean():.0%} kept; flows sorted by time: '
                  f'{bool(np.all(np.diff(t) >= 0))}; median |t_flow - t_event| '
                  f'{_median(np.abs(pairs["t_s"] - pairs["t_event_s"])) * 1e6:.1f} us; '
                  f'noise events among kept {pairs["noise"][pairs["kept"]].mean():.1%}; '
                  f'trajectory {pairs["scene"].description["trajectory"]}', flush=True)
            print(cell_table(pairs, drawn), flush=True)
            all_pairs.append(pairs)
            drawn_all.append(drawn)
            if not args.no_egomotion:
                ego.append(egomotion_rows(pairs, hybrids(pairs, args.tolerance), config,
                                          args.duration, config.window_s, drawn))
                print('| flows | gyro deg | free deg | free omega deg/s |\n|---|---|---|---|')
                for name, errors, _ in ego[-1]:
                    print(f'| {name} | {_median(errors["gyro"]):.1f} | '
                          f'{_median(errors["free"]):.1f} | {_median(errors["omega"]):.2f} |')
        joined = {key: np.concatenate([p[key] for p in all_pairs])
                  for key in ('m', 'e', 'u', 'depth', 'occlusion', 'kept', 'validity')}
        joined['speed'] = np.linalg.norm(joined['e'], axis=1)
        print(f'\n### {kind}: model vs exact normal flow per exact speed (published flows)')
        print(binned_table(joined, 'speed', SPEED_EDGES_PX_S, '|e| px/s'))
        print(f'\n### {kind}: per local event density')
        print(density_table(all_pairs))
        print(f'\n### {kind}: per depth')
        print(binned_table(joined, 'depth', DEPTH_EDGES_M, 'depth m'))
        if ego:
            print(f'\n### {kind}: egomotion, median over the {sum(len(r[0][2]) for r in ego)} '
                  'windows (deg; omega without gyro deg/s)')
            print('| flows | gyro deg | free deg | free omega deg/s | windows ratio |')
            print('|---|---|---|---|---|')
            for number, (name, _, _) in enumerate(ego[0]):
                gyro = np.concatenate([r[number][1]['gyro'] for r in ego])
                free = np.concatenate([r[number][1]['free'] for r in ego])
                omega = np.concatenate([r[number][1]['omega'] for r in ego])
                ratio = np.concatenate([r[number][2] for r in ego])
                print(f'| {name} | {_median(gyro):.1f} | {_median(free):.1f} | '
                      f'{_median(omega):.2f} | {_median(ratio):.2f} |')
        print(flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
