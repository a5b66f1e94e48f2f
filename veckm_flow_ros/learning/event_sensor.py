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
The event sensor of the simulators: thresholds, refractory period, background activity.

PixelState turns successive log-intensity images of a scene into events (threshold crossings
interpolated linearly in time between two render steps); background_noise and
with_background_noise add uniform background activity (marked, ground truth NaN);
sensor_times_ns rounds the event times to the sensor's resolution. Shared by the 2D
(learning/simulate.py) and 3D (learning/simulate3d.py) simulators.
"""

from dataclasses import dataclass

import numpy as np


@dataclass
class SensorConfig:
    """Event-sensor model. Thresholds in log-intensity units, times in seconds."""

    threshold: float = 0.25
    threshold_sigma: float = 0.03
    refractory_s: float = 1e-4
    noise_rate_hz_per_px: float = 0.1
    max_step_px: float = 0.5
    max_step_s: float = 2e-3
    time_resolution_ns: int = 1000


@dataclass
class PixelState:
    """
    Per-pixel state of the event sensor: thresholds, reference level, time of the last event.

    threshold_on, threshold_off: (H, W) contrast thresholds [log intensity]; reference: (H, W)
    float64 log intensity of each pixel's last event; last_event_s: (H, W) [s].
    """

    threshold_on: np.ndarray
    threshold_off: np.ndarray
    reference: np.ndarray
    last_event_s: np.ndarray
    refractory_s: float

    @classmethod
    def start(cls, sensor, rng, level):
        """Draw the thresholds and random start references for the first log image `level`."""
        height, width = level.shape
        threshold_on = np.maximum(sensor.threshold * (
            1 + sensor.threshold_sigma / sensor.threshold
            * rng.standard_normal((height, width))), 0.02)
        threshold_off = np.maximum(sensor.threshold * (
            1 + sensor.threshold_sigma / sensor.threshold
            * rng.standard_normal((height, width))), 0.02)
        # Random initial reference inside (-C_off, C_on) so pixels do not fire in lock-step.
        offset = rng.uniform(size=(height, width)) * (threshold_on + threshold_off) \
            - threshold_off
        reference = level.astype(np.float64) - 0.99 * offset
        return cls(threshold_on, threshold_off, reference,
                   np.full((height, width), -np.inf), sensor.refractory_s)

    def crossings(self, level_prev, level_cur, t_prev, step):
        """Events between two log images `step` seconds apart (see _crossings)."""
        return _crossings(level_prev.astype(np.float64), level_cur.astype(np.float64),
                          self.reference, self.threshold_on, self.threshold_off,
                          self.last_event_s, t_prev, step, self.refractory_s)


def background_noise(sensor, rng, width, height, duration_s):
    """
    Background-activity events: Poisson in time, uniform over pixels, random polarity.

    Returns (t_s float64, x int64, y int64, is_on bool) arrays or None when there are none.
    """
    n_noise = rng.poisson(sensor.noise_rate_hz_per_px * width * height * duration_s)
    if not n_noise:
        return None
    return (rng.uniform(0, duration_s, n_noise), rng.integers(0, width, n_noise),
            rng.integers(0, height, n_noise), rng.uniform(size=n_noise) < 0.5)


def with_background_noise(sensor, rng, width, height, duration_s, t_s, x, y, on, *columns):
    """
    Append background-activity events (background_noise) to the signal events' columns.

    t_s, x, y, on: the signal events; columns: (values, fill) pairs of further per-event
    arrays, `fill` being the noise events' value (NaN ground truth, ...). Returns (t_s, x, y,
    on, is_noise, [each column extended]), signal events first.
    """
    values = [np.asarray(column) for column, _ in columns]
    fills = [fill for _, fill in columns]
    is_noise = np.zeros(len(t_s), bool)
    noise = background_noise(sensor, rng, width, height, duration_s)
    if noise is None:
        return t_s, x, y, on, is_noise, values
    n_noise = len(noise[0])
    t_s, x, y, on = (np.concatenate([signal, extra]) for signal, extra in
                     zip((t_s, x, y, on), noise))
    values = [np.concatenate([column, np.full((n_noise,) + column.shape[1:], fill,
                                              column.dtype)])
              for column, fill in zip(values, fills)]
    return t_s, x, y, on, np.concatenate([is_noise, np.ones(n_noise, bool)]), values


def sensor_times_ns(t_s, sensor):
    """Event times [s] rounded to the sensor's time resolution: int64 [ns]."""
    resolution = int(sensor.time_resolution_ns)
    return np.round(t_s * 1e9 / resolution).astype(np.int64) * resolution


def _crossings(level_prev, level_cur, reference, threshold_on, threshold_off, last_event_s,
               t_prev, step, refractory_s):
    """
    Threshold crossings of one render step, linearly interpolated in time.

    Updates `reference` and `last_event_s` in place. Returns (t_s float64[M], flat pixel index
    int64[M], is_on bool[M]) or None when no pixel fired.
    """
    diff = level_cur - reference
    n_on = np.floor(diff / threshold_on)
    n_off = np.floor(-diff / threshold_off)
    count = np.where(diff > 0, n_on, n_off).astype(np.int64)
    count = np.maximum(count, 0)
    fired = np.flatnonzero(count)
    if len(fired) == 0:
        return None
    n = count.reshape(-1)[fired]
    is_on = diff.reshape(-1)[fired] > 0
    c = np.where(is_on, threshold_on.reshape(-1)[fired], threshold_off.reshape(-1)[fired])
    sign = np.where(is_on, 1.0, -1.0)
    ref = reference.reshape(-1)[fired]
    lp = level_prev.reshape(-1)[fired]
    slope = (level_cur.reshape(-1)[fired] - lp) / step  # log intensity per second, nonzero
    # k-th crossing (k = 1..n) at level ref + sign k c.
    first_s = t_prev + (ref + sign * c - lp) / slope
    spacing_s = c / np.abs(slope)
    reference.reshape(-1)[fired] = ref + sign * n * c

    # Refractory: first crossing at least refractory_s after the previous event, then every
    # m-th crossing (crossings inside one step are equally spaced).
    last = last_event_s.reshape(-1)[fired]
    k0 = np.maximum(np.ceil((last + refractory_s - first_s) / spacing_s - 1e-9), 0)
    k0 = np.where(np.isfinite(k0), k0, 0).astype(np.int64)
    m = np.maximum(np.ceil(refractory_s / spacing_s - 1e-9), 1).astype(np.int64)
    kept = np.where(k0 < n, (n - 1 - k0) // m + 1, 0)
    total = int(kept.sum())
    if total == 0:
        return None
    owner_of = np.repeat(np.arange(len(fired)), kept)
    rank = np.arange(total) - np.repeat(np.cumsum(kept) - kept, kept)
    k = k0[owner_of] + rank * m[owner_of]
    t_s = first_s[owner_of] + k * spacing_s[owner_of]
    has = kept > 0
    last_k = k0 + (kept - 1) * m
    last_event_s.reshape(-1)[fired[has]] = (first_s + last_k * spacing_s)[has]
    return t_s, fired[owner_of], is_on[owner_of]
