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
3D event-camera simulator: a camera with known twist in a room of textured planes.

The world is a room (ground, four walls) with boxes standing on the ground, all built from
textured rectangles (textures from simulate.make_texture, mapped in metres). The world frame is
the camera's optical frame at t = 0 (x right, y down, z forward). The camera moves with a body
twist that is linear in time,

    v(t) = v0 + a t [m/s],   omega(t) = omega0 + alpha t [rad/s]   (camera frame),

which covers the trajectories 'constant', 'accelerating', 'turning' and 'approach' (towards a
wall). Its pose (R camera -> world, p position) integrates dR/dt = R [omega]x, dp/dt = R v with
exponential steps of the mid-step twist (1e-4 s grid; error far below a micro-pixel).

Rendering: the ray of every pixel centre (CameraModel.normalize, with distortion) is cast into
the world at small time steps (per-pixel motion below SensorConfig.max_step_px); the nearest
hit gives depth Z and texture coordinates, the texture is sampled from a mip pyramid at the
pixel's footprint (trilinear), so distant or grazing surfaces are blurred instead of aliased.
Rays that hit nothing see a uniform sky (infinite depth). Events come from the 2D simulator's
sensor model (simulate.PixelState: per-pixel thresholds, refractory period, background noise,
timestamp rounding).

Ground truth per event, exact and independent of the rendering: the ray of the event's pixel
is cast again at the event's time, giving the depth Z of the nearest surface there, and the
optical flow is the motion field of a static point,

    (dx/dt, dy/dt) = (1/Z) [[-1, 0, x], [0, -1, y]] v + [[x y, -(1 + x^2), y],
                                                        [1 + y^2, -x y, -x]] omega,

mapped to pixels with CameraModel.velocity_to_pixels (1/Z = 0 for the sky). Events whose pixel
touches a depth discontinuity (a neighbouring pixel on another surface more than 3 % nearer or
farther, or a change of surface during the render step) are kept and marked `at_occlusion`:
their ground truth is that of the surface at the pixel centre, while the event may have been
caused by the occluding contour. Per sequence: the twist at 1 kHz, the FOE
(project(v_x / v_z, v_y / v_z)) and the time to contact Z / v_z of every event.

Gyroscope: samples of omega(t) in the camera frame (the IMU is taken as aligned with the
camera) plus a constant bias per axis (normal, GyroConfig.bias_sigma_rad_s) and white noise of
GyroConfig.noise_density_rad_s_sqrt_hz (per sample sigma = density * sqrt(rate)).
"""

from dataclasses import asdict, dataclass
import json
import math
from typing import Optional

import numpy as np

from veckm_flow_ros.core.camera import CameraModel
from veckm_flow_ros.eventio.events import EventArray
from veckm_flow_ros.learning import simulate
# The scene and its constants live in learning/scene3d.py; imported here for this module and
# for the callers that take them from the simulator.
from veckm_flow_ros.learning.scene3d import (  # noqa: F401
    BOX_TEXTURES, DISTORTION_COEFFICIENTS, DISTORTIONS, FOCAL_PER_WIDTH, GyroConfig,
    HELDOUT_3D_SEED, HELDOUT_3D_SUBSET_SEED, MAX_FOOTPRINT_STRETCH, MAX_TEXTURE_PX,
    OCCLUSION_DEPTH_RATIO, OPTICS_SIGMA_PX, ROOM_TEXTURES, Scene3D, SUPERSAMPLING, TRAJECTORIES)
from veckm_flow_ros.learning.simulate import PixelState, SensorConfig, SimulatedSequence
from veckm_flow_ros.learning.world3d import (  # noqa: F401 - intersect, motion_field: API
    foe_px, intersect, motion_field, Plane, Trajectory)


def _unit(vector):
    vector = np.asarray(vector, np.float64)
    return vector / np.linalg.norm(vector)


def _make_trajectory(kind, rng):
    """Random twist of a trajectory kind; returns (Trajectory, approach wall distance or None)."""
    zero = np.zeros(3)
    if kind == 'constant':
        direction = _unit([rng.uniform(-0.6, 0.6), rng.uniform(-0.15, 0.15), 1.0])
        omega = rng.uniform(0.2, 0.6) * _unit(rng.normal(0.0, 1.0, 3))
        return Trajectory(kind, rng.uniform(1.2, 2.5) * direction, zero, omega, zero), None
    if kind == 'accelerating':
        direction = _unit([rng.uniform(-0.3, 0.3), rng.uniform(-0.1, 0.1), 1.0])
        accel = rng.uniform(3.0, 6.0) * direction + rng.normal(0.0, 0.5, 3)
        # Mostly yaw: a pitching camera would soon look at the sky above the walls.
        omega = rng.uniform(0.2, 0.4) * _unit(rng.normal(0.0, [0.3, 1.0, 0.3]))
        angular_accel = rng.normal(0.0, [0.2, 0.6, 0.2])
        return Trajectory(kind, rng.uniform(0.4, 0.8) * direction, accel, omega,
                          angular_accel), None
    if kind == 'turning':
        omega = np.array([rng.normal(0.0, 0.1), rng.choice([-1, 1]) * rng.uniform(1.5, 3.0),
                          rng.normal(0.0, 0.1)])
        direction = _unit([rng.uniform(-0.2, 0.2), rng.uniform(-0.05, 0.05), 1.0])
        return Trajectory(kind, rng.uniform(0.5, 1.5) * direction, zero, omega, zero), None
    if kind == 'approach':
        speed_z = rng.uniform(1.5, 3.0)
        # FOE inside the central part of the image.
        v = speed_z * np.array([rng.uniform(-0.25, 0.25), rng.uniform(-0.15, 0.15), 1.0])
        ttc_s = rng.uniform(1.0, 3.0)
        return Trajectory(kind, v, zero, rng.normal(0.0, 0.08, 3), zero), ttc_s * speed_z
    raise ValueError(f'unknown trajectory {kind!r}; choose one of {", ".join(TRAJECTORIES)}')


def _texel_m(depth_m, focal_px):
    """Texel size [m] that makes texture detail a few pixels at a typical depth."""
    return 0.6 * depth_m / focal_px


def _textured_plane(rng, origin, axis_u, axis_v, size_m, depth_m, focal_px, texture,
                    description, choices=BOX_TEXTURES):
    texel = _texel_m(depth_m, focal_px)
    raster = int(np.clip(2 ** math.ceil(math.log2(max(max(size_m) / texel, 1.0))), 64,
                         MAX_TEXTURE_PX))
    # The raster covers the whole plane (large planes get coarser texels).
    texel = max(texel, max(size_m) / (raster - 1))
    kind = str(rng.choice(choices)) if texture == 'random' else texture
    log_texture = rng.uniform(0.4, 1.2) * simulate.make_texture(kind, raster, rng) \
        + rng.uniform(-1.0, 1.0)
    return Plane.textured(origin, axis_u, axis_v, size_m, texel, log_texture,
                          dict(description, texture=kind, texel_m=texel))


def make_scene3d(trajectory='constant', seed=0, width=346, height=260, distortion='none',
                 noise_hz=1.0, texture='random', sensor=None, gyro=None):
    """
    Build a room with boxes and a camera trajectory.

    trajectory: one of TRAJECTORIES; distortion: one of DISTORTIONS; noise_hz: background
    activity [Hz/px]; texture: one of simulate.TEXTURES or 'random' (per plane); sensor,
    gyro: SensorConfig / GyroConfig (defaults: threshold 0.25, 1e-4 s refractory, noise_hz).
    """
    if trajectory not in TRAJECTORIES:
        raise ValueError(f'unknown trajectory {trajectory!r}; choose one of '
                         f'{", ".join(TRAJECTORIES)}')
    if distortion not in DISTORTIONS:
        raise ValueError(f'unknown distortion {distortion!r}; choose one of '
                         f'{", ".join(DISTORTIONS)}')
    if texture != 'random' and texture not in simulate.TEXTURES:
        raise ValueError(f'unknown texture {texture!r}; choose one of random, '
                         f'{", ".join(simulate.TEXTURES)}')
    if not (noise_hz >= 0 and math.isfinite(noise_hz)):
        raise ValueError(f'noise rate must be >= 0 Hz/px, got {noise_hz}')
    rng = np.random.default_rng(seed)
    focal = FOCAL_PER_WIDTH * width
    if distortion == 'none':
        camera = CameraModel.pinhole(width, height, focal)
    else:
        camera = CameraModel.pinhole(width, height, focal, distortion,
                                     DISTORTION_COEFFICIENTS[distortion])
    motion, wall_m = _make_trajectory(trajectory, rng)

    camera_height = rng.uniform(0.8, 1.6)  # ground at y = +camera_height (y points down)
    half_width = rng.uniform(3.0, 6.0)
    front = wall_m if wall_m is not None else rng.uniform(7.0, 12.0)
    back = rng.uniform(4.0, 8.0)
    wall_height = rng.uniform(3.0, 6.0)
    top = camera_height - wall_height
    ex, ey, ez = np.eye(3)
    planes = [
        _textured_plane(rng, [-half_width, camera_height, -back], ex, ez,
                        (2 * half_width, front + back), 4.0, focal, texture, {'name': 'ground'},
                        ROOM_TEXTURES),
        _textured_plane(rng, [-half_width, top, front], ex, ey, (2 * half_width, wall_height),
                        front, focal, texture, {'name': 'front wall'},
                        ROOM_TEXTURES),
        _textured_plane(rng, [-half_width, top, -back], ez, ey, (front + back, wall_height),
                        half_width, focal, texture, {'name': 'left wall'},
                        ROOM_TEXTURES),
        _textured_plane(rng, [half_width, top, -back], ez, ey, (front + back, wall_height),
                        half_width, focal, texture, {'name': 'right wall'},
                        ROOM_TEXTURES),
        _textured_plane(rng, [-half_width, top, -back], ex, ey, (2 * half_width, wall_height),
                        back, focal, texture, {'name': 'back wall'},
                        ROOM_TEXTURES),
    ]
    near = 0.6 * front if wall_m is not None else 2.5
    # Smaller boxes in front of a near wall (approach), so that some fit between camera and wall.
    box_scale = min(1.0, (front - near) / 3.0)
    for box in range(int(rng.integers(3, 6))):
        size = rng.uniform(0.3, 1.5, 3) * box_scale
        radius = 0.5 * math.hypot(size[0], size[2])
        position = rng.uniform(0.0, 1.0, 2)
        if near + radius > front - radius - 0.05:
            continue  # no room for this box in front of the wall
        centre_z = near + radius + position[0] * (front - near - 2 * radius - 0.05)
        centre_x = (half_width - radius) * (2 * position[1] - 1)
        planes.extend(_box(rng, [centre_x, camera_height, centre_z], size, rng.uniform(0, np.pi),
                           focal, texture, box))
    sensor = sensor or SensorConfig(threshold=0.25, threshold_sigma=0.03, refractory_s=1e-4,
                                    noise_rate_hz_per_px=noise_hz)
    gyro = gyro or GyroConfig()
    description = {'scene': '3d', 'trajectory': motion.describe(), 'seed': seed,
                   'distortion': distortion, 'texture': texture, 'sensor': asdict(sensor),
                   'gyro': asdict(gyro), 'optics_sigma_px': OPTICS_SIGMA_PX,
                   'supersampling': SUPERSAMPLING,
                   'camera_height_m': camera_height,
                   'room_m': {'half_width': half_width, 'front': front, 'back': back,
                              'height': wall_height},
                   'planes': [plane.description for plane in planes]}
    return Scene3D(camera, planes, motion, sensor, gyro, rng.uniform(0.5, 1.5), description)


def _box(rng, base_centre, size, yaw, focal, texture, number):
    """Four sides and the top of a box standing on the ground (base_centre: bottom centre)."""
    c, s = math.cos(yaw), math.sin(yaw)
    along_x = np.array([c, 0.0, -s])
    along_z = np.array([s, 0.0, c])
    down = np.array([0.0, 1.0, 0.0])
    half_x, height, half_z = 0.5 * size[0], size[1], 0.5 * size[2]
    base = np.asarray(base_centre, np.float64)
    top = base - height * down
    depth = float(base[2])
    corner = top - half_x * along_x - half_z * along_z  # top corner, min x and min z
    faces = [
        (corner, along_x, down, (size[0], height), 'side -z'),
        (corner + size[2] * along_z, along_x, down, (size[0], height), 'side +z'),
        (corner, along_z, down, (size[2], height), 'side -x'),
        (corner + size[0] * along_x, along_z, down, (size[2], height), 'side +x'),
        (corner, along_x, along_z, (size[0], size[2]), 'top'),
    ]
    return [_textured_plane(rng, origin, u, v, extent, depth, focal, texture,
                            {'name': f'box {number} {name}'})
            for origin, u, v, extent, name in faces]


# --------------------------------------------------------------------------------------------
# Events


@dataclass
class SimulatedSequence3D(SimulatedSequence):
    """
    A SimulatedSequence with the 3D ground truth.

    camera: CameraModel; depth_m (N,) float32 depth of each event's surface [m] (inf: sky,
    NaN: noise); at_occlusion (N,) bool; gt_t_s (M,), gt_v_m_s (M, 3), gt_omega_rad_s (M, 3):
    camera twist samples (camera frame); gyro_t_s (G,), gyro_rad_s (G, 3): gyroscope samples
    (camera frame, with noise and bias).
    """

    camera: Optional[CameraModel] = None
    depth_m: Optional[np.ndarray] = None
    at_occlusion: Optional[np.ndarray] = None
    gt_t_s: Optional[np.ndarray] = None
    gt_v_m_s: Optional[np.ndarray] = None
    gt_omega_rad_s: Optional[np.ndarray] = None
    gyro_t_s: Optional[np.ndarray] = None
    gyro_rad_s: Optional[np.ndarray] = None

    def __getitem__(self, index):
        return SimulatedSequence3D(
            self.events[index], self.flow_px_s[index], self.is_noise[index], self.width,
            self.height, self.description, self.camera, self.depth_m[index],
            self.at_occlusion[index], self.gt_t_s, self.gt_v_m_s, self.gt_omega_rad_s,
            self.gyro_t_s, self.gyro_rad_s)

    def twist_at(self, t_s):
        """Ground-truth (v (N, 3) [m/s], omega (N, 3) [rad/s]) interpolated at times t_s."""
        t = np.asarray(t_s, np.float64).reshape(-1)
        v = np.stack([np.interp(t, self.gt_t_s, self.gt_v_m_s[:, i]) for i in range(3)], 1)
        w = np.stack([np.interp(t, self.gt_t_s, self.gt_omega_rad_s[:, i]) for i in range(3)],
                     1)
        return v, w

    def foe_at(self, t_s):
        """Ground-truth focus of expansion [px] (N, 2) at times t_s (NaN when v_z ~ 0)."""
        return foe_px(self.camera, self.twist_at(t_s)[0])

    @property
    def ttc_s(self):
        """Time to contact Z / v_z of each event [s] (N,) float32; NaN for noise, v_z <= 0."""
        v, _ = self.twist_at(self.events.t_ns * 1e-9)
        with np.errstate(divide='ignore', invalid='ignore'):
            ttc = np.where(v[:, 2] > 0, self.depth_m / v[:, 2], np.nan)
        return ttc.astype(np.float32)


def _check_inside_room(scene, duration_s):
    """Raise ValueError when the camera would reach a wall or the ground within duration_s."""
    room = scene.description.get('room_m')
    if not room:
        return
    t_s = np.linspace(0.0, duration_s, int(math.ceil(duration_s * 1000)) + 1)
    _, position = scene.trajectory.pose(t_s)  # also integrates the pose grid once
    margin = 0.05
    outside = (np.abs(position[:, 0]) > room['half_width'] - margin) \
        | (position[:, 2] > room['front'] - margin) | (position[:, 2] < margin - room['back']) \
        | (position[:, 1] > scene.description['camera_height_m'] - margin)
    if outside.any():
        t_out = t_s[np.argmax(outside)]
        raise ValueError(f'the camera reaches a wall or the ground of this scene at t = '
                         f'{t_out:.3f} s; simulate less than that (duration {duration_s} s)')


def _occlusion_mask(depth, surface):
    """Pixels (H, W) bool next to a depth discontinuity between two surfaces."""
    mask = np.zeros(depth.shape, bool)
    with np.errstate(invalid='ignore'):
        for axis in (0, 1):
            a = [slice(None), slice(None)]
            b = [slice(None), slice(None)]
            a[axis], b[axis] = slice(1, None), slice(None, -1)
            a, b = tuple(a), tuple(b)
            near = np.minimum(depth[a], depth[b])
            edge = (surface[a] != surface[b]) \
                & ~(np.abs(depth[a] - depth[b]) <= OCCLUSION_DEPTH_RATIO * near)
            mask[a] |= edge
            mask[b] |= edge
    return mask


def simulate3d(scene, duration_s=0.5, seed=0, progress=None):
    """
    Simulate `scene` for duration_s seconds; returns a SimulatedSequence3D.

    Deterministic for a given scene and seed. progress: optional callable(t_s, events) called
    about every 10 % of the duration.
    """
    if not (duration_s > 0 and math.isfinite(duration_s)):
        raise ValueError(f'duration must be positive, got {duration_s} s')
    _check_inside_room(scene, duration_s)
    rng = np.random.default_rng(seed)
    sensor = scene.sensor
    width, height = scene.width, scene.height
    level_prev, depth_prev, surface_prev = scene.render(0.0)
    pixels = PixelState.start(sensor, rng, level_prev)
    edge_prev = _occlusion_mask(depth_prev, surface_prev)
    flat_t, flat_index, flat_on, flat_edge = [], [], [], []
    t_prev = 0.0
    next_report = 0.1 * duration_s
    count = 0
    steps = 0
    while t_prev < duration_s:
        speed = scene.max_speed_px_s(depth_prev, t_prev)
        # 10 % margin: the twist changes during the step.
        step = min(sensor.max_step_s, sensor.max_step_px / max(1.1 * speed, 1e-9),
                   duration_s - t_prev)
        step = max(step, 1e-6)
        t_cur = t_prev + step
        level_cur, depth_cur, surface_cur = scene.render(t_cur)
        edge_cur = _occlusion_mask(depth_cur, surface_cur)
        events = pixels.crossings(level_prev, level_cur, t_prev, step)
        if events is not None:
            t_s, index, on = events
            with np.errstate(invalid='ignore'):
                changed = (surface_prev != surface_cur) & ~(
                    np.abs(depth_prev - depth_cur)
                    <= OCCLUSION_DEPTH_RATIO * np.minimum(depth_prev, depth_cur))
            edge = (edge_prev | edge_cur | changed).reshape(-1)[index]
            flat_t.append(t_s)
            flat_index.append(index)
            flat_on.append(on)
            flat_edge.append(edge)
            count += len(t_s)
        level_prev, depth_prev, surface_prev, edge_prev = level_cur, depth_cur, surface_cur, \
            edge_cur
        t_prev = t_cur
        steps += 1
        if progress is not None and t_prev >= next_report:
            progress(t_prev, count)
            next_report += 0.1 * duration_s

    t_s = np.concatenate(flat_t) if flat_t else np.empty(0)
    index = np.concatenate(flat_index) if flat_index else np.empty(0, np.int64)
    on = np.concatenate(flat_on) if flat_on else np.empty(0, bool)
    edge = np.concatenate(flat_edge) if flat_edge else np.empty(0, bool)
    depth = np.empty(len(t_s))
    flow = np.empty((len(t_s), 2))
    chunk = 200_000
    for start in range(0, len(t_s), chunk):
        part = slice(start, start + chunk)
        depth[part], _ = scene.cast(t_s[part], index[part])
        flow[part] = scene.event_flow(t_s[part], index[part], depth[part])
    x = (index % width).astype(np.float64)
    y = (index // width).astype(np.float64)
    t_s, x, y, on, is_noise, (flow, depth, edge) = simulate.with_background_noise(
        sensor, rng, width, height, duration_s, t_s, x, y, on, (flow, np.nan),
        (depth, np.nan), (edge, False))

    t_ns = simulate.sensor_times_ns(t_s, sensor)
    order = np.argsort(t_ns, kind='stable')
    events = EventArray(t_ns[order], x[order].astype(np.uint16), y[order].astype(np.uint16),
                        on[order].astype(np.uint8))

    # Twist ground truth and gyroscope at the gyro rate (own generator: the events do not
    # depend on the gyro settings).
    gyro = scene.gyro
    gt_t_s = np.arange(int(math.floor(duration_s * gyro.rate_hz + 1e-9)) + 1) / gyro.rate_hz
    gt_v, gt_omega = scene.trajectory.twist(gt_t_s)
    gyro_rng = np.random.default_rng([seed, 1])
    bias = gyro_rng.normal(0.0, gyro.bias_sigma_rad_s, 3)
    sigma = gyro.noise_density_rad_s_sqrt_hz * math.sqrt(gyro.rate_hz)
    rotation = np.asarray(gyro.rotation_cam_imu, np.float64).reshape(3, 3)
    omega_imu = gt_omega if np.array_equal(rotation, np.eye(3)) else gt_omega @ rotation
    gyro_rad_s = omega_imu + bias + gyro_rng.normal(0.0, sigma, gt_omega.shape)
    description = dict(scene.description, duration_s=duration_s, sim_seed=seed,
                       render_steps=steps, gyro_bias_rad_s=bias.tolist(),
                       gyro_noise_sigma_rad_s=sigma)
    return SimulatedSequence3D(
        events, flow[order].astype(np.float32), is_noise[order], width, height, description,
        scene.camera, depth[order].astype(np.float32), edge[order], gt_t_s, gt_v, gt_omega,
        gt_t_s - gyro.time_offset_s, gyro_rad_s)


def heldout_3d_specs(count, trajectories=TRAJECTORIES):
    """
    Dicts of make_scene3d arguments (trajectory, seed) for evaluation, cycling trajectories.

    All four trajectories: seeds HELDOUT_3D_SEED + i (the mixed held-out set); a subset
    (e.g. ('approach',)): seeds HELDOUT_3D_SUBSET_SEED + i, none of the mixed set's scenes.
    """
    kinds = tuple(dict.fromkeys(trajectories))  # in order, without repeats
    unknown = [kind for kind in kinds if kind not in TRAJECTORIES]
    if not kinds or unknown:
        raise ValueError(f'held-out trajectories must be some of {", ".join(TRAJECTORIES)}, '
                         f'got {", ".join(map(repr, unknown or kinds)) or "none"}')
    if set(kinds) == set(TRAJECTORIES):
        kinds, first = TRAJECTORIES, HELDOUT_3D_SEED
    else:
        first = HELDOUT_3D_SUBSET_SEED
    return [{'trajectory': kinds[i % len(kinds)], 'seed': first + i} for i in range(int(count))]


# --------------------------------------------------------------------------------------------
# Files


def save_npz3d(sequence, path):
    """Write simulate.save_npz's columns plus depth_m, at_occlusion, the twist and the camera."""
    camera = sequence.camera
    np.savez_compressed(
        path, **simulate.npz_columns(sequence), depth_m=sequence.depth_m,
        at_occlusion=sequence.at_occlusion, gt_t_s=sequence.gt_t_s, gt_v_m_s=sequence.gt_v_m_s,
        gt_omega_rad_s=sequence.gt_omega_rad_s, gyro_t_s=sequence.gyro_t_s,
        gyro_rad_s=sequence.gyro_rad_s, camera_k=camera.K.reshape(-1), camera_d=camera.D,
        camera_distortion_model=np.array(camera.distortion_model))


def load_npz3d(path):
    """Read a file written by save_npz3d; returns a SimulatedSequence3D (ValueError if not)."""
    from veckm_flow_ros.eventio.npz import read_npz
    data = read_npz(path, '3D simulated sequence')
    base = simulate.sequence_from_npz(data, path)
    missing = {'depth_m', 'gt_t_s', 'gt_v_m_s', 'gt_omega_rad_s', 'camera_k', 'camera_d',
               'camera_distortion_model'} - set(data)
    if missing:
        raise ValueError(f'{path} is not a 3D simulated sequence: missing {sorted(missing)}')
    camera = CameraModel.from_camera_info(base.width, base.height, data['camera_k'],
                                          data['camera_d'], str(data['camera_distortion_model']))
    n = len(base)
    at_occlusion = data['at_occlusion'] if 'at_occlusion' in data else np.zeros(n, bool)
    gyro_t = data['gyro_t_s'] if 'gyro_t_s' in data else np.empty(0)
    gyro = data['gyro_rad_s'] if 'gyro_rad_s' in data else np.empty((0, 3))
    return SimulatedSequence3D(
        base.events, base.flow_px_s, base.is_noise, base.width, base.height, base.description,
        camera, data['depth_m'].astype(np.float32), at_occlusion.astype(bool),
        data['gt_t_s'].astype(np.float64), data['gt_v_m_s'].astype(np.float64),
        data['gt_omega_rad_s'].astype(np.float64), gyro_t.astype(np.float64),
        gyro.astype(np.float64))


def save_gyro_npz(sequence, path):
    """Write the gyroscope samples: t (s, float64), wx, wy, wz (rad/s, camera frame)."""
    np.savez_compressed(path, t=sequence.gyro_t_s, wx=sequence.gyro_rad_s[:, 0],
                        wy=sequence.gyro_rad_s[:, 1], wz=sequence.gyro_rad_s[:, 2],
                        description=np.array(json.dumps({
                            'frame': 'IMU frame: omega_camera = rotation_cam_imu omega_imu '
                                     '(identity by default: camera optical frame, x right, y '
                                     'down, z forward); camera time = t + time_offset_s',
                            'gyro': sequence.description.get('gyro', {}),
                            'bias_rad_s': sequence.description.get('gyro_bias_rad_s')})))
