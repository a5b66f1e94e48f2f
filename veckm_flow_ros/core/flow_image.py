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
Colour-wheel pictures of per-event flow, shared by the node's ~/flow_image and the offline tools.

Images are BGR uint8 arrays of shape (height, width, 3), ready for cv2.imwrite, a video writer
or a `bgr8` sensor_msgs/Image. Flows are given as columns: pixel coordinates x, y (x right,
y down) and flow u_px_s, v_px_s in pixels per second along the image axes.

Colour wheel: the hue is the flow direction *as seen on screen*, measured counter-clockwise
from "to the right": right = red, up = yellow-green, left = cyan, down = violet. The brightness
is the speed, linear from black (0 px/s) to full colour at `max_speed_px_s` (faster flows are
clipped). Pixels without flow are black. A small wheel in the top-right corner is the legend,
with the maximum speed written under it.
"""

import functools
import math

import cv2
import numpy as np

FONT = cv2.FONT_HERSHEY_SIMPLEX


def nice_speed_px_s(speed_px_s: float) -> float:
    """Round a speed up to 1, 2 or 5 times a power of ten (a readable, stable scale)."""
    if not np.isfinite(speed_px_s) or speed_px_s <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(speed_px_s))
    for step in (1.0, 2.0, 5.0, 10.0):
        if speed_px_s <= step * power * (1 + 1e-9):
            return step * power
    return 10.0 * power


def auto_max_speed_px_s(u_px_s, v_px_s, percentile: float = 95.0) -> float:
    """
    Pick a colour-scale maximum for these flows: a nice number above the given percentile.

    u_px_s, v_px_s: float arrays (M,) in px/s. Non-finite values are ignored. Returns 1.0 when
    there is no finite non-zero flow.
    """
    speed = np.hypot(np.asarray(u_px_s, np.float64), np.asarray(v_px_s, np.float64))
    speed = speed[np.isfinite(speed)]
    if speed.size == 0:
        return 1.0
    return nice_speed_px_s(float(np.percentile(speed, percentile)))


def flow_colors(u_px_s, v_px_s, max_speed_px_s: float) -> np.ndarray:
    """
    Colour-wheel colours of flows: uint8 (M, 3) BGR.

    u_px_s, v_px_s: arrays (M,) in px/s (image axes, y down). Hue = direction on screen,
    brightness = min(speed / max_speed_px_s, 1). Zero and non-finite flows are black.
    """
    if not max_speed_px_s > 0:
        raise ValueError(f'max_speed_px_s must be > 0, got {max_speed_px_s}')
    u = np.asarray(u_px_s, np.float64).reshape(-1)
    v = np.asarray(v_px_s, np.float64).reshape(-1)
    if u.shape != v.shape:
        raise ValueError(f'u_px_s and v_px_s differ in length: {u.shape[0]} vs {v.shape[0]}')
    if u.size == 0:
        return np.empty((0, 3), np.uint8)
    finite = np.isfinite(u) & np.isfinite(v)
    u = np.where(finite, u, 0.0)
    v = np.where(finite, v, 0.0)
    # Screen angle: y points down in the image, so "up" is -v.
    angle_deg = np.degrees(np.arctan2(-v, u)) % 360.0
    value = np.clip(np.hypot(u, v) / max_speed_px_s, 0.0, 1.0)
    hsv = np.empty((u.size, 1, 3), np.uint8)
    hsv[:, 0, 0] = np.round(angle_deg / 2.0).astype(np.int64) % 180  # OpenCV hue: 0..179
    hsv[:, 0, 1] = 255
    hsv[:, 0, 2] = np.round(value * 255.0).astype(np.uint8)
    return cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR).reshape(-1, 3)


def pixel_index(x, y, width: int, height: int):
    """Round pixel coordinates; return (flat index, mask of those inside the image)."""
    xi = np.rint(np.asarray(x, np.float64)).astype(np.int64)
    yi = np.rint(np.asarray(y, np.float64)).astype(np.int64)
    inside = (xi >= 0) & (xi < width) & (yi >= 0) & (yi < height)
    return yi * width + xi, inside


def mean_flow_per_pixel(x, y, u_px_s, v_px_s, width: int, height: int):
    """
    Average the flows that fall on each pixel, for the pixels that have any.

    Returns (pixel, u_mean, v_mean): int64 (K,) flat pixel indices (y * width + x), sorted,
    and float64 (K,) mean flows in px/s. Flows outside the image or non-finite are ignored.
    """
    u = np.asarray(u_px_s, np.float64).reshape(-1)
    v = np.asarray(v_px_s, np.float64).reshape(-1)
    index, keep = pixel_index(x, y, width, height)
    keep &= np.isfinite(u) & np.isfinite(v)
    pixel, inverse, count = np.unique(index[keep], return_inverse=True, return_counts=True)
    u_mean = np.bincount(inverse, weights=u[keep], minlength=len(pixel)) / np.maximum(count, 1)
    v_mean = np.bincount(inverse, weights=v[keep], minlength=len(pixel)) / np.maximum(count, 1)
    return pixel, u_mean, v_mean


def render_flow_image(x, y, u_px_s, v_px_s, width: int, height: int,
                      max_speed_px_s: float = None, legend: bool = True,
                      dot_radius_px: int = 0, zoom: int = 1) -> np.ndarray:
    """
    Colour-wheel image of per-event flow: uint8 (height*zoom, width*zoom, 3) BGR.

    x, y: pixel coordinates (M,) (any numeric dtype; rounded); u_px_s, v_px_s: flow (M,) in
    px/s. Flows on the same pixel are averaged. max_speed_px_s: speed shown at full
    brightness; None picks a nice number above the 95th percentile of the speeds. Pixels
    without flow are black. legend: draw the colour wheel and the max-speed label.
    dot_radius_px: also paint the empty pixels up to this many pixels away (a square) with
    the colour of a neighbouring flow (sparse flows are easier to see; 0 = one pixel each).
    zoom: integer upscaling of the picture (pixels become zoom x zoom squares; the legend is
    drawn at the final size), for small sensors on screens.
    """
    check_size(width, height)
    if max_speed_px_s is None:
        max_speed_px_s = auto_max_speed_px_s(u_px_s, v_px_s)
    pixel, u_mean, v_mean = mean_flow_per_pixel(x, y, u_px_s, v_px_s, width, height)
    colors = flow_colors(u_mean, v_mean, max_speed_px_s)
    image = np.zeros((height, width, 3), np.uint8)
    flat = image.reshape(-1, 3)
    flat[pixel] = colors
    if dot_radius_px > 0 and len(pixel):
        # Dilate an image of flow ids (1..K, exact in float32): each empty pixel takes one
        # neighbour's flow instead of a blend of colours.
        ids = np.zeros(width * height, np.float32)
        ids[pixel] = np.arange(1, len(pixel) + 1, dtype=np.float32)
        size = 2 * int(dot_radius_px) + 1
        grown = cv2.dilate(ids.reshape(height, width), np.ones((size, size), np.uint8))
        grown = grown.reshape(-1).astype(np.int64)
        fill = (ids == 0) & (grown > 0)
        flat[fill] = colors[grown[fill] - 1]
    image = zoomed(image, zoom)
    if legend:
        draw_color_wheel_legend(image, max_speed_px_s)
    return image


def zoomed(image, zoom):
    """Return `image` enlarged by the integer `zoom` (pixels become zoom x zoom squares)."""
    zoom = int(zoom)
    if zoom < 1:
        raise ValueError(f'zoom must be an integer >= 1, got {zoom}')
    if zoom == 1:
        return image
    height, width = image.shape[:2]
    return cv2.resize(image, (width * zoom, height * zoom), interpolation=cv2.INTER_NEAREST)


@functools.lru_cache(maxsize=16)
def _cached_color_wheel(radius_px: int, max_speed_px_s: float) -> np.ndarray:
    wheel = color_wheel(radius_px, max_speed_px_s)
    wheel.setflags(write=False)
    return wheel


def color_wheel(radius_px: int, max_speed_px_s: float = 1.0) -> np.ndarray:
    """
    Draw the legend disc: uint8 (2r+1, 2r+1, 3) BGR; centre 0 px/s, rim max_speed_px_s.

    Each pixel shows the colour of a flow pointing from the centre to that pixel, so the wheel
    reads like the image (right = red, up = yellow-green, ...). Outside the disc is black.
    """
    offsets = np.arange(-radius_px, radius_px + 1, dtype=np.float64)
    dx, dy = np.meshgrid(offsets, offsets)
    scale = max_speed_px_s / max(radius_px, 1)
    wheel = flow_colors((dx * scale).ravel(), (dy * scale).ravel(), max_speed_px_s)
    wheel = wheel.reshape(dx.shape + (3,))
    wheel[np.hypot(dx, dy) > radius_px + 0.5] = 0
    return wheel


def draw_color_wheel_legend(image: np.ndarray, max_speed_px_s: float) -> np.ndarray:
    """Draw the colour wheel and a 'max N px/s' label into the top-right corner (in place)."""
    height, width = image.shape[:2]
    radius = int(np.clip(min(width, height) // 14, 8, 40))
    font_scale = 0.3 if radius < 16 else 0.4
    label = f'{format_speed(max_speed_px_s)} px/s'
    (text_w, text_h), baseline = cv2.getTextSize(label, FONT, font_scale, 1)
    margin = 3
    box_w = max(2 * radius + 1, text_w) + 2 * margin
    box_h = 2 * radius + 1 + text_h + baseline + 3 * margin
    if box_w > width or box_h > height:
        return image  # too small an image for a legend
    left, top = width - box_w, 0
    # A dark box so that the legend reads on any background, black included.
    image[top:top + box_h, left:left + box_w] = (40, 40, 40)
    wheel = _cached_color_wheel(radius, float(max_speed_px_s))
    wx = left + (box_w - wheel.shape[1]) // 2
    wy = top + margin
    inside = wheel.any(axis=2)
    region = image[wy:wy + wheel.shape[0], wx:wx + wheel.shape[1]]
    region[inside] = wheel[inside]
    text_x = left + (box_w - text_w) // 2
    text_y = wy + wheel.shape[0] + margin + text_h
    cv2.putText(image, label, (text_x, text_y), FONT, font_scale, (255, 255, 255), 1,
                cv2.LINE_AA)
    return image


def format_speed(speed_px_s: float) -> str:
    """Return a speed [px/s] as the legends write it (1500, 2.5e+05)."""
    return f'{speed_px_s:g}' if speed_px_s < 1e5 else f'{speed_px_s:.3g}'


def check_size(width, height):
    """Raise ValueError naming the size unless width and height are positive."""
    if int(width) <= 0 or int(height) <= 0:
        raise ValueError(f'image size must be positive, got {width}x{height}')
