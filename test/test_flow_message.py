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
The compiled ~/flow reader (read_flow_message) against the Python reader it stands in for.

read_flow_message (csrc/egomotion/flow_message.cpp) against ros/cdr.py's parse,
read_flow_cloud and screen_flows.

Where it answers, its columns, stamp, frame and counts are those of the Python reader, and
the Python reader refuses none of the flows; where it does not (None), the message is one the
Python reader refuses flows of, or fails on. Random, truncated and corrupted messages.
"""

import numpy as np
import pytest

from veckm_flow_ros.eventio.flow_cloud import make_flow_points
from veckm_flow_ros.ros.cdr import parse_pointcloud2_cdr, pointcloud2_cdr
from veckm_flow_ros.stream.egomotion_input import screen_flows
from veckm_flow_ros.stream.flow_windows import FlowWindows, read_flow_cloud, read_flow_message

MAX_BEFORE_S, MAX_AFTER_S = 0.2, 0.03
SIZE = (346, 260)


def python_reader(raw, max_points, size=SIZE):
    """(stamp_ns, frame_id, columns, refused) by the Python path; ValueError when it fails."""
    cloud = parse_pointcloud2_cdr(raw)
    columns = read_flow_cloud(cloud['fields'], cloud['point_step'], cloud['data'],
                              cloud['is_bigendian'], cloud['width'], cloud['height'],
                              max_points)
    kept, refused = screen_flows(columns, MAX_BEFORE_S, MAX_AFTER_S, size)
    return cloud['stamp_ns'], cloud['frame_id'], columns, kept, refused


def random_points(rng, count, weight=None, extra=False, faults=()):
    """Return a cloud of count flows inside SIZE and the time bounds; faults: values made bad."""
    t = np.sort(rng.uniform(-0.19, 0.029, count))
    if 'unordered' in faults:
        rng.shuffle(t)
    columns = {'x': rng.uniform(-0.5, SIZE[0] - 0.51, count),
               'y': rng.uniform(-0.5, SIZE[1] - 0.51, count), 't': t,
               'u': rng.normal(0, 300, count), 'v': rng.normal(0, 300, count)}
    if weight:
        columns[weight] = rng.uniform(0, 1, count)
    if count:
        i = rng.integers(count)
        bad = {'late': ('t', 0.031), 'early': ('t', -0.25), 'nan_u': ('u', np.nan),
               'inf_v': ('v', np.inf), 'outside': ('x', SIZE[0] - 0.5),
               'negative_weight': (weight, -0.1), 'nan_weight': (weight, np.nan),
               'heavy_weight': (weight, 1.5)}
        for fault in faults:
            if fault in bad and bad[fault][0] is not None:
                name, value = bad[fault]
                columns[name][i] = value
    if weight and 'no_scores' in faults:
        columns[weight][:] = np.nan  # a flow node that writes the field without scores
    names = list(columns) + (['pad'] if extra else [])
    order = rng.permutation(len(names)) if extra else np.arange(len(names))
    dtype = np.dtype([(names[k], '<f4') for k in order])
    points = np.zeros(count, dtype)
    for name, values in columns.items():
        points[name] = values
    return points


def check_against_python(raw, max_points, size=SIZE):
    """Compare both readers on raw; return whether the compiled one answered."""
    fast = read_flow_message(raw, max_points, MAX_BEFORE_S, MAX_AFTER_S, size)
    try:
        stamp_ns, frame_id, columns, kept, refused = python_reader(raw, max_points, size)
    except ValueError:
        assert fast is None
        return False
    if fast is None:
        return False
    assert not refused
    assert fast[:2] == (stamp_ns, frame_id)
    got = fast[2]
    assert got.capped == columns.capped and len(got) == len(columns)
    for name in ('x', 'y', 't', 'u', 'v', 'weight'):
        expected, actual = getattr(columns, name), getattr(got, name)
        assert (expected is None) == (actual is None), name
        if expected is not None:
            assert actual.dtype == np.float32
            assert np.array_equal(expected.view(np.uint32), actual.view(np.uint32)), name
    assert got.in_order == bool(np.all(np.diff(columns.t) >= 0))
    assert got.screened_for == (MAX_BEFORE_S, MAX_AFTER_S, size)
    return True


@pytest.mark.parametrize('seed', range(4))
def test_the_compiled_reader_answers_as_the_python_reader(seed):
    rng = np.random.default_rng(seed)
    faults = ['late', 'early', 'nan_u', 'inf_v', 'outside', 'negative_weight', 'nan_weight',
              'heavy_weight', 'unordered', 'no_scores']
    answered = {}  # messages of the common case (True) and not, and how many
    for trial in range(120):
        count = int(rng.choice([0, 1, 2, 7, 500, 2400]))
        weight = rng.choice([None, 'validity', 'confidence'])
        chosen = tuple(rng.choice(faults, size=rng.integers(0, 2), replace=False))
        points = random_points(rng, count, weight, extra=bool(rng.integers(2)), faults=chosen)
        raw = pointcloud2_cdr(points, int(rng.integers(0, 2**60)),
                              rng.choice(['camera', '', 'κάμερα/ö']))
        max_points = int(rng.choice([0, 100, 4000])) or None
        size = SIZE if rng.integers(4) else None
        outcome = check_against_python(raw, max_points, size)
        # The common case: the flows kept after thinning are all good as they are.
        step = -(-count // max_points) if max_points and count > max_points else 1
        kept = points[::step]
        weights = np.nan_to_num(kept[weight], nan=1.0) if weight else np.zeros(len(kept))
        common = bool(np.all((kept['t'] >= np.float32(-MAX_BEFORE_S))
                             & (kept['t'] <= np.float32(MAX_AFTER_S))
                             & np.isfinite(kept['u']) & np.isfinite(kept['v'])
                             & (weights >= 0) & (weights <= 1)))
        if size is not None and len(kept):
            common = common and bool(np.all((kept['x'] >= -0.5) & (kept['x'] < SIZE[0] - 0.5)
                                            & (kept['y'] >= -0.5)
                                            & (kept['y'] < SIZE[1] - 0.5)))
        assert outcome == common, (chosen, count, weight, size, max_points)
        answered[common] = answered.get(common, 0) + 1
    assert answered[True] > 40 and answered[False] > 20, answered


def test_truncated_and_corrupted_messages_never_pass_as_something_else():
    rng = np.random.default_rng(7)
    points = random_points(rng, 40, 'validity')
    raw = pointcloud2_cdr(points, 123_456_789_012, 'camera')
    assert check_against_python(raw, None)
    for end in range(len(raw)):
        check_against_python(raw[:end], None)
    for trial in range(3000):
        corrupt = bytearray(raw)
        # Half of them in the header and the field table (before the points).
        end = len(raw) if trial % 2 else len(raw) - points.nbytes
        for index in rng.integers(0, end, rng.integers(1, 4)):
            corrupt[index] = rng.integers(256)
        check_against_python(bytes(corrupt), None)


def test_windows_are_the_same_from_either_reader():
    rng = np.random.default_rng(3)
    fast_windows, python_windows = FlowWindows(0.03, 500), FlowWindows(0.03, 500)
    fast_closed, python_closed = [], []
    for index in range(40):
        points = random_points(rng, 800, 'validity')
        points['t'] = np.sort(rng.uniform(-0.024, 0.0, 800))
        raw = pointcloud2_cdr(points, 10**12 + index * 24_000_000, 'camera')
        stamp_ns, frame_id, columns = read_flow_message(raw, None, 0.2, 0.03, SIZE)
        assert columns.screened_for is not None
        fast_closed += fast_windows.add(stamp_ns, columns, frame_id, now_s=0.0, size=SIZE)
        stamp_ns, frame_id, columns, _, _ = python_reader(raw, None)
        python_closed += python_windows.add(stamp_ns, columns, frame_id, now_s=0.0, size=SIZE)
    assert len(fast_closed) == len(python_closed) >= 25
    for fast, slow in zip(fast_closed, python_closed):
        assert (fast.t0_s, fast.t1_s, fast.stamp_ns, fast.received_flows) == (
            slow.t0_s, slow.t1_s, slow.stamp_ns, slow.received_flows)
        for name in ('x', 'y', 'u', 'v', 'weight'):
            assert np.array_equal(getattr(fast, name), getattr(slow, name))


def test_columns_screened_for_other_bounds_are_screened_again():
    points = make_flow_points([10.0, 20.0], [10.0, 400.0], [-0.01, 0.0], [5.0, 5.0],
                              [1.0, 1.0], validity=[1.0, 1.0])
    raw = pointcloud2_cdr(points, 10**12, 'camera')
    stamp_ns, frame_id, columns = read_flow_message(raw, None, 0.2, 0.03, None)
    windows = FlowWindows(0.03, 100)
    windows.add(stamp_ns, columns, frame_id, size=(346, 260))  # a calibration since: y 400
    assert windows.last_refused['flows_outside_image'][0] == 1


def test_a_bad_output_buffer_is_named():
    from veckm_flow_ros import _egomotion
    raw = pointcloud2_cdr(make_flow_points([1.0], [1.0], [0.0], [1.0], [1.0]), 0, 'c')
    with pytest.raises(ValueError, match='out must be float32 with a multiple of 6 values, '
                                         "got buffer format 'd'"):
        _egomotion.read_flow_message(raw, np.empty(12), 0, -0.2, 0.03, 0, 0)
