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
The egomotion estimator per motion kind (learning/motion_suite.py), exact flow.

Each window is classed by its translational / rotational image-speed ratio: 'translating'
(>= 0.25), 'turning' (0.1-0.25), 'rotating' (< 0.1). Per kind and mode (with the biased
gyroscope, without it) the table gives, per class, the median direction error [deg] over
the windows with a direction, the share of windows with a direction, and for rotating
windows the count of confident wrong headings (a direction more than 10 deg off); without
the gyroscope the median angular-velocity error [deg/s and %]; on approaches the median
relative time-to-contact error per region.
"""

import dataclasses
import math
import os
import pathlib
import sys

import numpy as np

from veckm_flow_ros.core.egomotion import EgomotionConfig, EgomotionEstimator, GyroBuffer
from veckm_flow_ros.learning import motion_suite

MODES = ('gyro', 'free')
CLASSES = (('translating', 0.25, math.inf), ('turning', 0.1, 0.25), ('rotating', 0.0, 0.1))
WRONG_DEG = 10.0


def _angle_deg(a, b):
    cos = np.sum(a * b, axis=-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
    return np.degrees(np.arccos(np.clip(cos, -1.0, 1.0)))


def load_sequence(kind, seed, duration_s, flow, cache_dir=None, window_s=0.03, model=None):
    """
    Windows of one sequence as arrays (dict), from cache_dir when there.

    flow: 'normal' or 'full' (motion_suite.window_flows), or 'model': events simulated
    (learning.simulate3d, slow) and the flows the flow node would publish with `model`
    (a shipped name or checkpoint path; None: the default model). A model other than the
    default is part of the cache file's name.
    """
    path = None
    if cache_dir:
        window = '' if window_s == 0.03 else f'-{window_s * 1e3:g}ms'
        name = '' if model is None or flow != 'model' else f'-{pathlib.Path(model).stem}'
        path = os.path.join(cache_dir,
                            f'{kind}-{seed}-{duration_s:g}-{flow}{window}{name}.npz')
        if os.path.exists(path):
            with np.load(path) as data:
                return {k: data[k] for k in data.files}
    if flow == 'model':
        out = _model_sequence(kind, seed, duration_s, window_s, model)
        if path:
            os.makedirs(cache_dir, exist_ok=True)
            np.savez_compressed(path, **out)
        return out
    scene, windows, (gyro_t, gyro_w, bias) = motion_suite.motion_sequence(
        kind, seed, duration_s, window_s, flow=flow)
    camera = scene.camera
    out = {
        'kind': np.array(kind), 'seed': np.array(seed),
        'size': np.array([camera.width, camera.height]),
        'k': camera.K.reshape(-1), 'd': np.asarray(camera.D, np.float64),
        'counts': np.array([len(w.x_px) for w in windows]),
        'x_px': np.concatenate([w.x_px for w in windows]),
        'y_px': np.concatenate([w.y_px for w in windows]),
        'flow_px_s': np.concatenate([w.flow_px_s for w in windows]),
        't0_s': np.array([w.t0_s for w in windows]), 't1_s': np.array([w.t1_s for w in windows]),
        'v_m_s': np.array([w.v_m_s for w in windows]),
        'omega_rad_s': np.array([w.omega_rad_s for w in windows]),
        'ratio': np.array([w.ratio for w in windows]),
        'ttc_s': np.array([w.ttc_s for w in windows]),
        'gyro_t_s': gyro_t, 'gyro_rad_s': gyro_w, 'gyro_bias_rad_s': bias}
    if path:
        os.makedirs(cache_dir, exist_ok=True)
        np.savez_compressed(path, **out)
    return out


def _model_sequence(kind, seed, duration_s, window_s=0.03, model=None):
    """load_sequence's dict for the flow model's flows of simulated events."""
    from veckm_flow_ros.learning.simulate3d import simulate3d
    from veckm_flow_ros.offline.evaluate_egomotion import sequence_flows
    scene = motion_suite.make_motion_scene(kind, seed)
    sequence = simulate3d(scene, duration_s, seed=seed)
    flows, _ = sequence_flows(sequence, 'estimated', model=model)
    return flow_windows(scene, sequence, flows, duration_s, window_s)


def flow_windows(scene, sequence, flows, duration_s, window_s=0.03, ttc_grid=(6, 8),
                 min_ttc_flows=10):
    """
    load_sequence's dict for flows of a simulated sequence of `scene`.

    flows: (t_s, x, y, u, v, weight) (N,) arrays in time order (evaluate_egomotion's
    sequence_flows; weight None: all 1), u, v the flow [px/s]; the truth per window
    [k window_s, (k + 1) window_s) as in motion_suite.window_flows.
    """
    from veckm_flow_ros.learning.world3d import motion_field
    t_s, x, y, u, v, weight = flows
    edges = np.arange(0.0, duration_s + 1e-9, window_s)
    camera = scene.camera
    bounds = np.searchsorted(t_s, edges)
    # Per flow: its event's depth (the flows keep the events' order and times).
    depth = _event_depth(sequence, t_s, x, y)
    rows, cols = ttc_grid
    windows = []
    for t0, t1, lo, hi in zip(edges[:-1], edges[1:], bounds[:-1], bounds[1:]):
        v_s, w_s = scene.trajectory.twist(np.linspace(t0, t1, 9))
        v_mean, w_mean = v_s.mean(0), w_s.mean(0)
        z = depth[lo:hi]
        nx, ny = camera.normalize(np.asarray(x[lo:hi], np.float64),
                                  np.asarray(y[lo:hi], np.float64))
        ok = np.isfinite(nx) & np.isfinite(ny) & ~np.isnan(z)
        inverse = np.where(np.isfinite(z), 1.0 / np.where(np.isfinite(z), z, 1.0), 0.0)[ok]
        tx, ty = motion_field(nx[ok], ny[ok], inverse, v_mean, np.zeros(3))
        rx, ry = motion_field(nx[ok], ny[ok], 0 * inverse, np.zeros(3), w_mean)
        rot = np.median(np.hypot(rx, ry)) if ok.any() else np.nan
        ratio = float(np.median(np.hypot(tx, ty)) / rot) if rot > 0 else float('inf')
        ttc = np.full((rows, cols), np.nan)
        if v_mean[2] > 0:
            region = (np.asarray(y[lo:hi], np.int64) * rows // camera.height) * cols + \
                np.asarray(x[lo:hi], np.int64) * cols // camera.width
            for cell in range(rows * cols):
                depths = z[(region == cell) & np.isfinite(z)]
                if len(depths) >= min_ttc_flows:
                    ttc.flat[cell] = np.median(depths) / v_mean[2]
        windows.append((t0, t1, lo, hi, v_mean, w_mean, ratio, ttc))
    kind, seed = scene.description['kind'], scene.description['seed']
    gyro_t, gyro_w, bias = motion_suite.gyro_samples(scene.trajectory, duration_s, seed)
    return {
        'kind': np.array(kind), 'seed': np.array(seed),
        'size': np.array([camera.width, camera.height]),
        'k': camera.K.reshape(-1), 'd': np.asarray(camera.D, np.float64),
        'counts': np.array([w[3] - w[2] for w in windows]),
        'x_px': np.asarray(x[bounds[0]:bounds[-1]], np.float64),
        'y_px': np.asarray(y[bounds[0]:bounds[-1]], np.float64),
        'flow_px_s': np.stack([u, v], 1)[bounds[0]:bounds[-1]],
        'weight': (np.ones(len(t_s)) if weight is None else weight)[bounds[0]:bounds[-1]],
        't0_s': edges[:-1], 't1_s': edges[1:],
        'v_m_s': np.array([w[4] for w in windows]),
        'omega_rad_s': np.array([w[5] for w in windows]),
        'ratio': np.array([w[6] for w in windows]),
        'ttc_s': np.array([w[7] for w in windows]),
        'gyro_t_s': gyro_t, 'gyro_rad_s': gyro_w, 'gyro_bias_rad_s': bias}


def _event_depth(sequence, t_s, x, y):
    """Depth [m] of the events behind flows (t_s, x, y): matched by time and pixel."""
    events = sequence.events
    key = (events.t_ns.astype(np.int64) * sequence.width + events.x) * sequence.height \
        + events.y
    order = np.argsort(key, kind='stable')
    t_ns = np.rint(np.asarray(t_s) * 1e9).astype(np.int64)
    query = (t_ns * sequence.width + np.asarray(x, np.int64)) * sequence.height \
        + np.asarray(y, np.int64)
    position = np.clip(np.searchsorted(key[order], query), 0, len(order) - 1)
    found = key[order][position] == query
    depth = sequence.depth_m[order][position].astype(np.float64)
    return np.where(found, depth, np.nan)


def _camera(data):
    from veckm_flow_ros.core.camera import CameraModel
    width, height = (int(v) for v in data['size'])
    return CameraModel.from_camera_info(width, height, data['k'].tolist(),
                                        data['d'].tolist(), 'plumb_bob')


def run_sequence(data, mode, config):
    """Per-window arrays of one sequence in one mode: direction, omega, reason, ttc error."""
    camera = _camera(data)
    estimator = EgomotionEstimator(camera, config)
    gyro = None
    if mode == 'gyro':
        gyro = GyroBuffer(max_age_s=10.0, max_samples=len(data['gyro_t_s']) + 1)
        gyro.add(data['gyro_t_s'], data['gyro_rad_s'])
    bounds = np.concatenate([[0], np.cumsum(data['counts'])])
    count = len(data['counts'])
    direction = np.full((count, 3), np.nan)
    omega = np.full((count, 3), np.nan)
    ttc_error = np.full(count, np.nan)
    min_ttc_error = np.full(count, np.nan)
    reasons = []
    for i in range(count):
        part = slice(bounds[i], bounds[i + 1])
        t0, t1 = float(data['t0_s'][i]), float(data['t1_s'][i])
        rate = gyro.mean(t0, t1) if gyro is not None else None
        flow = data['flow_px_s'][part]
        weight = data['weight'][part] if 'weight' in data else None
        estimate = estimator.estimate(data['x_px'][part], data['y_px'][part], flow[:, 0],
                                      flow[:, 1], weight, omega_rad_s=rate,
                                      t_s=0.5 * (t0 + t1))
        direction[i], omega[i] = estimate.direction, estimate.omega_rad_s
        reasons.append(getattr(estimate, 'undetermined', ''))
        truth = data['ttc_s'][i]
        with np.errstate(invalid='ignore', divide='ignore'):
            relative = np.abs(estimate.ttc_grid_s - truth) / truth
        relative = relative[np.isfinite(relative)]
        if len(relative):
            ttc_error[i] = np.median(relative)
        if np.isfinite(truth).any() and np.isfinite(estimate.min_ttc_s):
            true_min = np.nanmin(truth)
            min_ttc_error[i] = abs(estimate.min_ttc_s - true_min) / true_min
    return {'direction': direction, 'omega': omega, 'reason': reasons, 'ttc_error': ttc_error,
            'min_ttc_error': min_ttc_error}


def kind_rows(datas, results, mode):
    """Summary dict of one kind and mode over its sequences (module doc)."""
    ratio = np.concatenate([d['ratio'] for d in datas])
    truth_v = np.concatenate([d['v_m_s'] for d in datas])
    truth_w = np.concatenate([d['omega_rad_s'] for d in datas])
    direction = np.concatenate([r['direction'] for r in results])
    omega = np.concatenate([r['omega'] for r in results])
    has = np.all(np.isfinite(direction), axis=1)
    error = np.where(has, _angle_deg(direction, truth_v), np.nan)
    row = {'windows': len(ratio), 'ratio': float(np.median(ratio))}
    for name, low, high in CLASSES:
        inside = (ratio >= low) & (ratio < high)
        row[f'{name}_n'] = int(inside.sum())
        picked = error[inside & has]
        row[f'{name}_deg'] = float(np.median(picked)) if len(picked) else float('nan')
        row[f'{name}_reported'] = float(has[inside].mean()) if inside.any() else float('nan')
        row[f'{name}_wrong'] = int(np.sum(picked > WRONG_DEG))
    w_err = np.linalg.norm(omega - truth_w, axis=1)
    w_true = np.linalg.norm(truth_w, axis=1)
    row['omega_deg_s'] = float(np.degrees(np.nanmedian(w_err)))
    row['omega_pct'] = float(100 * np.nanmedian(w_err / np.maximum(w_true, 1e-9)))
    ttc = np.concatenate([r['ttc_error'] for r in results])
    row['ttc_pct'] = float(100 * np.nanmedian(ttc)) if np.isfinite(ttc).any() else float('nan')
    ttc = np.concatenate([r['min_ttc_error'] for r in results])
    row['min_ttc_pct'] = float(100 * np.nanmedian(ttc)) if np.isfinite(ttc).any() else \
        float('nan')
    return row


COLUMNS = (('windows', 'win', '{:.0f}'), ('ratio', 'ratio', '{:.2f}'),
           ('translating_n', 'n>=.25', '{:.0f}'), ('translating_deg', 'deg', '{:.2f}'),
           ('translating_reported', 'rep', '{:.0%}'),
           ('turning_n', 'n.1-.25', '{:.0f}'), ('turning_deg', 'deg', '{:.2f}'),
           ('turning_reported', 'rep', '{:.0%}'),
           ('rotating_n', 'n<.1', '{:.0f}'), ('rotating_wrong', 'wrong', '{:.0f}'),
           ('rotating_reported', 'rep', '{:.0%}'),
           ('omega_deg_s', 'w deg/s', '{:.2f}'), ('omega_pct', 'w %', '{:.1f}'),
           ('ttc_pct', 'ttc %', '{:.1f}'), ('min_ttc_pct', 'min ttc %', '{:.1f}'))


def table(rows):
    """Markdown table of (kind, mode, row) triples."""
    head = '| kind | mode | ' + ' | '.join(c[1] for c in COLUMNS) + ' |'
    lines = [head, '|' + '---|' * (len(COLUMNS) + 2)]
    for kind, mode, row in rows:
        cells = []
        for key, _, fmt in COLUMNS:
            value = row[key]
            cells.append('-' if isinstance(value, float) and math.isnan(value)
                         else fmt.format(value))
        lines.append(f'| {kind} | {mode} | ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def as_components(data):
    """
    Return a 'full' flow sequence's windows with each flow as two normal flows.

    (u, 0) and (0, v) at its pixel: both components constrain the motion, where the full flow
    given as one normal flow along itself keeps only its length.
    """
    data = dict(data)
    flow = data['flow_px_s']
    zero = np.zeros(len(flow))
    data['x_px'] = np.repeat(data['x_px'], 2)
    data['y_px'] = np.repeat(data['y_px'], 2)
    data['flow_px_s'] = np.stack([np.stack([flow[:, 0], zero], 1),
                                  np.stack([zero, flow[:, 1]], 1)], 1).reshape(-1, 2)
    data['counts'] = 2 * data['counts']
    return data


def evaluate(split='tuning', count=4, kinds=motion_suite.MOTION_KINDS, duration_s=0.6,
             flow='normal', config=None, cache_dir=None, quiet=False, model=None):
    """
    Run every kind of a split in both modes; returns [(kind, mode, row)].

    flow: 'normal', 'full' (the full flow as one normal flow along itself), 'components'
    (the full flow as two normal flows, as_components; max_flows doubled) or 'model' (the
    flows of `model`: a shipped name or checkpoint path, None for the default model).
    """
    config = config or EgomotionConfig()
    if flow == 'components':
        config = dataclasses.replace(config, max_flows=2 * config.max_flows)
    rows = []
    for kind in kinds:
        datas = [load_sequence(kind, seed, duration_s, 'full' if flow == 'components' else flow,
                               cache_dir, config.window_s, model)
                 for seed in motion_suite.split_seeds(split, count)]
        if flow == 'components':
            datas = [as_components(data) for data in datas]
        for mode in MODES:
            results = [run_sequence(d, mode, config) for d in datas]
            rows.append((kind, mode, kind_rows(datas, results, mode)))
            if not quiet:
                print(f'{split} {kind} {mode} done', file=sys.stderr, flush=True)
    return rows
