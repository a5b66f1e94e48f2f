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

"""Message conversions of the node (veckm_flow_ros.ros.messages): stamps and the flow image."""

import numpy as np
import pytest

from veckm_flow_ros.ros import messages


def _picture():
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (6, 7, 3), dtype=np.uint8)


def _check_image(msg, bgr, stamp_ns, frame_id):
    assert (msg.height, msg.width, msg.encoding, msg.step) == (6, 7, 'bgr8', 21)
    assert not msg.is_bigendian
    assert bytes(msg.data) == bgr.tobytes()
    assert messages.stamp_to_ns(msg.header.stamp) == stamp_ns
    assert msg.header.frame_id == frame_id


def test_stamps_round_trip():
    for t_ns in (0, 1, 999_999_999, 1_735_689_600_123_456_789):
        assert messages.stamp_to_ns(messages.stamp_from_ns(t_ns)) == t_ns
    assert messages.stamp_to_ns(messages.stamp_from_ns(-5)) == 0


def test_image_message_built_in_conversion(monkeypatch):
    monkeypatch.setattr(messages, 'CV_BRIDGE', None)
    bgr = _picture()
    msg = messages.image_message(bgr, 1_500_000_001, 'camera')
    _check_image(msg, bgr, 1_500_000_001, 'camera')
    # A view that is not contiguous is copied, not misread.
    wide = np.zeros((6, 14, 3), np.uint8)
    wide[:, ::2] = bgr
    _check_image(messages.image_message(wide[:, ::2], 7, 'c'), bgr, 7, 'c')
    with pytest.raises(ValueError, match='must be \\(H, W, 3\\)'):
        messages.image_message(np.zeros((6, 7), np.uint8), 0, 'camera')


def test_image_message_through_cv_bridge():
    pytest.importorskip('cv_bridge', reason='cv_bridge comes with a ROS install (no PyPI wheel '
                                            'for ROS 2)')
    assert messages.CV_BRIDGE is not None
    bgr = _picture()
    msg = messages.image_message(bgr, 42, 'camera')
    _check_image(msg, bgr, 42, 'camera')
    reference = messages.bgr8_image(bgr)
    assert (msg.height, msg.width, msg.step, bytes(msg.data)) == (
        reference.height, reference.width, reference.step, bytes(reference.data))
