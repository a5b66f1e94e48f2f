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
(ttc.cpp). Solver.accurate: whether a window's flows fit a motion (the gyroscope-bias
measurement's check). docs/egomotion.md gives the equations and the reasons of each step;
the state across windows (previous direction, warm-window count, gyroscope bias) stays with
the caller, EgomotionEstimator.
"""

import math

import numpy as np

# The accuracy check also passes when the flows with the smallest |a . d| (this share of them)
# leave a median |residual| below _DEPTH_FREE_LIMIT times the limit (rotation_start_residual
# of the median |flow|); the same constants as solve_free.cpp's check. Measured (median
# |residual| of that tenth / median |flow|): the flow model's held-out windows 0.056-0.54
# (2 % below 0.068), exact flows of random per-flow depths 0.013-0.027, analytic windows with
# 5 % noise and outliers up to 0.048.
_DEPTH_FREE_SHARE = 0.1
_DEPTH_FREE_LIMIT = 0.5


def fibonacci_sphere(count: int) -> np.ndarray:
    """Return (count, 3) nearly evenly spread unit vectors."""
    index = np.arange(count) + 0.5
    z = 1.0 - 2.0 * index / count
    radius = np.sqrt(np.maximum(0.0, 1.0 - z * z))
    angle = index * math.pi * (3.0 - math.sqrt(5.0))
    return np.stack([radius * np.cos(angle), radius * np.sin(angle), z], axis=1)


def _squares(rows):
    """Return the (K, 6) products x x, y y, z z, x y, x z, y z of the rows (K, 3)."""
    return rows.take([0, 1, 2, 0, 0, 1], axis=1) * rows.take([0, 1, 2, 1, 2, 2], axis=1)


def _median(values):
    """np.median of a 1-D array of finite values, by one partition."""
    count = len(values)
    half = count // 2
    if count % 2:
        return float(np.partition(values, half)[half])
    low, high = np.partition(values, (half - 1, half))[half - 1:half + 1]
    return 0.5 * (float(low) + float(high))


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
             config.rotation_error, self.coarse_step_rad, config.cell_huber_scale))
        window.robust = robust
        return np.array(direction), fit

    def solve_free(self, window, previous, least_squares=False):
        """
        Direction and omega together: (unit direction (3,), omega (3,) [rad/s], share).

        previous: one more start of the coarse search, or None. least_squares: the joint
        least squares alone (no rotation start, whatever config.rotation_start says).
        """
        config = self.config
        robust = np.empty(len(window))
        direction, omega, fit = self._extension.solve_free(
            window.a_rows, window.g_rows, window.m, window.weight, window.starts,
            window.input_order, self.half_sphere, previous, robust,
            (config.refine_steps, config.robust_iterations, config.huber_scale,
             config.sign_flows, config.rotation_error,
             bool(config.rotation_start) and not least_squares,
             config.rotation_start_residual, config.rotation_prior_weight,
             self.coarse_step_rad, config.cell_huber_scale))
        window.robust = robust
        return np.array(direction), np.array(omega), fit

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

    def accurate(self, window, direction, omega):
        """
        Whether the flows are accurate at (direction, omega).

        The median |residual| (cell depths fitted) below rotation_start_residual of the median
        |flow|, or half of it on the tenth of the flows with the smallest |a . d| (free of the
        depth model's misfit).
        """
        limit = self.config.rotation_start_residual * _median(np.abs(window.m))
        residual, b = self._cell_residual(window, direction, omega)
        if _median(np.abs(residual)) < limit:
            return True
        flat = np.abs(b) <= np.quantile(np.abs(b), _DEPTH_FREE_SHARE)
        return _median(np.abs(residual[flat])) < _DEPTH_FREE_LIMIT * limit

    @staticmethod
    def _cell_residual(window, direction, omega):
        """Per-flow residual (N,) under (direction, omega), cell depths fitted, and a . d (N,)."""
        r = window.m - window.g @ omega
        sums = window.cell_sums(np.concatenate([window.aa_rows, window.a_rows * r]),
                                window.weight * window.robust)
        s_bb = sums[:, :6] @ _squares(direction[None])[0]
        rho = np.where(s_bb > 0, (sums[:, 6:9] @ direction) / np.maximum(s_bb, 1e-300), 0.0)
        b = window.a @ direction
        return r - np.take(np.maximum(rho, 0.0), window.cell) * b, b
