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
Accuracy of the egomotion estimator on simulated 3D sequences (learning/simulate3d).

Per sequence: the flows (the flow estimator's, or the simulator's exact optical flow), then
the egomotion per window with the simulated gyroscope and without it, against the truth of
the window (mean twist of the window, depth of its events):

- direction error [deg]: angle between the estimated and the true translation direction,
  over windows where the translation is observable: |v| >= 10 % of the median event depth
  per second; a window without an estimate counts as 180 deg (and lowers the coverage);
- angular velocity error: |omega_est - omega_true| in deg/s and in % of |omega_true|
  (windows with |omega_true| >= 1 deg/s for the %; without gyro only);
- FOE error [px] where both the estimate and the truth are valid (|d_z| >= min_forward);
- time to contact: relative error |TTC_est - TTC_true| / TTC_true per region, with the truth
  the median of Z / v_z over the region's events; median over regions and windows;
- minimum time to contact (the avoidance trigger): relative error of min_ttc_s against the
  minimum of the true grid, per window where both exist.
"""

from dataclasses import dataclass
import math
import sys
from typing import List, Optional

import numpy as np

from veckm_flow_ros.core.egomotion import EgomotionConfig, GyroBuffer
from veckm_flow_ros.offline import egomotion

# Translation observable: |v| / median depth at least this [1/s].
MIN_SPEED_PER_DEPTH = 0.1
# Relative angular-velocity errors only where |omega| is at least this [rad/s].
MIN_OMEGA_RAD_S = math.radians(1.0)
MODES = ('gyro', 'free')


@dataclass
class SequenceResult:
    """Per-window errors of one sequence, for both modes (arrays over windows)."""

    name: str
    trajectory: str
    windows: int
    observable: np.ndarray          # bool [W]: translation observable
    direction_deg: dict             # mode -> [W] error (NaN estimate -> 180)
    has_direction: dict             # mode -> bool [W]
    omega_deg_s: np.ndarray         # [W] (free mode)
    omega_percent: np.ndarray       # [W] NaN where |omega_true| < 1 deg/s
    foe_px: dict                    # mode -> [W] NaN where not both valid
    ttc_relative: dict              # mode -> list of per-region relative errors
    truth: dict
    estimates: dict                 # mode -> arrays (estimates_to_arrays)
    flow_quality: Optional[dict] = None  # see sequence_flows
    min_ttc_relative: Optional[dict] = None  # mode -> [W] NaN where either minimum is NaN


def angle_deg(a, b):
    """Angle [deg] between rows of a and b (N, 3); NaN where either is NaN."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    cos = np.sum(a * b, axis=-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
    return np.degrees(np.arccos(np.clip(cos, -1.0, 1.0)))


def window_truth(sequence, edges, config: EgomotionConfig) -> dict:
    """
    Return the truth per window [edges[i], edges[i+1]).

    Mean v, omega, direction, speed / depth, FOE, time-to-contact grid (median Z / v_z of the
    region's events) and its minimum.
    """
    camera = sequence.camera
    t_event = sequence.events.t_ns * 1e-9
    rows, cols = config.ttc_grid
    count = len(edges) - 1
    v = np.zeros((count, 3))
    omega = np.zeros((count, 3))
    depth = np.full(count, np.nan)
    ttc = np.full((count, rows, cols), np.nan)
    bounds = np.searchsorted(t_event, edges)
    usable = ~np.asarray(sequence.is_noise, bool) & np.isfinite(sequence.depth_m)
    region_all = ((sequence.events.y.astype(np.int64) * rows) // camera.height) * cols + (
        (sequence.events.x.astype(np.int64) * cols) // camera.width)
    for index in range(count):
        samples = np.linspace(edges[index], edges[index + 1], 16)
        v_s, omega_s = sequence.twist_at(samples)
        v[index], omega[index] = v_s.mean(axis=0), omega_s.mean(axis=0)
        lo, hi = bounds[index], bounds[index + 1]
        ok = usable[lo:hi]
        depths = sequence.depth_m[lo:hi][ok].astype(np.float64)
        if len(depths):
            depth[index] = np.median(depths)
        if v[index, 2] > 0 and len(depths):
            region = region_all[lo:hi][ok]
            order = np.argsort(region, kind='stable')
            region, z = region[order], depths[order]
            starts = np.searchsorted(region, np.arange(rows * cols + 1))
            for cell in range(rows * cols):
                if starts[cell + 1] - starts[cell] >= config.min_ttc_flows:
                    ttc[index].flat[cell] = np.median(
                        z[starts[cell]:starts[cell + 1]]) / v[index, 2]
    speed = np.linalg.norm(v, axis=1)
    direction = v / np.maximum(speed, 1e-12)[:, None]
    forward = np.abs(direction[:, 2]) >= config.min_forward
    safe_z = np.where(forward, direction[:, 2], 1.0)
    fx, fy = camera.project(direction[:, 0] / safe_z, direction[:, 1] / safe_z)
    foe = np.where(forward[:, None], np.stack([fx, fy], axis=1), np.nan)
    with np.errstate(invalid='ignore'):
        min_ttc = np.where(np.any(np.isfinite(ttc), axis=(1, 2)),
                           np.nanmin(np.where(np.isfinite(ttc), ttc, np.inf), axis=(1, 2)),
                           np.nan)
    return {'t_s': 0.5 * (edges[:-1] + edges[1:]), 'v_m_s': v, 'omega_rad_s': omega,
            'direction': direction, 'speed_per_depth': speed / depth, 'depth_m': depth,
            'foe_px': foe, 'ttc_s': ttc, 'min_ttc_s': min_ttc}


def evaluate_sequence(sequence, name, flows, config: EgomotionConfig) -> SequenceResult:
    """Egomotion with and without the sequence's gyroscope, against its truth."""
    t_s = flows[0]
    edges = np.arange(t_s[0], t_s[-1] + config.window_s, config.window_s) if len(t_s) else \
        np.zeros(1)
    truth = window_truth(sequence, edges, config)
    if sequence.gyro_t_s is None or len(sequence.gyro_t_s) < 2:
        raise ValueError(f'{name}: the sequence has no gyroscope samples (gyro_t_s); simulate '
                         'it again with simulate3d')
    gyro = GyroBuffer(max_age_s=float(np.ptp(sequence.gyro_t_s)) + 1.0,
                      max_samples=len(sequence.gyro_t_s) + 1)
    gyro.add(sequence.gyro_t_s, sequence.gyro_rad_s)
    estimates = {}
    for mode in MODES:
        windows = egomotion.estimate_windows(sequence.camera, *flows, config=config,
                                             gyro=gyro if mode == 'gyro' else None)
        estimates[mode] = egomotion.estimates_to_arrays(windows, config.ttc_grid)
    count = len(truth['t_s'])
    observable = truth['speed_per_depth'] >= MIN_SPEED_PER_DEPTH
    direction, has_direction, foe, ttc, min_ttc = {}, {}, {}, {}, {}
    for mode in MODES:
        arrays = estimates[mode]
        has_direction[mode] = np.all(np.isfinite(arrays['direction']), axis=1)
        error = angle_deg(arrays['direction'], truth['direction'])
        direction[mode] = np.where(has_direction[mode], error, 180.0)
        foe[mode] = np.linalg.norm(arrays['foe_px'] - truth['foe_px'], axis=1)
        with np.errstate(invalid='ignore', divide='ignore'):
            relative = np.abs(arrays['ttc_grid_s'] - truth['ttc_s']) / truth['ttc_s']
        ttc[mode] = relative[np.isfinite(relative)]
        with np.errstate(invalid='ignore'):
            min_ttc[mode] = np.abs(arrays['min_ttc_s'] - truth['min_ttc_s']) / truth['min_ttc_s']
    omega_error = np.linalg.norm(estimates['free']['omega_rad_s'] - truth['omega_rad_s'], axis=1)
    omega_true = np.linalg.norm(truth['omega_rad_s'], axis=1)
    percent = np.where(omega_true >= MIN_OMEGA_RAD_S,
                       100.0 * omega_error / np.maximum(omega_true, 1e-12), np.nan)
    trajectory = str(sequence.description.get('trajectory', {}).get('kind', '')) \
        if isinstance(sequence.description.get('trajectory'), dict) else \
        str(sequence.description.get('trajectory', ''))
    return SequenceResult(name, trajectory, count, observable, direction, has_direction,
                          np.degrees(omega_error), percent, foe, ttc, truth, estimates,
                          min_ttc_relative=min_ttc)


def _median(values):
    values = np.asarray(values, np.float64)
    values = values[np.isfinite(values)]
    return float(np.median(values)) if len(values) else float('nan')


def _percentile(values, q):
    values = np.asarray(values, np.float64)
    values = values[np.isfinite(values)]
    return float(np.percentile(values, q)) if len(values) else float('nan')


def summary_row(results: List[SequenceResult]) -> dict:
    """Pooled metrics over the windows of `results` (one sequence or all)."""
    row = {'windows': sum(r.windows for r in results),
           'observable': int(sum(r.observable.sum() for r in results))}
    qualities = [r.flow_quality for r in results if r.flow_quality]
    for key in ('pos', 'relative'):
        row[f'flow_{key}'] = (100.0 * float(np.mean([q[key] for q in qualities]))
                              if qualities else float('nan'))
    for mode in MODES:
        errors = np.concatenate([r.direction_deg[mode][r.observable] for r in results])
        found = np.concatenate([r.has_direction[mode][r.observable] for r in results])
        row[f'{mode}_dir_med'] = _median(errors)
        row[f'{mode}_dir_p90'] = _percentile(errors, 90)
        row[f'{mode}_coverage'] = float(found.mean()) if len(found) else float('nan')
        row[f'{mode}_foe_med'] = _median(np.concatenate([r.foe_px[mode] for r in results]))
        row[f'{mode}_ttc_med'] = _median(np.concatenate([r.ttc_relative[mode]
                                                         for r in results]))
        row[f'{mode}_min_ttc_med'] = _median(np.concatenate(
            [r.min_ttc_relative[mode] for r in results if r.min_ttc_relative] or [[]]))
    row['omega_deg_s_med'] = _median(np.concatenate([r.omega_deg_s for r in results]))
    row['omega_pct_med'] = _median(np.concatenate([r.omega_percent for r in results]))
    return row


COLUMNS = (('windows', 'win', '{:.0f}'), ('observable', 'obs', '{:.0f}'),
           ('flow_pos', 'flow %Pos', '{:.1f}'), ('flow_relative', 'flow rel err %', '{:.0f}'),
           ('gyro_dir_med', 'gyro dir med', '{:.2f}'), ('gyro_dir_p90', 'gyro dir p90', '{:.2f}'),
           ('gyro_coverage', 'gyro cov', '{:.2f}'), ('gyro_foe_med', 'gyro FOE px', '{:.1f}'),
           ('gyro_ttc_med', 'gyro TTC rel', '{:.3f}'),
           ('gyro_min_ttc_med', 'gyro min TTC rel', '{:.3f}'),
           ('free_dir_med', 'free dir med', '{:.2f}'), ('free_dir_p90', 'free dir p90', '{:.2f}'),
           ('free_coverage', 'free cov', '{:.2f}'), ('omega_deg_s_med', 'free w deg/s', '{:.2f}'),
           ('omega_pct_med', 'free w %', '{:.1f}'), ('free_foe_med', 'free FOE px', '{:.1f}'),
           ('free_ttc_med', 'free TTC rel', '{:.3f}'),
           ('free_min_ttc_med', 'free min TTC rel', '{:.3f}'))


def results_table(results: List[SequenceResult]) -> str:
    """Return a markdown table: one row per sequence, then per trajectory and overall."""
    header = '| sequence | ' + ' | '.join(title for _, title, _ in COLUMNS) + ' |'
    lines = [header, '|' + '---|' * (len(COLUMNS) + 1)]

    def line(name, row):
        cells = [fmt.format(row[key]) if np.isfinite(row[key]) else '-'
                 for key, _, fmt in COLUMNS]
        lines.append(f'| {name} | ' + ' | '.join(cells) + ' |')
    for result in results:
        line(result.name, summary_row([result]))
    kinds = sorted({r.trajectory for r in results})
    if len(kinds) > 1:
        for kind in kinds:
            line(f'all {kind}', summary_row([r for r in results if r.trajectory == kind]))
    line('**overall**', summary_row(results))
    return '\n'.join(lines)


def plot_results(results: List[SequenceResult], path):
    """Save the cumulative distributions of the direction errors (with / without gyro)."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    figure, axes = plt.subplots(1, 3, figsize=(14, 4))
    for mode, style in zip(MODES, ('-', '--')):
        errors = np.sort(np.concatenate([r.direction_deg[mode][r.observable] for r in results]))
        if len(errors):
            axes[0].plot(errors, np.arange(1, len(errors) + 1) / len(errors), style,
                         label='with gyro' if mode == 'gyro' else 'without gyro')
    axes[0].set_xlim(0, 45)
    axes[0].set_xlabel('translation direction error [deg]')
    axes[0].set_ylabel('fraction of observable windows')
    axes[0].axvline(5, color='grey', lw=0.5)
    axes[0].axvline(15, color='grey', lw=0.5)
    percent = np.sort(np.concatenate([r.omega_percent for r in results]))
    percent = percent[np.isfinite(percent)]
    if len(percent):
        axes[1].plot(percent, np.arange(1, len(percent) + 1) / len(percent))
    axes[1].set_xlim(0, 50)
    axes[1].set_xlabel('angular velocity error without gyro [% of |omega|]')
    for mode, style in zip(MODES, ('-', '--')):
        ttc = np.sort(np.concatenate([r.ttc_relative[mode] for r in results]))
        if len(ttc):
            axes[2].plot(ttc, np.arange(1, len(ttc) + 1) / len(ttc), style,
                         label='with gyro' if mode == 'gyro' else 'without gyro')
    axes[2].set_xlim(0, 1)
    axes[2].set_xlabel('time-to-contact relative error (per region)')
    for axis in axes:
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8) if axis.get_legend_handles_labels()[0] else None
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def sequence_flows(sequence, flow='estimated', model=None, stride=1, confidence=False,
                   progress=False):
    """
    Return ((t_s, x, y, u, v, weight), quality) of a sequence's flows.

    weight: the confidence with `confidence`, else the validity (as the node weighs flows).

    quality: the flow estimator's accuracy on the sequence's signal events (not noise, not
    sky): 'pos' the share of flows whose magnitude has the sign of the exact flow projected
    onto the flow's direction, 'relative' the median |m - m_exact| / |m_exact|.

    flow 'estimated': the normal flow the flow node would publish (its automatic block and
    min_validity: stream.pipeline.node_default_estimator); 'exact': the simulator's exact
    optical flow projected onto the flow estimator's normal directions (exact magnitudes,
    realistic directions; noise events left out), which isolates the egomotion estimator.
    """
    if flow not in ('estimated', 'exact'):
        raise ValueError(f'flow must be "estimated" or "exact", got {flow!r}')
    from veckm_flow_ros.core.estimator import FlowBlock
    from veckm_flow_ros.core.model import load_model
    from veckm_flow_ros.stream.pipeline import node_default_estimator
    from tqdm import tqdm
    model = model if model is not None and not isinstance(model, str) else load_model(model)
    estimator = node_default_estimator(model, sequence.width, sequence.height,
                                       target_stride=stride, confidence=confidence,
                                       max_buffered_events=4_000_000)
    events = sequence.events
    blocks = []
    with tqdm(total=len(events), unit='ev', unit_scale=True, file=sys.stderr,
              disable=not progress, desc='flow') as bar:
        for start in range(0, len(events), egomotion.CHUNK_EVENTS):
            chunk = events[start:start + egomotion.CHUNK_EVENTS]
            blocks += estimator.push(chunk)
            bar.update(len(chunk))
    flows = FlowBlock.concatenate(blocks + estimator.flush())
    index = np.asarray(flows.event_index, np.int64)
    u, v = np.asarray(flows.u_px_s, np.float64), np.asarray(flows.v_px_s, np.float64)
    # The node's weight: the confidence when asked for, else the validity.
    weight = flows.confidence if flows.confidence is not None else flows.validity
    weight = None if weight is None else np.asarray(weight, np.float64)
    quality = flow_quality(sequence, index, u, v)
    if flow == 'exact':
        speed = np.hypot(u, v)
        keep = ~np.asarray(sequence.is_noise, bool)[index] & (speed > 0) & np.all(
            np.isfinite(sequence.flow_px_s[index]), axis=1)
        index, u, v, speed = index[keep], u[keep], v[keep], speed[keep]
        weight = None if weight is None else weight[keep]
        exact = sequence.flow_px_s[index].astype(np.float64)
        magnitude = (u * exact[:, 0] + v * exact[:, 1]) / speed
        u, v = magnitude * u / speed, magnitude * v / speed
    return (events.t_ns[index] * 1e-9, events.x[index], events.y[index], u, v, weight), quality


def flow_quality(sequence, index, u, v) -> dict:
    """Sign agreement and median relative magnitude error of flows (see sequence_flows)."""
    speed = np.hypot(u, v)
    signal = (~np.asarray(sequence.is_noise, bool)[index] & np.isfinite(sequence.depth_m[index])
              & (speed > 0))
    exact = sequence.flow_px_s[index[signal]].astype(np.float64)
    projected = (u[signal] * exact[:, 0] + v[signal] * exact[:, 1]) / speed[signal]
    if not len(projected):
        return {'pos': float('nan'), 'relative': float('nan')}
    relative = np.abs(speed[signal] - projected) / np.maximum(np.abs(projected), 1e-9)
    return {'pos': float(np.mean(projected > 0)), 'relative': float(np.median(relative))}


def log(message, quiet=False):
    if not quiet:
        print(message, file=sys.stderr, flush=True)


def evaluate_specs(specs, duration_s, config, flow='estimated', model=None, stride=1,
                   confidence=False, quiet=False, sequences: Optional[list] = None,
                   cache_dir=None) -> List[SequenceResult]:
    """
    Simulate each spec (make_scene3d arguments) or load each file, then evaluate.

    cache_dir: keep the simulated sequences there (SPEC_DURATION.npz) and read them back on
    the next run (simulating is the slow part).
    """
    import pathlib

    from veckm_flow_ros.learning import simulate3d
    results = []
    items = [('file', path) for path in (sequences or [])] + [('spec', s) for s in specs]
    for number, (kind, item) in enumerate(items, 1):
        if kind == 'file':
            sequence = simulate3d.load_npz3d(item)
            name = pathlib.Path(item).stem
        else:
            name = f'{item["trajectory"]}-{item["seed"]}'
            cached = None if cache_dir is None else (
                pathlib.Path(cache_dir) / f'{name}_{duration_s:g}s.npz')
            if cached is not None and cached.is_file():
                sequence = simulate3d.load_npz3d(cached)
            else:
                log(f'[{number}/{len(items)}] simulating {name} ({duration_s:g} s)', quiet)
                sequence = simulate3d.simulate3d(simulate3d.make_scene3d(**item), duration_s,
                                                 seed=item['seed'])
                if cached is not None:
                    cached.parent.mkdir(parents=True, exist_ok=True)
                    simulate3d.save_npz3d(sequence, cached)
        log(f'[{number}/{len(items)}] {name}: {len(sequence.events):,} events, flows '
            f'({flow}, stride {stride}{", confidence" if confidence else ""})', quiet)
        flows, quality = sequence_flows(sequence, flow, model, stride, confidence,
                                        progress=not quiet)
        results.append(evaluate_sequence(sequence, name, flows, config))
        results[-1].flow_quality = quality
        row = summary_row(results[-1:])
        log(f'    flows: {100 * quality["pos"]:.1f} % with the right sign, median relative '
            f'magnitude error {100 * quality["relative"]:.0f} %; direction error median with '
            f'gyro {row["gyro_dir_med"]:.2f} deg, without {row["free_dir_med"]:.2f} deg', quiet)
    return results
