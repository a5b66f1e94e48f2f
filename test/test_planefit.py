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

"""Plane fitting recovers the normal flow of ideal and simulated edges."""

import math

import numpy as np
import pytest

from veckm_flow_ros.core import metrics
from veckm_flow_ros.eventio.events import EventArray
from veckm_flow_ros.learning import simulate
from veckm_flow_ros.offline import planefit


def _ideal_edge(normal_angle, speed_px_s, width=40, height=30):
    """Return events of a straight edge: each pixel fires once when the edge line passes it."""
    normal = np.array([math.cos(normal_angle), math.sin(normal_angle)])
    ys, xs = np.mgrid[0:height, 0:width]
    distance = (xs - width / 2) * normal[0] + (ys - height / 2) * normal[1] + 15
    t_s = distance / speed_px_s
    keep = (t_s >= 0) & (t_s < 30 / speed_px_s)
    order = np.argsort(t_s[keep], kind='stable')
    events = EventArray((t_s[keep][order] * 1e9).astype(np.int64), xs[keep][order],
                        ys[keep][order], np.ones(keep.sum(), np.uint8))
    return events, speed_px_s * normal


@pytest.mark.parametrize('angle', [0.0, 0.7, 2.0, -2.6])
def test_ideal_edge_gives_its_normal_flow(angle):
    events, expected = _ideal_edge(angle, 200.0)
    flow = planefit.plane_fit_flow(events, 40, 30, pixel_radius=2, half_window_s=0.02)
    covered = np.isfinite(flow[:, 0])
    assert covered.mean() > 0.8
    # Rounding the pixel grid makes single fits imprecise; their average is exact.
    np.testing.assert_allclose(np.median(flow[covered], axis=0), expected, atol=10.0)
    result = metrics.flow_metrics(flow, np.tile(expected, (len(events), 1)))
    assert result['pos'] > 0.99
    assert result['rel_pee'] < 0.1


def test_simulated_translation_is_mostly_right():
    scene = simulate.make_scene('translation', 'checker', seed=4, width=96, height=72,
                                speed_px_s=300.0)
    sequence = simulate.simulate(scene, 0.06, seed=4)
    flow = planefit.plane_fit_flow(sequence.events, 96, 72)
    result = metrics.flow_metrics(flow, sequence.flow_px_s)
    assert result['coverage'] > 0.1
    assert result['pos'] > 0.9


def test_empty_sparse_and_unsorted_input():
    assert planefit.plane_fit_flow(EventArray.empty(), 10, 10).shape == (0, 2)
    lonely = EventArray(np.array([0, 10]), np.array([1, 8]), np.array([1, 8]), np.array([1, 1]))
    assert np.isnan(planefit.plane_fit_flow(lonely, 10, 10)).all()
    with pytest.raises(ValueError, match='sorted'):
        planefit.plane_fit_flow(EventArray(np.array([10, 0]), np.array([1, 1]),
                                           np.array([1, 1]), np.array([1, 1])), 10, 10)
