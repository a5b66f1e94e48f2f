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
A packet sequence with known sensor-to-ROS time offsets, for the node and replay stamp tests.

Three segments of moving-edge packets (mono, 10 ms each): a first stream whose header stamps
carry an alternating 0 / 8 ms arrival jitter; a camera restart (sensor time back by 0.3 s,
stamps and seq go on); a bag loop (stamps and seq back). The true offset of each segment
(stamp minus sensor time without jitter) is known, and each event's sensor time follows from
its pixel (scenes.EDGES): so every published flow point has a known true ROS time, and the
residual of its stamp shows the time sync at work.

The oracle is the time sync's contract (event_camera_renderer): the first packet of a stream
sets the offset (jitter 0 here: exact), later packets move it by alpha = 1 % of their
deviation, so that the offset drifts by at most 0.08 ms per 8 ms jitter; a new stream sets it
afresh. An inverted blend (99 % per packet) makes the residual jump by ~8 ms between packets;
a missing reset leaves the second and third segments off by 0.3 s and 1 s.
"""

import numpy as np

from scenes import EDGES, moving_edges

PACKET_NS = 10_000_000
JITTER_NS = 8_000_000
EVENT_JITTER_NS = 1_500_000  # moving_edges fires a pixel up to 1.5 ms after the edge passes
DURATION_S = 0.3
T0_NS = 1_000_000_000
# (frame_id, first packet, packet count, true offset ROS - sensor [ns])
SEGMENTS = (('stream_a', 0, 30, 40_000_000_000),
            ('stream_b', 0, 12, 40_000_000_000 + 300_000_000),    # camera restart
            ('stream_c', 0, 12, 39_000_000_000))                  # bag loop: stamps back


def stamped_packets():
    """Return [(packet, seq, stamp_ns, frame_id)] of the three segments (mono, 10 ms)."""
    from veckm_flow_ros.eventio.packets import encode_packets
    events, _, _ = moving_edges(duration_s=DURATION_S, t0_ns=T0_NS)
    packets = encode_packets(events, 'mono', packet_duration_ns=PACKET_NS)
    sequence = []
    seq = 0
    for frame_id, first, count, offset_ns in SEGMENTS:
        if frame_id == 'stream_c':
            seq = 0  # a bag loop: seq starts again
        for index, packet in enumerate(packets[first:first + count]):
            jitter_ns = JITTER_NS * (index % 2)
            sequence.append((packet, seq, packet.first_t_ns + offset_ns + jitter_ns, frame_id))
            seq += 1
    return sequence


def edge_time_ns(x, y):
    """Sensor time [ns] at which the edge of the pixel's quadrant passes (x, y)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    index = (x >= 320).astype(int) + 2 * (y >= 240).astype(int)
    table = np.array([[cx, cy, np.cos(a), np.sin(a), s] for cx, cy, a, s in EDGES])
    cx, cy, nx, ny, speed = table[index].T
    return T0_NS + np.round(((x - cx) * nx + (y - cy) * ny) / speed * 1e9
                            + DURATION_S / 2 * 1e9)


def block_residuals_ms(clouds):
    """
    Return {frame_id: [median stamp residual per block, ms]} of (stamp_ns, frame_id, points).

    A point's ROS time is stamp + t; minus the true ROS time of its pixel's edge passing it
    (sensor time + the segment's true offset) this lies in [0, EVENT_JITTER] when the time
    sync is exact.
    """
    offsets = {frame_id: offset_ns for frame_id, _, _, offset_ns in SEGMENTS}
    residuals = {}
    for stamp_ns, frame_id, points in clouds:
        if len(points) < 50:
            continue
        true_ns = edge_time_ns(points['x'], points['y']) + offsets[frame_id]
        ros_ns = stamp_ns + np.round(points['t'].astype(np.float64) * 1e9)
        residuals.setdefault(frame_id, []).append(float(np.median(ros_ns - true_ns)) * 1e-6)
    return residuals


def check_residuals(residuals):
    """Assert what the time sync promises (see the module docstring) for each segment."""
    assert set(residuals) == {frame_id for frame_id, _, _, _ in SEGMENTS}, residuals.keys()
    for frame_id, values in residuals.items():
        values = np.array(values)
        assert len(values) >= 3, (frame_id, values)
        # Within each block's event jitter plus the drift toward the mean jitter (4 ms at
        # most); -1 ms: the median of float32 t and of the 1.5 ms event spread.
        assert np.all((values > -1.0) & (values < EVENT_JITTER_NS * 1e-6 + 4.0)), \
            (frame_id, values)
        # The offset moves by at most alpha x 8 ms = 0.08 ms per packet: no jumps.
        assert np.all(np.abs(np.diff(values)) < 1.0), (frame_id, np.round(values, 2))
        # The first blocks of a stream: the offset set exactly from the first packet.
        assert -1.0 < values[0] < EVENT_JITTER_NS * 1e-6 + 1.0, (frame_id, values)
