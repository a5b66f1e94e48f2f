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
The solves of one prepared window (egomotion_window.Window), each one call of the extension.

Solver.solve_gyro: the direction with omega from the gyroscope (csrc/egomotion/solve_gyro.cpp:
sign vote, cell-depth least squares with Huber rounds, the global check). Solver.solve_free:
direction and omega together (solve_free.cpp: the joint least squares, the accuracy check,
the rotation start and its ridge). Solver.time_to_contact: the weighted median per region
(ttc.cpp). Solver.checks: the translation ratio, the sign disagreement and the accuracy
check (checks.cpp). docs/egomotion.md gives the equations and the reasons of each step;
the state across windows (previous direction, warm-window count, gyroscope bias) stays with
the caller, EgomotionEstimator.
"""

import math

import numpy as np


def fibonacci_sphere(count: int) -> np.ndarray:
    """Return (count, 3) nearly evenly spread unit vectors."""
    index = np.arange(count) + 0.5
    z = 1.0 - 2.0 * index / count
    radius = np.sqrt(np.maximum(0.0, 1.0 - z * z))
    angle = index * math.pi * (3.0 - math.sqrt(5.0))
    return np.stack([radius * np.cos(angle), radius * np.sin(angle), z], axis=1)


class Solver:
    """
    The per-window solves for one EgomotionConfig, with the compiled extension.

    The coarse search grid is half a Fibonacci sphere of config.sphere_directions (z >= 0);
    the solves add its mirror image (every cost shares most of its work between d and -d).
    Each solve writes the window's final Huber weights (window.robust, (N,)).
    """

    def __init__(self, config, extension):
        self.config, self._extension = config, extension
        sphere = fibonacci_sphere(config.sphere_directions)
        self.half_sphere = sphere[sphere[:, 2] >= 0]
        self.coarse_step_rad = math.sqrt(4 * math.pi / config.sphere_directions)

    def solve_gyro(self, window, omega, previous, warm):
        """
        Direction with omega (3,) known [rad/s]: (unit direction (3,), explained share).

        previous: the last window's direction (3,) or None; warm: start the sign vote from
        it (the caller keeps the warm-window count).
        """
        config = self.config
        robust = np.empty(len(window))
        direction, fit = self._extension.solve_gyro(
            window.a_rows, window.g_rows, window.m, window.weight, window.slow, window.starts,
            window.input_order, omega, self.half_sphere, previous, warm, robust,
            (config.refine_steps, config.robust_iterations, config.huber_scale,
             bool(config.sign_start), config.sign_flows, config.sign_tolerance,
             config.rotation_error, self.coarse_step_rad, config.cell_huber_scale,
             bool(config.affine_depth), config.rotation_start_residual))
        window.robust = robust
        return np.array(direction), fit

    def solve_free(self, window, previous, least_squares=False, skip_check=False):
        """
        Direction and omega together: (unit direction (3,), omega (3,) [rad/s], share, accurate).

        previous: one more start of the coarse search, or None. least_squares: the joint
        least squares alone (no rotation start, whatever config.rotation_start says).
        skip_check: with the rotation start, leave the accuracy check's fit out and take the
        rotation start. accurate: the joint least squares passed the accuracy check (False
        where it did not run).
        """
        config = self.config
        robust = np.empty(len(window))
        direction, omega, fit, accurate = self._extension.solve_free(
            window.a_rows, window.g_rows, window.m, window.weight, window.starts,
            window.input_order, self.half_sphere, previous, skip_check, robust,
            (config.refine_steps, config.robust_iterations, config.huber_scale,
             config.sign_flows, config.rotation_error,
             bool(config.rotation_start) and not least_squares,
             config.rotation_start_residual, config.rotation_prior_weight,
             self.coarse_step_rad, config.cell_huber_scale, bool(config.affine_depth)))
        window.robust = robust
        return np.array(direction), np.array(omega), fit, accurate

    def time_to_contact(self, window, direction, omega):
        """Time to contact per region [s], (rows, cols) float32, NaN where undetermined."""
        config = self.config
        rows, cols = config.ttc_grid
        grid = np.empty((rows, cols), np.float32)
        self._extension.time_to_contact(
            window.a_rows, window.g_rows, window.m, window.validity, window.robust,
            window.region, direction, omega, grid,
            (rows, cols, config.min_ttc_flows, config.ttc_neighbour_weight))
        return grid

    def checks(self, window, direction, omega, signs, accuracy=False):
        """
        Check a solve's answer (direction (3,), omega (3,) [rad/s]) (checks.cpp).

        signs: compute the sign disagreement (with the gyroscope mode's slow-flow weights,
        whatever omega came from); accuracy: also the accuracy check (the gyroscope-bias
        measurement's). Returns (translation_ratio, sign_disagreement, accurate): the median
        |fitted translational normal flow| over the median |rotational|; the share of the
        sign vote's weight that contradicts the direction's cheirality (0 unless signs);
        whether the median |residual| (cell depths fitted) is below rotation_start_residual
        of the median |flow|, or half of that on the tenth of the flows with the smallest
        |a . d| (False unless accuracy).
        """
        config = self.config
        return self._extension.checks(
            window.a_rows, window.g_rows, window.m, window.weight,
            window.slow if signs else None, window.starts, window.robust,
            np.ascontiguousarray(direction, np.float64), np.ascontiguousarray(omega, np.float64),
            (config.huber_scale, config.rotation_error,
             config.rotation_start_residual if accuracy else -1.0))
