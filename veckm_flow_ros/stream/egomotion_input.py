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
What the egomotion stream refuses of its input, and the one log line that names it.

- screen_flows(): flows whose t lies outside [-max_flow_age_s, +window_s] of their header
  stamp (one corrupt time would move a window seconds ahead and hold every output back),
  whose weight lies outside its documented 0..1, or whose u, v are not finite.
- gyro_sample_problems(): gyroscope samples beyond the sensor's full scale (saturated,
  rates in deg/s, corrupt) or not finite.
- GyroMonitor: whether the gyroscope agrees with the rotation the flow shows (rates in the
  wrong unit or axes, a second IMU): a gyroscope that disagrees is not used until it agrees
  again.
- Refusals: counts per reason, logged as one line (throttled) with an example value each.
"""

import math
import threading
import time
from typing import Callable, Dict, Optional, Tuple

import numpy as np

# A rate at or above this share of imu_max_rate_rad_s is the sensor's full scale: saturated.
SATURATION_SHARE = 0.98
# The gyroscope disagrees with the flow's rotation when |omega_gyro - omega_flow| exceeds
# this [rad/s] plus DISAGREEMENT_SHARE x |omega_flow| (the flow's rotation is ~25 % off on the
# flow model's flows; a gyroscope in deg/s is 57x off, a wrong axis ~100 %).
DISAGREEMENT_RAD_S = 0.5
DISAGREEMENT_SHARE = 0.5


def screen_flows(columns, max_before_s: float, max_after_s: float, size=None):
    """
    Return (kept columns, {counter name: (refused flows, example)}) of one ~/flow message.

    columns: FlowColumns (t [s] relative to the header stamp); a flow is kept when
    -max_before_s <= t <= max_after_s, its u, v [px/s] are finite, its weight (when present)
    lies in 0..1 and, with size = (width, height) [px] of the calibration, its x, y round to
    a pixel of the image. The common case (nothing refused) costs a few reductions.
    """
    t, u, v, weight = columns.t, columns.u, columns.v, columns.weight
    if len(t) == 0:
        return columns, {}
    # The common case in a few reductions, no temporaries (NaN fails every comparison; a
    # sum that overflows only takes the exact path below).
    if (t.min() >= -max_before_s and t.max() <= max_after_s
            and math.isfinite(float(u.sum()) + float(v.sum()))
            and (weight is None or (weight.min() >= 0 and weight.max() <= 1))
            and (size is None or (columns.x.min() >= -0.5 and columns.x.max() < size[0] - 0.5
                                  and columns.y.min() >= -0.5
                                  and columns.y.max() < size[1] - 0.5))):
        return columns, {}
    checks = [('flows_with_bad_times', (t >= -max_before_s) & (t <= max_after_s),
               lambda i: f't = {t[i]:g} s from the header stamp, allowed '
                         f'{-max_before_s:g}..{max_after_s:g} s'),
              ('flows_with_bad_values', np.isfinite(u + v),
               lambda i: f'u, v = {u[i]:g}, {v[i]:g} px/s')]
    if weight is not None:
        checks.append(('flows_with_bad_weights', (weight >= 0) & (weight <= 1),
                       lambda i: f'weight {weight[i]:g}, documented 0..1'))
    if size is not None:
        x, y = columns.x, columns.y
        # The pixels the estimator looks up: rint(x) in 0..width-1 (False for NaN).
        checks.append(('flows_outside_image', (x >= -0.5) & (x < size[0] - 0.5)
                       & (y >= -0.5) & (y < size[1] - 0.5),
                       lambda i: f'x, y = {x[i]:g}, {y[i]:g} px in a {size[0]}x{size[1]} px '
                                 'calibration'))
    ok = checks[0][1]
    for _, good, _ in checks[1:]:
        ok = ok & good
    refused = {}
    for name, good, example in checks:
        count = len(good) - int(np.count_nonzero(good))
        if count:
            refused[name] = (count, example(int(np.argmin(good))))
    kept = type(columns)(*(None if a is None else a[ok] for a in (
        columns.x, columns.y, t, u, v, weight)))
    return kept, refused


def gyro_sample_problems(omega_rad_s: np.ndarray, max_rate_rad_s: float) -> np.ndarray:
    """
    Return a boolean (G,) mask of the gyroscope samples (G, 3) [rad/s] to refuse.

    Refused: any rate not finite or at or beyond SATURATION_SHARE of the full scale
    max_rate_rad_s (a saturated sensor reads its full scale; rates in deg/s or corrupt
    values exceed it).
    """
    limit = SATURATION_SHARE * max_rate_rad_s
    return ~np.all(np.abs(omega_rad_s) < limit, axis=1)  # NaN compares False


class GyroMonitor:
    """
    Whether the gyroscope agrees with the flow's own rotation estimate.

    check_due(omega_gyro): whether this gyro window should also be solved without the
    gyroscope: the first CHECKS_AT_START windows of trust, every CHECK_EVERY-th, after a
    disagreement, and when the gyroscope's rate changed by more than the disagreement
    margin since the last comparison (rates switching to deg/s or to another IMU are
    caught within two windows); record(omega_gyro, omega_flow) -> True when this comparison
    changed the trust. A
    trusted gyroscope becomes untrusted after 2 disagreements in the last 3 comparisons,
    an untrusted one is trusted again after AGREEMENTS_TO_TRUST agreeing windows in a row.
    """

    CHECKS_AT_START = 5
    CHECK_EVERY = 30
    AGREEMENTS_TO_TRUST = 5

    def __init__(self):
        self.trusted = True
        self.reason = ''
        self._recent = []
        self._agreements = 0
        self._gyro_windows = 0
        self._checked = None  # the gyroscope's rate at the last comparison

    def check_due(self, omega_gyro) -> bool:
        self._gyro_windows += 1
        checked = self._checked
        return (self._gyro_windows <= self.CHECKS_AT_START
                or self._gyro_windows % self.CHECK_EVERY == 0
                or (self._recent and not self._recent[-1]) or checked is None
                or float(np.linalg.norm(np.asarray(omega_gyro) - checked))
                > DISAGREEMENT_RAD_S + DISAGREEMENT_SHARE * float(np.linalg.norm(checked)))

    def record(self, omega_gyro, omega_flow) -> bool:
        omega_gyro = np.asarray(omega_gyro, np.float64)
        omega_flow = np.asarray(omega_flow, np.float64)
        if not (np.all(np.isfinite(omega_gyro)) and np.all(np.isfinite(omega_flow))):
            return False
        self._checked = omega_gyro
        difference = float(np.linalg.norm(omega_gyro - omega_flow))
        flow_rate = float(np.linalg.norm(omega_flow))
        agrees = difference <= DISAGREEMENT_RAD_S + DISAGREEMENT_SHARE * flow_rate
        if self.trusted:
            self._recent = (self._recent + [agrees])[-3:]
            if self._recent.count(False) >= 2:
                self.trusted, self._agreements, self._recent = False, 0, []
                self.reason = (f'the gyroscope ({_rad_s(omega_gyro)}) disagrees with the '
                               f"flow's rotation ({_rad_s(omega_flow)}): rates in deg/s, a "
                               'wrong imu_rotation_xyzw or another IMU?')
                return True
            return False
        self._agreements = self._agreements + 1 if agrees else 0
        if self._agreements >= self.AGREEMENTS_TO_TRUST:
            self.trusted, self._gyro_windows, self.reason = True, 0, ''
            return True
        return False


def _rad_s(omega) -> str:
    return '(' + ', '.join(f'{value:.3g}' for value in omega) + ') rad/s'


class Refusals:
    """
    Refused input per counter, named in one log line at most every period_s.

    add(counter, count, example): count refusals and remember an example text (the offending
    value). The line lists what was refused since the previous line, so every refusal is
    named once, however many there are. log(level, message) as the stream's.
    """

    def __init__(self, log: Callable[[str, str], None], period_s: float = 5.0):
        self._log = log
        self.period_s = period_s
        self._lock = threading.Lock()
        self._pending: Dict[str, Tuple[int, str]] = {}
        self._last_s = -math.inf

    def add(self, counter: str, count: int, example: str, now_s: Optional[float] = None):
        with self._lock:
            total, first = self._pending.get(counter, (0, example))
            self._pending[counter] = (total + count, first)
        self.flush(now_s)

    def flush(self, now_s: Optional[float] = None, force: bool = False):
        """Log the pending refusals when period_s has passed since the last line (or force)."""
        now_s = time.monotonic() if now_s is None else now_s
        with self._lock:
            if not self._pending or (not force and now_s - self._last_s < self.period_s):
                return
            pending, self._pending, self._last_s = self._pending, {}, now_s
        self._log('warning', 'refused input: ' + '; '.join(
            f'{count} {counter.replace("_", " ")} ({example})'
            for counter, (count, example) in sorted(pending.items())))
