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
Camera egomotion and time to contact from the normal flow of one window of events.

Conventions (docs/egomotion.md has the derivation): camera optical frame, x right, y down,
z forward; omega [rad/s] and the translation direction d (unit, scale unknown) of the camera
in that frame. At an undistorted normalized point p = (x, y) of depth Z the motion field is
u = A(p) v / Z + B(p) omega, A = [[-1, 0, x], [0, -1, y]],
B = [[x y, -(1 + x^2), y], [1 + y^2, -x y, -x]]. A normal flow of unit direction n and
magnitude m (normalized units, 1/s) gives one equation n . u = m, i.e.

    m = rho (a . v) + g . omega,    a = A^T n,  g = B^T n,  rho = 1 / Z > 0.

Pixel normal flows are mapped to this form exactly to first order: with M = K2 J (K2 the
upper 2x2 of K, J the distortion Jacobian) a pixel velocity is M u, so the pixel constraint
n_px . (M u) = m_px is (M^T n_px) . u = m_px: n = M^T n_px / |M^T n_px|, m = m_px / |...|.

The estimator models the inverse depth as constant per image cell (`cell_px`). For a fixed
direction d the cell depths and omega (when no gyroscope gives it) then follow by linear least
squares; the residual is minimised over d on a sphere grid, refined locally, with
Huber-reweighted iterations against outliers. With a gyroscope, a cell whose best depth would
be negative is not fitted (cheirality), and the search starts from a sign vote: the
direction whose cheirality sign(a . d) best agrees with the signs of the derotated flows
m - g . omega (the flow model's magnitudes are biased, its signs less so); the least squares
refine that start locally, and their global minimum replaces it only where it agrees about
as well with the signs. Slow normal flows (unreliable in sign and size) weigh less there.
Without a gyroscope the joint least squares of omega and direction serve where the flows are
accurate (a small median residual), and there their answer is refined with an inverse depth
affine within each cell (exact on planes, `affine_depth`); on the flow model's flows (biased
magnitudes) the rotation-only fit of omega (translation ignored) stands in for the gyroscope
in the sign vote, the joint least squares refine its direction locally, and the final omega
is pulled towards the rotation-only fit (ridge).
Time to contact per region is the weighted median (weights |a . d| times validity and the
Huber weight) of the per-flow estimates (a . d) / ((m - g . omega) d_z).

EgomotionEstimator is the one implementation: the node, `veckm-flow egomotion` and the
evaluation all call estimate() per window. It keeps the state across windows (the previous
direction, the warm-start count, the gyroscope's bias) and runs, per window, the modules of
each responsibility:

- egomotion_config: EgomotionConfig (the parameters) and EgomotionEstimate (the result);
- egomotion_window: window preparation (the per-pixel map, the compiled input stage);
- egomotion_solve: the solves with and without a gyroscope and the time to contact, each one
  call of the compiled extension veckm_flow_ros._egomotion (csrc/egomotion/);
- egomotion_checks: the gyroscope-bias tracker (the undetermined checks are compiled:
  Solver.checks);
- egomotion_gyro: GyroBuffer, the gyroscope's mean rate over a window (bounded memory).

This module re-exports EgomotionConfig, EgomotionEstimate, GyroBuffer and fibonacci_sphere.
"""

import math

import numpy as np

from veckm_flow_ros.core.camera import CameraModel
from veckm_flow_ros.core.egomotion_checks import GyroBiasTracker, omega_covariance
from veckm_flow_ros.core.egomotion_config import EgomotionConfig, EgomotionEstimate
from veckm_flow_ros.core.egomotion_gyro import GyroBuffer
from veckm_flow_ros.core.egomotion_solve import fibonacci_sphere, Solver
from veckm_flow_ros.core.egomotion_window import InputStage, load_extension

__all__ = ['EgomotionConfig', 'EgomotionEstimate', 'EgomotionEstimator', 'GyroBuffer',
           'fibonacci_sphere']


def _finite(values):
    """Whether all of a few values (array) are finite (a numpy reduction costs more cold)."""
    return all(math.isfinite(value) for value in values.tolist())


class EgomotionEstimator:
    """
    Angular velocity, translation direction, FOE and time to contact per window of flows.

    camera: CameraModel of the event camera (the flows' pixels are its distorted pixels).
    config: EgomotionConfig (checked; ValueError names a value out of range). Needs the
    compiled extension veckm_flow_ros._egomotion (ImportError saying how to build it).
    """

    def __init__(self, camera: CameraModel, config: EgomotionConfig = None):
        self.camera = camera
        self.config = (config or EgomotionConfig()).check()
        extension = load_extension()
        self._input = InputStage(camera, self.config, extension)
        self._solver = Solver(self.config, extension)
        self._previous = None  # the last window's direction: one more start of the search
        self._warm_windows = 0  # windows in a row started from _previous (gyro mode)
        # Without a gyroscope: whether the last window's flows passed the accuracy check
        # (None: not solved without one), and the windows in a row that left the check out.
        # (The node's gyroscope check solves single windows without it in between: they
        # must not touch the gyro mode's count.)
        self._previous_accurate = None
        self._unchecked_windows = 0
        self._bias = GyroBiasTracker(self.config.gyro_bias_windows,
                                     self.config.gyro_bias_prior_rad_s,
                                     self.config.max_gyro_bias_rad_s)

    def reset(self):
        """Forget the previous window's direction (after a time jump or a new camera)."""
        self._previous = None
        self._warm_windows = 0
        self._previous_accurate = None
        self._unchecked_windows = 0
        self._bias.reset()

    def estimate(self, x_px, y_px, u_px_s, v_px_s, weight=None, omega_rad_s=None,
                 t_s=0.0, time_to_contact=True) -> EgomotionEstimate:
        """
        Estimate the egomotion of one window of normal flows.

        x_px, y_px: pixel positions (N,) (float or uint16, distorted image); u_px_s, v_px_s
        (N,) normal flow [px/s]; weight (N,) e.g. validity in 0..1, or None (all 1);
        omega_rad_s (3,) mean angular velocity from a gyroscope in the camera frame, or
        None (or NaN) to estimate it; time_to_contact False leaves ttc_grid_s and
        min_ttc_s NaN (saves their fit where nobody reads them). Too few usable flows give
        NaN fields, not an error;
        arrays of different lengths raise ValueError.
        """
        config = self.config
        gyro = None
        if omega_rad_s is not None:
            gyro = np.asarray(omega_rad_s, np.float64).reshape(-1)
            if gyro.size != 3:
                raise ValueError(f'omega_rad_s must have 3 values (camera frame), got '
                                 f'{gyro.size}')
            if not _finite(gyro):
                gyro = None
        previous_accurate, self._previous_accurate = self._previous_accurate, None
        window = self._input.prepare(x_px, y_px, u_px_s, v_px_s, weight)
        result = self._empty(t_s, 0 if window is None else len(window), gyro)
        result.undetermined = 'too_few_flows'
        if window is None or len(window) < config.min_flows:
            return result
        if gyro is not None:
            if self._bias.due():
                self._measure_bias(window, gyro)
            result.gyro_bias_rad_s = self._bias.bias_rad_s
            direction, omega, fit = self._solve_gyro(window, gyro - result.gyro_bias_rad_s)
        else:
            direction, omega, fit, self._previous_accurate = self._solve_free(
                window, previous_accurate)
        result.omega_rad_s = omega
        result.translation_fit = fit
        self._previous = direction if fit >= config.min_translation_fit else None
        result.inlier_fraction = np.count_nonzero(window.robust >= 1.0) / len(window)
        result.undetermined = 'translation_unexplained'
        if fit < config.min_translation_fit or not _finite(direction):
            return result
        ratio, share, _ = self._solver.checks(window, direction, omega, signs=True)
        result.translation_ratio = ratio
        if ratio < config.min_translation_ratio:
            result.undetermined = 'rotation_dominated'
            return result
        if share > config.max_sign_disagreement:
            # Cheirality: the derotated flows' signs follow the heading. Where many contradict
            # the answer, it rests on the flow magnitudes alone (a false least-squares minimum,
            # or without a gyroscope a rotation-only fit that took a translation for a
            # rotation): no heading, and no warm start from it.
            self._previous = None
            result.undetermined = 'signs_disagree'
            return result
        result.undetermined = ''
        result.direction = direction
        if abs(direction[2]) >= config.min_forward:
            fx, fy = self.camera.project_point(direction[0] / direction[2],
                                               direction[1] / direction[2])
            result.foe_px = np.array([fx, fy])
            result.foe_valid = _finite(result.foe_px)
            if direction[2] > 0 and time_to_contact:
                result.ttc_grid_s = self._solver.time_to_contact(window, direction, omega)
                times_s = result.ttc_grid_s[~np.isnan(result.ttc_grid_s)]
                if len(times_s):
                    result.min_ttc_s = float(times_s.min())
        return result

    def _empty(self, t_s, num_flows, gyro) -> EgomotionEstimate:
        nan3 = np.full(3, np.nan)
        rows, cols = self.config.ttc_grid
        return EgomotionEstimate(
            t_s=float(t_s), num_flows=int(num_flows),
            omega_rad_s=nan3.copy() if gyro is None else gyro.copy(),
            omega_from_gyro=gyro is not None, direction=nan3.copy(),
            foe_px=np.full(2, np.nan), foe_valid=False,
            ttc_grid_s=np.full((rows, cols), np.nan, np.float32), min_ttc_s=float('nan'),
            inlier_fraction=float('nan'))

    def _solve_gyro(self, window, omega):
        """Direction with omega known: (direction, omega, explained share); see Solver."""
        config = self.config
        previous = self._previous
        # Motion is continuous: most windows start from the previous direction, with a full
        # search every warm_start_windows + 1 windows so that a wrong basin cannot persist.
        warm = (config.sign_start and previous is not None
                and self._warm_windows < config.warm_start_windows)
        self._warm_windows = self._warm_windows + 1 if warm else 0
        direction, fit = self._solver.solve_gyro(window, omega, previous, warm)
        return direction, omega.copy(), fit

    def _solve_free(self, window, previous_accurate):
        """Direction and omega together: (direction, omega, share, accurate); see Solver."""
        # The flows' accuracy does not change from one window to the next: after windows whose
        # flows failed the accuracy check, up to warm_start_windows in a row leave the check's
        # fit out (the rotation start directly), then one checks again.
        config = self.config
        skip = (config.rotation_start and previous_accurate is False
                and self._unchecked_windows < config.warm_start_windows)
        self._unchecked_windows = self._unchecked_windows + 1 if skip else 0
        return self._solver.solve_free(window, self._previous, skip_check=skip)

    def _measure_bias(self, window, gyro):
        """One bias measurement from the joint least squares where they fit (GyroBiasTracker)."""
        direction, omega, _, _ = self._solver.solve_free(window, self._previous,
                                                         least_squares=True)
        if _finite(direction) and self._solver.checks(window, direction, omega, signs=False,
                                                      accuracy=True)[2]:
            covariance = omega_covariance(
                window.a, window.g, window.m, window.weight * window.robust, window.starts,
                direction, omega, self.config.gyro_bias_relative_error)
            self._bias.add(omega, gyro, covariance)
        else:
            self._bias.reject()
