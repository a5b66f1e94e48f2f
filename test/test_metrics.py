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

"""Known-answer cases of %Pos, PEE, relative PEE and coverage."""

import math

import numpy as np
import pytest

from veckm_flow_ros.core import metrics


def test_points_on_the_generalized_normal_flow_circle_have_zero_pee():
    u = np.array([[100.0, 0.0]] * 5)
    # n on the circle |n - u/2| = |u|/2: n = u/2 + |u|/2 (cos a, sin a), a != pi.
    angles = np.array([0.0, 0.5, 1.5, -2.0, 2.5])
    n = u / 2 + 50.0 * np.stack([np.cos(angles), np.sin(angles)], 1)
    result = metrics.flow_metrics(n, u)
    assert result['events'] == 5
    assert result['coverage'] == 1.0
    assert result['pos'] == 1.0
    assert result['pee_px_s'] == pytest.approx(0.0, abs=1e-9)
    assert result['rel_pee'] == pytest.approx(0.0, abs=1e-12)


def test_known_values():
    gt = np.array([[10.0, 0.0], [0.0, 20.0], [3.0, 4.0], [1.0, 1.0]])
    pred = np.array([[20.0, 0.0],    # too long: PEE = |20 - 10| = 10, rel 1
                     [0.0, -20.0],   # opposite: n.u < 0, PEE = |20 + 20| = 40, rel 2
                     [0.0, 4.0],     # PEE = |4 - 16/4| = 0 (on the circle), rel 0
                     [2.0, 0.0]])    # PEE = |2 - 2/2| = 1, rel 1/sqrt(2)
    result = metrics.flow_metrics(pred, gt)
    assert result['pos'] == pytest.approx(0.75)
    assert result['pee_px_s'] == pytest.approx((10 + 40 + 0 + 1) / 4)
    assert result['rel_pee'] == pytest.approx((1 + 2 + 0 + 1 / math.sqrt(2)) / 4)
    errors = metrics.per_event_errors(pred, gt)
    np.testing.assert_allclose(errors['pee_px_s'], [10, 40, 0, 1])
    np.testing.assert_array_equal(errors['pos'], [True, False, True, True])


def test_missing_ground_truth_and_invalid_predictions():
    gt = np.array([[10.0, 0.0], [np.nan, np.nan], [0.0, 0.0], [10.0, 0.0], [10.0, 0.0]])
    pred = np.array([[10.0, 0.0], [5.0, 0.0], [5.0, 0.0], [np.nan, np.nan], [0.0, 0.0]])
    result = metrics.flow_metrics(pred, gt)
    # Scored: rows 0, 3, 4 (ground truth present and non-zero); valid prediction: row 0.
    assert result['events'] == 3
    assert result['coverage'] == pytest.approx(1 / 3)
    assert result['pos'] == 1.0
    assert result['pee_px_s'] == 0.0


def test_mask_and_empty():
    gt = np.array([[10.0, 0.0], [10.0, 0.0]])
    pred = np.array([[10.0, 0.0], [-10.0, 0.0]])
    assert metrics.flow_metrics(pred, gt, mask=[True, False])['pos'] == 1.0
    empty = metrics.flow_metrics(np.zeros((0, 2)), np.zeros((0, 2)))
    assert empty['events'] == 0 and math.isnan(empty['pos'])


def test_accumulator_pools_events_and_keeps_rows():
    accumulator = metrics.MetricsAccumulator()
    accumulator.add('a', [[1.0, 0.0]], [[1.0, 0.0]])
    accumulator.add('b', [[-1.0, 0.0], [1.0, 0.0], [1.0, 0.0]], [[1.0, 0.0]] * 3)
    rows = accumulator.per_sequence()
    assert rows['a']['pos'] == 1.0
    assert rows['b']['pos'] == pytest.approx(2 / 3)
    assert accumulator.overall()['pos'] == pytest.approx(3 / 4)  # event-weighted
    assert accumulator.overall()['events'] == 4
    table = metrics.format_table(rows)
    assert 'a' in table and '66.67' in table


def test_shape_errors():
    with pytest.raises(ValueError, match=r'\(N, 2\)'):
        metrics.flow_metrics(np.zeros(3), np.zeros((3, 2)))
    with pytest.raises(ValueError, match='3 predictions for 2'):
        metrics.flow_metrics(np.zeros((3, 2)), np.zeros((2, 2)))
