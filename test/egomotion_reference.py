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
A short reference of the egomotion estimator's equations (docs/egomotion.md), for the tests.

Written from the equations for clarity, not speed: the window preparation flow by flow from
the camera model (no per-pixel map), the Huber weights, the cell-depth cost (2) with omega
known and with omega eliminated, and the minimum of a cost by brute force over a dense
direction grid, zoomed in twice. The estimator (core/egomotion*.py and csrc/egomotion/) is
tested against it.
"""

import math

import numpy as np

from veckm_flow_ros.core.egomotion import fibonacci_sphere


def prepare(camera, config, x_px, y_px, u_px_s, v_px_s, weight=None):
    """
    Return the usable flows of a window, in the estimator's order (sorted by cell, stable).

    Returns a dict of arrays over the flows: a, g (N, 3) = A^T n, B^T n; m (N,) [1/s];
    validity, weight (validity / (|flow| + floor)), slow (s^2 / (s^2 + slow^2)); cell (depth
    cell of the pixel), region (time-to-contact region); input_order (position among the
    flows that pass the input checks).
    """
    columns = [np.asarray(c, np.float64) for c in (x_px, y_px, u_px_s, v_px_s)]
    validity = np.ones(len(columns[0])) if weight is None else np.asarray(weight, np.float64)
    pick = np.arange(len(validity))
    if len(pick) > config.max_flows:  # evenly subsampled
        pick = np.linspace(0, len(pick) - 1, config.max_flows).astype(np.int64)
    x, y, u, v = (np.rint(c[pick]) if i < 2 else c[pick] for i, c in enumerate(columns))
    validity = validity[pick]
    speed = np.hypot(u, v)
    with np.errstate(invalid='ignore'):
        ok = ((x >= 0) & (x < camera.width) & (y >= 0) & (y < camera.height)
              & np.isfinite(speed) & (speed > 1e-9))
        if weight is not None:
            ok &= np.isfinite(validity) & (validity > 0) & (validity >= config.min_validity)
    x, y, u, v, speed, validity = (c[ok] for c in (x, y, u, v, speed, validity))
    # n = M^T n_px / |M^T n_px|, m = m_px / |M^T n_px|, M = K2 J (the pixel velocity of u)
    px, py = camera.normalize(x, y)
    jacobian = camera.distortion_jacobian(np.nan_to_num(px), np.nan_to_num(py))
    m_matrix = camera.K[:2, :2] @ jacobian                                  # (N, 2, 2)
    n = np.einsum('nji,nj->ni', m_matrix, np.stack([u, v], 1) / speed[:, None])
    norm = np.linalg.norm(n, axis=1)
    n, m = n / norm[:, None], speed / norm
    a = np.stack([-n[:, 0], -n[:, 1], px * n[:, 0] + py * n[:, 1]], 1)       # A^T n
    b_matrix = np.array([[px * py, -(1 + px * px), py], [1 + py * py, -px * py, -px]])
    g = np.einsum('ijn,ni->nj', b_matrix, n)                                 # B^T n
    xi, yi = x.astype(np.int64), y.astype(np.int64)
    cell = (yi // config.cell_px) * -(-camera.width // config.cell_px) + xi // config.cell_px
    rows, cols = config.ttc_grid
    region = (yi * rows // camera.height) * cols + xi * cols // camera.width
    # Flows without normalized coordinates and cells with too few flows are left out.
    finite = np.isfinite(m) & np.isfinite(px) & np.isfinite(py)
    counts = np.bincount(cell[finite], minlength=cell.max(initial=0) + 1)
    usable = finite & (counts[cell] >= config.min_cell_flows)
    order = np.flatnonzero(usable)[np.argsort(cell[usable], kind='stable')]
    floor = speed + config.flow_floor_px_s if config.flow_floor_px_s > 0 else 1.0
    slow = speed ** 2 / (speed ** 2 + config.slow_flow_px_s ** 2) \
        if config.slow_flow_px_s > 0 else np.ones_like(speed)
    flows = {'a': a, 'g': g, 'm': m, 'validity': validity, 'weight': validity / floor,
             'slow': slow, 'cell': cell, 'region': region,
             'input_order': np.arange(len(m))}
    return {name: value[order] for name, value in flows.items()}


def huber(residual, scale):
    """Huber weights min(1, k / |r|), k = scale x 1.4826 x median |r| (+ 1e-12)."""
    limit = scale * (1.4826 * np.median(np.abs(residual)) + 1e-12)
    return np.minimum(1.0, limit / np.maximum(np.abs(residual), 1e-300))


def _cell_sums(values, cell):
    """Per-cell sums (C, ...) of per-flow values (N, ...) (the cells present, in order)."""
    _, index = np.unique(cell, return_inverse=True)
    sums = np.zeros((index.max() + 1,) + values.shape[1:])
    np.add.at(sums, index, values)
    return sums


def cost_known(a, r, w, cell, dirs):
    """
    Equation (2) per direction (K, 3): sum w r^2 - sum_c max(0, S_br)^2 / S_bb.

    S_br = sum_c w b r, S_bb = sum_c w b^2, b = a . d: the residual after each cell's best
    non-negative inverse depth. a (N, 3), r (N,) derotated flow, w (N,) weights.
    """
    aa = _cell_sums(w[:, None, None] * a[:, :, None] * a[:, None, :], cell)  # sum w a a^T
    ar = _cell_sums((w * r)[:, None] * a, cell)                              # sum w a r
    s_bb = np.einsum('ki,cij,kj->kc', dirs, aa, dirs)
    s_br = dirs @ ar.T
    explained = np.maximum(s_br, 0.0) ** 2 / np.where(s_bb > 0, s_bb, np.inf)
    return np.sum(w * r * r) - explained.sum(axis=1)


def cost_free(a, g, m, w, cell, dirs):
    """
    Equation (2) per direction (K, 3) with omega its least squares: (costs (K,), omegas).

    omega (K, 3) minimises sum w (m - rho_c (a . d) - g . omega)^2 with the cell depths
    rho_c free (unclipped): H omega = h, H = sum w g g^T - sum_c S_c S_c^T / S_bb,
    h = sum w g m - sum_c S_c S_bm / S_bb, S_c = sum_c w b g. The cost is then (2) with
    r = m - g . omega (S_br = S_bm - omega . S_c).
    """
    aa = _cell_sums(w[:, None, None] * a[:, :, None] * a[:, None, :], cell)
    ga = _cell_sums(w[:, None, None] * g[:, :, None] * a[:, None, :], cell)  # sum w g a^T
    am = _cell_sums((w * m)[:, None] * a, cell)                              # sum w a m
    s_bb = np.einsum('ki,cij,kj->kc', dirs, aa, dirs)
    s_c = np.einsum('cij,kj->kci', ga, dirs)
    s_bm = dirs @ am.T
    gg, gm = np.einsum('n,ni,nj->ij', w, g, g), (w * m) @ g
    h = gg - np.einsum('kci,kcj,kc->kij', s_c, s_c, 1 / s_bb)
    rhs = gm - np.einsum('kci,kc->ki', s_c, s_bm / s_bb)
    omegas = np.linalg.solve(h, rhs[:, :, None])[:, :, 0]
    total = np.sum(w * m * m) - 2 * omegas @ gm + np.einsum('ki,ij,kj->k', omegas, gg, omegas)
    s_br = s_bm - np.einsum('ki,kci->kc', omegas, s_c)
    return total - (np.maximum(s_br, 0.0) ** 2 / s_bb).sum(axis=1), omegas


def _cap(center, radius_rad, side):
    """Return (side^2, 3) unit directions: a square grid of +-radius around center (3,)."""
    helper = np.eye(3)[np.argmin(np.abs(center))]
    e1 = np.cross(center, helper)
    e1 /= np.linalg.norm(e1)
    e2 = np.cross(center, e1)
    steps = np.linspace(-radius_rad, radius_rad, side)
    s, t = (c.reshape(-1) for c in np.meshgrid(steps, steps))
    dirs = center + s[:, None] * e1 + t[:, None] * e2
    return dirs / np.linalg.norm(dirs, axis=1)[:, None]


def minimum(cost, count=4000, side=21):
    """
    Return the direction (3,) of least cost(dirs (K, 3)) -> (K,), by brute force.

    A Fibonacci sphere of count directions, then three times a side x side grid around the
    best one spanning +-2 spacings of the previous grid (last spacing 0.026 deg at the
    defaults).
    """
    dirs = fibonacci_sphere(count)
    best = dirs[np.argmin(cost(dirs))]
    spacing = math.sqrt(4 * math.pi / count)
    for _ in range(3):
        dirs = _cap(best, 2 * spacing, side)
        best = dirs[np.argmin(cost(dirs))]
        spacing = 4 * spacing / (side - 1)
    return best


def _fitted_translation(a, r, w, cell, d):
    """Per flow: its cell's best non-negative inverse depth times a . d (N,)."""
    b = a @ d
    _, index = np.unique(cell, return_inverse=True)
    s_br = np.bincount(index, w * b * r)
    s_bb = np.bincount(index, w * b * b)
    rho = np.maximum(s_br / np.maximum(s_bb, 1e-300), 0.0)
    return rho[index] * b


def translation_ratio(a, g, m, w, cell, d, omega):
    """Median |fitted translational normal flow| / median |rotational normal flow g . omega|."""
    h = g @ omega
    return np.median(np.abs(_fitted_translation(a, m - h, w, cell, d))) / np.median(np.abs(h))


def sign_disagreement(a, g, m, weight, slow, d, omega, huber_scale, rotation_error):
    """
    Share of the sign vote's weight whose derotated flow r has the sign opposite to a . d.

    Each flow votes with weight x slow x huber(r) x r^2 / (r^2 + (rotation_error g . omega)^2).
    """
    h = g @ omega
    r = m - h
    vote = weight * slow * huber(r, huber_scale) * r * r / (r * r + (rotation_error * h) ** 2)
    return vote[np.sign(a @ d) != np.sign(r)].sum() / vote.sum()


def accurate(a, g, m, w, cell, d, omega, share):
    """
    Return whether the flows pass the accuracy check at (d, omega).

    The median |residual| (cell depths fitted) below share x median |m|, or below half of
    that on the tenth of the flows with the smallest |a . d|.
    """
    residual = np.abs(m - g @ omega - _fitted_translation(a, m - g @ omega, w, cell, d))
    limit = share * np.median(np.abs(m))
    flat = np.abs(a @ d) <= np.quantile(np.abs(a @ d), 0.1)
    return np.median(residual) < limit or np.median(residual[flat]) < 0.5 * limit
