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

"""Sensor -> ROS time mapping (TimeSync) and sequence-gap counting (SeqGapCounter)."""

import numpy as np
import pytest

from veckm_flow_ros.eventio.events import EventArray
from veckm_flow_ros.eventio.timesync import SeqGapCounter, TimeSync

STAMP0 = 1_700_000_000_123_456_789  # a ROS stamp: float64 alone would lose ~256 ns here


def _events(t_first_ns):
    return EventArray(np.array([t_first_ns, t_first_ns + 500]), np.zeros(2), np.zeros(2),
                      np.zeros(2))


def test_first_message_sets_the_offset_exactly():
    sync = TimeSync()
    with pytest.raises(ValueError, match='no message'):
        sync.to_ros_ns(0)
    assert sync.update(STAMP0, _events(7_000_000)) is True
    assert sync.offset_ns == STAMP0 - 7_000_000
    assert sync.to_ros_ns(7_000_001) == STAMP0 + 1
    times = np.array([7_000_000, 8_000_000], np.int64)
    np.testing.assert_array_equal(sync.to_ros_ns(times), [STAMP0, STAMP0 + 1_000_000])


def test_smoothing_follows_the_renderer_rule():
    sync = TimeSync(alpha=0.01)
    sync.update(STAMP0, 0)
    # Every later message arrives 1 ms "late": the offset moves 1 % of the way each time.
    expected_ns = 0.0  # offset - STAMP0, computed in float64 where it is exact enough
    for k in range(1, 301):
        t_first = k * 1_000_000
        sync.update(STAMP0 + t_first + 1_000_000, t_first)
        expected_ns = 0.99 * expected_ns + 0.01 * 1_000_000
    assert abs((sync.offset_ns - STAMP0) - expected_ns) <= 1.0
    assert 900_000 < sync.offset_ns - STAMP0 < 1_000_000  # 1 - 0.99^300 = 95 %


def test_stamp_going_back_resets_and_empty_messages_are_ignored():
    sync = TimeSync()
    sync.update(STAMP0, 5_000)
    assert sync.update(STAMP0 + 10, EventArray.empty()) is False
    assert sync.update(STAMP0 + 10**6, 5_000 + 10**6) is False
    assert sync.update(STAMP0 - 10**9, 123) is True  # bag looped
    assert sync.offset_ns == STAMP0 - 10**9 - 123
    assert sync.resets == 1
    with pytest.raises(ValueError, match='alpha'):
        TimeSync(alpha=0)


def test_seq_gaps():
    counter = SeqGapCounter()
    assert [counter.update(seq) for seq in (5, 6, 9, 10, 10, 2, 3, 7)] == [0, 0, 2, 0, 0, 0, 0,
                                                                           3]
    assert (counter.gaps, counter.missing, counter.restarts) == (2, 5, 2)
