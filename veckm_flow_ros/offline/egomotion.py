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
Offline egomotion: events -> normal flow (the node's estimator) -> egomotion per window.

    events (npz or bag) -> NormalFlowEstimator (defaults) -> flows
        -> windows of window_s -> EgomotionEstimator.estimate (+ GyroBuffer.mean) -> arrays

The arrays (estimates_to_arrays, written by `veckm-flow egomotion --out`): t_s [N] window
centre (s), omega_rad_s [N, 3], omega_from_gyro [N] bool, direction [N, 3] (NaN where
undetermined), foe_px [N, 2] (NaN where not valid), foe_valid [N] bool, min_ttc_s [N],
ttc_grid_s [N, rows, cols], num_flows [N], inlier_fraction [N], translation_fit [N],
undetermined [N] str (why direction is NaN: core/egomotion_checks.REASONS; '' when it is not),
translation_ratio [N], gyro_bias_rad_s [N, 3] (the bias estimate subtracted from the
gyroscope). Gyroscope files: t (s), wx, wy, wz (rad/s, camera optical frame).
"""

import pathlib
import sys
import tempfile
from typing import List, Optional

import numpy as np

from veckm_flow_ros.core.egomotion import (EgomotionConfig, EgomotionEstimate,
                                           EgomotionEstimator, GyroBuffer)
from veckm_flow_ros.eventio.npz import read_npz

GYRO_COLUMNS = ('t', 'wx', 'wy', 'wz')
# Events pushed to the flow estimator at once (bounded memory, progress steps).
CHUNK_EVENTS = 200_000


def load_gyro_npz(path):
    """
    Read a gyroscope npz: t (s, increasing), wx, wy, wz (rad/s). Return (t_s, omega (G, 3)).

    Raises FileNotFoundError for a missing file and ValueError naming the file and the
    missing or bad column.
    """
    data = read_npz(path, 'gyroscope file')
    missing = [name for name in GYRO_COLUMNS if name not in data]
    if missing:
        raise ValueError(f'{path}: gyroscope file without {", ".join(missing)} (needs t [s], '
                         'wx, wy, wz [rad/s])')
    columns = [np.asarray(data[name], np.float64).reshape(-1) for name in GYRO_COLUMNS]
    lengths = {name: len(column) for name, column in zip(GYRO_COLUMNS, columns)}
    if len(set(lengths.values())) != 1:
        raise ValueError(f'{path}: gyroscope columns differ in length ({lengths})')
    t = columns[0]
    if len(t) < 2:
        raise ValueError(f'{path}: gyroscope file needs at least 2 samples, got {len(t)}')
    if not np.all(np.isfinite(t)) or np.any(np.diff(t) <= 0):
        raise ValueError(f'{path}: gyroscope t must be finite and increasing (seconds)')
    return t, np.stack(columns[1:], axis=1)


def flows_from_events(events, width, height, model=None, progress=True, target_stride=1,
                      confidence=False):
    """
    Compute the normal flow of events as the flow node publishes it (node_default_estimator).

    target_stride: flow of every k-th event only (the context still uses all events);
    confidence: also the flow estimator's per-flow confidence (rotation ensemble, ~4x the
    cost). Returns (t_s, x_px, y_px, u_px_s, v_px_s, weight) arrays of the events that got a
    flow, weight the confidence (with confidence) or else the validity, as the node weighs them.
    """
    from tqdm import tqdm

    from veckm_flow_ros.core.model import load_model
    from veckm_flow_ros.stream.pipeline import node_default_estimator
    model = model if model is not None and not isinstance(model, str) else load_model(model)
    estimator = node_default_estimator(model, width, height, target_stride=target_stride,
                                       confidence=confidence,
                                       max_buffered_events=max(4_000_000, 2 * CHUNK_EVENTS))
    with tqdm(total=len(events), unit='ev', unit_scale=True, file=sys.stderr,
              disable=not progress, desc='flow') as bar:
        flows = estimator.estimate_all(events, CHUNK_EVENTS, bar.update)
    return (np.asarray(flows.t_ns, np.int64) * 1e-9, np.asarray(flows.x, np.float32),
            np.asarray(flows.y, np.float32), np.asarray(flows.u_px_s, np.float32),
            np.asarray(flows.v_px_s, np.float32), _weight(flows.confidence, flows.validity))


def _weight(confidence, validity):
    """Return the flows' weight: the confidence when computed, else the validity, or None."""
    weight = confidence if confidence is not None else validity
    return None if weight is None else np.asarray(weight, np.float32)


def flows_from_bag(path, topic=None, model=None, progress=True, confidence=False):
    """
    Compute the normal flow of a bag's events through the node's replay (ROS time).

    Returns (t_s, x, y, u, v, weight) with t_s the ROS time of each flow's event (s), the
    clock of the bag's other messages (IMU), and weight the confidence (with confidence) or
    else the validity.
    """
    from veckm_flow_ros.core.model import load_model
    from veckm_flow_ros.offline.replay import (load_flows_npz, replay_bag, ReplayOptions,
                                               ReplayOutputs)
    model = model if model is not None and not isinstance(model, str) else load_model(model)
    with tempfile.TemporaryDirectory() as folder:
        out = pathlib.Path(folder) / 'flows.npz'
        replay_bag(path, model, ReplayOptions(topic=topic, progress=progress,
                                              confidence=confidence),
                   ReplayOutputs(npz=out))
        flows = load_flows_npz(out)
    return (flows['stamp_ns'] * 1e-9, flows['x'], flows['y'], flows['u_px_s'],
            flows['v_px_s'], _weight(flows.get('confidence'), flows.get('validity')))


def estimate_windows(camera, t_s, x_px, y_px, u_px_s, v_px_s, weight=None,
                     config: EgomotionConfig = None, gyro: Optional[GyroBuffer] = None,
                     progress=False) -> List[EgomotionEstimate]:
    """
    Egomotion per window of config.window_s over flows sorted by time t_s.

    Windows are consecutive, from the first flow; each gets the gyroscope's mean rate over
    the window when `gyro` covers it (else omega is estimated). Returns one estimate per
    window (NaN fields for windows with too few flows).
    """
    from tqdm import tqdm
    config = (config or EgomotionConfig()).check()
    estimator = EgomotionEstimator(camera, config)
    t_s = np.asarray(t_s, np.float64)
    if len(t_s) == 0:
        return []
    if np.any(np.diff(t_s) < 0):
        order = np.argsort(t_s, kind='stable')
        t_s, x_px, y_px, u_px_s, v_px_s = (np.asarray(c)[order] for c in
                                           (t_s, x_px, y_px, u_px_s, v_px_s))
        weight = None if weight is None else np.asarray(weight)[order]
    edges = np.arange(t_s[0], t_s[-1] + config.window_s, config.window_s)
    bounds = np.searchsorted(t_s, edges)
    estimates = []
    for index in tqdm(range(len(edges) - 1), disable=not progress, file=sys.stderr,
                      desc='egomotion', unit='win'):
        lo, hi = bounds[index], bounds[index + 1]
        t0, t1 = edges[index], edges[index + 1]
        omega = gyro.mean(t0, t1) if gyro is not None else None
        estimates.append(estimator.estimate(
            x_px[lo:hi], y_px[lo:hi], u_px_s[lo:hi], v_px_s[lo:hi],
            None if weight is None else weight[lo:hi], omega, t_s=0.5 * (t0 + t1)))
    return estimates


def estimates_to_arrays(estimates, ttc_grid=(6, 8)) -> dict:
    """Stack estimates into the arrays of the module doc."""
    count = len(estimates)

    def stack(name, shape, dtype=np.float64):
        if not count:
            return np.empty((0,) + shape, dtype)
        return np.stack([np.asarray(getattr(e, name), dtype) for e in estimates])
    if count:
        ttc_grid = estimates[0].ttc_grid_s.shape
    return {
        't_s': stack('t_s', ()), 'omega_rad_s': stack('omega_rad_s', (3,)),
        'omega_from_gyro': stack('omega_from_gyro', (), bool),
        'direction': stack('direction', (3,)), 'foe_px': stack('foe_px', (2,)),
        'foe_valid': stack('foe_valid', (), bool), 'min_ttc_s': stack('min_ttc_s', ()),
        'ttc_grid_s': stack('ttc_grid_s', tuple(ttc_grid), np.float32),
        'num_flows': stack('num_flows', (), np.int64),
        'inlier_fraction': stack('inlier_fraction', ()),
        'translation_fit': stack('translation_fit', ()),
        'undetermined': np.array([e.undetermined for e in estimates], dtype='<U32'),
        'translation_ratio': stack('translation_ratio', ()),
        'gyro_bias_rad_s': stack('gyro_bias_rad_s', (3,)),
    }


def plot_egomotion(arrays: dict, path, title='', truth: Optional[dict] = None):
    """
    Save a plot of heading (azimuth, elevation of the direction, deg) and omega over time.

    truth: optional dict with t_s, direction (M, 3), omega_rad_s (M, 3) drawn as thin lines.
    """
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    t = arrays['t_s'] - (arrays['t_s'][0] if len(arrays['t_s']) else 0.0)
    t0 = arrays['t_s'][0] if len(arrays['t_s']) else 0.0
    figure, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True)

    def heading(direction):
        direction = np.asarray(direction, np.float64)
        azimuth = np.degrees(np.arctan2(direction[:, 0], direction[:, 2]))
        elevation = np.degrees(np.arcsin(np.clip(-direction[:, 1], -1, 1)))
        return azimuth, elevation
    azimuth, elevation = heading(arrays['direction'])
    axes[0].plot(t, azimuth, '.', ms=3, label='azimuth (x vs z)')
    axes[0].plot(t, elevation, '.', ms=3, label='elevation (up)')
    axes[0].set_ylabel('heading [deg]')
    for index, name in enumerate(('x', 'y', 'z')):
        axes[1].plot(t, arrays['omega_rad_s'][:, index], '.', ms=3, label=f'omega {name}')
    axes[1].set_ylabel('angular velocity [rad/s]')
    axes[2].plot(t, arrays['min_ttc_s'], '.', ms=3, label='min time to contact')
    axes[2].set_ylabel('min TTC [s]')
    axes[2].set_xlabel('time [s]')
    if truth is not None:
        tt = truth['t_s'] - t0
        t_azimuth, t_elevation = heading(truth['direction'])
        axes[0].plot(tt, t_azimuth, 'k-', lw=0.8, label='true')
        axes[0].plot(tt, t_elevation, 'k--', lw=0.8)
        for index in range(3):
            axes[1].plot(tt, truth['omega_rad_s'][:, index], 'k-', lw=0.8,
                         label='true' if index == 0 else None)
        if 'ttc_s' in truth:
            axes[2].plot(tt, truth['ttc_s'], 'k-', lw=0.8, label='true (centre)')
    for axis in axes:
        axis.grid(alpha=0.3)
        axis.legend(loc='upper right', fontsize=7)
    axes[0].set_title(title)
    figure.tight_layout()
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
