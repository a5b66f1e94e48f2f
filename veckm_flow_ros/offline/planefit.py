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
Local plane fitting, the classic event-based normal flow (baseline for evaluation).

Around each event, the events of a (2r+1) x (2r+1) pixel window and a short time window lie
near a plane t = a x + b y + c when an edge sweeps through; its gradient g = (a, b) [s/px]
gives the normal flow g / |g|^2 [px/s].

Vectorised like the VecKM encoder: events are grouped into short target blocks; each block
uses the context events within +-half_window_s of its centre. Per pixel, the counts and time
sums are scattered into images; box filters give every window's least-squares moments at
once, and a 3x3 solve per target pixel gives the plane. Events at one pixel of a block share
its fit.
"""

import cv2
import numpy as np

from veckm_flow_ros.eventio.events import EventArray


def plane_fit_flow(events: EventArray, width: int, height: int, pixel_radius: int = 3,
                   half_window_s: float = 0.005, block_s: float = 0.002,
                   min_events: int = 6, max_residual_px: float = 2.0,
                   max_flow_px_s: float = 20000.0) -> np.ndarray:
    """
    Plane-fitting normal flow for every event.

    events: EventArray sorted by t_ns; width, height: sensor size [px]; pixel_radius: r of the
    (2r+1)^2 window; half_window_s: context half-length around each block centre [s];
    block_s: target block length [s]; min_events: fewest window events for a fit;
    max_residual_px: largest RMS residual of an accepted plane, as a distance across the edge
    (RMS time residual times the flow speed) [px]; max_flow_px_s: faster fits are rejected
    (nearly flat planes). Returns (N, 2) float32 flow in px/s, NaN where no plane was
    accepted.
    """
    if pixel_radius < 1:
        raise ValueError(f'pixel_radius must be >= 1, got {pixel_radius}')
    n = len(events)
    flow = np.full((n, 2), np.nan, np.float32)
    if n == 0:
        return flow
    t_ns = events.t_ns
    if np.any(np.diff(t_ns) < 0):
        raise ValueError('plane_fit_flow needs events sorted by t_ns')
    x = events.x.astype(np.int64)
    y = events.y.astype(np.int64)
    inside = (x < width) & (y < height)
    block_ns = int(block_s * 1e9)
    half_ns = int(half_window_s * 1e9)
    kernel = (2 * pixel_radius + 1, 2 * pixel_radius + 1)
    xs = np.arange(width, dtype=np.float64)[None, :]
    ys = np.arange(height, dtype=np.float64)[:, None]
    start_ns = int(t_ns[0])
    block_edges = np.arange(start_ns, int(t_ns[-1]) + block_ns + 1, block_ns)
    target_bounds = np.searchsorted(t_ns, block_edges)
    for block in range(len(block_edges) - 1):
        first, last = target_bounds[block], target_bounds[block + 1]
        if first == last:
            continue
        centre_ns = int(block_edges[block]) + block_ns // 2
        lo, hi = np.searchsorted(t_ns, [centre_ns - half_ns, centre_ns + half_ns + 1])
        context = slice(lo, hi)
        keep = inside[context]
        cx, cy = x[context][keep], y[context][keep]
        ct = (t_ns[context][keep] - centre_ns) * 1e-9
        pixel = cy * width + cx
        count = np.bincount(pixel, minlength=width * height).reshape(height, width)
        t_sum = np.bincount(pixel, ct, minlength=width * height).reshape(height, width)
        t2_sum = np.bincount(pixel, ct * ct, minlength=width * height).reshape(height, width)
        count = count.astype(np.float64)
        maps = {'n': count, 'nx': count * xs, 'ny': count * ys, 'nxx': count * xs * xs,
                'nxy': count * xs * ys, 'nyy': count * ys * ys, 't': t_sum, 'tx': t_sum * xs,
                'ty': t_sum * ys, 'tt': t2_sum}
        # Box sums over the window (zero outside the image).
        sums = {key: cv2.boxFilter(value, -1, kernel, normalize=False,
                                   borderType=cv2.BORDER_CONSTANT)
                for key, value in maps.items()}
        tx, ty = x[first:last], y[first:last]
        ok = inside[first:last]
        tx, ty = np.where(ok, tx, 0), np.where(ok, ty, 0)
        s = {key: value[ty, tx] for key, value in sums.items()}
        # Moments relative to the target pixel (well conditioned, small numbers).
        px, py = tx.astype(np.float64), ty.astype(np.float64)
        s0 = s['n']
        sx = s['nx'] - px * s0
        sy = s['ny'] - py * s0
        sxx = s['nxx'] - 2 * px * s['nx'] + px * px * s0
        syy = s['nyy'] - 2 * py * s['ny'] + py * py * s0
        sxy = s['nxy'] - px * s['ny'] - py * s['nx'] + px * py * s0
        st = s['t']
        sxt = s['tx'] - px * st
        syt = s['ty'] - py * st
        matrix = np.stack([np.stack([sxx, sxy, sx], -1), np.stack([sxy, syy, sy], -1),
                           np.stack([sx, sy, s0], -1)], -2)
        rhs = np.stack([sxt, syt, st], -1)
        det = np.linalg.det(matrix)
        solvable = ok & (s0 >= min_events) & (np.abs(det) > 1e-9 * np.maximum(s0, 1) ** 3)
        coef = np.zeros_like(rhs)
        if solvable.any():
            coef[solvable] = np.linalg.solve(matrix[solvable], rhs[solvable][..., None])[..., 0]
        a, b = coef[:, 0], coef[:, 1]
        # Residual sum of squares: sum t^2 - 2 coef . rhs + coef' M coef.
        quad = np.einsum('ni,nij,nj->n', coef, matrix, coef)
        rss = np.maximum(s['tt'] - 2 * np.einsum('ni,ni->n', coef, rhs) + quad, 0)
        rms = np.sqrt(rss / np.maximum(s0, 1))
        grad_sq = a * a + b * b
        with np.errstate(divide='ignore', invalid='ignore'):
            speed = 1.0 / np.sqrt(grad_sq)
            accept = solvable & (grad_sq > 0) & (rms * speed <= max_residual_px) \
                & (speed <= max_flow_px_s)
            u = np.where(accept, a / grad_sq, np.nan)
            v = np.where(accept, b / grad_sq, np.nan)
        flow[first:last, 0] = u
        flow[first:last, 1] = v
    return flow
