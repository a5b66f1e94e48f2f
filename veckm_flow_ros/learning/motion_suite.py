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
The motions robots make, as 3D scenes with exact normal flow per window (no event rendering).

Kinds (MOTION_KINDS), each a Scene3D of learning/simulate3d (textured planes, a Trajectory):

- 'corridor': forward at 1-2 m/s down a corridor whose far wall is 15-25 m away, yaw
  0.1-0.3 rad/s (deep scene: translational flow small against the rotational one);
- 'sideways': strafing at 0.5-1 m/s (forward 0-0.2 m/s) past boxes at 1.5-6 m in front of a
  wall at 8-11 m, roll up to 0.4 rad/s (depth edges inside the solver's cells; the
  lateral-translation / rotation ambiguity);
- 'panning': turning in place, yaw 0.6-1.2 rad/s, 0.05-0.3 m/s (rotation-dominated);
- 'approach': towards a wall at 3-6 m at 1-2.5 m/s, little rotation (time to contact);
- 'drone': looking down at textured ground 2-6 m below (boxes on it), flying at 1-3 m/s
  with some yaw and tilt, plumb_bob lens distortion;
- 'turning': accelerating forward (1-2 m/s^2) while turning at 0.6-1.0 rad/s.

Sensors alternate per sequence between 640 x 480 and 346 x 260. Splits: 'tuning' (seeds
TUNING_SEED + i) and 'heldout' (HELDOUT_SEED + i, other scenes and twists).

Flows per window (window_flows): the image is rendered at the window centre; pixels are drawn
with probability proportional to the event rate |grad L . u| (log-intensity gradient times
the exact optical flow u); each gives the exact normal flow (n . u) n with n the gradient
direction ('normal'), or the full optical flow u itself ('full': a valid generalized normal
flow, |u| = u/|u| . u). Per window the truth (mean twist), the translational / rotational
image-speed ratio (median |translational flow| over median |rotational flow| of the drawn
pixels) and the true time-to-contact grid.

Gyroscope: 1 kHz samples of omega(t) plus a constant bias of GYRO_BIAS_RAD_S per axis with a
random sign and white noise of GYRO_NOISE_RAD_S per sample.
"""

from dataclasses import dataclass
import math

import numpy as np

from veckm_flow_ros.core.camera import CameraModel
from veckm_flow_ros.learning.simulate import SensorConfig
from veckm_flow_ros.learning.simulate3d import (
    _box, _textured_plane, DISTORTION_COEFFICIENTS, FOCAL_PER_WIDTH, ROOM_TEXTURES, Scene3D)
from veckm_flow_ros.learning.world3d import motion_field, Trajectory

MOTION_KINDS = ('corridor', 'sideways', 'panning', 'approach', 'drone', 'turning')
SPLITS = ('tuning', 'heldout')
TUNING_SEED = 4_100_000
HELDOUT_SEED = 4_200_000
SENSORS = ((640, 480), (346, 260))
# Gyroscope: 0.5 deg/s constant bias per axis (random sign), 0.004 rad/s noise per sample.
GYRO_BIAS_RAD_S = math.radians(0.5)
GYRO_NOISE_RAD_S = 0.004
GYRO_RATE_HZ = 1000.0
# Pixels whose log-intensity gradient is below this [1/px] make no events.
MIN_GRADIENT = 0.02


def _unit(vector):
    vector = np.asarray(vector, np.float64)
    return vector / np.linalg.norm(vector)


def _room(rng, focal, half_width, front, back, height, camera_height, boxes):
    """Ground, four walls and boxes (list of (x, z, size (3,))) as textured planes."""
    ex, ey, ez = np.eye(3)
    top = camera_height - height
    planes = [
        _textured_plane(rng, [-half_width, camera_height, -back], ex, ez,
                        (2 * half_width, front + back), 4.0, focal, 'random',
                        {'name': 'ground'}, ROOM_TEXTURES),
        _textured_plane(rng, [-half_width, top, front], ex, ey, (2 * half_width, height),
                        front, focal, 'random', {'name': 'front wall'}, ROOM_TEXTURES),
        _textured_plane(rng, [-half_width, top, -back], ez, ey, (front + back, height),
                        half_width, focal, 'random', {'name': 'left wall'}, ROOM_TEXTURES),
        _textured_plane(rng, [half_width, top, -back], ez, ey, (front + back, height),
                        half_width, focal, 'random', {'name': 'right wall'}, ROOM_TEXTURES),
        _textured_plane(rng, [-half_width, top, -back], ex, ey, (2 * half_width, height),
                        back, focal, 'random', {'name': 'back wall'}, ROOM_TEXTURES),
    ]
    for number, (x, z, size) in enumerate(boxes):
        planes.extend(_box(rng, [x, camera_height, z], size, rng.uniform(0, np.pi), focal,
                           'random', number))
    return planes


def _ground_below(rng, focal, height_m, boxes):
    """Textured ground facing the camera at depth height_m (camera looks down) and boxes."""
    ex, ey, ez = np.eye(3)
    size = 40.0
    planes = [_textured_plane(rng, [-size / 2, -size / 2, height_m], ex, ey, (size, size),
                              height_m, focal, 'random', {'name': 'ground'}, ROOM_TEXTURES)]
    for number, (x, y, box) in enumerate(boxes):
        # _box stands boxes on a ground at +y: rotate the frame so that 'down' is +z.
        # (built at depth height_m so that its texels suit that distance)
        for plane in _box(rng, [x, 0.0, height_m], box, rng.uniform(0, np.pi), focal,
                          'random', number):
            swap = np.array([[1.0, 0, 0], [0, 0, 1.0], [0, 1.0, 0]])
            plane.origin_m = swap @ (plane.origin_m - [0.0, 0.0, height_m]) \
                + np.array([0.0, y, height_m])
            plane.axis_u, plane.axis_v = swap @ plane.axis_u, swap @ plane.axis_v
            plane.normal = np.cross(plane.axis_u, plane.axis_v)
            planes.append(plane)
    return planes


def make_motion_scene(kind, seed):
    """Scene3D of a motion kind (MOTION_KINDS) for a seed; sensor size alternates by seed."""
    if kind not in MOTION_KINDS:
        raise ValueError(f'unknown motion kind {kind!r}; choose one of '
                         f'{", ".join(MOTION_KINDS)}')
    rng = np.random.default_rng([seed, MOTION_KINDS.index(kind)])
    width, height = SENSORS[seed % 2]
    focal = FOCAL_PER_WIDTH * width
    distortion = 'plumb_bob' if kind == 'drone' else 'none'
    camera = CameraModel.pinhole(width, height, focal, 'plumb_bob',
                                 DISTORTION_COEFFICIENTS['plumb_bob']
                                 if distortion != 'none' else ())
    zero = np.zeros(3)
    sign = rng.choice([-1.0, 1.0])
    cam_h = rng.uniform(0.8, 1.5)
    if kind == 'corridor':
        half = rng.uniform(1.5, 2.5)
        front = rng.uniform(15.0, 25.0)
        boxes = [(sgn * (half - 0.5), rng.uniform(4.0, front - 2.0),
                  rng.uniform(0.3, 0.9, 3)) for sgn in rng.choice([-1, 1], 3)]
        planes = _room(rng, focal, half, front, 3.0, rng.uniform(2.5, 3.5), cam_h, boxes)
        v = rng.uniform(1.0, 2.0) * _unit([rng.uniform(-0.1, 0.1), rng.uniform(-0.03, 0.03),
                                           1.0])
        omega = np.array([rng.normal(0, 0.03), sign * rng.uniform(0.1, 0.3),
                          rng.normal(0, 0.03)])
        motion = Trajectory(kind, v, zero, omega, zero)
    elif kind == 'sideways':
        front = rng.uniform(8.0, 11.0)
        boxes = []
        for depth in (rng.uniform(1.5, 2.5), rng.uniform(2.8, 4.0), rng.uniform(4.5, 6.0)):
            boxes.append((rng.uniform(-0.5, 0.5) * depth, depth, rng.uniform(0.4, 1.2, 3)))
        planes = _room(rng, focal, rng.uniform(5.0, 7.0), front, 4.0, rng.uniform(3.0, 5.0),
                       cam_h, boxes)
        v = np.array([sign * rng.uniform(0.5, 1.0), rng.normal(0, 0.05), rng.uniform(0, 0.2)])
        omega = np.array([rng.normal(0, 0.05), rng.normal(0, 0.05),
                          rng.uniform(-0.4, 0.4)])
        motion = Trajectory(kind, v, zero, omega, zero)
    elif kind == 'panning':
        half = rng.uniform(3.0, 6.0)
        boxes = [(rng.uniform(-half + 1, half - 1), rng.uniform(2.0, 5.0),
                  rng.uniform(0.4, 1.2, 3)) for _ in range(3)]
        planes = _room(rng, focal, half, rng.uniform(5.0, 8.0), rng.uniform(5.0, 8.0),
                       rng.uniform(4.0, 6.0), cam_h, boxes)
        heading = rng.uniform(-np.pi, np.pi)
        v = rng.uniform(0.05, 0.3) * np.array([math.sin(heading), 0.0, math.cos(heading)])
        omega = np.array([rng.normal(0, 0.05), sign * rng.uniform(0.6, 1.2),
                          rng.normal(0, 0.05)])
        motion = Trajectory(kind, v, zero, omega, zero)
    elif kind == 'approach':
        speed = rng.uniform(1.0, 2.5)
        front = speed * rng.uniform(1.8, 3.0)
        boxes = [(rng.uniform(-1.0, 1.0), rng.uniform(0.55, 0.8) * front,
                  rng.uniform(0.2, 0.5, 3)) for _ in range(2)]
        planes = _room(rng, focal, rng.uniform(3.0, 5.0), front, 4.0, rng.uniform(3.0, 5.0),
                       cam_h, boxes)
        v = speed * _unit([rng.uniform(-0.2, 0.2), rng.uniform(-0.1, 0.1), 1.0])
        motion = Trajectory(kind, v, zero, rng.normal(0, 0.05, 3), zero)
    elif kind == 'drone':
        altitude = rng.uniform(2.0, 6.0)
        boxes = [(rng.uniform(-3, 3), rng.uniform(-3, 3), rng.uniform(0.4, 1.0) *
                  np.array([1.0, altitude * 0.3, 1.0])) for _ in range(3)]
        planes = _ground_below(rng, focal, altitude, boxes)
        heading = rng.uniform(-np.pi, np.pi)
        v = np.array([math.cos(heading), math.sin(heading), rng.uniform(-0.15, 0.15)]) \
            * rng.uniform(1.0, 3.0)
        omega = np.array([rng.normal(0, 0.1), rng.normal(0, 0.1), rng.uniform(-0.3, 0.3)])
        motion = Trajectory(kind, v, zero, omega, zero)
    else:  # turning
        half = rng.uniform(4.0, 6.0)
        boxes = [(rng.uniform(-half + 1, half - 1), rng.uniform(3.0, 8.0),
                  rng.uniform(0.4, 1.2, 3)) for _ in range(3)]
        planes = _room(rng, focal, half, rng.uniform(9.0, 12.0), rng.uniform(5.0, 8.0),
                       rng.uniform(4.0, 6.0), cam_h, boxes)
        direction = _unit([rng.uniform(-0.2, 0.2), rng.uniform(-0.05, 0.05), 1.0])
        omega = np.array([rng.normal(0, 0.03), sign * rng.uniform(0.6, 1.0),
                          rng.normal(0, 0.03)])
        motion = Trajectory(kind, rng.uniform(0.5, 1.0) * direction,
                            rng.uniform(1.0, 2.0) * direction, omega,
                            np.array([0.0, -sign * rng.uniform(0.0, 1.0), 0.0]))
    sensor = SensorConfig(threshold=0.25, threshold_sigma=0.03, refractory_s=1e-4,
                          noise_rate_hz_per_px=0.0)
    description = {'scene': 'motion', 'kind': kind, 'seed': seed, 'width': width,
                   'height': height, 'distortion': distortion,
                   'trajectory': motion.describe()}
    return Scene3D(camera, planes, motion, sensor, sky_log_intensity=rng.uniform(0.5, 1.5),
                   description=description)


def split_seeds(split, count):
    """Seeds of a split ('tuning' or 'heldout'): count consecutive seeds of its block."""
    if split not in SPLITS:
        raise ValueError(f'unknown split {split!r}; choose one of {", ".join(SPLITS)}')
    first = TUNING_SEED if split == 'tuning' else HELDOUT_SEED
    return [first + i for i in range(int(count))]


def gyro_samples(trajectory, duration_s, seed):
    """Return gyroscope samples t_s (G,), omega_rad_s (G, 3) (bias and noise) and bias (3,)."""
    rng = np.random.default_rng([seed, 7])
    t_s = np.arange(int(duration_s * GYRO_RATE_HZ) + 1) / GYRO_RATE_HZ
    _, omega = trajectory.twist(t_s)
    bias = GYRO_BIAS_RAD_S * rng.choice([-1.0, 1.0], 3)
    return t_s, omega + bias + rng.normal(0.0, GYRO_NOISE_RAD_S, omega.shape), bias


@dataclass
class MotionWindow:
    """
    One window's flows and truth.

    x_px, y_px (N,) float64 pixel positions; flow_px_s (N, 2) normal flow (or full flow);
    t0_s, t1_s window bounds; v_m_s, omega_rad_s (3,) mean twist; ratio: median translational
    over median rotational image speed; ttc_s (rows, cols) true time to contact per region
    (median Z / v_z of its flows, NaN without enough flows or v_z <= 0).
    """

    x_px: np.ndarray
    y_px: np.ndarray
    flow_px_s: np.ndarray
    t0_s: float
    t1_s: float
    v_m_s: np.ndarray
    omega_rad_s: np.ndarray
    ratio: float
    ttc_s: np.ndarray


def window_flows(scene, t0_s, t1_s, rng, count=4000, flow='normal', ttc_grid=(6, 8),
                 min_ttc_flows=10):
    """Draw `count` flows of the window [t0, t1) (module doc); returns a MotionWindow."""
    t_mid = 0.5 * (t0_s + t1_s)
    level, depth, _ = scene.render(t_mid)
    gy, gx = np.gradient(level.astype(np.float64))
    full = scene.pixel_flow(depth, t_mid).astype(np.float64)
    rate = np.abs(gx * full[..., 0] + gy * full[..., 1])
    gradient = np.hypot(gx, gy)
    rate[~(gradient >= MIN_GRADIENT) | ~np.isfinite(depth) & ~np.isinf(depth)] = 0.0
    rate = rate.reshape(-1)
    total = rate.sum()
    if not total > 0:
        pick = np.empty(0, np.int64)
    else:
        pick = rng.choice(rate.size, size=count, p=rate / total)
    y, x = np.divmod(pick, scene.width)
    u = full.reshape(-1, 2)[pick]
    if flow == 'normal':
        n = np.stack([gx.reshape(-1)[pick], gy.reshape(-1)[pick]], 1)
        n /= np.linalg.norm(n, axis=1, keepdims=True)
        u = np.sum(n * u, axis=1, keepdims=True) * n
    elif flow != 'full':
        raise ValueError(f"flow must be 'normal' or 'full', got {flow!r}")
    samples = np.linspace(t0_s, t1_s, 9)
    v_s, w_s = scene.trajectory.twist(samples)
    v, omega = v_s.mean(0), w_s.mean(0)
    # Translational and rotational image speeds of the drawn pixels (normalized units).
    rays = scene._rays[pick]
    z = depth.reshape(-1)[pick].astype(np.float64)
    inverse = np.where(np.isfinite(z), 1.0 / z, 0.0)
    tx, ty = motion_field(rays[:, 0], rays[:, 1], inverse, v, np.zeros(3))
    rx, ry = motion_field(rays[:, 0], rays[:, 1], np.zeros_like(z), np.zeros(3), omega)
    rot = np.median(np.hypot(rx, ry)) if len(pick) else np.nan
    ratio = float(np.median(np.hypot(tx, ty)) / rot) if rot > 0 else float('inf')
    rows, cols = ttc_grid
    ttc = np.full((rows, cols), np.nan)
    if v[2] > 0 and len(pick):
        region = (y * rows // scene.height) * cols + x * cols // scene.width
        for cell in range(rows * cols):
            depths = z[(region == cell) & np.isfinite(z)]
            if len(depths) >= min_ttc_flows:
                ttc.flat[cell] = np.median(depths) / v[2]
    return MotionWindow(x.astype(np.float64), y.astype(np.float64), u, t0_s, t1_s, v, omega,
                        ratio, ttc)


def motion_sequence(kind, seed, duration_s=0.6, window_s=0.03, count=4000, flow='normal'):
    """(scene, windows (list of MotionWindow), gyro (t_s, omega_rad_s, bias)) of one sequence."""
    scene = make_motion_scene(kind, seed)
    rng = np.random.default_rng([seed, 11])
    edges = np.arange(0.0, duration_s + 1e-9, window_s)
    windows = [window_flows(scene, t0, t1, rng, count, flow)
               for t0, t1 in zip(edges[:-1], edges[1:])]
    return scene, windows, gyro_samples(scene.trajectory, duration_s, seed)
