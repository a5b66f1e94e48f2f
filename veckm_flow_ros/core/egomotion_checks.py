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
The gyroscope's bias, and the reasons a window reports no direction.

GyroBiasTracker: a constant gyroscope bias moves the direction by about bias / (|v| / Z)
radians (0.5 deg/s at |v| / Z = 0.1 /s: 5 deg). The flows constrain the rotation too: where
the joint least squares of rotation and direction fit the flows (the accuracy check of the
solve without a gyroscope), the gyroscope's mean minus their omega is a measurement of the
bias, with the covariance of the fit (omega_covariance: the residual's variance times the
inverse Gauss-Newton normal matrix of omega and the direction, cell depths eliminated) plus
a relative error of the fitted omega (the depth model's misfit, which the residual does not
show as noise). The tracker is a Kalman filter for a constant bias: a zero-mean prior, each
measurement weighed by its inverse covariance, measurements beyond GATE standard deviations
rejected; its mean is subtracted only where it stands out of its uncertainty.

The checks of whether a window's translation can be told at all (the translation ratio, the
sign disagreement) are compiled (csrc/egomotion/checks.cpp, Solver.checks): a window pays no
numpy pass for them.

Reasons an estimate has no direction (EgomotionEstimate.undetermined): see REASONS.
"""

import math

import numpy as np

REASONS = {
    'too_few_flows': 'fewer usable flows than min_flows',
    'rotation_dominated': 'translational flow below min_translation_ratio of the rotational',
    'translation_unexplained': 'the fit explains less than min_translation_fit of the '
                               'derotated flow',
    'signs_disagree': 'more than max_sign_disagreement of the sign weight of the derotated '
                      'flows contradicts the heading',
}


class GyroBiasTracker:
    """
    Online estimate of a gyroscope's constant bias [rad/s] (3,) in the camera frame.

    every_windows: measurements are due on the first FIRST_MEASUREMENTS windows, then every
    this many windows (0: never); the interval doubles (up to BACK_OFF times) after each
    rejected measurement and after each accepted one once the estimate has settled (SETTLED
    measurements kept: more add little against the flows' systematic errors), and returns
    to every_windows after an accepted one before that; prior_rad_s: standard deviation of
    the bias before any measurement (per axis); max_rad_s: measurements larger than this on
    any axis are rejected (a motion the flows mistook, e.g. the two solutions of a plane
    filling the view, not a bias).

    bias_rad_s, the estimate subtracted from the gyroscope, is the filter's mean where it
    stands out of its own uncertainty, else shrunk towards zero, so that the measurements'
    errors do not corrupt an unbiased gyroscope. The uncertainty is the filter's covariance
    times the measurements' weighted squared scatter about their mean over its expectation
    3 (kept - 1) where that exceeds 1 (the depth model's misfit, which the covariance does
    not see, varies from window to window), or down to MIN_SCALE once TRUST_SCATTER
    measurements are kept (the stated covariances hold a relative error of the flows' omega
    that is pessimistic for fast rotations; a small scatter of fewer is chance). The squared
    Mahalanobis distance D2 of the mean from zero gives the share subtracted: 0 up to
    SIGNIFICANT[0], 1 from SIGNIFICANT[1] (chi-square quantiles, 3 degrees of freedom),
    linear between.
    """

    GATE = 5.0  # standard deviations beyond which a measurement is rejected
    BACK_OFF = 8  # longest interval between measurements, in every_windows
    FIRST_MEASUREMENTS = 4  # windows in a row measured at the start
    MIN_SCALE = 0.05  # least factor of the stated covariances (they include a relative error)
    TRUST_SCATTER = 4  # measurements kept before a small scatter may shrink the covariance
    SETTLED = 8  # measurements kept after which the interval doubles
    SIGNIFICANT = (6.25, 16.27)  # D2 where the estimate starts to count / counts in full
    #                              (chi2 with 3 dof: 90 % and 99.9 % quantiles)

    def __init__(self, every_windows, prior_rad_s, max_rad_s=math.inf):
        self.every_windows = int(every_windows)
        self.prior_rad_s = float(prior_rad_s)
        self.max_rad_s = float(max_rad_s)
        self.accepted = 0
        self.rejected = 0
        self.reset()

    def reset(self):
        """Forget the measurements (a new gyroscope or a long gap)."""
        self._prior = np.eye(3) / max(self.prior_rad_s, 1e-12) ** 2
        self._information = self._prior.copy()
        self._vector = np.zeros(3)
        self._square = 0.0  # sum of s^T C^-1 s over the kept measurements s
        self._kept = 0
        self._count = 0
        self._interval = self.every_windows
        self._first = self.FIRST_MEASUREMENTS
        self._mean = np.zeros(3)
        self._applied = np.zeros(3)

    def due(self):
        """Whether this window should measure the bias (counts the windows)."""
        if self.every_windows <= 0 or self.prior_rad_s <= 0:
            return False
        if self._first > 0:
            self._first -= 1
            self._count = 1
            return True
        due = self._count % self._interval == 0
        self._count = 1 if due else self._count + 1
        return due

    def _back_off(self, longer):
        self._interval = min(2 * self._interval, self.BACK_OFF * self.every_windows) \
            if longer else self.every_windows

    def add(self, omega_flow_rad_s, omega_gyro_rad_s, covariance):
        """
        Add the measurement gyro - flows with covariance (3, 3) [rad^2/s^2].

        Returns whether it was kept (finite, within max_rad_s and within GATE standard
        deviations of the filter's mean).
        """
        sample = np.asarray(omega_gyro_rad_s, np.float64) - omega_flow_rad_s
        covariance = np.asarray(covariance, np.float64)
        if not (np.all(np.isfinite(sample)) and np.all(np.isfinite(covariance))):
            return self.reject()
        if not float(np.max(np.abs(sample))) <= self.max_rad_s:
            return self.reject()
        difference = sample - self._mean
        total = covariance + np.linalg.inv(self._information)
        if float(difference @ np.linalg.solve(total, difference)) > self.GATE ** 2:
            return self.reject()
        information = np.linalg.inv(covariance)
        weighted = information @ sample
        self._information = self._information + information
        self._vector = self._vector + weighted
        self._square += float(sample @ weighted)
        self._kept += 1
        self.accepted += 1
        self._update()
        self._back_off(self._kept >= self.SETTLED)
        return True

    def _update(self):
        """Update the mean and the estimate subtracted (class doc), once per kept measurement."""
        posterior = np.linalg.inv(self._information)
        self._mean = posterior @ self._vector
        # The measurements' weighted squared scatter about the data's own mean, against its
        # expectation 3 (kept - 1) under their stated covariances.
        scale = 1.0
        if self._kept >= 2:
            data = self._information - self._prior
            data_mean = np.linalg.solve(data, self._vector)
            scatter = self._square - float(data_mean @ self._vector)
            floor = self.MIN_SCALE if self._kept >= self.TRUST_SCATTER else 1.0
            scale = max(floor, scatter / (3.0 * (self._kept - 1)))
        distance2 = float(self._mean @ np.linalg.solve(scale * posterior, self._mean))
        low, high = self.SIGNIFICANT
        self._applied = self._mean * min(max((distance2 - low) / (high - low), 0.0), 1.0)

    def reject(self):
        """Count a rejected measurement (the flows not accurate, or out of the gates)."""
        self.rejected += 1
        self._back_off(True)
        return False

    @property
    def bias_rad_s(self):
        """Return the estimate to subtract (3,) (zeros before any measurement)."""
        return self._applied.copy()

    @property
    def mean_rad_s(self):
        """Return the filter's mean (3,), before the significance test."""
        return self._mean.copy()


def omega_covariance(a, g, m, weight, starts, direction, omega, relative_error):
    """
    Covariance (3, 3) of the joint least squares' omega at (direction, omega).

    a, g (N, 3), m (N,), weight (N,) (fit weight times Huber weight), starts (C,) the cells'
    first flows (flows sorted by cell): the Gauss-Newton normal matrix of omega and the
    direction's two tangent angles with each cell's depth eliminated, H = sum w x x^T -
    sum_c S_c S_c^T / sum_c w b^2 (x = (g, rho_c a . t1, rho_c a . t2), S_c = sum_c w b x,
    b = a . d), its omega block of H^-1 times the residual's variance per unit weight, plus
    (relative_error |omega|)^2 per axis. The direction's uncertainty counts: a lateral
    translation and a rotation that the flows barely tell apart leave omega uncertain.
    """
    b = a @ direction
    r = m - g @ omega
    wb = weight * b
    s_bb = np.add.reduceat(wb * b, starts)
    s_br = np.add.reduceat(wb * r, starts)
    safe = np.maximum(s_bb, 1e-300)
    rho = np.maximum(s_br / safe, 0.0)
    cell = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(m))))
    rho_flow = rho[cell]
    residual = r - rho_flow * b
    variance = float(weight @ (residual * residual)) / max(len(m) - len(starts) - 8, 1) \
        / max(float(np.mean(weight)), 1e-300)
    # The residual's derivatives: -g per omega, -rho_c a . t per tangent angle of d.
    tangent = np.linalg.svd(direction[None])[2][1:]  # (2, 3) orthonormal, normal to d
    x = np.concatenate([g, rho_flow[:, None] * (a @ tangent.T)], axis=1)  # (N, 5)
    s_bx = np.add.reduceat(wb[:, None] * x, starts, axis=0)
    normal = (weight[:, None] * x).T @ x - (s_bx / safe[:, None]).T @ s_bx
    normal = normal / max(float(np.mean(weight)), 1e-300)
    covariance = variance * np.linalg.pinv(normal)[:3, :3]
    return covariance + np.eye(3) * (relative_error * float(np.linalg.norm(omega))) ** 2
