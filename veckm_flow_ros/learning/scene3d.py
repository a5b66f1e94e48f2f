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
The 3D simulator's scene: a camera with a known twist among textured planes, and its rendering.

Scene3D holds the camera model, the planes (a room and boxes), the trajectory and the sensor
and gyroscope models; it renders log intensity images (cast rays, mip-mapped textures,
supersampled surface boundaries, optics blur) and gives the exact motion field, depth and time
to contact of any pixel at any time. learning/simulate3d.py builds random scenes and turns
them into events with ground truth; its module docstring describes the whole model.
"""

from dataclasses import dataclass, field
import math
from typing import List

import cv2
import numpy as np

from veckm_flow_ros.core.camera import CameraModel
from veckm_flow_ros.learning.simulate import SensorConfig
from veckm_flow_ros.learning.world3d import (
    dot_columns, hit_plane, intersect, motion_field, Plane, RayHits, Trajectory)

TRAJECTORIES = ('constant', 'accelerating', 'turning', 'approach')
DISTORTIONS = ('none', 'plumb_bob', 'equidistant')
# Coefficients of the distortion variants (moderate barrel distortion at f ~ 0.72 width).
DISTORTION_COEFFICIENTS = {'plumb_bob': (-0.2, 0.05, 5e-4, -5e-4, 0.0),
                           'equidistant': (-0.02, 0.004, 0.0, 0.0)}
# Held-out sequences for evaluation: seeds far from the 2D simulator's (training and held-out).
HELDOUT_3D_SEED = 3_700_000
# Held-out sequences of a subset of the trajectories (e.g. approaches only): a block of seeds
# apart from the mixed set's, so that they never repeat one of its scenes.
HELDOUT_3D_SUBSET_SEED = 3_710_000
# Focal length of the default camera relative to the sensor width (250 px at 346 px).
FOCAL_PER_WIDTH = 250.0 / 346.0
# Neighbouring pixels on different surfaces with depths differing by more than this fraction
# form an occlusion boundary.
OCCLUSION_DEPTH_RATIO = 0.03
# Random textures of the ground and the walls: not the periodic ones (gratings, checker),
# which would make most of the image ambiguous under the aperture problem; boxes use all.
ROOM_TEXTURES = ('noise', 'edges', 'polygons', 'bars', 'pink', 'blobs')
# Random textures of the boxes: the 2D simulator's textures without the dense 'fine' grain
# (added for training later; listing them here keeps the scenes of a seed unchanged).
BOX_TEXTURES = ('noise', 'edges', 'checker', 'polygons', 'bars', 'pink', 'gratings', 'blobs')
# Largest texture raster of a plane [texels].
MAX_TEXTURE_PX = 1024
# Blur of the rendered image by the optics and the pixel's area [px]: the 2D simulator blurs its
# textures by 0-1.5 px and its object outlines by 0.5 px. Without it the boundaries of planes
# are point-sampled: a pixel steps from one surface's intensity to the other's within one render
# step, and a slow edge gives a burst of events in well under a millisecond at every pixel
# (measured: 8 OFF events in 0.8 ms where the edge needs 9 ms to cross the pixel), which the flow
# models read as a fast edge (about 1,300 px/s against the true 115 px/s).
OPTICS_SIGMA_PX = 0.7
# Rays per pixel side at surface boundaries (a pixel integrates its area): 4 x 4.
SUPERSAMPLING = 4
# Largest stretch of a pixel's footprint on a grazing surface used for the mip level.
MAX_FOOTPRINT_STRETCH = 16.0


@dataclass
class GyroConfig:
    """
    Gyroscope model.

    Defaults: a consumer MEMS IMU (BMI088-class noise density 0.014 deg/s/sqrt(Hz)), an
    uncalibrated bias of about 0.3 deg/s per axis, aligned with the camera and on its clock.
    rotation_cam_imu (9 values, row-major) and time_offset_s have the meaning of
    core.egomotion.GyroBuffer's arguments: omega_camera = R omega_imu, camera time = IMU
    time + time_offset_s; the samples are then omega_imu = R^T omega_camera + bias + noise at
    IMU times gt_t_s - time_offset_s.
    """

    rate_hz: float = 1000.0
    noise_density_rad_s_sqrt_hz: float = 2.4e-4
    bias_sigma_rad_s: float = 5e-3
    rotation_cam_imu: tuple = (1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0)
    time_offset_s: float = 0.0

    def __post_init__(self):
        rotation = np.asarray(self.rotation_cam_imu, np.float64)
        if rotation.size != 9 or not np.allclose(rotation.reshape(3, 3) @ rotation.reshape(
                3, 3).T, np.eye(3), atol=1e-6) or np.linalg.det(rotation.reshape(3, 3)) < 0:
            raise ValueError(f'rotation_cam_imu must be a 3x3 rotation matrix (9 values), got '
                             f'{rotation.tolist()}')
        if not (self.rate_hz > 0 and math.isfinite(self.time_offset_s)):
            raise ValueError(f'gyro rate must be > 0 Hz and the time offset finite, got '
                             f'{self.rate_hz} Hz, {self.time_offset_s} s')


@dataclass
class Scene3D:
    """Camera, planes, camera trajectory, sensor and gyro models."""

    camera: CameraModel
    planes: List[Plane]
    trajectory: Trajectory
    sensor: SensorConfig
    gyro: GyroConfig = field(default_factory=GyroConfig)
    sky_log_intensity: float = 1.0
    description: dict = field(default_factory=dict)
    # Optics and pixel area [px, Gaussian sigma in linear intensity]: a surface boundary then
    # ramps over the time an edge needs to cross about two pixels, as in a camera, instead of
    # stepping at the instant it passes a pixel centre (0: point-sampled geometry).
    optics_sigma_px: float = OPTICS_SIGMA_PX
    # Rays per pixel side where surfaces meet (pixel area integration; 1: the centre ray only).
    supersampling: int = SUPERSAMPLING

    def __post_init__(self):
        x, y = self.camera.pixel_grid_normalized()
        self._rays = np.stack([x.reshape(-1), y.reshape(-1), np.ones(x.size)], 1)
        self._valid = np.isfinite(self._rays).all(1)
        rays = np.where(self._valid[:, None], self._rays, 0.0)
        self._rays32 = rays.astype(np.float32)
        self._ray_length = np.linalg.norm(rays, axis=1).astype(np.float32)
        # Normalized -> pixel velocity per pixel: A J (K's 2x2 times the distortion Jacobian).
        jac = self.camera.distortion_jacobian(np.where(self._valid, rays[:, 0], 0),
                                              np.where(self._valid, rays[:, 1], 0))
        self._to_pixels = (self.camera.K[:2, :2] @ jac).astype(np.float32)
        # Normalized coordinates seen by the sensor (with a margin), to clip plane boxes.
        margin = 2.0 / self.camera.focal_px
        self._normalized_extent = (rays[self._valid, 0].min() - margin,
                                   rays[self._valid, 0].max() + margin,
                                   rays[self._valid, 1].min() - margin,
                                   rays[self._valid, 1].max() + margin)

    @property
    def width(self):
        return self.camera.width

    @property
    def height(self):
        return self.camera.height

    def render(self, t_s):
        """
        Render the camera image at time t_s.

        Returns log intensity (H, W) float32, depth Z (H, W) float32 [m] (inf: sky, NaN: no
        ray) and surface index (H, W) int16 (-1: sky or no ray).
        """
        rotation, position = self.trajectory.pose(t_s)
        rotation, position = rotation[0], position[0]
        level, depth, index = self._shade(rotation, position, self._rays32, self._ray_length,
                                          boxes=True)
        shape = (self.height, self.width)
        if self.supersampling > 1:
            level = self._antialias(rotation, position, level, index.reshape(shape))
        depth = np.where(self._valid, depth, np.nan)
        index[~self._valid] = -1
        return (self._optics(level.reshape(shape)), depth.reshape(shape).astype(np.float32),
                index.reshape(shape))

    def _shade(self, rotation, position, rays32, ray_length, boxes=False):
        """
        Log intensity, depth Z [m] and surface index of camera rays (x, y, 1) (N, 3) float32.

        boxes: the rays are the pixel grid's, so a plane is only cast where its image box lies.
        """
        # World directions of the rays: one array per component.
        x, y = rays32[:, 0], rays32[:, 1]
        columns = tuple(x * np.float32(r[0]) + y * np.float32(r[1]) + np.float32(r[2])
                        for r in rotation)
        n = len(x)
        hits = RayHits(n, np.float32)
        for i, plane in enumerate(self.planes):
            box = self._pixel_box(plane, rotation, position) if boxes else 'all'
            if box is None:
                continue
            pixels = self._box_pixels(box)
            if pixels is None:
                hits.update(i, *hit_plane(plane, position, columns))
            else:
                hits.update(i, *hit_plane(plane, position, tuple(c[pixels] for c in columns)),
                            pixels=pixels)
        depth, index, hit_u, hit_v = hits.depth, hits.index, hits.u, hits.v
        level = np.full(n, self.sky_log_intensity, np.float32)
        order = np.argsort(index, kind='stable')
        bounds = np.searchsorted(index[order], np.arange(len(self.planes) + 1))
        focal = np.float32(self.camera.focal_px)
        for i, plane in enumerate(self.planes):
            pixels = order[bounds[i]:bounds[i + 1]]
            if len(pixels) == 0:
                continue
            cosine = np.abs(dot_columns(tuple(c[pixels] for c in columns), plane.normal)) \
                / ray_length[pixels]
            stretch = np.minimum(1.0 / np.maximum(cosine, 1e-6), MAX_FOOTPRINT_STRETCH)
            footprint = depth[pixels] / focal * stretch
            level[pixels] = plane.sample(hit_u[pixels], hit_v[pixels], footprint)
        return level, depth, index

    def _antialias(self, rotation, position, level, index):
        """
        Average the light over supersampling^2 rays per pixel where surfaces meet.

        A pixel integrates the light of its area: where a surface boundary (an outline or a
        crease) crosses it, the centre ray alone would step from one surface to the other the
        instant the boundary passes the centre. Textures need no supersampling (mip-filtered).
        """
        edge = np.zeros(index.shape, bool)
        edge[:, 1:] |= index[:, 1:] != index[:, :-1]
        edge[:, :-1] |= index[:, 1:] != index[:, :-1]
        edge[1:, :] |= index[1:, :] != index[:-1, :]
        edge[:-1, :] |= index[1:, :] != index[:-1, :]
        pixels = np.flatnonzero(edge.reshape(-1) & self._valid)
        if len(pixels) == 0:
            return level
        # Rays through a k x k grid inside each of these pixels (only these: a full-frame
        # table would hold k^2 rays for every pixel).
        k = self.supersampling
        offsets = (np.arange(k) + 0.5) / k - 0.5
        du, dv = (np.repeat(offsets, k)[:, None], np.tile(offsets, k)[:, None])
        x, y = self.camera.normalize(pixels % self.width + du, pixels // self.width + dv)
        rays = np.stack([np.nan_to_num(x).reshape(-1), np.nan_to_num(y).reshape(-1),
                         np.ones(x.size)], 1)
        lengths = np.linalg.norm(rays, axis=1).astype(np.float32)
        sub_level, _, _ = self._shade(rotation, position, rays.astype(np.float32), lengths)
        light = np.exp(sub_level.reshape(k * k, len(pixels))).mean(0)
        level = level.copy()
        level[pixels] = np.log(light)
        return level

    def _optics(self, log_intensity):
        """Blur the image in linear intensity (light adds up there) by optics_sigma_px."""
        if self.optics_sigma_px <= 0:
            return log_intensity
        linear = np.exp(log_intensity)
        blurred = cv2.GaussianBlur(linear, (0, 0), self.optics_sigma_px,
                                   borderType=cv2.BORDER_REPLICATE)
        return np.log(np.maximum(blurred, np.float32(1e-12)))

    def _pixel_box(self, plane, rotation, position):
        """
        Image region (x0, x1, y0, y1) [px, end exclusive] that may show the plane.

        'all' when a corner is behind or near the camera, None when the plane is out of view.
        """
        local = (plane.corners_m - position) @ rotation  # R^T (P - p) for each corner
        if (local[:, 2] < 0.05).any():
            return 'all'
        x, y = local[:, 0] / local[:, 2], local[:, 1] / local[:, 2]
        lo_x, hi_x, lo_y, hi_y = self._normalized_extent
        x0, x1 = max(x.min(), lo_x), min(x.max(), hi_x)
        y0, y1 = max(y.min(), lo_y), min(y.max(), hi_y)
        if x0 > x1 or y0 > y1:
            return None
        # The border of the normalized box, densely enough for a distorted projection.
        steps = np.linspace(0.0, 1.0, 17 if self.camera.has_distortion else 2)
        bx = np.concatenate([x0 + (x1 - x0) * steps, np.full(len(steps), x1),
                             x0 + (x1 - x0) * steps, np.full(len(steps), x0)])
        by = np.concatenate([np.full(len(steps), y0), y0 + (y1 - y0) * steps,
                             np.full(len(steps), y1), y0 + (y1 - y0) * steps])
        u, v = self.camera.project(bx, by)
        margin = 3
        c0, c1 = max(int(np.floor(u.min())) - margin, 0), min(int(np.ceil(u.max())) + margin + 1,
                                                              self.width)
        r0, r1 = max(int(np.floor(v.min())) - margin, 0), min(int(np.ceil(v.max())) + margin + 1,
                                                              self.height)
        if c0 >= c1 or r0 >= r1:
            return None
        return c0, c1, r0, r1

    def _box_pixels(self, box):
        """Flat pixel indices of an image region, or None for the whole image."""
        if box == 'all':
            return None
        c0, c1, r0, r1 = box
        if (c1 - c0) * (r1 - r0) > 0.5 * self.width * self.height:
            return None
        return (np.arange(r0, r1)[:, None] * self.width + np.arange(c0, c1)[None, :]).reshape(-1)

    def pixel_flow(self, depth, t_s, stride=1):
        """
        Motion field [px/s] (H, W, 2) float32 of a depth image (H, W) at time t_s.

        stride: evaluate every stride-th row and column only (shape (H / s, W / s, 2)).
        """
        v, omega = self.trajectory.twist(t_s)
        shape = (self.height, self.width)
        grid = (slice(None, None, stride), slice(None, None, stride))
        rays = self._rays32.reshape(shape + (3,))[grid]
        depth = np.asarray(depth)[grid]
        with np.errstate(divide='ignore', invalid='ignore'):
            inverse = np.where(np.isfinite(depth), 1.0 / depth, 0.0).astype(np.float32)
        dx, dy = motion_field(rays[..., 0], rays[..., 1], inverse, v[0].astype(np.float32),
                              omega[0].astype(np.float32))
        m = self._to_pixels.reshape(shape + (2, 2))[grid]
        flow = np.stack([m[..., 0, 0] * dx + m[..., 0, 1] * dy,
                         m[..., 1, 0] * dx + m[..., 1, 1] * dy], -1)
        flow[~self._valid.reshape(shape)[grid]] = 0.0
        return flow

    def max_speed_px_s(self, depth, t_s):
        """Largest image speed [px/s] of a depth image at t_s (every second pixel, +5 %)."""
        flow = self.pixel_flow(depth, t_s, stride=2)
        return 1.05 * float(np.sqrt(np.max(flow[..., 0] ** 2 + flow[..., 1] ** 2)))

    def cast(self, t_s, index):
        """
        Exact depth and surface of pixels (flat index, (N,)) at times t_s (N,) [s].

        Returns depth Z (N,) float64 [m] (inf: sky) and the surface index (N,) int16.
        """
        t_s = np.asarray(t_s, np.float64)
        rotation, position = self.trajectory.pose(t_s)
        directions = np.einsum('nij,nj->ni', rotation, self._rays[index])
        depth, surface, _, _ = intersect(self.planes, position, directions)
        return depth, surface

    def event_flow(self, t_s, index, depth):
        """Exact optical flow [px/s] (N, 2) float64 of events at pixels `index` and times t_s."""
        v, omega = self.trajectory.twist(t_s)
        rays = self._rays[index]
        inverse = np.where(np.isfinite(depth), 1.0 / depth, 0.0)
        dx, dy = motion_field(rays[:, 0], rays[:, 1], inverse, v, omega)
        u, w = self.camera.velocity_to_pixels(rays[:, 0], rays[:, 1], dx, dy)
        return np.stack([u, w], 1)

    def project(self, t_s, points_m):
        """Pixel positions (N, 2) of world points (N, 3) seen at times t_s (N,)."""
        rotation, position = self.trajectory.pose(t_s)
        local = np.einsum('nji,nj->ni', rotation, points_m - position)
        u, v = self.camera.project(local[:, 0] / local[:, 2], local[:, 1] / local[:, 2])
        return np.stack([u, v], 1)

    def point(self, t_s, index, depth):
        """World points (N, 3) at depth Z along the rays of pixels `index` at times t_s."""
        rotation, position = self.trajectory.pose(t_s)
        local = self._rays[index] * np.asarray(depth)[:, None]
        return position + np.einsum('nij,nj->ni', rotation, local)

    def ttc_image_s(self, t_s):
        """Time to contact Z / v_z [s] (H, W) float32 at t_s; NaN where v_z <= 0 or sky."""
        _, depth, _ = self.render(t_s)
        v, _ = self.trajectory.twist(t_s)
        if v[0, 2] <= 0:
            return np.full(depth.shape, np.nan, np.float32)
        ttc = depth / v[0, 2]
        return np.where(np.isfinite(ttc), ttc, np.nan).astype(np.float32)
