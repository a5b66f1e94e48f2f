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
Pictures of per-event flow: arrow overlays, event images, side-by-side panels.

All images are BGR uint8 arrays of shape (height, width, 3). The colour-wheel flow images
(render_flow_image, flow_colors, the legend) live in core/flow_image.py, which the node's
~/flow_image uses too; they are re-exported here for the offline tools.
"""

import math

import cv2
import numpy as np

# Re-exported: the offline tools draw their colour-wheel images through this module.
from veckm_flow_ros.core.flow_image import (auto_max_speed_px_s, check_size,  # noqa: F401
                                            color_wheel, draw_color_wheel_legend,
                                            flow_colors, FONT, format_speed,
                                            mean_flow_per_pixel, nice_speed_px_s,
                                            pixel_index, render_flow_image, zoomed)

# Grey levels of the accumulated event image (arrows are drawn on it in colour).
EVENT_GREY_ON = 220
EVENT_GREY_OFF = 120


def accumulate_event_image(x, y, p, width: int, height: int) -> np.ndarray:
    """
    Grey picture of events: uint8 (height, width, 3) BGR, black background.

    x, y: pixel coordinates (N,); p: polarity (N,) (1 = ON, 0 = OFF). A pixel shows the
    polarity of its majority: ON light grey, OFF mid grey; pixels without events are black.
    """
    check_size(width, height)
    index, inside = pixel_index(x, y, width, height)
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
    background = zoomed(accumulate_event_image(x, y, p, width, height), zoom)
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
        cv2.putText(column, str(label), (3, strip - 5), FONT, 0.45, (255, 255, 255), 1,
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
    label = f'{format_speed(speed_px_s)} px/s'
    (text_w, text_h), baseline = cv2.getTextSize(label, FONT, 0.4, 1)
    box_w, box_h = length_px + text_w + 14, text_h + baseline + 8
    if box_w > width or box_h > height:
        return
    top = height - box_h
    image[top:, :box_w] = (40, 40, 40)
    y = height - box_h // 2
    cv2.arrowedLine(image, (4, y), (4 + length_px, y), (255, 255, 255), 1, cv2.LINE_AA,
                    tipLength=0.3)
    cv2.putText(image, label, (length_px + 10, height - baseline - 4), FONT, 0.4,
                (255, 255, 255), 1, cv2.LINE_AA)
