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
accurate (a small median residual); on the flow model's flows (biased magnitudes) the
rotation-only fit of omega (translation ignored) stands in for the gyroscope in the sign vote,
the joint least squares refine its direction locally, and the final omega is pulled towards
the rotation-only fit (ridge).
Time to contact per region is the weighted median (weights |a . d| times validity and the
slow-flow factor) of the per-flow estimates (a . d) / ((m - g . omega) d_z).

EgomotionEstimator is the one implementation: the node, `veckm-flow egomotion` and the
evaluation all call estimate() per window. GyroBuffer averages gyroscope samples over a
window (bounded memory).
"""

from dataclasses import dataclass, field, fields
import math
from typing import Optional

import numpy as np

from veckm_flow_ros.core.camera import CameraModel
from veckm_flow_ros.core.egomotion_checks import (
    GyroBiasTracker, omega_covariance, translation_ratio)
from veckm_flow_ros.core.egomotion_gyro import GyroBuffer  # noqa: F401 - part of the API
from veckm_flow_ros.core.pixel_map import build_pixel_map


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
    sign_tolerance: float = 0.2     # the least-squares global minimum replaces the sign start
    #                                 when its sign disagreement is at most (1 + this) times
    #                                 the sign start's, [0, 10]
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
    warm_start_windows: int = 10    # with a gyroscope and the sign start: up to this many
    #                                 windows in a row start from the previous window's
    #                                 direction (local searches; the global least-squares
    #                                 check only when the fit ends > 5 deg from it), then one
    #                                 window is searched in full; 0: every window in full,
    #                                 0..1000
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
    min_translation_ratio: float = 0.05  # the fitted translational normal flow below this
    #                                 share of the rotational (medians over the flows) ->
    #                                 direction NaN, undetermined 'rotation_dominated'; 0:
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


def fibonacci_sphere(count: int) -> np.ndarray:
    """Return (count, 3) nearly evenly spread unit vectors."""
    index = np.arange(count) + 0.5
    z = 1.0 - 2.0 * index / count
    radius = np.sqrt(np.maximum(0.0, 1.0 - z * z))
    angle = index * math.pi * (3.0 - math.sqrt(5.0))
    return np.stack([radius * np.cos(angle), radius * np.sin(angle), z], axis=1)


# The six distinct products of a row (x, y, z) with itself: x x, y y, z z, x y, x z, y z.
_SQ_FIRST, _SQ_SECOND = np.array([0, 1, 2, 0, 0, 1]), np.array([0, 1, 2, 1, 2, 2])
# Per-flow tables (_Window.aa_rows) hold the mixed products twice: a direction's six products
# then give the quadratic form d^T S d of the symmetric 3x3 sum S in one dot product.


def _squares(rows):
    """Return the (K, 6) products x x, y y, z z, x y, x z, y z of the rows (K, 3)."""
    return rows.take(_SQ_FIRST, axis=1) * rows.take(_SQ_SECOND, axis=1)


def _clipped_gain(s_br, inv, mirror):
    """
    Return sum_c max(0, s_br)^2 inv (K,) per row: the share the cell depths explain.

    mirror: (2 K,), then also for -s_br (the opposite directions), from the same products.
    """
    if not mirror:
        positive = np.maximum(s_br, 0.0)
        return np.einsum('kc,kc->k', positive * inv, positive)
    square = s_br * s_br * inv
    positive = (square * (s_br > 0)).sum(axis=1)
    return np.concatenate([positive, square.sum(axis=1) - positive])


# The 6 distinct entries of a symmetric 3x3 matrix (order of _squares) and back to 9.
_SYM_OF_3X3 = np.array([0, 4, 8, 1, 2, 5])
_3X3_OF_SYM = np.array([0, 3, 4, 3, 1, 5, 4, 5, 2])
_DIAGONAL = np.array([1.0, 1.0, 1.0, 0.0, 0.0, 0.0])


def _pair_tables():
    """
    Index tables of _cell_stats_free: T_i T_j for the pairs i <= j, i < 3 of T = [G; am] d.

    T_i T_j = sum_{a, b} X[i, a] X[j, b] d_a d_b (X the 4x3 matrix [G; am], 12 values
    row-major); over the 6 distinct products d_a d_b (_squares) the coefficient is
    X[i, a] X[j, b] + X[i, b] X[j, a], halved for a = b. Returns the indices of the four
    factors into the 12 values and the scale, each (54,) in the order (pair, product).
    """
    pairs_i = [0, 1, 2, 0, 0, 1, 0, 1, 2]
    pairs_j = [0, 1, 2, 1, 2, 2, 3, 3, 3]
    tables = [], [], [], [], []
    for i, j in zip(pairs_i, pairs_j):
        for a, b in zip(_SQ_FIRST, _SQ_SECOND):
            for table, value in zip(tables, (3 * i + a, 3 * j + b, 3 * i + b, 3 * j + a,
                                             0.5 if a == b else 1.0)):
                table.append(value)
    return tuple(np.array(table) for table in tables)


_PAIR_A, _PAIR_B, _PAIR_C, _PAIR_D, _PAIR_SCALE = _pair_tables()


# The cofactors of a symmetric 3x3 matrix from its 6 distinct entries (order of _squares:
# h00 h11 h22 h01 h02 h12), in the same order: h[first 6] * h[...] - h[last 6] * h[...].
_COF_AC = np.array([1, 0, 0, 4, 3, 3, 5, 4, 3, 3, 4, 0])
_COF_BD = np.array([2, 2, 1, 5, 5, 4, 5, 4, 3, 2, 1, 5])
_FIRST_ROW = np.array([0, 3, 4])  # h00 h01 h02 (and their cofactors)


def _solve_sym3(h, rhs):
    """Solve the symmetric 3x3 systems h (K, 6 distinct entries) x = rhs (K, 3): adjugate."""
    products = h[:, _COF_AC] * h[:, _COF_BD]
    cof = products[:, :6] - products[:, 6:]
    det = np.einsum('ki,ki->k', h[:, _FIRST_ROW], cof[:, _FIRST_ROW])
    det = np.where(det != 0.0, det, np.finfo(det.dtype).tiny)
    # inverse = adjugate / det; the adjugate of a symmetric matrix is its cofactor matrix
    adjugate = cof[:, _3X3_OF_SYM].reshape(-1, 3, 3)
    return (adjugate @ rhs[:, :, None])[:, :, 0] / det[:, None]


def _tangent_basis(d):
    """Return (2, 3): two unit vectors orthogonal to unit d (and to each other)."""
    x, y, z = (float(value) for value in d)
    # d x e_x or d x e_y, whichever is better conditioned
    e1 = (0.0, z, -y) if abs(x) < 0.9 else (-z, 0.0, x)
    scale = 1.0 / math.sqrt(e1[0] ** 2 + e1[1] ** 2 + e1[2] ** 2)
    e1 = (e1[0] * scale, e1[1] * scale, e1[2] * scale)
    return np.array([e1, (y * e1[2] - z * e1[1], z * e1[0] - x * e1[2],
                          x * e1[1] - y * e1[0])])


def _finite(values):
    """Whether all of a few values (array) are finite (a numpy reduction costs more cold)."""
    return all(math.isfinite(value) for value in values.tolist())


def _median(values):
    """np.median of a 1-D array of finite values, by one partition."""
    count = len(values)
    half = count // 2
    if count % 2:
        return float(np.partition(values, half)[half])
    low, high = np.partition(values, (half - 1, half))[half - 1:half + 1]
    return 0.5 * (float(low) + float(high))


def _quadratic_minimum(costs, row, col):
    """
    Locate the minimum of the quadratic through the 3x3 costs around (row, col).

    Returns its offset (2,) from (row, col) [grid spacings], or None at the border, where
    the quadratic is not convex, or beyond one spacing.
    """
    if not (1 <= row < costs.shape[0] - 1 and 1 <= col < costs.shape[1] - 1):
        return None
    f = costs[row - 1:row + 2, col - 1:col + 2]
    gx, gy = 0.5 * (f[2, 1] - f[0, 1]), 0.5 * (f[1, 2] - f[1, 0])
    hxx, hyy = f[2, 1] - 2.0 * f[1, 1] + f[0, 1], f[1, 2] - 2.0 * f[1, 1] + f[1, 0]
    hxy = 0.25 * (f[2, 2] - f[2, 0] - f[0, 2] + f[0, 0])
    det = hxx * hyy - hxy * hxy
    if not (hxx > 0 and det > 0):
        return None
    dx, dy = (hxy * gy - hyy * gx) / det, (hxy * gx - hxx * gy) / det
    return (dx, dy) if abs(dx) <= 1 and abs(dy) <= 1 else None


def _quadratic_at(values, row, col, offset):
    """Return values (k,) at offset (2,) [spacings] of the quadratic through 3x3 values."""
    f = values[row - 1:row + 2, col - 1:col + 2]
    dx, dy = offset
    return (f[1, 1] + 0.5 * (f[2, 1] - f[0, 1]) * dx + 0.5 * (f[1, 2] - f[1, 0]) * dy
            + 0.5 * (f[2, 1] - 2.0 * f[1, 1] + f[0, 1]) * dx * dx
            + 0.5 * (f[1, 2] - 2.0 * f[1, 1] + f[1, 0]) * dy * dy
            + 0.25 * (f[2, 2] - f[2, 0] - f[0, 2] + f[0, 0]) * dx * dy)


# A search whose result only starts another search or sets the Huber weights takes this
# many rounds fewer than refine_steps (2 by default: a grid spacing of 1/27 of its first
# step, then the quadratic step).
_INTERMEDIATE_ROUNDS_LESS = 3
# The tolerance check's global least-squares fit stops when its first search ends this close
# to the local fit's first [deg]: both sit in the same basin, the check cannot change much.
_SAME_BASIN_DEG = 1.0

# A warm-started window (see warm_start_windows) skips the global least-squares check when its
# fit ends within this angle of the previous window's direction [deg].
_WARM_SAME_DEG = 5.0

# A warm-started window takes this many Huber rounds fewer than robust_iterations (at least 0)
# and its sign vote this many local rounds fewer (at least 1): it starts near the answer
# (benchmarks/RESULTS.md, "Egomotion": as accurate on the held-out set, ~0.2-0.4 ms less
# CPU per paced window).
_WARM_ROUNDS_LESS = 1

# Without a gyroscope, the joint least squares' first search from the rotation start takes a
# first step this many times the sphere grid's spacing (a warm or local start: 0.25): the
# start's omega is the rotation-only fit, so the direction may have to move further (held-out
# set, the rotation start forced on every window: exact magnitudes 2.5 deg median at 0.25,
# 1.2 at 0.5, 0.9 at 1.0; the flow model's flows 11.0, 11.6 and 13.9 deg).
_ROTATION_START_REACH = 0.5
# The accuracy check without a gyroscope also passes when the flows with the smallest |a . d|
# (this share of them) leave a median |residual| below _DEPTH_FREE_LIMIT times the limit
# (rotation_start_residual of the median |flow|). Measured (median |residual| of that tenth
# / median |flow|): the flow model's held-out windows 0.056-0.54 (2 % below 0.068), exact
# flows of random per-flow depths 0.013-0.027, analytic windows with 5 % noise and outliers
# up to 0.048.
_DEPTH_FREE_SHARE = 0.1
_DEPTH_FREE_LIMIT = 0.5

# The time to contact's weighted medians find their flow in blocks of this many consecutive
# flows (in the order of the inverse time to contact): per region, a sum per block, then a
# cumulative sum within one block (cost ~ regions x (flows / this + this)).
_TTC_BLOCK = 64
# Least cell factor of the Huber rounds (cell_huber_scale): weights stay positive.
_MIN_CELL_FACTOR = 1e-3

# The input dtypes the compiled input stage reads as they are (numpy's dtype.char, native
# byte order): the others are converted to float64 first.
_COLUMN_CODES = frozenset('bBhHiIlLqQfd')

# The local search pattern: a 7x7 grid over [-1, 1]^2 (times the step).
_PATTERN = np.array([(i / 3.0, j / 3.0) for i in range(-3, 4) for j in range(-3, 4)])


class _Window:
    """
    The usable flows of one window in normalized form (see the module doc).

    The flows are sorted by depth cell (cell k holds flows starts[k]:starts[k + 1]), so the
    per-cell sums are one np.add.reduceat; input_order: their increasing positions in the
    input (the flows in input order are argsort(input_order)). Per-flow tables are stored
    one row per quantity (k, N): products and sums along rows are contiguous.
    """

    def __init__(self, a_rows, g_rows, m, weight, validity, slow, cell, starts, region,
                 input_order):
        self.a_rows, self.g_rows = a_rows, g_rows  # (3, N) each
        self.a, self.g, self.m = a_rows.T, g_rows.T, m  # (N, 3) views, (N,)
        self.weight = weight                      # (N,) fit weight: validity / (|flow| + floor)
        self.validity = validity                  # (N,) input weight alone
        self.slow = slow                          # (N,) s^2 / (s^2 + slow_flow_px_s^2)
        self.robust = np.ones_like(m)             # (N,) Huber weights
        self.cell_factor = np.ones_like(m)        # (N,) the cell factors within robust
        self.cell = cell                          # (N,) depth cell index, sorted
        self.starts = starts                      # (C,) first flow of each cell
        self.num_cells = len(starts)
        self.region = region                      # (N,) time-to-contact region index
        self.input_order = input_order
        self._products = None  # see aa_rows (the compiled solve does not need them)
        self.first_free_stats = None  # _fit_free's first cell sums (Huber weights of m)

    def __len__(self):
        return len(self.m)

    @property
    def aa_rows(self):
        """(6, N) a a^T (order of _squares), the mixed products twice (computed once)."""
        return self._table()[:6]

    def _table(self):
        """Return (10, N): aa_rows, then room for known_table's rows (written in place)."""
        if self._products is None:
            self._products = np.empty((10, len(self.m)))
            aa_rows, a_rows = self._products[:6], self.a_rows
            np.multiply(a_rows, a_rows, out=aa_rows[:3])
            np.multiply(a_rows[0], a_rows[1:], out=aa_rows[3:5])
            np.multiply(a_rows[1], a_rows[2], out=aa_rows[5])
            aa_rows[3:] *= 2.0
        return self._products

    def known_table(self, r):
        """Return (10, N) per flow a a^T (aa_rows), a r and r^2, r (N,) the derotated flow."""
        table = self._table()
        np.multiply(self.a_rows, r, out=table[6:9])
        np.multiply(r, r, out=table[9])
        return table

    def input_positions(self):
        """Return the flows' positions (N,) in input order: argsort(input_order), by a scatter."""
        order = self.input_order
        rank = np.full(int(order.max()) + 1, -1, np.intp)
        rank[order] = np.arange(len(order))
        return rank[rank >= 0]

    def cell_sums(self, table, weight):
        """Per-cell sums (C, k) of table (k, N) times weight (N,)."""
        return np.add.reduceat(table * weight, self.starts, axis=1).T

    def robust_sums(self, table):
        """Per-cell sums (C, k) of table (k, N) times weight * robust (one segmented sum)."""
        return self.cell_sums(table, self.weight * self.robust)


class EgomotionEstimator:
    """
    Angular velocity, translation direction, FOE and time to contact per window of flows.

    camera: CameraModel of the event camera (the flows' pixels are its distorted pixels).
    compiled: the input stage and the solve of each window (with and without a gyroscope) in
    the compiled extension (veckm_flow_ros._egomotion, csrc/egomotion/: the same algorithm,
    one call each);
    false: the numpy code of this module, the reference the extension is tested and
    benchmarked against.
    """

    def __init__(self, camera: CameraModel, config: EgomotionConfig = None, compiled=True):
        self.camera = camera
        self.config = (config or EgomotionConfig()).check()
        self._extension = _extension() if compiled else None
        self._compiled = None if self._extension is None else self._extension.solve_gyro
        self._compiled_free = None if self._extension is None else self._extension.solve_free
        # The coarse grid: half a Fibonacci sphere and its mirror image. Every cost shares
        # most of its work between d and -d (see the costs' `mirror`).
        sphere = fibonacci_sphere(self.config.sphere_directions)
        self._half_sphere = sphere[sphere[:, 2] >= 0]
        self._previous = None  # the last window's direction: one more start of the search
        self._warm_windows = 0  # windows in a row started from _previous (gyro mode)
        self._bias = GyroBiasTracker(self.config.gyro_bias_windows,
                                     self.config.gyro_bias_prior_rad_s,
                                     self.config.max_gyro_bias_rad_s)
        step = math.sqrt(4 * math.pi / self.config.sphere_directions)
        self._coarse_step_rad = step
        # The precomputed per-pixel maps: undistorted normalized coordinates and M^T of
        # the module doc, so a window costs a table look-up per flow.
        # One row of 8 float32 per pixel (32 bytes, two per cache line): x, y, M^T, cell,
        # region (core/pixel_map.py, built in blocks of rows: bounded memory). A paced window
        # starts with cold caches, and one gather of a row costs about one cache miss where
        # three tables cost three. float32: 1e-7 relative, far below any flow error; the
        # indices are exact (below 2^24: cell_px >= 2 and at most 64 x 64 regions).
        config = self.config
        self._pixel_map, self._num_cells = build_pixel_map(camera, config.cell_px,
                                                           config.ttc_grid)
        rows_ttc, cols_ttc = config.ttc_grid
        # Per region: itself and its 8 neighbours (rows * cols where outside the grid) and
        # their weights in its time to contact.
        row, col = np.divmod(np.arange(rows_ttc * cols_ttc), cols_ttc)
        shift = np.array([(dr, dc) for dr in (-1, 0, 1) for dc in (-1, 0, 1)])
        row_to, col_to = row[:, None] + shift[:, 0], col[:, None] + shift[:, 1]
        inside = (row_to >= 0) & (row_to < rows_ttc) & (col_to >= 0) & (col_to < cols_ttc)
        self._ttc_pool = np.where(inside, row_to * cols_ttc + col_to, rows_ttc * cols_ttc)
        self._ttc_pool_weight = np.where(
            inside, np.where(np.all(shift == 0, axis=1), 1.0, config.ttc_neighbour_weight),
            0.0)
        # Per flow position in a window (at most max_flows): its block of the medians.
        self._ttc_block_of = np.arange(config.max_flows) // _TTC_BLOCK
        self._ttc_offsets = np.arange(_TTC_BLOCK)
        # The weight of region s in the time to contact of region t: _ttc_share[code[s] -
        # code[t]], code = row * 2 cols + col (a negative difference indexes from the end).
        self._ttc_code = row * 2 * cols_ttc + col
        self._ttc_share = np.zeros((2 * rows_ttc + 2) * 2 * cols_ttc)
        self._ttc_share[shift[:, 0] * 2 * cols_ttc + shift[:, 1]] = np.where(
            np.all(shift == 0, axis=1), 1.0, config.ttc_neighbour_weight)
        self._ttc_regions = np.arange(rows_ttc * cols_ttc)

    # ---- public ---------------------------------------------------------------------------

    def reset(self):
        """Forget the previous window's direction (after a time jump or a new camera)."""
        self._previous = None
        self._warm_windows = 0
        self._bias.reset()

    def estimate(self, x_px, y_px, u_px_s, v_px_s, weight=None, omega_rad_s=None,
                 t_s=0.0) -> EgomotionEstimate:
        """
        Estimate the egomotion of one window of normal flows.

        x_px, y_px: pixel positions (N,) (float or uint16, distorted image); u_px_s, v_px_s
        (N,) normal flow [px/s]; weight (N,) e.g. validity in 0..1, or None (all 1);
        omega_rad_s (3,) mean angular velocity from a gyroscope in the camera frame, or
        None (or NaN) to estimate it. Too few usable flows give NaN fields, not an error;
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
        window = self._prepare(x_px, y_px, u_px_s, v_px_s, weight)
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
            direction, omega, fit = self._solve_free(window)
        result.omega_rad_s = omega
        result.translation_fit = fit
        self._previous = direction if fit >= config.min_translation_fit else None
        result.inlier_fraction = np.count_nonzero(window.robust >= 1.0) / len(window)
        result.undetermined = 'translation_unexplained'
        if fit < config.min_translation_fit or not _finite(direction):
            return result
        result.translation_ratio = translation_ratio(
            window.a, window.g, window.m, window.weight * window.robust, window.starts,
            window.cell, direction, omega)
        if result.translation_ratio < config.min_translation_ratio:
            result.undetermined = 'rotation_dominated'
            return result
        result.undetermined = ''
        result.direction = direction
        if abs(direction[2]) >= config.min_forward:
            fx, fy = self.camera.project(direction[0] / direction[2],
                                         direction[1] / direction[2])
            result.foe_px = np.array([float(fx), float(fy)])
            result.foe_valid = _finite(result.foe_px)
            if direction[2] > 0:
                result.ttc_grid_s = self._ttc(window, direction, omega)
                times_s = result.ttc_grid_s[~np.isnan(result.ttc_grid_s)]
                if len(times_s):
                    result.min_ttc_s = float(times_s.min())
        return result

    # ---- input ----------------------------------------------------------------------------

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

    def _prepare(self, x_px, y_px, u_px_s, v_px_s, weight) -> Optional[_Window]:
        columns = [np.asarray(c).reshape(-1) for c in (x_px, y_px, u_px_s, v_px_s)]
        names = ('x_px', 'y_px', 'u_px_s', 'v_px_s')
        if weight is not None:
            columns.append(np.asarray(weight).reshape(-1))
            names += ('weight',)
        lengths = {name: len(c) for name, c in zip(names, columns)}
        if len(set(lengths.values())) != 1:
            raise ValueError(f'egomotion inputs differ in length: {lengths}')
        if self._extension is not None:
            return self._prepare_compiled(columns, weight is not None)
        config = self.config
        width, height = self.camera.width, self.camera.height
        if lengths['x_px'] > config.max_flows:
            # Even subsampling first: the cost of a window stays bounded at any flow rate.
            pick = np.linspace(0, lengths['x_px'] - 1, config.max_flows).astype(np.int64)
            columns = [np.take(c, pick) for c in columns]
        x, y = (np.rint(c, dtype=np.float64) for c in columns[:2])
        u, v = (c.astype(np.float64) for c in columns[2:4])
        speed = np.sqrt(u * u + v * v)
        # Comparisons are False for NaN; x < width and speed < inf also reject infinities.
        keep = ((x >= 0) & (x < width) & (y >= 0) & (y < height) & (speed > 1e-9)
                & (speed < np.inf))
        if weight is not None:
            w = columns[4].astype(np.float64)
            keep &= (w > 0) & (w >= config.min_validity) & (w < np.inf)
        index = np.flatnonzero(keep)
        if len(index) == 0:
            return None
        # (np.take: gathers much faster than fancy indexing)
        pixel = np.take(y * width + x, index).astype(np.int64)
        maps = np.take(self._pixel_map, pixel, axis=0)  # x, y, M^T, cell, region (N, 8)
        cell = maps[:, 6].astype(np.intp)
        # (the float32 columns enter float64 arithmetic as they are: exact, no copy)
        speed = np.take(speed, index)
        nx_px, ny_px = np.take(u, index) / speed, np.take(v, index) / speed
        nx = maps[:, 2] * nx_px + maps[:, 3] * ny_px
        ny = maps[:, 4] * nx_px + maps[:, 5] * ny_px
        norm = np.sqrt(nx * nx + ny * ny)
        m = speed / norm
        # Cells with too few flows tell nothing about depth: leave their flows out. Flows
        # without normalized coordinates or magnitude go to one more cell, never used.
        num_cells = self._num_cells
        cell = np.where(np.isfinite(m), cell, num_cells)
        counts = np.bincount(cell, minlength=num_cells + 1)
        present = counts >= config.min_cell_flows
        present[num_cells] = False
        # The usable flows sorted by cell (stable: in input order within a cell; a radix
        # sort for 16-bit keys).
        key = cell.astype(np.uint16) if num_cells < 65535 else cell
        order = np.argsort(key, kind='stable')
        order = order[np.take(present, np.take(cell, order))]
        if len(order) == 0:
            return None
        counts = counts[:num_cells][present[:num_cells]]
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        cell = np.repeat(np.arange(len(counts)), counts)
        # (one take per column or of whole rows: a take of strided columns costs ~4x more)
        sorted_maps = np.take(maps, order, axis=0)
        px, py = sorted_maps[:, 0], sorted_maps[:, 1]  # float32
        nx, ny, m, speed = (np.take(c, order) for c in (nx / norm, ny / norm, m, speed))
        validity = np.take(w, np.take(index, order)) if weight is not None else \
            np.ones(len(order))
        w = validity
        if config.flow_floor_px_s > 0:
            w = w / (speed + config.flow_floor_px_s)
        if config.slow_flow_px_s > 0:
            square = speed * speed
            slow = square / (square + config.slow_flow_px_s ** 2)
        else:
            slow = np.ones_like(w)
        # a = A^T n = (-nx, -ny, q) with q = nx px + ny py; g = B^T n = (py q + ny,
        # -(px q + nx), nx py - ny px): written in place, rows of one (6, N) block.
        ag = np.empty((6, len(m)))
        np.negative(nx, out=ag[0])
        np.negative(ny, out=ag[1])
        q = np.multiply(nx, px, out=ag[2])
        q += ny * py
        np.multiply(py, q, out=ag[3])
        ag[3] += ny
        np.multiply(px, q, out=ag[4])
        ag[4] += nx
        np.negative(ag[4], out=ag[4])
        np.multiply(nx, py, out=ag[5])
        ag[5] -= ny * px
        a, g = ag[:3], ag[3:]                                            # (3, N) each
        region = sorted_maps[:, 7].astype(np.intp)
        return _Window(a, g, m, w, validity, slow, cell, starts, region, order)

    def _prepare_compiled(self, columns, weighted) -> Optional[_Window]:
        """Do _prepare's work after the length check in one call of the extension."""
        config = self.config
        # (other dtypes, e.g. bool, float16 or byte-swapped, as float64 first)
        columns = [c if c.dtype.char in _COLUMN_CODES and c.dtype.isnative else
                   c.astype(np.float64) for c in columns]
        count = min(len(columns[0]), config.max_flows)
        floats, ints = np.empty(10 * count), np.empty(3 * count, np.int64)
        starts = np.empty(self._num_cells, np.int64)
        num_flows, num_cells = self._extension.prepare(
            *columns[:4], columns[4] if weighted else None, self._pixel_map, floats, ints,
            starts, (self.camera.width, self.camera.height, config.max_flows,
                     config.min_validity, config.flow_floor_px_s, config.slow_flow_px_s,
                     self._num_cells, config.min_cell_flows))
        if num_flows == 0:
            return None
        floats = floats[:10 * num_flows].reshape(10, num_flows)
        ints = ints[:3 * num_flows].reshape(3, num_flows)
        return _Window(floats[:3], floats[3:6], floats[6], floats[7], floats[8], floats[9],
                       ints[0], starts[:num_cells], ints[1], ints[2])

    # ---- with a gyroscope -----------------------------------------------------------------

    def _solve_gyro(self, window, omega):
        """Direction with omega known: minimise the cell-depth residual, cheirality enforced."""
        if self._compiled is not None:
            return self._solve_gyro_compiled(window, omega)
        config = self.config
        h = window.g @ omega
        r = window.m - h
        # Slow normal flows are unreliable in sign and size: they weigh less in this mode.
        window.weight = window.weight * window.slow
        # Before any fit, the derotated magnitude itself is the residual: caps gross outliers.
        self._reweight(window, r, r)
        # Per flow a a^T, a r, r^2: every fit below sums this table per cell with its weights.
        table = window.known_table(r)
        start_stats = self._cell_stats_known(window, table)
        direction = None
        coarse_rounds = 1
        # Motion is continuous: most windows start from the previous direction, with a full
        # search every warm_start_windows + 1 windows so that a wrong basin cannot persist.
        previous = self._previous
        warm = (config.sign_start and previous is not None
                and self._warm_windows < config.warm_start_windows)
        self._warm_windows = self._warm_windows + 1 if warm else 0
        if config.sign_start:
            direction, signed = self._sign_vote(window, r, h, window.weight * window.robust,
                                                previous if warm else None)
            coarse_rounds = -1
        robust, cell_factor = window.robust, window.cell_factor
        robust_iterations = config.robust_iterations
        if warm:
            robust_iterations = max(0, robust_iterations - _WARM_ROUNDS_LESS)
        direction, stats, first = self._fit_known(window, r, table, start_stats, direction,
                                                  coarse_rounds, robust_iterations)
        if warm and float(direction @ previous) >= math.cos(math.radians(_WARM_SAME_DEG)):
            pass  # the fit stayed near the previous direction: no global check
        elif config.sign_start:
            # The least squares from the sign start refine it only locally: magnitude errors
            # can put their global minimum elsewhere (e.g. the opposite direction). Their
            # global minimum replaces it where it agrees at least as well with the signs
            # (flows of exact magnitude: a sign start in a wrong basin).
            local_robust, local_factor = window.robust, window.cell_factor
            window.robust, window.cell_factor = robust, cell_factor
            other, other_stats, _ = self._fit_known(window, r, table, start_stats, None, 1,
                                                    config.robust_iterations, first)
            if other is None:
                window.robust, window.cell_factor = local_robust, local_factor
            elif self._cost_sign(window.a, signed, other[None])[0] <= self._cost_sign(
                    window.a, signed, direction[None])[0] * (1.0 + config.sign_tolerance):
                direction, stats = other, other_stats
            else:
                window.robust, window.cell_factor = local_robust, local_factor
        fit = 1.0 - float(self._cost_known(stats, direction[None])[0]) / max(stats[2], 1e-300)
        self._huber_only(window)
        return direction, omega.copy(), fit

    def _measure_bias(self, window, gyro):
        """One bias measurement from the joint least squares where they fit (GyroBiasTracker)."""
        weight, robust = window.weight.copy(), window.robust.copy()
        direction, omega, _ = self._solve_free(window, least_squares=True)
        if _finite(direction) and self._accurate(window, direction, omega):
            covariance = omega_covariance(
                window.a, window.g, window.m, window.weight * window.robust, window.starts,
                direction, omega, self.config.gyro_bias_relative_error)
            self._bias.add(omega, gyro, covariance)
        else:
            self._bias.reject()
        window.weight, window.robust = weight, robust

    def _accurate(self, window, direction, omega):
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

    def _solve_gyro_compiled(self, window, omega):
        """Solve as _solve_gyro in one call of the compiled extension (same algorithm)."""
        config = self.config
        previous = self._previous
        warm = (config.sign_start and previous is not None
                and self._warm_windows < config.warm_start_windows)
        self._warm_windows = self._warm_windows + 1 if warm else 0
        robust = np.empty(len(window))
        direction, fit = self._compiled(
            window.a_rows, window.g_rows, window.m, window.weight, window.slow, window.starts,
            window.input_order, omega, self._half_sphere, previous, warm, robust,
            (config.refine_steps, config.robust_iterations, config.huber_scale,
             bool(config.sign_start), config.sign_flows, config.sign_tolerance,
             config.rotation_error, self._coarse_step_rad, config.cell_huber_scale))
        window.robust = robust
        return np.array(direction), omega.copy(), fit

    def _sign_vote(self, window, r, h, weight, previous=None):
        """
        Direction whose cheirality best agrees with the signs of derotated flows r: (d, signed).

        A start that ignores the magnitudes: the sign of a . d against the sign of r, the flows
        weighted (weight (N,)) by how far their derotated flow stands out of the rotational
        flow h's error. previous: search locally around it (a warm start), else the sphere.
        signed (N,): the flows' signed weights of _cost_sign.
        """
        config = self.config
        trust = r * r / (r * r + (config.rotation_error * h) ** 2 + 1e-300)
        signed = weight * trust * np.sign(r)
        # At most sign_flows flows (evenly spread in input order): the vote needs no more.
        pick = window.input_positions()[::-(-len(r) // config.sign_flows)]
        # float32: the vote only picks a start that the least squares refine.
        a_sign = np.take(window.a_rows, pick, axis=1).T.astype(np.float32, order='C')
        signed_sign = np.take(signed, pick).astype(np.float32)
        direction = self._search(
            lambda dirs, mirror=False: self._cost_sign(
                a_sign, signed_sign, dirs.astype(np.float32), mirror),
            previous, coarse=previous is None, final=False, scale_free=False,
            fewer=_WARM_ROUNDS_LESS if previous is not None else 0)
        return direction, signed

    def _fit_known(self, window, r, table, start_stats, direction, coarse_rounds,
                   robust_iterations, known_first=None):
        """
        Least-squares direction for derotated flows r with Huber rounds: (d, stats, first).

        robust_iterations: the Huber rounds (config.robust_iterations, or fewer when warm).
        table: the per-flow products of _solve_gyro; start_stats: its cell sums with the
        current Huber weights; first: the direction of the first search (before any Huber
        round). known_first: another fit's first direction; when this fit's first search
        ends within _SAME_BASIN_DEG of it, returns (None, None, None) at once.
        """
        stats = start_stats
        last = robust_iterations
        first = None
        for iteration in range(last + 1):
            if iteration:
                stats = self._cell_stats_known(window, table)
            direction = self._search(
                lambda dirs, mirror=False: self._cost_known(stats, dirs, mirror), direction,
                coarse=iteration <= coarse_rounds, final=iteration == last)
            if iteration == 0:
                first = direction
                if known_first is not None and float(direction @ known_first) >= \
                        math.cos(math.radians(_SAME_BASIN_DEG)):
                    return None, None, None
            if iteration < last:
                self._reweight(window, r, self._cell_fit(window, r, stats, direction), True)
        return direction, stats, first

    @staticmethod
    def _cost_sign(a, signed, dirs, mirror=False):
        """
        Sign disagreement (K,) of each direction (K, 3): sum of w max(0, -sign(r) a . d).

        a: (N, 3) the flows' a; signed: (N,) their weights times the sign of their derotated
        flow r. As max(0, -x) = (|x| - x) / 2: one product for |a . d|, the rest is linear.
        mirror: return (2 K,), the costs of dirs and then of -dirs (same |a . d|).
        """
        absolute = np.abs(signed) @ np.abs(a @ dirs.T)                              # (K,)
        linear = dirs @ (a.T @ signed)
        if mirror:
            return 0.5 * np.concatenate([absolute - linear, absolute + linear])
        return 0.5 * (absolute - linear)

    @staticmethod
    def _cell_stats_known(window, table):
        """Per-cell sums of a a^T (6 values), a r (3) and r^2 (1) with the fit's weights."""
        sums = window.robust_sums(table)
        return sums[:, :6], sums[:, 6:9], float(sums[:, 9].sum())

    @staticmethod
    def _cost_known(stats, dirs, mirror=False):
        """
        Weighted residual for each direction (K, 3): sum r^2 - sum_c max(0, S_br)^2 / S_bb.

        mirror: return (2 K,), the residuals of dirs and then of -dirs (S_br changes sign).
        """
        aa, ar, total = stats
        inv = 1.0 / np.maximum(_squares(dirs) @ aa.T, 1e-300)
        return total - _clipped_gain(dirs @ ar.T, inv, mirror)

    # ---- without a gyroscope --------------------------------------------------------------

    def _solve_free(self, window, least_squares=False):
        """
        Direction and omega together: cell depths and omega by least squares per direction.

        With rotation_start, the rotation-only fit of omega stands in for a gyroscope in a
        sign vote for the start, the joint least squares refine it locally, and the final
        omega is pulled towards the rotation-only fit (rotation_prior_weight).
        """
        if self._compiled_free is not None:
            return self._solve_free_compiled(window, least_squares)
        config = self.config
        a, g, m = window.a_rows, window.g, window.m
        # Per flow a a^T, a m and g a^T (9 values, row-major): the cell sums of the fit.
        table = np.concatenate([window.aa_rows, a * m,
                                (window.g_rows[:, None] * a[None]).reshape(9, len(m))])
        fitted = None
        if least_squares or not config.rotation_start:
            fitted = self._fit_free(window, table)
        else:
            # The joint least squares serve where the flows are accurate enough: after one
            # Huber round, their global minimum leaves a median |residual| below
            # rotation_start_residual of the median |flow|. Else (the flow model's flows)
            # its magnitude errors move that minimum far off (a translation with free cell
            # depths mimics much of a rotation), while the rotation-only fit, with the
            # translational flow left as an error that mostly averages out, is near the true
            # omega; with that omega in place of a gyroscope, the sign vote finds the
            # direction's basin, and the joint least squares refine it locally.
            # The residual of flows whose normal is nearly perpendicular to the translational
            # flow (the tenth with the smallest |a . d|) does not depend on the depths: where
            # the depth varies inside the cells (the depth model's misfit, not the flows'),
            # those flows still show that the flows are accurate.
            fitted = self._fit_free(window, table,
                                    accurate=lambda d, w: self._accurate(window, d, w))
        if fitted is None:
            rotation = self._rotation_only(window)
            h = g @ rotation
            start, _ = self._sign_vote(window, m - h, h, window.weight)
            fitted = self._fit_free(window, table, start, rotation)
        direction, omega, stats, ar, r = fitted
        known = stats[0], ar, float(np.dot(window.weight * window.robust, r * r))
        # The explained share of the flow left after rotation, as with a gyroscope.
        fit = 1.0 - float(self._cost_known(known, direction[None])[0]) / max(known[2], 1e-300)
        self._huber_only(window)
        return direction, omega, fit

    def _solve_free_compiled(self, window, least_squares=False):
        """Solve as _solve_free in one call of the compiled extension (same algorithm)."""
        config = self.config
        robust = np.empty(len(window))
        direction, omega, fit = self._compiled_free(
            window.a_rows, window.g_rows, window.m, window.weight, window.starts,
            window.input_order, self._half_sphere, self._previous, robust,
            (config.refine_steps, config.robust_iterations, config.huber_scale,
             config.sign_flows, config.rotation_error,
             bool(config.rotation_start) and not least_squares,
             config.rotation_start_residual, config.rotation_prior_weight,
             self._coarse_step_rad, config.cell_huber_scale))
        window.robust = robust
        return np.array(direction), np.array(omega), fit

    def _fit_free(self, window, table, start=None, rotation=None, accurate=None):
        """
        Joint least squares of omega and direction with Huber rounds: (d, omega, stats, ar, r).

        start: refine it locally, else search the sphere. rotation: the rotation-only fit that
        the final omega is pulled towards (rotation_prior_weight), or None. accurate(d, omega):
        asked after the second search (the first with Huber weights; the first when there
        is no Huber round); when false, return None at once.
        """
        config = self.config
        g, m = window.g, window.m
        self._reweight(window, m, m)  # caps gross outliers before any fit
        direction = start
        last = config.robust_iterations
        evaluated = {}

        def cost(dirs, mirror=False):
            if mirror:
                # The coarse grid only picks a start: float32 halves its work.
                values, _ = self._cost_free(tuple(np.float32(x) for x in stats),
                                            dirs.astype(np.float32), mirror)
                return values
            values, evaluated['omega'] = self._cost_free(stats, dirs, mirror)
            return values

        for iteration in range(last + 1):
            if iteration or window.first_free_stats is None:
                stats = self._cell_stats_free(window, table)
            else:
                stats = window.first_free_stats  # same Huber weights (of m alone) as before
            if iteration == 0:
                window.first_free_stats = stats
            direction, omega = self._search(cost, direction,
                                            coarse=start is None and iteration <= 1,
                                            final=iteration == last,
                                            companion=lambda: evaluated['omega'],
                                            reach=_ROTATION_START_REACH if iteration == 0
                                            else 0.25)
            if iteration == last or omega is None:
                omega = self._omega_free(stats, direction[None])[0][0]
            # else: only for the Huber weights, omega from the last grid (smooth in d)
            if accurate is not None and iteration == min(1, last) and \
                    not accurate(direction, omega):
                return None
            if iteration == last and rotation is not None and config.rotation_prior_weight > 0:
                # Ridge towards the rotation-only fit: the posterior mean with a prior of
                # variance 1 / rotation_prior_weight around it and flows whose error variance
                # (per unit weight) is the fit's mean squared residual. With exact magnitudes
                # the residual and so the pull are tiny.
                residual = float(self._cost_free(stats, direction[None])[0][0])
                pull = config.rotation_prior_weight * max(residual, 0.0) / max(
                    float(np.dot(window.weight, window.robust)), 1e-300)
                omega = self._omega_free(stats, direction[None], (rotation, pull))[0][0]
            r = m - g @ omega
            # The cell sums of a r follow from those of a m and g a^T: a r = a m - a (g . w).
            ar = stats[1] - omega @ stats[2].reshape(-1, 3, 3)
            if iteration < last:
                self._reweight(window, r, self._cell_fit(window, r, (stats[0], ar, None),
                                                         direction), True)
        return direction, omega, stats, ar, r

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

    def _rotation_only(self, window):
        """Omega (3,) of the least squares m = g . omega, translation ignored (Huber-capped)."""
        m = window.m
        self._reweight(window, m, m)  # caps gross outliers
        w = window.weight * window.robust
        wg = window.g_rows * w
        gg = wg @ window.g
        gg += np.eye(3) * (1e-12 * np.trace(gg))
        omega = np.linalg.solve(gg, wg @ m)
        window.robust = np.ones_like(m)
        window.cell_factor = np.ones_like(m)
        return omega

    @staticmethod
    def _cell_stats_free(window, table):
        """
        Cell sums of a a^T (6), a m (3), g a^T (9), the table of _cost_free; g g^T, g m, m^2.

        With T_c = [G_c; am_c^T] d (G_c the cell's sum of w g a^T, 4 values per direction),
        the cost needs sum_c T_c T_c^T / S_bb: the table holds the products of T_c's entries
        (the 9 pairs with an entry of G_c d) as quadratic forms of d (6 values each), so that
        sum is one matrix product.
        """
        w = window.weight * window.robust
        sums = window.robust_sums(table)
        wg = window.g_rows * w
        g, m = window.g, window.m
        ga = sums[:, 9:]
        augmented = np.concatenate([ga, sums[:, 6:9]], axis=1)              # (C, 12): [G; am]
        pairs = (augmented[:, _PAIR_A] * augmented[:, _PAIR_B]
                 + augmented[:, _PAIR_C] * augmented[:, _PAIR_D]) * _PAIR_SCALE
        gg = wg @ g
        # H's constant part, 6 distinct entries, regularised
        h0 = gg.reshape(9)[_SYM_OF_3X3] + _DIAGONAL * (1e-12 * np.trace(gg))
        return (sums[:, :6], sums[:, 6:9], ga, pairs, h0, gg, wg @ m, float(np.dot(w, m * m)))

    @staticmethod
    def _cost_free(stats, dirs, mirror=False):
        """
        Residual (K,) and omega (K, 3) per direction (K, 3), cell depths eliminated.

        Every sum over cells is a matrix product with per-cell tables (see _cell_stats_free),
        so a direction costs O(cells) multiply-adds in BLAS. mirror: residuals (2 K,) of dirs
        and then of -dirs (the same omega; S_br changes sign).
        """
        aa, am, ga, pairs, h0, gg, gm, total = stats
        count = len(dirs)
        omega, inv = EgomotionEstimator._omega_free(stats, dirs)
        # Cheirality: with this omega, a cell whose depth would be negative is not fitted.
        s_br = dirs @ am.T - (omega[:, :, None] * dirs[:, None, :]).reshape(count, 9) @ ga.T
        total_r = total + ((omega @ gg - 2.0 * gm) * omega).sum(axis=1)
        if mirror:
            total_r = np.concatenate([total_r, total_r])
        return total_r - _clipped_gain(s_br, inv, mirror), omega

    @staticmethod
    def _omega_free(stats, dirs, prior=None):
        """
        Omega (K, 3) of each direction (K, 3) and the cells' 1 / S_bb (K, C).

        prior: (omega0 (3,), weight): minimise the residual plus weight |omega - omega0|^2.
        """
        aa, _, _, pairs, h0, _, gm, _ = stats
        squares = _squares(dirs)
        inv = 1.0 / np.maximum(squares @ aa.T, np.finfo(aa.dtype).tiny)            # (K, C)
        # sum_c T_c T_c^T / S_bb (9 values per direction): H = gg - [:6], rhs = gm - [6:9]
        moments = ((inv @ pairs).reshape(len(dirs), 9, 6) @ squares[:, :, None])[:, :, 0]
        h, rhs = h0 - moments[:, :6], gm - moments[:, 6:9]
        if prior is not None:
            h, rhs = h + prior[1] * _DIAGONAL, rhs + prior[1] * prior[0]
        return _solve_sym3(h, rhs), inv

    # ---- shared ---------------------------------------------------------------------------

    def _search(self, cost, direction, coarse, final=True, scale_free=True, companion=None,
                fewer=0, reach=0.25):
        """
        Minimise cost(dirs (K, 3), mirror=False) -> (K,) over unit directions.

        coarse: start from the best of the sphere grid (and of `direction` and the previous
        window's estimate, when given); else from `direction` with a finer first step. Then
        refine_steps rounds (final) or 3 fewer (not final: the result only starts another
        search or sets weights) of a 7x7 grid of +-step in the tangent plane around the best
        point so far, the step shrinking 3x per round, and a last step to the minimum of
        the quadratic through the best point's 3x3 neighbours. scale_free: cost(c d) =
        cost(d) for c > 0 (the least-squares costs), so the grid needs no normalising.
        companion: returns (K, k) values that came with the last cost call (omega); then
        return (direction, its value: at the best point, or quadratic through its
        neighbours; None without rounds). fewer: this many rounds fewer (at least 1). reach:
        the first step of a local start, times the sphere grid's spacing.
        """
        step = self._coarse_step_rad
        if coarse or direction is None:
            # The half sphere and the starts with their mirror images: one evaluation.
            half = self._half_sphere
            candidates = np.concatenate(
                [half] + [d[None] for d in (direction, self._previous) if d is not None])
            costs = cost(candidates, mirror=True)[:len(candidates) + len(half)]
            best = int(np.argmin(costs))
            direction = candidates[best] if best < len(candidates) else \
                -half[best - len(candidates)]
        else:
            step *= reach
        # Final: the rounds to the resolution of refine_steps rounds from the coarse step,
        # the quadratic step standing in for the last one (a local start is 4x finer and
        # needs a round less). Not final: 3 rounds fewer than refine_steps (at least 1).
        levels = self.config.refine_steps
        rounds = 0
        if levels and not final:
            rounds = max(1, levels - _INTERMEDIATE_ROUNDS_LESS)
        elif levels:
            ratio = self._coarse_step_rad / step * 3.0 ** -max(1, levels - 1)  # target/start
            rounds = max(1, math.ceil(-math.log(ratio) / math.log(3.0) - 1e-9))
        if rounds:
            rounds = max(1, rounds - fewer)
        for _ in range(rounds):
            center, basis = direction, _tangent_basis(direction)
            dirs = center + (step * _PATTERN) @ basis
            if not scale_free:
                dirs /= np.sqrt(np.einsum('ki,ki->k', dirs, dirs))[:, None]
            costs = cost(dirs)
            best = int(np.argmin(costs))
            direction = dirs[best] / math.sqrt(float(dirs[best] @ dirs[best]))
            step /= 3.0  # now the spacing of this round's pattern
        value = None
        if rounds:
            # Sub-grid: Newton step on the quadratic through the 3x3 neighbours of the best
            # point, kept within one spacing (costs are smooth between cells' clip changes).
            row, col = divmod(best, 7)
            offset = _quadratic_minimum(costs.reshape(7, 7), row, col)
            if companion is not None:
                values = companion().reshape(7, 7, -1)
                value = values[row, col] if offset is None else \
                    _quadratic_at(values, row, col, offset)
            if offset is not None:
                direction = center + ((row - 3 + offset[0]) * step) * basis[0] + \
                    ((col - 3 + offset[1]) * step) * basis[1]
        direction = direction / math.sqrt(float(direction @ direction))
        return direction if companion is None else (direction, value)

    @staticmethod
    def _cell_fit(window, r, stats, direction):
        """Per-flow residual of the cell-depth fit (cells with negative depth not fitted)."""
        aa, ar, _ = stats
        s_bb = aa @ _squares(direction[None])[0]
        s_br = ar @ direction
        rho = np.where(s_bb > 0, s_br / np.maximum(s_bb, 1e-300), 0.0)
        return r - np.take(np.maximum(rho, 0.0), window.cell) * (window.a @ direction)

    def _reweight(self, window, r, residual, cells=False):
        """
        Huber weights from the residuals (robust scale: median absolute residual).

        cells (after a fit): each cell's weights also times min(1, cell_huber_scale *
        median_c(e_c) / e_c), e_c the cell's weighted mean |residual|: a cell whose flows the
        constant depth cannot fit (a depth edge inside it) pulls the direction less.
        """
        size = np.abs(residual)
        limit = self.config.huber_scale * (1.4826 * _median(size) + 1e-12)
        window.robust = np.minimum(1.0, limit / np.maximum(size, 1e-300))
        window.cell_factor = np.ones_like(size)
        scale = self.config.cell_huber_scale
        if cells and scale > 0:
            weight = window.weight
            sums = np.add.reduceat(np.stack([weight * size, weight]), window.starts, axis=1)
            error = sums[0] / np.maximum(sums[1], 1e-300)
            factor = np.clip(scale * _median(error) / np.maximum(error, 1e-300),
                             _MIN_CELL_FACTOR, 1.0)
            window.cell_factor = np.take(factor, window.cell)
            window.robust *= window.cell_factor

    @staticmethod
    def _huber_only(window):
        """Leave the Huber weights without the cell factors (time to contact, inliers)."""
        window.robust = window.robust / window.cell_factor
        window.cell_factor = np.ones_like(window.robust)

    def _ttc(self, window, direction, omega):
        """Time to contact per region [s]: weighted median of per-flow estimates."""
        config = self.config
        rows, cols = config.ttc_grid
        if self._extension is not None:
            grid = np.empty((rows, cols), np.float32)
            self._extension.time_to_contact(
                window.a_rows, window.g_rows, window.m, window.validity, window.robust,
                window.region, direction, omega, grid,
                (rows, cols, config.min_ttc_flows, config.ttc_neighbour_weight))
            return grid
        b = direction @ window.a_rows
        r = window.m - omega @ window.g_rows
        # inverse time to contact s d_z / Z = r d_z / b; L1 fit through the origin per region
        # = median of r / b weighted by |b| (flows with b ~ 0 carry no depth), times the
        # validity. Not the fit's 1 / (|flow| + floor) nor the slow-flow factor: both weigh
        # a flow by its measured size and favour the flows measured too small (long times)
        # or too large (short times). Flows whose sign no positive depth explains (the sign
        # errors of slow flows) are left out: they would pull the median towards zero.
        w = np.abs(b) * window.validity * window.robust
        ok = w > 1e-12  # (so b != 0)
        inverse = np.divide(r * direction[2], b, out=np.zeros_like(b), where=ok)
        ok &= inverse > 0
        inverse, region, w = inverse[ok], window.region[ok], w[ok]
        if len(inverse) == 0:
            return np.full((rows, cols), np.nan, np.float32)
        # A region needs min_ttc_flows of its own; its median also takes the flows of its 8
        # neighbours at ttc_neighbour_weight: the flow model's errors differ from surface to
        # surface, and a wider pool averages them while the grid keeps its resolution (an
        # obstacle that fills one region only may not outweigh its neighbours: see the doc).
        enough = np.bincount(region, minlength=rows * cols) >= max(config.min_ttc_flows, 1)
        order = np.argsort(inverse)
        inverse, region, w = (np.take(c, order) for c in (inverse, region, w))
        # The weighted median of a region is the first flow in this order whose cumulative
        # weight (in the region's pool) reaches half of the pool's total. Two steps instead of
        # one cumulative sum per region over all flows: per region the weights summed over
        # blocks of _TTC_BLOCK consecutive flows (one bincount) and pooled over the 3 x 3
        # neighbourhood (a convolution of the rows x cols x blocks sums) find the block that
        # holds the median; the cumulative sum within that block finds the flow.
        count, regions = len(inverse), rows * cols
        blocks = -(-count // _TTC_BLOCK)
        if count > len(self._ttc_block_of):  # (a config changed after construction)
            self._ttc_block_of = np.arange(count) // _TTC_BLOCK
        # (regions + 1, blocks): the last row, outside the grid, stays 0
        sums = np.bincount(region * blocks + self._ttc_block_of[:count], weights=w,
                           minlength=(regions + 1) * blocks).reshape(regions + 1, blocks)
        pooled = self._ttc_pool_weight[:, None, :] @ np.take(sums, self._ttc_pool, axis=0)
        cumulative = np.cumsum(pooled[:, 0], axis=1)
        half = 0.5 * cumulative[:, -1:]
        # the median's block (cumulative < half for all blocks before it); then in the
        # (regions, _TTC_BLOCK) flows of each region's block, the weight still to reach
        block = np.count_nonzero(cumulative < half, axis=1)
        entry = np.minimum((block * _TTC_BLOCK)[:, None] + self._ttc_offsets, count - 1)
        # (a block past the last flow repeats the last flow: its weight counts only after
        # half was reached, or where rounding kept the cumulative sum short of it)
        rest = half - cumulative[self._ttc_regions, block - 1][:, None] * (block > 0)[:, None]
        share = np.take(self._ttc_share, np.take(self._ttc_code, np.take(region, entry))
                        - self._ttc_code[:, None])
        within = np.cumsum(share * np.take(w, entry), axis=1)
        pick = np.minimum(np.count_nonzero(within < rest, axis=1), _TTC_BLOCK - 1)
        median = np.where(enough, np.take(inverse, entry[self._ttc_regions, pick]), np.nan)
        grid = 1.0 / median  # (every inverse is > 0; NaN stays NaN)
        return grid.reshape(rows, cols).astype(np.float32)


def _extension():
    """Return the compiled module veckm_flow_ros._egomotion, or raise ImportError saying how."""
    try:
        from veckm_flow_ros import _egomotion
    except ImportError as error:
        raise ImportError(
            f'the egomotion extension veckm_flow_ros._egomotion does not import ({error}); '
            'build it with `python3 setup.py build_ext --inplace` (or scripts/setup.sh), or '
            'pass compiled=False for the numpy reference') from error
    return _egomotion
