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
veckm_flow_node against a lying camera, on a real ROS 2 graph (rclpy + Fast DDS, no mocks).

A header claiming a sensor beyond max_sensor_width_px x max_sensor_height_px never sizes the
~/flow_image; a sensor clock jumping 3 h is re-synchronised, counted in /diagnostics and
never reaches the ~/flow stamps; a seq leap to 2^63 is no 2^63 lost packets.
"""

import numpy as np
import pytest

rclpy = pytest.importorskip('rclpy')
pytest.importorskip('event_camera_msgs')

from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402, I100
from scenes import moving_edges  # noqa: E402, I100
from test_node import harness_factory, model_path  # noqa: E402, F401
from veckm_flow_ros.eventio.packets import encode_packets  # noqa: E402
from veckm_flow_ros.ros import node as flow_node  # noqa: E402
from veckm_flow_ros.ros.messages import stamp_to_ns  # noqa: E402

STAMP_OFFSET_NS = 1_700_000_000_000_000_000
HOURS_3_NS = 3 * 3600 * 1_000_000_000


def _mono_packets(duration_s, t0_ns=1_000_000_000):
    events, _, _ = moving_edges(duration_s=duration_s, t0_ns=t0_ns)
    return encode_packets(events, 'mono', packet_duration_ns=1_000_000)


def _diagnostics(harness):
    received = []
    harness.probe.create_subscription(DiagnosticArray, '/diagnostics', received.append,
                                      flow_node.OUTPUT_QOS)
    return received


def _values(received):
    return {item.key: item.value for item in received[-1].status[0].values}


def test_a_huge_claimed_sensor_never_sizes_the_flow_image(harness_factory):  # noqa: F811
    harness = harness_factory(image_rate_hz=20.0, block_ms=5.0, target_stride=4)
    harness.subscribe_images()
    packets = _mono_packets(0.2)
    for k, packet in enumerate(packets):
        # From packet 100 on, every other packet claims a 4096x4096 sensor (beyond 2048).
        width, height = (4096, 4096) if k >= 100 and k % 2 else (640, 480)
        harness.publish('mono', packet.data, packet.first_t_ns + STAMP_OFFSET_NS, width=width,
                        height=height, time_base=packet.time_base)
        harness.spin_for(0.0005)
    assert harness.wait_idle()
    assert harness.spin_until(lambda: len(harness.images) >= 2, 10.0)
    assert {(image.width, image.height) for image in harness.images} == {(640, 480)}
    pipeline = harness.node.pipeline
    assert pipeline.sensor_size == (640, 480)
    assert pipeline.front_end.oversized_packets == len(range(101, len(packets), 2))
    assert pipeline.stats.totals['bad_packets'] == pipeline.front_end.oversized_packets


def test_a_clock_jump_is_resynchronised_and_counted_in_diagnostics(harness_factory):  # noqa
    harness = harness_factory(block_ms=5.0, target_stride=4, diagnostics_period_s=0.2)
    received = _diagnostics(harness)
    packets = _mono_packets(0.3)
    for k, packet in enumerate(packets):
        # Sensor time +3 h from packet 150 on, header stamps continuous; a seq leap to 2^63
        # (and back) at packet 200.
        time_base = packet.time_base + (HOURS_3_NS if k >= 150 else 0)
        seq = (1 << 63) if k == 200 else k
        harness.publish('mono', packet.data, packet.first_t_ns + STAMP_OFFSET_NS,
                        time_base=time_base, seq=seq)
        harness.spin_for(0.0005)
    assert harness.wait_idle()
    stamps = [stamp_to_ns(cloud.header.stamp) for cloud in harness.clouds]
    low = packets[0].first_t_ns + STAMP_OFFSET_NS - 500_000_000
    high = packets[-1].first_t_ns + STAMP_OFFSET_NS + 1_000_000_000
    assert stamps and all(low <= stamp <= high for stamp in stamps)
    assert max(stamps) > packets[200].first_t_ns + STAMP_OFFSET_NS  # flows after the jump
    harness.spin_until(lambda: received and 'time sync jumps (total)' in _values(received)
                       and _values(received)['time sync jumps (total)'] == '1', 5.0)
    values = _values(received)
    assert values['time sync jumps (total)'] == '1'
    assert int(values['packets lost upstream (total)']) == 0
    assert int(values['stream resets (total)']) >= 1
    assert np.isfinite(float(values['latency p99 [ms]'])) or values['latency p99 [ms]'] == 'nan'
