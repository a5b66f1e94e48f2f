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
What the egomotion estimator checks around its solves: the gyroscope's bias and whether a
window's translation can be told at all.

GyroBiasTracker: a constant gyroscope bias moves the direction by about bias / (|v| / Z)
radians (0.5 deg/s at |v| / Z = 0.1 /s: 5 deg). The flows constrain the rotation too: where
the joint least squares of rotation and direction fit the flows (the accuracy check of the
solve without a gyroscope), the gyroscope's mean minus their omega is a measurement of the
bias. The tracker keeps the last few and gives their per-axis median.

translation_ratio: the translational normal flow the fit explains (cell depth times a . d per
flow) over the rotational normal flow g . omega, medians over the window's flows. Where it is
small the direction rests on a few per cent of the flow, below the flow errors and the
rotation's (the gyroscope's bias, the flow magnitudes' common scale): the estimate reports no
direction ('rotation_dominated') rather than a confident wrong heading.

Reasons an estimate has no direction (EgomotionEstimate.undetermined): see REASONS.
"""

from collections import deque

import numpy as np

REASONS = {
    'too_few_flows': 'fewer usable flows than min_flows',
    'rotation_dominated': 'translational flow below min_translation_ratio of the rotational',
    'translation_unexplained': 'the fit explains less than min_translation_fit of the '
                               'derotated flow',
}


class GyroBiasTracker:
    """
    Online estimate of a gyroscope's constant bias [rad/s] (3,) in the camera frame.

    every_windows: a measurement is due on the first window and then every this many
    windows (0: never); max_bias_rad_s: measurements larger than this are rejected (a
    motion the flows mistook, not a bias); samples: how many recent measurements the
    per-axis median takes.
    """

    def __init__(self, every_windows, max_bias_rad_s, samples=9):
        self.every_windows = int(every_windows)
        self.max_bias_rad_s = float(max_bias_rad_s)
        self._samples = deque(maxlen=int(samples))
        self._count = 0
        self.accepted = 0
        self.rejected = 0

    def reset(self):
        """Forget the measurements (a new gyroscope or a long gap)."""
        self._samples.clear()
        self._count = 0

    def due(self):
        """Whether this window should measure the bias (counts the windows)."""
        if self.every_windows <= 0:
            return False
        due = self._count % self.every_windows == 0
        self._count += 1
        return due

    def add(self, omega_flow_rad_s, omega_gyro_rad_s):
        """Add a measurement (gyroscope's omega - flows'); returns whether it was kept."""
        sample = np.asarray(omega_gyro_rad_s, np.float64) - omega_flow_rad_s
        if not (np.all(np.isfinite(sample))
                and float(np.max(np.abs(sample))) <= self.max_bias_rad_s):
            self.rejected += 1
            return False
        self._samples.append(sample)
        self.accepted += 1
        return True

    @property
    def bias_rad_s(self):
        """Per-axis median of the kept measurements (zeros before the first)."""
        if not self._samples:
            return np.zeros(3)
        return np.median(np.array(self._samples), axis=0)


def translation_ratio(residual, r, h):
    """
    Median |explained translational flow| over median |rotational flow| (float).

    residual (N,): the flows' residual after the cell-depth fit; r (N,): derotated flow
    m - g . omega; h (N,): rotational flow g . omega (all normalized normal flow, 1/s).
    """
    rotational = float(np.median(np.abs(h))) if len(h) else 0.0
    if not rotational > 0:
        return float('inf')
    return float(np.median(np.abs(r - residual))) / rotational
