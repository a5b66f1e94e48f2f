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
The egomotion estimator's settings (EgomotionConfig) and one window's result (EgomotionEstimate).

Both are re-exported by core.egomotion; docs/egomotion.md explains every parameter.
"""

from dataclasses import dataclass, field, fields

import numpy as np


@dataclass
class EgomotionConfig:
    """
    Parameters of the egomotion estimator (unit and accepted range in each comment).

    check() raises ValueError naming the first value out of range.
    """

    window_s: float = 0.03          # flows per estimate [s], (0, 10]
    min_flows: int = 200            # fewer usable flows -> no estimate (NaN fields), >= 10
    max_flows: int = 4000           # evenly subsampled above this [flows per window], >= 10
    min_validity: float = 0.0       # flows whose weight (validity) is below are ignored, [0, 1]
    min_forward: float = 0.25       # |direction_z| below this -> FOE and TTC invalid, [0, 1]
    ttc_grid: tuple = (6, 8)        # rows, cols of the time-to-contact image, each 1..64
    cell_px: int = 32               # side of the constant-inverse-depth cells [px], 2..256
    min_cell_flows: int = 3         # cells with fewer flows are not used, >= 2
    sphere_directions: int = 300    # coarse search directions on the sphere, 50..100000
    refine_steps: int = 5           # local search rounds (step / 3 each), 0..20
    robust_iterations: int = 2      # Huber reweighting rounds, 0..10
    huber_scale: float = 2.0        # Huber threshold in robust standard deviations, (0, 100]
    min_translation_fit: float = 0.05  # explained share of the derotated flow below this ->
    #                                    direction NaN (translation too small to tell), [0, 1)
    min_ttc_flows: int = 10         # flows a time-to-contact region needs, >= 1
    ttc_neighbour_weight: float = 0.25  # weight of the flows of the 8 neighbouring regions
    #                                    in a region's time to contact (its own weigh 1);
    #                                    0: each region alone, [0, 1]
    flow_floor_px_s: float = 50.0   # flows weighted by 1 / (|flow| + this) [px/s]: the flow
    #                                 errors grow with the flow; 0: all flows weigh the same
    #                                 (plain least squares), else > 0
    slow_flow_px_s: float = 100.0   # with a gyroscope, flows
    #                                 weighted by s^2 / (s^2 + this^2), s = |flow| [px/s]: slow
    #                                 normal flows are unreliable in sign and size; 0: off
    sign_start: bool = True         # with a gyroscope: start the search from the direction
    #                                 whose cheirality best agrees with the derotated flows'
    #                                 signs (robust to magnitude errors), not from the coarse
    #                                 least-squares minimum
    sign_flows: int = 1000          # flows (evenly spread) of the sign start's search, >= 10
    sign_tolerance: float = 2.0     # the least-squares global minimum replaces the sign start
    #                                 when its sign disagreement is at most (1 + this) times
    #                                 the sign start's (the sign cost is flat near the
    #                                 truth: it picks a basin, the magnitudes decide), [0, 10]
    rotation_error: float = 0.3     # relative error assumed for the rotational flow g . omega:
    #                                 the signs of derotated flows r count r^2 / (r^2 +
    #                                 (this g . omega)^2) in the sign start, [0, 10]
    rotation_start: bool = True     # without a gyroscope, where the flows are not accurate
    #                                 (rotation_start_residual): the rotation-only fit of omega
    #                                 (translation ignored) stands in for the gyroscope in the
    #                                 sign vote for the start, the joint least squares of omega
    #                                 and direction refine it locally; false: the joint least
    #                                 squares' global minimum everywhere
    rotation_start_residual: float = 0.07  # without a gyroscope and with the rotation start:
    #                                 the joint least squares' global minimum is the result
    #                                 where (after one Huber round) it leaves a median |residual|
    #                                 below this share of the median |normal flow|, or half of
    #                                 it on the tenth of the flows with the smallest |a . d|
    #                                 (accurate flows); else the rotation start; 0: always the
    #                                 rotation start, [0, 10]
    rotation_prior_weight: float = 300.0  # without a gyroscope and with the rotation start:
    #                                 the rotation-only fit's omega counts in the final omega
    #                                 as a measurement of standard deviation 1 / sqrt(this)
    #                                 rad/s (0.058 at 300) where the flows' error is the fit's
    #                                 residual [s^2/rad^2]; 0: the joint least squares alone,
    #                                 [0, 1e6]
    warm_start_windows: int = 10    # up to this many windows in a row rely on the
    #                                 previous one, then one window is searched in full: with
    #                                 a gyroscope and the sign start, they start from its
    #                                 direction (local searches; the global least-squares
    #                                 check only when the fit ends > 5 deg from it); without,
    #                                 with the rotation start, after a window whose flows
    #                                 failed the accuracy check they leave the check out;
    #                                 0: every window in full, 0..1000
    gyro_bias_windows: int = 10     # with a gyroscope: every this many windows (and the
    #                                 first 4) the joint least squares of omega and direction
    #                                 run too; where they fit the flows (the accuracy check
    #                                 of rotation_start_residual) the gyroscope's mean minus
    #                                 their omega measures its bias, and a Kalman filter of a
    #                                 constant bias (egomotion_checks.GyroBiasTracker) gives
    #                                 the estimate subtracted from the gyroscope where it
    #                                 stands out of its uncertainty; 0: the
    #                                 gyroscope is trusted, 0..1000
    gyro_bias_prior_rad_s: float = 0.02  # the bias's standard deviation per axis before any
    #                                 measurement [rad/s]; 0: the gyroscope is trusted, [0, 1]
    max_gyro_bias_rad_s: float = 0.025  # bias measurements larger than this on any axis are
    #                                 rejected [rad/s], [0, 1]
    gyro_bias_relative_error: float = 0.02  # relative error of the flows' omega added to
    #                                 each measurement's covariance (the depth model's
    #                                 misfit), [0, 1]
    cell_huber_scale: float = 2.0   # after each fit, a cell's flows weigh at most
    #                                 this times the median cell's weighted mean |residual|
    #                                 over its own (cells straddling a depth edge); 0: off,
    #                                 [0, 100]
    affine_depth: bool = True       # where the flows are accurate, refine the answer
    #                                 with an inverse depth affine within each cell (exact
    #                                 on planes): omega and direction, or with a gyroscope
    #                                 the direction
    min_translation_ratio: float = 0.05  # the fitted translational normal flow below this
    #                                 share of the rotational (medians over the flows) ->
    #                                 direction NaN, undetermined 'rotation_dominated'; 0:
    #                                 off, [0, 1]
    max_sign_disagreement: float = 0.1  # the share of the sign vote's weight (with or
    #                                 without a gyroscope) whose derotated flow's sign
    #                                 contradicts the answer's cheirality above this ->
    #                                 direction NaN, undetermined 'signs_disagree' (flows
    #                                 whose signs do not support the heading: the flow
    #                                 model's wrong signs and magnitude errors, or without
    #                                 a gyroscope a translation taken for a rotation); 1:
    #                                 off, [0, 1]

    def check(self) -> 'EgomotionConfig':
        """Return self, or raise ValueError naming the first value out of its range."""
        def need(ok, name, rule):
            if not ok:
                raise ValueError(f'egomotion {name} must be {rule}, got '
                                 f'{getattr(self, name)!r}')
        need(0 < self.window_s <= 10, 'window_s', 'in (0, 10] s')
        need(self.min_flows >= 10, 'min_flows', '>= 10')
        need(self.max_flows >= 10, 'max_flows', '>= 10')
        need(0 <= self.min_validity <= 1, 'min_validity', 'in [0, 1]')
        need(0 <= self.min_forward <= 1, 'min_forward', 'in [0, 1]')
        grid = tuple(self.ttc_grid)
        need(len(grid) == 2 and all(int(v) == v and 1 <= v <= 64 for v in grid), 'ttc_grid',
             '(rows, cols), each 1..64')
        need(2 <= self.cell_px <= 256, 'cell_px', 'in 2..256 px')
        need(self.min_cell_flows >= 2, 'min_cell_flows', '>= 2')
        need(50 <= self.sphere_directions <= 100000, 'sphere_directions', 'in 50..100000')
        need(0 <= self.refine_steps <= 20, 'refine_steps', 'in 0..20')
        need(0 <= self.robust_iterations <= 10, 'robust_iterations', 'in 0..10')
        need(0 < self.huber_scale <= 100, 'huber_scale', 'in (0, 100]')
        need(0 <= self.min_translation_fit < 1, 'min_translation_fit', 'in [0, 1)')
        need(self.min_ttc_flows >= 1, 'min_ttc_flows', '>= 1')
        need(0 <= self.ttc_neighbour_weight <= 1, 'ttc_neighbour_weight', 'in [0, 1]')
        need(self.flow_floor_px_s >= 0, 'flow_floor_px_s', '>= 0 px/s')
        need(self.slow_flow_px_s >= 0, 'slow_flow_px_s', '>= 0 px/s')
        need(isinstance(self.sign_start, (bool, np.bool_)), 'sign_start', 'true or false')
        need(0 <= self.rotation_error <= 10, 'rotation_error', 'in [0, 10]')
        need(0 <= self.sign_tolerance <= 10, 'sign_tolerance', 'in [0, 10]')
        need(self.sign_flows >= 10, 'sign_flows', '>= 10')
        need(isinstance(self.rotation_start, (bool, np.bool_)), 'rotation_start',
             'true or false')
        need(isinstance(self.affine_depth, (bool, np.bool_)), 'affine_depth', 'true or false')
        need(0 <= self.rotation_start_residual <= 10, 'rotation_start_residual', 'in [0, 10]')
        need(0 <= self.rotation_prior_weight <= 1e6, 'rotation_prior_weight',
             'in [0, 1e6] s^2/rad^2')
        need(0 <= self.warm_start_windows <= 1000, 'warm_start_windows', 'in 0..1000')
        need(0 <= self.gyro_bias_windows <= 1000, 'gyro_bias_windows', 'in 0..1000')
        need(0 <= self.gyro_bias_prior_rad_s <= 1, 'gyro_bias_prior_rad_s', 'in [0, 1] rad/s')
        need(0 <= self.max_gyro_bias_rad_s <= 1, 'max_gyro_bias_rad_s', 'in [0, 1] rad/s')
        need(0 <= self.gyro_bias_relative_error <= 1, 'gyro_bias_relative_error', 'in [0, 1]')
        need(0 <= self.cell_huber_scale <= 100, 'cell_huber_scale', 'in [0, 100]')
        need(0 <= self.min_translation_ratio <= 1, 'min_translation_ratio', 'in [0, 1]')
        need(0 <= self.max_sign_disagreement <= 1, 'max_sign_disagreement', 'in [0, 1]')
        return self

    @classmethod
    def names(cls):
        """List the names of the parameters, for the node's parameter declarations."""
        return [item.name for item in fields(cls)]


@dataclass
class EgomotionEstimate:
    """
    One window's estimate; NaN fields where undetermined.

    t_s: window centre (sensor time, s); num_flows: flows used; omega_rad_s (3,) camera
    frame (from the gyroscope when omega_from_gyro); direction (3,) unit translation direction
    of the camera; foe_px (2,) focus of expansion in pixels (valid when |direction_z| >=
    min_forward); ttc_grid_s (rows, cols) float32 time to contact [s] per image region;
    min_ttc_s its minimum; inlier_fraction: share of used flows within the Huber threshold;
    undetermined: why direction is NaN (a key of egomotion_checks.REASONS), '' when it is
    not; translation_ratio: fitted translational over rotational normal flow (medians);
    gyro_bias_rad_s (3,): the bias estimate subtracted from the gyroscope (zeros without).
    """

    t_s: float
    num_flows: int
    omega_rad_s: np.ndarray
    omega_from_gyro: bool
    direction: np.ndarray
    foe_px: np.ndarray
    foe_valid: bool
    ttc_grid_s: np.ndarray
    min_ttc_s: float
    inlier_fraction: float
    translation_fit: float = float('nan')  # explained share of the derotated flow, [0, 1]
    undetermined: str = ''
    translation_ratio: float = float('nan')
    gyro_bias_rad_s: np.ndarray = field(default_factory=lambda: np.zeros(3))
