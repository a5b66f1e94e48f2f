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
Pictures of per-event flow: colour-wheel flow images, arrow overlays, side-by-side panels.

All images are BGR uint8 arrays of shape (height, width, 3), ready for cv2.imwrite, a video
writer or a `bgr8` sensor_msgs/Image. Flows are given as columns: pixel coordinates x, y
(x right, y down) and flow u_px_s, v_px_s in pixels per second along the image axes.

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

# Grey levels of the accumulated event image (arrows are drawn on it in colour).
EVENT_GREY_ON = 220
EVENT_GREY_OFF = 120
_FONT = cv2.FONT_HERSHEY_SIMPLEX


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


def _pixel_index(x, y, width: int, height: int):
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
    index, keep = _pixel_index(x, y, width, height)
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
    _check_size(width, height)
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
    image = _zoomed(image, zoom)
    if legend:
        draw_color_wheel_legend(image, max_speed_px_s)
    return image


def _zoomed(image, zoom):
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
    label = f'{_format_speed(max_speed_px_s)} px/s'
    (text_w, text_h), baseline = cv2.getTextSize(label, _FONT, font_scale, 1)
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
    cv2.putText(image, label, (text_x, text_y), _FONT, font_scale, (255, 255, 255), 1,
                cv2.LINE_AA)
    return image


def accumulate_event_image(x, y, p, width: int, height: int) -> np.ndarray:
    """
    Grey picture of events: uint8 (height, width, 3) BGR, black background.

    x, y: pixel coordinates (N,); p: polarity (N,) (1 = ON, 0 = OFF). A pixel shows the
    polarity of its majority: ON light grey, OFF mid grey; pixels without events are black.
    """
    _check_size(width, height)
    index, inside = _pixel_index(x, y, width, height)
    polarity = np.asarray(p).reshape(-1)[inside].astype(np.int64)
    index = index[inside]
    size = width * height
    signed = np.bincount(index, weights=2 * polarity - 1, minlength=size)
    count = np.bincount(index, minlength=size)
    grey = np.zeros(size, np.uint8)
    grey[(count > 0) & (signed >= 0)] = EVENT_GREY_ON
    grey[(count > 0) & (signed < 0)] = EVENT_GREY_OFF
    return cv2.cvtColor(grey.reshape(height, width), cv2.COLOR_GRAY2BGR)


def draw_flow_arrows(image: np.ndarray, x, y, u_px_s, v_px_s, max_speed_px_s: float = None,
                     cell_px: int = 16, min_flows_per_cell: int = 3,
                     scale_bar: bool = True, zoom: int = 1) -> np.ndarray:
    """
    Draw subsampled flow arrows on a copy of `image` (e.g. accumulate_event_image) and return it.

    The image is cut into cell_px × cell_px cells; each cell with at least min_flows_per_cell
    flows gets one arrow from the mean position of its flows, along their mean flow, coloured
    by the colour wheel at full brightness. Length ∝ speed: an arrow of max_speed_px_s is
    cell_px long (longer flows are clipped at 1.5 cells). A scale bar of max_speed_px_s is
    drawn in the bottom-left corner. max_speed_px_s None: auto (see auto_max_speed_px_s).
    zoom: the image is the sensor picture upscaled zoom times (x, y, cell_px and the flows
    are in sensor pixels; arrows are drawn zoom times larger).
    """
    zoom = int(zoom)
    height, width = image.shape[0] // zoom, image.shape[1] // zoom
    out = image.copy()
    if max_speed_px_s is None:
        max_speed_px_s = auto_max_speed_px_s(u_px_s, v_px_s)
    xf = np.asarray(x, np.float64).reshape(-1)
    yf = np.asarray(y, np.float64).reshape(-1)
    u = np.asarray(u_px_s, np.float64).reshape(-1)
    v = np.asarray(v_px_s, np.float64).reshape(-1)
    keep = (np.isfinite(u) & np.isfinite(v) & (xf >= 0) & (xf < width) & (yf >= 0)
            & (yf < height))
    xf, yf, u, v = xf[keep], yf[keep], u[keep], v[keep]
    cells_x = (width + cell_px - 1) // cell_px
    cells_y = (height + cell_px - 1) // cell_px
    cell = (yf // cell_px).astype(np.int64) * cells_x + (xf // cell_px).astype(np.int64)
    size = cells_x * cells_y
    count = np.bincount(cell, minlength=size)
    chosen = np.flatnonzero(count >= max(min_flows_per_cell, 1))
    if chosen.size:
        n = count[chosen]
        mean = [np.bincount(cell, weights=w, minlength=size)[chosen] / n for w in (xf, yf, u, v)]
        cx, cy, cu, cv = mean
        colors = _full_brightness_colors(cu, cv)
        pixels_per_speed = zoom * cell_px / max_speed_px_s
        max_length = 1.5 * zoom * cell_px
        for i in range(chosen.size):
            dx, dy = cu[i] * pixels_per_speed, cv[i] * pixels_per_speed
            length = math.hypot(dx, dy)
            if length < 1.0:
                continue
            if length > max_length:
                dx, dy = dx * max_length / length, dy * max_length / length
            # Pixel centres: sensor pixel x covers [x, x + 1) * zoom in the picture.
            start_x, start_y = (cx[i] + 0.5) * zoom, (cy[i] + 0.5) * zoom
            start = (int(round(start_x)), int(round(start_y)))
            end = (int(round(start_x + dx)), int(round(start_y + dy)))
            cv2.arrowedLine(out, start, end, tuple(int(c) for c in colors[i]), 1, cv2.LINE_AA,
                            tipLength=0.3)
    if scale_bar:
        _draw_scale_bar(out, zoom * cell_px, max_speed_px_s)
    return out


def render_arrow_image(x, y, p, flow_x, flow_y, u_px_s, v_px_s, width: int, height: int,
                       max_speed_px_s: float = None, cell_px: int = 16,
                       zoom: int = 1) -> np.ndarray:
    """
    Accumulated image of events (x, y, p) with arrows of the flows (flow_x, flow_y, u, v).

    Returns uint8 (height*zoom, width*zoom, 3) BGR; see draw_flow_arrows.
    """
    background = _zoomed(accumulate_event_image(x, y, p, width, height), zoom)
    return draw_flow_arrows(background, flow_x, flow_y, u_px_s, v_px_s, max_speed_px_s,
                            cell_px=cell_px, zoom=zoom)


def side_by_side(panels, gap_px: int = 4) -> np.ndarray:
    """
    Join labelled images left to right: panels is a list of (label, BGR uint8 image).

    Images of different heights are padded with black at the bottom; each label is written in
    a strip above its image. Returns one BGR uint8 image.
    """
    panels = list(panels)
    if not panels:
        raise ValueError('side_by_side needs at least one (label, image) panel')
    height = max(image.shape[0] for _, image in panels)
    strip = 18
    columns = []
    for index, (label, image) in enumerate(panels):
        column = np.zeros((height + strip, image.shape[1], 3), np.uint8)
        column[strip:strip + image.shape[0]] = image
        cv2.putText(column, str(label), (3, strip - 5), _FONT, 0.45, (255, 255, 255), 1,
                    cv2.LINE_AA)
        columns.append(column)
        if index + 1 < len(panels):
            columns.append(np.full((height + strip, gap_px, 3), 80, np.uint8))
    return np.hstack(columns)


def render_comparison(x, y, u_px_s, v_px_s, gt_u_px_s, gt_v_px_s, width: int, height: int,
                      max_speed_px_s: float = None, dot_radius_px: int = 0, zoom: int = 1,
                      events=None) -> np.ndarray:
    """
    Side-by-side colour-wheel images: predicted normal flow | ground-truth optical flow.

    Both use the same colour scale (auto from the ground truth when max_speed_px_s is None).
    Remember that a correct *normal* flow is the projection of the optical flow on the image
    gradient: its colour may differ in hue by up to 90° and be darker than the ground truth.
    dot_radius_px, zoom: as in render_flow_image. events: optional (x, y, p) arrays of the
    events of the same time span; their accumulated image with arrows of the predicted flow
    is then added as the first panel.
    """
    if max_speed_px_s is None:
        max_speed_px_s = auto_max_speed_px_s(gt_u_px_s, gt_v_px_s)
    panels = []
    if events is not None:
        event_x, event_y, event_p = events
        panels.append(('events + predicted arrows', render_arrow_image(
            event_x, event_y, event_p, x, y, u_px_s, v_px_s, width, height, max_speed_px_s,
            zoom=zoom)))
    for label, u, v in (('predicted normal flow', u_px_s, v_px_s),
                        ('ground-truth optical flow', gt_u_px_s, gt_v_px_s)):
        panels.append((label, render_flow_image(x, y, u, v, width, height, max_speed_px_s,
                                                dot_radius_px=dot_radius_px, zoom=zoom)))
    return side_by_side(panels)


def _full_brightness_colors(u_px_s, v_px_s):
    """Colour-wheel hue of each flow at full brightness (for arrows)."""
    speed = np.hypot(u_px_s, v_px_s)
    scale = np.where(speed > 0, 1.0 / np.maximum(speed, 1e-300), 0.0)
    return flow_colors(u_px_s * scale, v_px_s * scale, 1.0)


def _draw_scale_bar(image, length_px: int, speed_px_s: float):
    height, width = image.shape[:2]
    label = f'{_format_speed(speed_px_s)} px/s'
    (text_w, text_h), baseline = cv2.getTextSize(label, _FONT, 0.4, 1)
    box_w, box_h = length_px + text_w + 14, text_h + baseline + 8
    if box_w > width or box_h > height:
        return
    top = height - box_h
    image[top:, :box_w] = (40, 40, 40)
    y = height - box_h // 2
    cv2.arrowedLine(image, (4, y), (4 + length_px, y), (255, 255, 255), 1, cv2.LINE_AA,
                    tipLength=0.3)
    cv2.putText(image, label, (length_px + 10, height - baseline - 4), _FONT, 0.4,
                (255, 255, 255), 1, cv2.LINE_AA)


def _format_speed(speed_px_s: float) -> str:
    return f'{speed_px_s:g}' if speed_px_s < 1e5 else f'{speed_px_s:.3g}'


def _check_size(width, height):
    if int(width) <= 0 or int(height) <= 0:
        raise ValueError(f'image size must be positive, got {width}x{height}')
