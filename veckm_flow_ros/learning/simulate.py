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
Event-camera simulator with exact per-event ground-truth optical flow.

A scene is a stack of textured layers (a background and optional occluding objects). Each
layer moves under a linear motion field

    x(t) = c(t) + expm(L t) (x(0) - c(0)),   c(t) = c(0) + v t,
    flow(x, t) = v + L (x - c(t))   [px/s]

which covers translation (L = 0), rotation (L = w J), zoom (L = k I), general affine motion and,
per object, independent motions with occlusion. The log intensity of every pixel centre is
rendered at small time steps; events are emitted where it crosses the pixel's contrast
threshold, at the crossing time interpolated linearly between the two render steps. Each event
carries the analytic motion field of the layer that owns its pixel at that time: exact ground
truth, independent of the rendering.

Sensor effects: per-pixel ON/OFF thresholds (Gaussian spread), a refractory period (crossings
closer than it to the pixel's previous event are dropped; the reference level still advances),
and uniform background-activity noise events (marked, ground truth NaN). Timestamps are rounded
to the sensor resolution (1 us by default).

Everything is vectorised over pixels (numpy); a 346x260 scene runs at millions of events per
minute on one CPU core.

The textures are made in learning/textures.py, the sensor (thresholds, refractory period,
background activity) is learning/event_sensor.py.
"""

from dataclasses import asdict, dataclass, field
import json
import math
from typing import List, Optional

import cv2
import numpy as np

from veckm_flow_ros.eventio.events import EventArray
# Re-exported: callers build sensors and textures through this module.
from veckm_flow_ros.learning.event_sensor import (PixelState, sensor_times_ns,  # noqa: F401
                                                  SensorConfig, with_background_noise)
from veckm_flow_ros.learning.textures import (blur, coords, make_texture,  # noqa: F401
                                              TEXTURES)

MOTIONS = ('translation', 'rotation', 'zoom', 'affine', 'objects', 'spiral')

# Held-out split: the training recipe never sees these textures or motions (see train.py).
TRAIN_TEXTURES = ('noise', 'edges', 'checker', 'polygons', 'bars', 'pink')
TRAIN_MOTIONS = ('translation', 'rotation', 'zoom', 'objects')
HELDOUT_TEXTURES = ('gratings', 'blobs')
HELDOUT_MOTIONS = ('affine',)
# Added for the 'full2' recipe: fine-grained band-limited noise (many events per pixel) and
# zoom combined with rotation (a similarity motion, a special case of the held-out affine).
DENSE_TEXTURES = ('fine',)
DENSE_MOTIONS = ('spiral',)
# Typical image speed of a random scene [px/s] (log-uniform), unless make_scene is told.
SPEED_RANGE_PX_S = (30.0, 1500.0)
# Contrast of a random scene's textures [log intensity per unit texture amplitude], drawn per
# layer uniformly in this range unless make_scene is told otherwise ('fine' keeps a further
# 15..50 % of it).
CONTRAST_RANGE = (0.3, 1.5)
CONTRAST_DISTRIBUTIONS = ('uniform', 'log-uniform')
# Spread of a random scene's per-pixel thresholds [log intensity] (uniform), unless told.
THRESHOLD_SIGMA_RANGE = (0.01, 0.06)

# A layer owns a pixel (and its events) as soon as it covers any of it: the intensity of
# a pixel that an object boundary touches changes because of that boundary.
OWNER_ALPHA = 1e-3


# --------------------------------------------------------------------------------------------
# Motion


def expm2(matrix):
    """Matrix exponential of a real 2x2 matrix (closed form), float64 (2, 2)."""
    m = np.asarray(matrix, dtype=np.float64)
    half_trace = 0.5 * (m[0, 0] + m[1, 1])
    shifted = m - half_trace * np.eye(2)
    delta_sq = shifted[0, 0] ** 2 + shifted[0, 1] * shifted[1, 0]
    if delta_sq > 1e-18:
        delta = math.sqrt(delta_sq)
        c, s = math.cosh(delta), math.sinh(delta) / delta
    elif delta_sq < -1e-18:
        delta = math.sqrt(-delta_sq)
        c, s = math.cos(delta), math.sin(delta) / delta
    else:
        c, s = 1.0, 1.0
    return math.exp(half_trace) * (c * np.eye(2) + s * shifted)


@dataclass
class Motion:
    """
    Linear motion field of one layer.

    velocity_px_s: (2,) translation of the centre [px/s]; gradient_per_s: (2, 2) velocity
    gradient L [1/s]; centre_px: (2,) position of the centre at t = 0 [px].
    """

    velocity_px_s: np.ndarray
    gradient_per_s: np.ndarray
    centre_px: np.ndarray

    def __post_init__(self):
        self.velocity_px_s = np.asarray(self.velocity_px_s, dtype=np.float64).reshape(2)
        self.gradient_per_s = np.asarray(self.gradient_per_s, dtype=np.float64).reshape(2, 2)
        self.centre_px = np.asarray(self.centre_px, dtype=np.float64).reshape(2)

    def centre_at(self, t_s):
        return self.centre_px + self.velocity_px_s * t_s

    def flow_px_s(self, x, y, t_s):
        """Analytic optical flow (u, v) [px/s] at image points x, y [px] and times t_s [s]."""
        cx = self.centre_px[0] + self.velocity_px_s[0] * np.asarray(t_s, dtype=np.float64)
        cy = self.centre_px[1] + self.velocity_px_s[1] * np.asarray(t_s, dtype=np.float64)
        dx = np.asarray(x, dtype=np.float64) - cx
        dy = np.asarray(y, dtype=np.float64) - cy
        g = self.gradient_per_s
        return (self.velocity_px_s[0] + g[0, 0] * dx + g[0, 1] * dy,
                self.velocity_px_s[1] + g[1, 0] * dx + g[1, 1] * dy)

    def to_reference(self, t_s):
        """Affine map image(t) -> image(0): returns (A (2, 2), b (2,)) with x0 = A x + b."""
        inverse = expm2(-self.gradient_per_s * t_s)
        return inverse, self.centre_px - inverse @ self.centre_at(t_s)

    def max_speed_px_s(self, width, height, t_s):
        """Upper bound of |flow| over the image at time t_s [px/s]."""
        corners = np.array([[0, 0], [width, 0], [0, height], [width, height]], np.float64)
        u, v = self.flow_px_s(corners[:, 0], corners[:, 1], t_s)
        return float(np.max(np.hypot(u, v)))


def _sample(raster, qx, qy, mirror):
    """
    Bilinear sample of a (H, W) float32 raster at float32 pixel coords (cv2.remap).

    Outside the raster: mirrored (mirror=True) or zero. cv2 quantises the sub-pixel position to
    1/32 px; the resulting intensity error is far below a contrast threshold.
    """
    border = cv2.BORDER_REFLECT_101 if mirror else cv2.BORDER_CONSTANT
    return cv2.remap(raster, np.ascontiguousarray(qx, np.float32),
                     np.ascontiguousarray(qy, np.float32), cv2.INTER_LINEAR,
                     borderMode=border, borderValue=0.0)


# --------------------------------------------------------------------------------------------
# Scenes


@dataclass
class Layer:
    """
    One textured layer: log intensity raster, optional alpha mask, motion.

    log_texture: (S, S) float32 log intensity; alpha: (S, S) float32 coverage in [0, 1] or None
    for an opaque background (mirrored beyond its raster); origin_px: (2,) image position at t = 0
    of raster pixel (0, 0).
    """

    log_texture: np.ndarray
    motion: Motion
    origin_px: np.ndarray
    alpha: Optional[np.ndarray] = None
    description: dict = field(default_factory=dict)

    def max_speed_px_s(self, width, height, t_s):
        """Upper bound of this layer's image speed where it is visible [px/s]."""
        if self.alpha is None:
            return self.motion.max_speed_px_s(width, height, t_s)
        # An object only extends half a raster diagonal from its centre.
        reach = 0.75 * self.alpha.shape[0]
        return float(np.linalg.norm(self.motion.velocity_px_s)
                     + np.linalg.norm(self.motion.gradient_per_s, 2) * reach)


@dataclass
class Scene:
    width: int
    height: int
    layers: List[Layer]
    sensor: SensorConfig
    description: dict = field(default_factory=dict)

    def render(self, t_s, xs, ys):
        """
        Log intensity (H, W) float32 and front-most owner (H, W) int8 at time t_s.

        Layers composite front over back with their alpha; the owner of a pixel is the
        front-most layer covering it by more than OWNER_ALPHA.
        """
        image = None
        owner = np.zeros(xs.shape, np.int8)
        for index, layer in enumerate(self.layers):
            a, b = layer.motion.to_reference(t_s)
            if layer.alpha is None or image is None:
                qx = a[0, 0] * xs + a[0, 1] * ys + (b[0] - layer.origin_px[0])
                qy = a[1, 0] * xs + a[1, 1] * ys + (b[1] - layer.origin_px[1])
                image = _sample(layer.log_texture, qx, qy, mirror=layer.alpha is None)
                continue
            # Objects: only the image box that can hold the object's raster.
            box = self._object_box(layer, t_s)
            if box is None:
                continue
            sub_x, sub_y = xs[box], ys[box]
            qx = a[0, 0] * sub_x + a[0, 1] * sub_y + (b[0] - layer.origin_px[0])
            qy = a[1, 0] * sub_x + a[1, 1] * sub_y + (b[1] - layer.origin_px[1])
            value = _sample(layer.log_texture, qx, qy, mirror=False)
            alpha = _sample(layer.alpha, qx, qy, mirror=False)
            image[box] += alpha * (value - image[box])
            owner[box][alpha > OWNER_ALPHA] = index
        return image.astype(np.float32), owner

    def _object_box(self, layer, t_s):
        """Slices (rows, cols) of the image that may show an object layer, or None."""
        forward = expm2(layer.motion.gradient_per_s * t_s)
        size = layer.alpha.shape[0]
        corners = np.array([[0, 0], [size, 0], [0, size], [size, size]], np.float64) \
            + layer.origin_px - layer.motion.centre_px
        image_corners = corners @ forward.T + layer.motion.centre_at(t_s)
        x0, y0 = np.floor(image_corners.min(0)).astype(int) - 1
        x1, y1 = np.ceil(image_corners.max(0)).astype(int) + 2
        x0, y0 = max(x0, 0), max(y0, 0)
        x1, y1 = min(x1, self.width), min(y1, self.height)
        if x0 >= x1 or y0 >= y1:
            return None
        return slice(y0, y1), slice(x0, x1)

    def flow_px_s(self, owner, x, y, t_s):
        """Ground-truth flow (N, 2) float64 for events at x, y, t_s owned by layer `owner`."""
        flow = np.zeros((len(x), 2))
        for index, layer in enumerate(self.layers):
            mask = owner == index
            if mask.any():
                u, v = layer.motion.flow_px_s(x[mask], y[mask], t_s[mask])
                flow[mask, 0] = u
                flow[mask, 1] = v
        return flow


def _log_uniform(rng, low, high):
    return float(math.exp(rng.uniform(math.log(low), math.log(high))))


def _random_direction(rng):
    angle = rng.uniform(0, 2 * math.pi)
    return np.array([math.cos(angle), math.sin(angle)])


def _background_motion(kind, rng, width, height, speed_px_s):
    """Motion of a full-frame layer whose typical image speed is about speed_px_s."""
    extent = 0.5 * math.hypot(width, height)
    centre = np.array([width / 2, height / 2]) + rng.uniform(-0.5, 0.5, 2) * [width, height]
    zero = np.zeros((2, 2))
    if kind == 'translation':
        return Motion(speed_px_s * _random_direction(rng), zero, centre)
    if kind == 'rotation':
        # Rotation about a point near the image: speed grows with distance from it.
        rate = speed_px_s / extent * rng.choice([-1, 1])
        return Motion(rng.uniform(-0.2, 0.2, 2) * speed_px_s,
                      [[0, -rate], [rate, 0]], centre)
    if kind == 'zoom':
        rate = speed_px_s / extent * rng.choice([-1, 1])
        return Motion(np.zeros(2), [[rate, 0], [0, rate]], centre)
    if kind == 'spiral':
        # Zoom and rotation together (a similarity): L = rate (cos a I + sin a J), a random.
        rate = speed_px_s / extent
        angle = rng.uniform(0, 2 * math.pi)
        zoom, spin = rate * math.cos(angle), rate * math.sin(angle)
        return Motion(rng.uniform(-0.2, 0.2, 2) * speed_px_s, [[zoom, -spin], [spin, zoom]],
                      centre)
    if kind == 'affine':
        gradient = rng.normal(0, 1, (2, 2))
        gradient *= 0.7 * speed_px_s / extent / np.linalg.norm(gradient, 2)
        return Motion(0.7 * speed_px_s * _random_direction(rng), gradient, centre)
    raise ValueError(f'unknown motion {kind!r}; choose one of {", ".join(MOTIONS)}')


def make_scene(motion='translation', texture='noise', seed=0, width=346, height=260,
               speed_px_s=None, sensor=None, textures=None, motions=None,
               speed_range_px_s=SPEED_RANGE_PX_S, contrast_range=CONTRAST_RANGE,
               contrast_distribution='uniform', threshold_sigma_range=THRESHOLD_SIGMA_RANGE):
    """
    Build a random scene.

    motion: one of MOTIONS or 'random'; texture: one of TEXTURES or 'random' (drawn from
    `textures`, default all); speed_px_s: typical image speed (default log-uniform in
    speed_range_px_s, 30..1500); sensor: SensorConfig (default: randomised thresholds,
    refractory and noise). Each layer's texture contrast [log intensity] is drawn from
    contrast_range, 'uniform' or 'log-uniform' (contrast_distribution); either takes one draw
    of the random stream, so the rest of the scene does not change with them; so does the
    random sensor's threshold spread, uniform in threshold_sigma_range.
    """
    low_contrast, high_contrast = contrast_range
    if not 0 < low_contrast <= high_contrast:
        raise ValueError(f'contrast_range must be 0 < low <= high, got {contrast_range}')
    if contrast_distribution not in CONTRAST_DISTRIBUTIONS:
        raise ValueError(f'unknown contrast_distribution {contrast_distribution!r}; choose '
                         f'one of {", ".join(CONTRAST_DISTRIBUTIONS)}')
    if not 0 <= threshold_sigma_range[0] <= threshold_sigma_range[1]:
        raise ValueError('threshold_sigma_range must be 0 <= low <= high, got '
                         f'{threshold_sigma_range}')
    rng = np.random.default_rng(seed)
    textures = tuple(textures or TEXTURES)
    motions = tuple(motions or MOTIONS)
    if motion == 'random':
        motion = str(rng.choice(motions))
    if speed_px_s is None:
        low, high = speed_range_px_s
        if not 0 < low <= high:
            raise ValueError(f'speed_range_px_s must be 0 < low <= high, got {speed_range_px_s}')
        speed_px_s = _log_uniform(rng, low, high)
    if sensor is None:
        sensor = SensorConfig(threshold=rng.uniform(0.15, 0.45),
                              threshold_sigma=rng.uniform(*threshold_sigma_range),
                              refractory_s=rng.uniform(0.0, 5e-4),
                              noise_rate_hz_per_px=_log_uniform(rng, 0.02, 2.0))

    def pick_texture():
        return str(rng.choice(textures)) if texture == 'random' else texture

    def contrast():
        if contrast_distribution == 'log-uniform':
            return _log_uniform(rng, low_contrast, high_contrast)
        return rng.uniform(low_contrast, high_contrast)

    size = int(2 ** math.ceil(math.log2(max(width, height) * 1.5)))
    origin = np.array([width / 2 - size / 2, height / 2 - size / 2])
    layers = []
    if motion == 'objects':
        # Slow background (static to translating) and 2-4 occluding objects on top.
        background_kind = str(rng.choice(('translation', 'rotation', 'zoom')))
        bg_speed = speed_px_s * rng.uniform(0.0, 0.5)
        bg_texture = pick_texture()
        layers.append(Layer(contrast() * make_texture(bg_texture, size, rng),
                            _background_motion(background_kind, rng, width, height, bg_speed),
                            origin, description={'texture': bg_texture,
                                                 'motion': background_kind}))
        for _ in range(rng.integers(2, 5)):
            layers.append(_make_object(rng, width, height, speed_px_s, pick_texture(),
                                       contrast()))
    else:
        name = pick_texture()
        layers.append(Layer(contrast() * make_texture(name, size, rng),
                            _background_motion(motion, rng, width, height, speed_px_s),
                            origin, description={'texture': name, 'motion': motion}))
    description = {'motion': motion, 'texture': texture, 'seed': seed,
                   'speed_px_s': speed_px_s, 'sensor': asdict(sensor),
                   'layers': [layer.description for layer in layers]}
    return Scene(width, height, layers, sensor, description)


def _make_object(rng, width, height, speed_px_s, texture, contrast):
    """Return a textured polygon or ellipse layer with its own translation and spin."""
    radius = rng.uniform(0.1, 0.3) * min(width, height)
    size = int(2 * radius + 8)
    xx, yy = coords(size)
    c = size / 2
    if rng.uniform() < 0.5:
        angles = np.sort(rng.uniform(0, 2 * math.pi, rng.integers(3, 9)))
        poly = np.stack([c + radius * np.cos(angles), c + radius * np.sin(angles)], 1)
        mask = np.zeros((size, size))
        cv2.fillPoly(mask, [np.round(poly * 16).astype(np.int32)], 1.0, shift=4)
    else:
        ratio = rng.uniform(0.4, 1.0)
        mask = (((xx - c) / radius) ** 2 + ((yy - c) / (radius * ratio)) ** 2 < 1).astype(float)
    alpha = np.clip(blur(np.pad(mask, 4), 0.5)[4:-4, 4:-4], 0, 1).astype(np.float32)
    # Objects differ from the background by an offset, so their outline is an edge too.
    values = contrast * make_texture(texture, size, rng) + rng.uniform(-1, 1)
    centre = rng.uniform(0.15, 0.85, 2) * [width, height]
    spin = rng.normal(0, 0.3) * speed_px_s / radius
    speed = speed_px_s * rng.uniform(0.5, 1.5)
    motion = Motion(speed * _random_direction(rng), [[0, -spin], [spin, 0]], centre)
    return Layer(values.astype(np.float32), motion, centre - c, alpha,
                 description={'texture': texture, 'motion': 'object'})


# --------------------------------------------------------------------------------------------
# Events


@dataclass
class SimulatedSequence:
    """
    Events with exact ground truth.

    events: EventArray (sorted by t_ns); flow_px_s: (N, 2) float32 ground-truth optical flow
    (NaN for noise events); is_noise: (N,) bool; width, height: sensor size [px].
    """

    events: EventArray
    flow_px_s: np.ndarray
    is_noise: np.ndarray
    width: int
    height: int
    description: dict = field(default_factory=dict)

    def __len__(self):
        return len(self.events)

    def __getitem__(self, index):
        return SimulatedSequence(self.events[index], self.flow_px_s[index],
                                 self.is_noise[index], self.width, self.height, self.description)


def simulate(scene, duration_s=0.5, seed=0):
    """
    Simulate `scene` for duration_s seconds; returns a SimulatedSequence.

    Deterministic for a given scene and seed.
    """
    rng = np.random.default_rng(seed)
    sensor = scene.sensor
    width, height = scene.width, scene.height
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    level_prev, owner_prev = scene.render(0.0, xs, ys)
    pixels = PixelState.start(sensor, rng, level_prev)
    flat_t, flat_index, flat_on, flat_owner = [], [], [], []
    t_prev = 0.0
    while t_prev < duration_s:
        speed = max(layer.max_speed_px_s(width, height, t_prev) for layer in scene.layers)
        step = min(sensor.max_step_s, sensor.max_step_px / max(speed, 1e-9), duration_s - t_prev)
        step = max(step, 1e-6)
        t_cur = t_prev + step
        level_cur, owner_cur = scene.render(t_cur, xs, ys)
        # The front-most layer that covered the pixel during the step owns its events, so
        # events at an occluding boundary move with the occluder.
        owner = np.maximum(owner_prev, owner_cur)
        events = pixels.crossings(level_prev, level_cur, t_prev, step)
        if events is not None:
            t_s, index, on = events
            flat_t.append(t_s)
            flat_index.append(index)
            flat_on.append(on)
            flat_owner.append(owner.reshape(-1)[index])
        level_prev, owner_prev, t_prev = level_cur, owner_cur, t_cur

    t_s = np.concatenate(flat_t) if flat_t else np.empty(0)
    index = np.concatenate(flat_index) if flat_index else np.empty(0, np.int64)
    on = np.concatenate(flat_on) if flat_on else np.empty(0, bool)
    owner = np.concatenate(flat_owner) if flat_owner else np.empty(0, np.int8)
    x = (index % width).astype(np.float64)
    y = (index // width).astype(np.float64)
    flow = scene.flow_px_s(owner, x, y, t_s)
    t_s, x, y, on, is_noise, (flow,) = with_background_noise(
        sensor, rng, width, height, duration_s, t_s, x, y, on, (flow, np.nan))

    t_ns = sensor_times_ns(t_s, sensor)
    order = np.argsort(t_ns, kind='stable')
    events = EventArray(t_ns[order], x[order].astype(np.uint16), y[order].astype(np.uint16),
                        on[order].astype(np.uint8))
    return SimulatedSequence(events, flow[order].astype(np.float32), is_noise[order],
                             width, height, dict(scene.description, duration_s=duration_s,
                                                 sim_seed=seed))


def normal_flow_px_s(scene, sequence, step_s=1e-3, blur_sigma_px=1.0):
    """
    Ground-truth normal flow (N, 2) float32 [px/s]: the optical flow along the image gradient.

    The log intensity is rendered at the centre of every step_s slice of the sequence and
    smoothed by a Gaussian of blur_sigma_px; each event's ground-truth flow u is projected on
    the gradient g at its pixel in its slice: n = (g . u) g / |g|^2. NaN where u is NaN (noise)
    or the gradient vanishes.
    """
    events = sequence.events
    flow = np.full((len(events), 2), np.nan, np.float32)
    if not len(events):
        return flow
    ys, xs = np.mgrid[0:scene.height, 0:scene.width].astype(np.float32)
    step_ns = max(int(round(step_s * 1e9)), 1)
    slot = events.t_ns // step_ns  # sorted, so each slot is one run of events
    values, first = np.unique(slot, return_index=True)
    for value, lo, hi in zip(values, first, np.append(first[1:], len(slot))):
        members = np.arange(lo, hi)
        image, _ = scene.render((value + 0.5) * step_ns * 1e-9, xs, ys)
        if blur_sigma_px > 0:
            image = cv2.GaussianBlur(image, (0, 0), blur_sigma_px)
        gx = cv2.Sobel(image, cv2.CV_32F, 1, 0, ksize=3) / 8.0
        gy = cv2.Sobel(image, cv2.CV_32F, 0, 1, ksize=3) / 8.0
        px, py = events.x[members].astype(np.int64), events.y[members].astype(np.int64)
        g = np.stack([gx[py, px], gy[py, px]], 1).astype(np.float64)
        u = sequence.flow_px_s[members].astype(np.float64)
        norm_sq = np.sum(g * g, axis=1)
        with np.errstate(invalid='ignore', divide='ignore'):
            along = np.sum(g * u, axis=1) / norm_sq
        along[norm_sq < 1e-12] = np.nan
        flow[members] = along[:, None] * g
    return flow


# --------------------------------------------------------------------------------------------
# Files


def save_npz(sequence, path):
    """Write t (int64 ns), x, y (uint16), p (uint8), gt_u, gt_v (float32 px/s), is_noise..."""
    np.savez_compressed(path, **npz_columns(sequence))


def npz_columns(sequence):
    """Return the arrays save_npz writes, by name (the 3D simulator adds its own to them)."""
    return {
        't': sequence.events.t_ns, 'x': sequence.events.x, 'y': sequence.events.y,
        'p': sequence.events.p, 'gt_u': sequence.flow_px_s[:, 0],
        'gt_v': sequence.flow_px_s[:, 1], 'is_noise': sequence.is_noise,
        'width': np.int64(sequence.width), 'height': np.int64(sequence.height),
        'description': np.array(json.dumps(sequence.description, default=_json_default))}


def load_npz(path):
    """
    Read a file written by save_npz; returns a SimulatedSequence.

    Times follow eventio.npz.event_times_ns (finite, in time order: unsorted files are
    refused, as EVIMO2 directories are); a damaged file gives a ValueError naming it.
    """
    from veckm_flow_ros.eventio.npz import read_npz
    return sequence_from_npz(read_npz(path, 'simulated sequence'), path)


def sequence_from_npz(data, path):
    """Build a SimulatedSequence from the arrays of a save_npz file (see load_npz)."""
    from veckm_flow_ros.eventio.npz import event_times_ns
    missing = {'t', 'x', 'y', 'p', 'gt_u', 'gt_v', 'width', 'height'} - set(data)
    if missing:
        raise ValueError(f'{path} is not a simulated sequence: missing {sorted(missing)}')
    t_ns, _ = event_times_ns(data['t'], str(path))
    n = len(t_ns)
    is_noise = data['is_noise'] if 'is_noise' in data else np.zeros(n, bool)
    description = json.loads(str(data['description'])) if 'description' in data else {}
    return SimulatedSequence(
        EventArray(t_ns, data['x'], data['y'], data['p']),
        np.stack([data['gt_u'], data['gt_v']], 1).astype(np.float32),
        is_noise.astype(bool), int(data['width']), int(data['height']), description)


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f'cannot serialise {type(value).__name__}')
