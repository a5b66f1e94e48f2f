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
The gyroscope buffer of the egomotion estimator.

GyroBuffer (re-exported by core.egomotion): recent rate samples in the IMU frame, the mean
rate over a camera window in the camera frame.
"""

import bisect
import math

import numpy as np

# GyroBuffer.add checks batches of at most this many samples in plain Python (an IMU message
# batch holds 1-10; numpy's calls cost more on so few).
SMALL_BATCH = 32


def _interpolate(times, rates, t_s):
    """
    Return the rates (lists of 3) interpolated linearly at t_s, times[0] <= t_s <= times[-1].

    np.interp's arithmetic on Python floats (same results): the sample's value at a sample
    time, else slope x (t_s - left time) + left value.
    """
    left = bisect.bisect_right(times, t_s) - 1
    if left == len(times) - 1 or times[left] == t_s:
        return rates[left]
    t_left, step_s = times[left], times[left + 1] - times[left]
    return [(b - a) / step_s * (t_s - t_left) + a
            for a, b in zip(rates[left], rates[left + 1])]


class GyroBuffer:
    """
    Recent gyroscope samples, averaged over a window in the camera frame (bounded memory).

    rotation_cam_imu (3, 3) turns IMU-frame rates into the camera optical frame; camera time
    = IMU time + time_offset_s. Samples older than max_age_s before the newest, and beyond
    max_samples, are forgotten; samples older than the newest one are dropped (counted in
    `dropped`).
    """

    def __init__(self, rotation_cam_imu=np.eye(3), time_offset_s=0.0, max_age_s=2.0,
                 max_samples=20000, max_gap_s=0.05):
        rotation = np.asarray(rotation_cam_imu, np.float64)
        if rotation.shape != (3, 3) or not np.all(np.isfinite(rotation)):
            raise ValueError(f'rotation_cam_imu must be a finite 3x3 matrix, got '
                             f'{rotation.tolist()}')
        if not np.allclose(rotation @ rotation.T, np.eye(3), atol=1e-3) or \
                np.linalg.det(rotation) < 0:
            raise ValueError(f'rotation_cam_imu must be a rotation matrix (orthonormal, det '
                             f'+1), got {rotation.tolist()}')
        if not math.isfinite(time_offset_s):
            raise ValueError(f'time_offset_s must be finite, got {time_offset_s}')
        if not max_age_s > 0:
            raise ValueError(f'max_age_s must be > 0 s, got {max_age_s}')
        if not int(max_samples) >= 2:
            raise ValueError(f'max_samples must be >= 2, got {max_samples}')
        self.rotation_cam_imu = rotation
        self.time_offset_s = float(time_offset_s)
        self.max_age_s = float(max_age_s)
        self.max_samples = int(max_samples)
        self.max_gap_s = float(max_gap_s)
        self._t = np.empty(2 * self.max_samples)
        self._w = np.empty((2 * self.max_samples, 3))
        self._start = self._end = 0
        self.dropped = 0

    def __len__(self):
        return self._end - self._start

    def clear(self):
        self._start = self._end = 0

    def add(self, t_s, omega_rad_s):
        """Add samples: times (G,) [s, IMU clock] and rates (G, 3) [rad/s, IMU frame]."""
        t = np.asarray(t_s, np.float64).reshape(-1)
        w = np.asarray(omega_rad_s, np.float64).reshape(-1, 3)
        if len(t) != len(w):
            raise ValueError(f'gyro times and rates differ in length: {len(t)} vs {len(w)}')
        if len(t) <= SMALL_BATCH:
            keep = self._keep_small(t.tolist(), w.tolist())
        else:
            keep = self._keep(t, w)
        self.dropped += int(len(t) - len(keep))
        if len(keep) < len(t):
            t, w = t[keep], w[keep]
        if len(t) > self.max_samples:
            t, w = t[-self.max_samples:], w[-self.max_samples:]
        if self._end + len(t) > len(self._t):
            live = slice(self._start, self._end)
            count = self._end - self._start
            self._t[:count], self._w[:count] = self._t[live].copy(), self._w[live].copy()
            self._start, self._end = 0, count
        self._t[self._end:self._end + len(t)] = t
        self._w[self._end:self._end + len(t)] = w
        self._end += len(t)
        if len(self):
            limit = self._t[self._end - 1] - self.max_age_s
            if self._t[self._start] < limit:
                first = self._start + int(np.searchsorted(self._t[self._start:self._end],
                                                          limit))
                self._start = max(first, self._end - self.max_samples)
            else:
                self._start = max(self._start, self._end - self.max_samples)

    def _newest(self):
        return float(self._t[self._end - 1]) if len(self) else -math.inf

    def _keep(self, t, w):
        """
        Return the positions (K,) of the samples to keep.

        Finite, and each later than every sample before it (the newest one held included).
        """
        ok = np.isfinite(t) & np.all(np.isfinite(w), axis=1)
        increasing = t > np.maximum.accumulate(np.concatenate([[self._newest()], t[:-1]]))
        return np.flatnonzero(ok & increasing)

    def _keep_small(self, times, rates):
        """_keep for a few samples (lists), in plain Python: numpy's calls cost more there."""
        keep, latest = [], self._newest()
        for index, (t_s, rate) in enumerate(zip(times, rates)):
            if (t_s > latest and math.isfinite(t_s) and math.isfinite(rate[0])
                    and math.isfinite(rate[1]) and math.isfinite(rate[2])):
                keep.append(index)
            # (np.maximum.accumulate: a NaN time stays the running maximum)
            if not math.isnan(latest) and (math.isnan(t_s) or t_s > latest):
                latest = t_s
        return keep

    def mean(self, t0_s, t1_s):
        """
        Mean rate (3,) [rad/s, camera frame] over camera times [t0_s, t1_s], or None.

        The rate is interpolated linearly between samples; None when the samples do not
        cover the window (within max_gap_s at either end).
        """
        if len(self) == 0 or not t1_s >= t0_s:
            return None
        t = self._t[self._start:self._end]
        first_s, last_s = float(t[0]), float(t[-1])
        lo, hi = t0_s - self.time_offset_s, t1_s - self.time_offset_s
        if lo < first_s - self.max_gap_s or hi > last_s + self.max_gap_s:
            return None
        lo, hi = min(max(lo, first_s), last_s), min(max(hi, first_s), last_s)
        # A window holds a few samples: Python floats over them cost less than numpy calls
        # over the buffer (same arithmetic as np.interp and the trapezoid sum).
        begin, end = (int(index) for index in t.searchsorted((lo, hi), side='right'))
        begin = max(begin - 1, 0)   # the sample at or before lo
        end = min(end + 1, len(t))  # up to the sample after hi
        times = t[begin:end].tolist()
        rates = self._w[self._start + begin:self._start + end].tolist()
        if hi - lo <= 0:
            rate = _interpolate(times, rates, 0.5 * (lo + hi))
        else:
            knots = [lo] + [t_s for t_s in times if lo < t_s < hi] + [hi]
            values = [_interpolate(times, rates, knot) for knot in knots]
            rate = None
            for step, (start, stop) in enumerate(zip(values, values[1:])):
                duration_s = knots[step + 1] - knots[step]
                area = [(b + a) * 0.5 * duration_s for a, b in zip(start, stop)]
                rate = area if rate is None else [r + s for r, s in zip(rate, area)]
            rate = [r / (hi - lo) for r in rate]
        return self.rotation_cam_imu @ np.array(rate)
