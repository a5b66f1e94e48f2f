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
The geometry of the 3D simulator: rigid motion, the motion field, textured planes, ray casting.

Frames: the camera's optical frame (x right, y down, z forward); the world frame is the camera
frame at t = 0. A Trajectory integrates a body twist that is linear in time (v0 + a t,
omega0 + alpha t, camera frame) on a POSE_STEP_S grid with exponential steps of the mid-step
twist. motion_field() is the image velocity of a static point in normalized coordinates; Plane
is a textured rectangle sampled from a mip pyramid; intersect() casts rays against planes.
Used by learning/simulate3d.py.
"""

from dataclasses import dataclass, field
import math

import cv2
import numpy as np

# Pose integration grid [s].
POSE_STEP_S = 1e-4

# --------------------------------------------------------------------------------------------
# Rigid motion


def _skew(w):
    """(N, 3) -> (N, 3, 3) cross-product matrices."""
    k = np.zeros(w.shape[:-1] + (3, 3))
    k[..., 0, 1], k[..., 0, 2] = -w[..., 2], w[..., 1]
    k[..., 1, 0], k[..., 1, 2] = w[..., 2], -w[..., 0]
    k[..., 2, 0], k[..., 2, 1] = -w[..., 1], w[..., 0]
    return k


def se3_exp(v_m, phi_rad):
    """
    Exponential of body twists (N, 3) displacement v_m and rotation vector phi_rad.

    Returns (R (N, 3, 3), p (N, 3)): the pose after moving with the constant twist, relative to
    the start (R = exp([phi]x), p = V(phi) v).
    """
    theta = np.linalg.norm(phi_rad, axis=-1)[..., None, None]
    small = theta < 1e-4
    t2 = theta * theta
    safe = np.where(small, 1.0, theta)
    a = np.where(small, 1 - t2 / 6, np.sin(safe) / safe)
    b = np.where(small, 0.5 - t2 / 24, (1 - np.cos(safe)) / safe ** 2)
    c = np.where(small, 1.0 / 6 - t2 / 120, (safe - np.sin(safe)) / safe ** 3)
    k = _skew(phi_rad)
    k2 = k @ k
    eye = np.eye(3)
    rotation = eye + a * k + b * k2
    v_matrix = eye + b * k + c * k2
    return rotation, np.einsum('nij,nj->ni', v_matrix, v_m)


@dataclass
class Trajectory:
    """
    Camera body twist linear in time, in the camera optical frame.

    v0_m_s, accel_m_s2: linear velocity at t = 0 and its rate; omega0_rad_s,
    angular_accel_rad_s2: angular velocity at t = 0 and its rate. All (3,) float64. The pose
    grid is cached: build a new Trajectory rather than changing these after use.
    """

    kind: str
    v0_m_s: np.ndarray
    accel_m_s2: np.ndarray
    omega0_rad_s: np.ndarray
    angular_accel_rad_s2: np.ndarray

    def __post_init__(self):
        for name in ('v0_m_s', 'accel_m_s2', 'omega0_rad_s', 'angular_accel_rad_s2'):
            setattr(self, name, np.asarray(getattr(self, name), np.float64).reshape(3))
        self._grid_r = np.eye(3)[None]
        self._grid_p = np.zeros((1, 3))

    def twist(self, t_s):
        """Linear [m/s] and angular [rad/s] velocity at times t_s: two (N, 3) arrays."""
        t = np.asarray(t_s, np.float64).reshape(-1, 1)
        return self.v0_m_s + self.accel_m_s2 * t, self.omega0_rad_s + self.angular_accel_rad_s2 * t

    def _step(self, t0_s, dt_s):
        """Pose increments over [t0, t0 + dt] (arrays), with the mid-step twist."""
        v, w = self.twist(t0_s + 0.5 * dt_s)
        dt = np.asarray(dt_s, np.float64).reshape(-1, 1)
        return se3_exp(v * dt, w * dt)

    def _extend(self, t_s):
        """Grow the pose grid (sequentially) to cover time t_s."""
        needed = int(math.floor(t_s / POSE_STEP_S)) + 2
        count = len(self._grid_p)
        if needed <= count:
            return
        rotations = [self._grid_r]
        positions = [self._grid_p]
        r, p = self._grid_r[-1], self._grid_p[-1]
        k = np.arange(count - 1, needed - 1)
        dr, dp = self._step(k * POSE_STEP_S, np.full(len(k), POSE_STEP_S))
        new_r = np.empty((len(k), 3, 3))
        new_p = np.empty((len(k), 3))
        for i in range(len(k)):
            p = p + r @ dp[i]
            r = r @ dr[i]
            new_r[i], new_p[i] = r, p
        rotations.append(new_r)
        positions.append(new_p)
        self._grid_r = np.concatenate(rotations)
        self._grid_p = np.concatenate(positions)

    def pose(self, t_s):
        """Camera pose at times t_s: R (N, 3, 3) camera -> world, p (N, 3) [m]."""
        t = np.asarray(t_s, np.float64).reshape(-1)
        self._extend(float(t.max()) if len(t) else 0.0)
        # Times before 0 (finite differences) extrapolate the twist from t = 0.
        k = np.maximum(np.floor(t / POSE_STEP_S), 0).astype(np.int64)
        t0 = k * POSE_STEP_S
        dr, dp = self._step(t0, t - t0)
        base_r = self._grid_r[k]
        return base_r @ dr, self._grid_p[k] + np.einsum('nij,nj->ni', base_r, dp)

    def describe(self):
        return {'kind': self.kind, 'v0_m_s': self.v0_m_s, 'accel_m_s2': self.accel_m_s2,
                'omega0_rad_s': self.omega0_rad_s,
                'angular_accel_rad_s2': self.angular_accel_rad_s2}


def motion_field(x, y, inverse_depth, v, omega):
    """
    Motion field of static points in normalized coordinates [1/s] (the module formula).

    x, y, inverse_depth (1/Z [1/m], 0 at infinity): arrays of one shape; v, omega: (3,) or
    arrays broadcasting as (..., 3). Returns (dx/dt, dy/dt).
    """
    v = np.asarray(v)
    omega = np.asarray(omega)
    vx, vy, vz = v[..., 0], v[..., 1], v[..., 2]
    wx, wy, wz = omega[..., 0], omega[..., 1], omega[..., 2]
    dx = inverse_depth * (x * vz - vx) + x * y * wx - (1 + x * x) * wy + y * wz
    dy = inverse_depth * (y * vz - vy) + (1 + y * y) * wx - x * y * wy - x * wz
    return dx, dy


def foe_px(camera, v_m_s, min_forward=0.01):
    """
    Focus of expansion [px] (N, 2) of linear velocities (N, 3), NaN where |v_z| < min_forward |v|.

    For v_z < 0 the point is the focus of contraction.
    """
    v = np.asarray(v_m_s, np.float64).reshape(-1, 3)
    speed = np.linalg.norm(v, axis=1)
    valid = np.abs(v[:, 2]) >= min_forward * np.maximum(speed, 1e-12)
    vz = np.where(valid, v[:, 2], 1.0)
    u, w = camera.project(v[:, 0] / vz, v[:, 1] / vz)
    return np.where(valid[:, None], np.stack([u, w], 1), np.nan)


# --------------------------------------------------------------------------------------------
# Scene


@dataclass
class Plane:
    """
    A textured rectangle: origin_m + s axis_u + t axis_v, 0 <= s <= size_m[0], 0 <= t <= size[1].

    atlas: float32 raster holding the log-intensity mip pyramid (level 0 = the texture, texel
    size texel_m, covering the whole rectangle; each level padded by one mirrored texel for
    bilinear reads at its far border); level_size, level_x0, level_y0: per level raster size
    and position in the atlas.
    """

    origin_m: np.ndarray
    axis_u: np.ndarray
    axis_v: np.ndarray
    size_m: np.ndarray
    texel_m: float
    atlas: np.ndarray
    level_size: np.ndarray
    level_x0: np.ndarray
    level_y0: np.ndarray
    description: dict = field(default_factory=dict)

    def __post_init__(self):
        self.normal = np.cross(self.axis_u, self.axis_v)

    @classmethod
    def textured(cls, origin_m, axis_u, axis_v, size_m, texel_m, log_texture, description):
        """Build the plane and its mip atlas from a square log-intensity raster."""
        levels = [np.asarray(log_texture, np.float32)]
        while levels[-1].shape[0] >= 16 and len(levels) < 8:
            levels.append(cv2.pyrDown(levels[-1]))
        sizes = np.array([level.shape[0] for level in levels])
        size0 = sizes[0]
        x0 = np.array([0] + [size0 + 1] * (len(levels) - 1))
        y0 = np.concatenate([[0, 0], np.cumsum(sizes[1:-1] + 1)])[:len(levels)]
        height = max(size0 + 1, int(y0[-1] + sizes[-1] + 1))
        width = int(x0[1] + sizes[1] + 1) if len(levels) > 1 else size0 + 1
        atlas = np.zeros((height, width), np.float32)
        for raster, left, top in zip(levels, x0, y0):
            padded = np.pad(raster, ((0, 1), (0, 1)), mode='reflect')
            atlas[top:top + len(padded), left:left + len(padded)] = padded
        return cls(np.asarray(origin_m, np.float64), np.asarray(axis_u, np.float64),
                   np.asarray(axis_v, np.float64), np.asarray(size_m, np.float64),
                   float(texel_m), atlas, sizes, x0.astype(np.float32), y0.astype(np.float32),
                   description)

    def sample(self, u_m, v_m, footprint_m):
        """Log intensity at plane coordinates [m] with a pixel footprint [m] (trilinear mip)."""
        top = len(self.level_size) - 1
        level = np.log2(np.maximum(footprint_m / np.float32(self.texel_m), 1.0))
        level = np.minimum(level, top)
        low = np.minimum(level.astype(np.int64), max(top - 1, 0))
        weight = (level - low).astype(np.float32)
        high = np.minimum(low + 1, top)
        # The raster covers the plane: level-k texel i sits at i 2^k texel_m from the origin.
        scale = (1.0 / (self.texel_m * 2.0 ** np.arange(top + 1))).astype(np.float32)
        qx = np.concatenate([u_m * scale[low] + self.level_x0[low],
                             u_m * scale[high] + self.level_x0[high]])
        qy = np.concatenate([v_m * scale[low] + self.level_y0[low],
                             v_m * scale[high] + self.level_y0[high]])
        values = _remap_flat(self.atlas, qx, qy)
        n = len(u_m)
        return values[:n] + weight * (values[n:] - values[:n])

    @property
    def corners_m(self):
        """(4, 3) world corners of the rectangle."""
        du, dv = self.axis_u * self.size_m[0], self.axis_v * self.size_m[1]
        return self.origin_m + np.array([0 * du, du, dv, du + dv])


def _remap_flat(raster, qx, qy):
    """Bilinear samples of a raster at float32 coordinate lists (cv2.remap, rows of 1024)."""
    n = len(qx)
    columns = 1024
    rows = max(-(-n // columns), 1)
    map_x = np.zeros(rows * columns, np.float32)
    map_y = np.zeros(rows * columns, np.float32)
    map_x[:n], map_y[:n] = qx, qy
    values = cv2.remap(raster, map_x.reshape(rows, columns), map_y.reshape(rows, columns),
                       cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    return values.reshape(-1)[:n]


def intersect(planes, origin_m, directions):
    """
    Nearest hit of rays origin + s d (s > 0) with the planes.

    origin_m: (3,) or (N, 3); directions: (N, 3) (world frame, with camera-frame z = 1, so
    s is the depth Z). Returns depth (N,) (inf where nothing is hit), plane index (N,) int16
    (-1: none), plane coordinates u_m, v_m (N,) of the hit.
    """
    columns = tuple(np.ascontiguousarray(directions[:, k]) for k in range(3))
    hits = RayHits(len(directions), directions.dtype)
    for i, plane in enumerate(planes):
        hits.update(i, *hit_plane(plane, origin_m, columns))
    return hits.depth, hits.index, hits.u, hits.v


class RayHits:
    """Nearest hit so far of a set of rays (depth, plane index, plane coordinates)."""

    def __init__(self, n, dtype):
        self.depth = np.full(n, np.inf, dtype)
        self.index = np.full(n, -1, np.int16)
        self.u = np.zeros(n, dtype)
        self.v = np.zeros(n, dtype)

    def update(self, plane_index, s, u, v, pixels=None):
        """Keep the hits s (plane coordinates u, v) nearer than the current ones."""
        if pixels is None:
            closer = s < self.depth
            np.copyto(self.depth, s, where=closer)
            np.copyto(self.u, u, where=closer)
            np.copyto(self.v, v, where=closer)
            self.index[closer] = plane_index
            return
        closer = s < self.depth[pixels]
        pixels = pixels[closer]
        self.depth[pixels] = s[closer]
        self.u[pixels] = u[closer]
        self.v[pixels] = v[closer]
        self.index[pixels] = plane_index


def dot_columns(columns, vector):
    """Sum of columns[k] * vector[k], skipping zero weights (axis-aligned planes are cheap)."""
    total = None
    for column, weight in zip(columns, vector):
        weight = float(weight)
        if weight == 0.0:
            continue
        term = column if weight == 1.0 else (-column if weight == -1.0 else column * weight)
        total = term if total is None else total + term
    return np.zeros_like(columns[0]) if total is None else total


def hit_plane(plane, origin_m, columns):
    """
    Ray parameter s (inf: no hit inside the rectangle) and plane coordinates u, v [m].

    columns: the x, y, z components of the ray directions (three arrays of one dtype).
    """
    dtype = columns[0].dtype
    offset = np.asarray(origin_m, np.float64) - plane.origin_m
    offset_n, offset_u, offset_v = (offset @ axis for axis in
                                    (plane.normal, plane.axis_u, plane.axis_v))
    if np.ndim(offset_n) == 0:
        offset_n, offset_u, offset_v = float(offset_n), float(offset_u), float(offset_v)
    with np.errstate(divide='ignore', invalid='ignore'):
        s = -offset_n / dot_columns(columns, plane.normal)
        u = offset_u + s * dot_columns(columns, plane.axis_u)
        v = offset_v + s * dot_columns(columns, plane.axis_v)
        half_u, half_v = 0.5 * plane.size_m
        inside = (s > 1e-6) & (np.abs(u - half_u) <= half_u) & (np.abs(v - half_v) <= half_v)
    return np.where(inside, s, dtype.type(np.inf)), u, v
