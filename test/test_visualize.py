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

"""Colour wheel, flow images, arrow overlays and panels of veckm_flow_ros.offline.visualize."""

import cv2
import numpy as np
import pytest

from veckm_flow_ros.offline import visualize


def _hue_deg(bgr):
    """Hue in degrees (0..360) of one BGR colour."""
    hsv = cv2.cvtColor(np.asarray(bgr, np.uint8).reshape(1, 1, 3), cv2.COLOR_BGR2HSV_FULL)
    return hsv[0, 0, 0] * 360.0 / 256.0


def test_direction_to_color():
    # right, up (screen: y down, so v < 0), left, down
    colors = visualize.flow_colors([100, 0, -100, 0], [0, -100, 0, 100], max_speed_px_s=100)
    right, up, left, down = (tuple(int(c) for c in color) for color in colors)
    assert right == (0, 0, 255)  # pure red in BGR
    assert left == (255, 255, 0)  # cyan, the opposite hue
    assert len({right, up, left, down}) == 4
    # hue runs counter-clockwise on screen: right 0°, up 90°, left 180°, down 270°
    for color, expected in ((right, 0), (up, 90), (left, 180), (down, 270)):
        difference = abs((_hue_deg(color) - expected + 180) % 360 - 180)
        assert difference < 4, (color, expected)


def test_brightness_grows_with_speed_and_clips():
    colors = visualize.flow_colors([0, 25, 50, 100, 400], [0, 0, 0, 0, 0], 100)
    brightness = colors.max(axis=1)
    assert brightness[0] == 0  # zero flow is black
    assert brightness[1] < brightness[2] < brightness[3]
    assert brightness[3] == brightness[4] == 255


def test_flow_colors_rejects_bad_scale():
    with pytest.raises(ValueError, match='max_speed_px_s'):
        visualize.flow_colors([1.0], [0.0], 0.0)


def test_render_flow_image_places_colors_and_black_elsewhere():
    width, height = 120, 90
    image = visualize.render_flow_image([10, 20, 30], [40, 40, 40], [50, 0, 0], [0, 50, 0],
                                        width, height, max_speed_px_s=50, legend=False)
    assert image.shape == (height, width, 3) and image.dtype == np.uint8
    assert tuple(image[40, 10]) == (0, 0, 255)  # right: red
    assert tuple(image[40, 20]) != (0, 0, 255) and image[40, 20].max() == 255  # down
    assert tuple(image[40, 30]) == (0, 0, 0)  # zero flow: black
    lit = np.argwhere(image.any(axis=2))
    assert {tuple(p) for p in lit} == {(40, 10), (40, 20)}


def test_flows_on_one_pixel_are_averaged_and_outside_ignored():
    image = visualize.render_flow_image([5, 5, -3, 500], [5, 5, 2, 2], [100, -100, 10, 10],
                                        [0, 0, 0, 0], 32, 24, max_speed_px_s=100, legend=False)
    assert not image.any()  # the two opposite flows cancel; the others are outside


def test_dot_radius_grows_flows_into_empty_pixels():
    image = visualize.render_flow_image([10, 30], [10, 10], [50, -50], [0, 0], 40, 20,
                                        max_speed_px_s=50, legend=False, dot_radius_px=2)
    lit = image.any(axis=2)
    assert lit[8:13, 8:13].all() and lit[8:13, 28:33].all()
    assert lit.sum() == 2 * 25
    assert tuple(image[12, 12]) == (0, 0, 255)  # grown pixels keep their flow's colour
    assert tuple(image[8, 28]) == (255, 255, 0)


def test_legend_present():
    width, height = 320, 240
    empty = visualize.render_flow_image([], [], [], [], width, height, max_speed_px_s=200)
    assert empty.shape == (height, width, 3)
    corner = empty[:height // 3, width * 2 // 3:]
    assert corner.any(), 'the legend should be drawn in the top-right corner'
    assert not empty[height // 2:, :width // 2].any()
    # the wheel's rim to the right of its centre is red, as for a flow to the right
    colors = corner.reshape(-1, 3).astype(int)
    assert ((colors[:, 2] > 200) & (colors[:, 1] < 40) & (colors[:, 0] < 40)).any()
    no_legend = visualize.render_flow_image([], [], [], [], width, height, 200, legend=False)
    assert not no_legend.any()


def test_color_wheel_matches_flow_colors():
    wheel = visualize.color_wheel(10, max_speed_px_s=1.0)
    assert wheel.shape == (21, 21, 3)
    assert tuple(wheel[10, 20]) == (0, 0, 255)  # right of centre: red
    assert tuple(wheel[10, 10]) == (0, 0, 0)  # centre: zero speed
    assert tuple(wheel[0, 0]) == (0, 0, 0)  # outside the disc


def test_auto_max_speed_is_a_nice_number():
    speeds = np.linspace(0, 730, 101)
    assert visualize.auto_max_speed_px_s(speeds, np.zeros_like(speeds)) == 1000
    assert visualize.nice_speed_px_s(130) == 200
    assert visualize.nice_speed_px_s(0.0) == 1.0
    assert visualize.auto_max_speed_px_s([], []) == 1.0


def test_event_image_polarity_and_arrows():
    width, height = 64, 48
    events = visualize.accumulate_event_image([1, 2, 2, 3, 3, 3], [1, 1, 1, 1, 1, 1],
                                              [1, 0, 1, 0, 0, 1], width, height)
    assert tuple(events[1, 1]) == (visualize.EVENT_GREY_ON,) * 3
    assert tuple(events[1, 2]) == (visualize.EVENT_GREY_ON,) * 3  # tie goes to ON
    assert tuple(events[1, 3]) == (visualize.EVENT_GREY_OFF,) * 3  # OFF majority
    assert not events[10:].any()
    x = np.full(20, 24.0)
    y = np.full(20, 24.0)
    with_arrows = visualize.draw_flow_arrows(events, x, y, np.full(20, 100.0), np.zeros(20),
                                             max_speed_px_s=100, cell_px=16, scale_bar=False)
    assert not np.array_equal(with_arrows, events)
    assert not with_arrows[:16].any(axis=2)[2:].any()  # nothing drawn far from the arrow
    assert (with_arrows[24, 26:38, 2] > 100).any()  # a red arrow to the right of (24, 24)
    assert not events[24, 26:38].any()  # the input image is not modified


def test_side_by_side_and_comparison():
    a = np.zeros((30, 40, 3), np.uint8)
    b = np.zeros((20, 50, 3), np.uint8)
    joined = visualize.side_by_side([('a', a), ('b', b)], gap_px=4)
    assert joined.shape[1] == 40 + 4 + 50 and joined.shape[0] > 30
    comparison = visualize.render_comparison([5], [5], [1.0], [0.0], [2.0], [0.0], 100, 80)
    assert comparison.shape[1] == 2 * 100 + 4
    with pytest.raises(ValueError):
        visualize.side_by_side([])


def test_zoom_scales_pictures_but_not_speeds():
    image = visualize.render_flow_image([10], [5], [50], [0], 40, 20, max_speed_px_s=50,
                                        legend=False, zoom=3)
    assert image.shape == (60, 120, 3)
    lit = np.argwhere(image.any(axis=2))
    assert lit.min(axis=0).tolist() == [15, 30] and lit.max(axis=0).tolist() == [17, 32]
    arrows = visualize.render_arrow_image([], [], [], np.full(5, 24.0), np.full(5, 24.0),
                                          np.full(5, 100.0), np.zeros(5), 64, 48,
                                          max_speed_px_s=100, zoom=2)
    assert arrows.shape == (96, 128, 3)
    row = arrows[49, :, 2]  # through the arrow's start at pixel centre (24.5 * 2)
    assert (row[52:80] > 100).any() and not (row[:45] > 100).any()
    with pytest.raises(ValueError, match='zoom'):
        visualize.render_flow_image([], [], [], [], 8, 8, 1.0, zoom=0)
