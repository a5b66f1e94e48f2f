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
veckm_flow_node and veckm_egomotion_node chained on a simulated 3D recording, over DDS.

    records = run_chain(context, sequence, use_imu=True)

The simulated events (learning/simulate3d.py) travel as evt3 EventPackets of 1 ms, stamped
sensor time + STAMP_OFFSET_NS as a driver would stamp them, to the flow node's ~/events; the
egomotion node takes the flow node's real ~/flow, the sequence's camera as ~/camera_info and
(use_imu) its gyroscope samples as ~/imu; a probe records every ~/twist and ~/foe. Used by
test_egomotion_node.py and scripts/plot_egomotion_heading.py (the README's picture).
"""

from dataclasses import dataclass
import time

import numpy as np

STAMP_OFFSET_NS = 1_700_000_000_000_000_000  # sensor time 0 -> this ROS time
FLOW_TOPIC = '/veckm_flow/flow'


@dataclass
class ChainRecords:
    """Per ~/twist: sensor time [s], direction (3,), omega [rad/s] (3,), foe [px] (2,)."""

    t_s: np.ndarray
    direction: np.ndarray
    omega_rad_s: np.ndarray
    foe_px: np.ndarray
    flows: int
    wall_s: float


def direction_errors_deg(sequence, records: ChainRecords) -> np.ndarray:
    """Angle between each estimated and the true translation direction [deg]."""
    velocity, _ = sequence.twist_at(records.t_s)
    truth = velocity / np.linalg.norm(velocity, axis=1, keepdims=True)
    cosine = np.sum(truth * records.direction, axis=1)
    return np.degrees(np.arccos(np.clip(cosine, -1.0, 1.0)))


def run_chain(context, sequence, use_imu=True, egomotion_parameters=None,
              flow_parameters=None, timeout_s=120.0, progress=None) -> ChainRecords:
    """Run both nodes on `sequence` (SimulatedSequence3D); return the ~/twist records."""
    from geometry_msgs.msg import PointStamped, TwistStamped
    from event_camera_msgs.msg import EventPacket
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.parameter import Parameter
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import CameraInfo, Imu
    from veckm_flow_ros.eventio.packets import encode_packets
    from veckm_flow_ros.ros import egomotion_node, node as flow_node
    from veckm_flow_ros.ros.messages import stamp_from_ns, stamp_to_ns

    def overrides(values):
        return [Parameter(name, value=value) for name, value in values.items()]
    # Every packet is computed (the probe publishes faster than real time on a busy machine).
    flow = flow_node.VecKMFlowNode(context=context, parameter_overrides=overrides(
        {'max_queue_delay_ms': 0.0, 'image_rate_hz': 0.0, **(flow_parameters or {})}))
    ego_name = egomotion_node.NODE_NAME
    ego = egomotion_node.EgomotionNode(
        context=context, cli_args=['--ros-args', '-r', f'/{ego_name}/flow:={FLOW_TOPIC}'],
        parameter_overrides=overrides({'max_queued_windows': 100, 'use_imu': use_imu,
                                       **(egomotion_parameters or {})}))
    probe = Node('egomotion_chain_probe', context=context)
    reliable = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
    events_pub = probe.create_publisher(EventPacket, f'/{flow_node.NODE_NAME}/events',
                                        flow_node.EVENTS_QOS)
    info_pub = probe.create_publisher(CameraInfo, f'/{ego_name}/camera_info', reliable)
    imu_pub = probe.create_publisher(Imu, f'/{ego_name}/imu', reliable)
    twists, foes = [], []
    probe.create_subscription(TwistStamped, f'/{ego_name}/twist', twists.append, reliable)
    probe.create_subscription(PointStamped, f'/{ego_name}/foe', foes.append, reliable)
    executor = SingleThreadedExecutor(context=context)
    for each in (flow, ego, probe):
        executor.add_node(each)

    def spin_until(predicate, seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not predicate():
            executor.spin_once(timeout_sec=0.01)
        return predicate()
    start_s = time.monotonic()
    try:
        assert spin_until(lambda: events_pub.get_subscription_count() > 0
                          and info_pub.get_subscription_count() > 0
                          and ego.count_publishers(FLOW_TOPIC) > 0
                          and probe.count_publishers(f'/{ego_name}/twist') > 0, 10.0), \
            'DDS discovery between the nodes did not complete'
        camera = sequence.camera
        info = CameraInfo(width=camera.width, height=camera.height,
                          distortion_model=camera.distortion_model)
        info.k = [float(v) for v in camera.K.reshape(-1)]
        info.d = [float(v) for v in camera.D]
        info_pub.publish(info)
        assert spin_until(lambda: ego.stream.camera is not None, 5.0), 'no ~/camera_info'
        packets = encode_packets(sequence.events, 'evt3', packet_duration_ns=1_000_000)
        gyro_t_ns = np.round(np.asarray(sequence.gyro_t_s) * 1e9).astype(np.int64)
        next_gyro = 0
        for index, packet in enumerate(packets):
            while use_imu and next_gyro < len(gyro_t_ns) and \
                    gyro_t_ns[next_gyro] <= packet.last_t_ns:
                imu = Imu()
                imu.header.stamp = stamp_from_ns(gyro_t_ns[next_gyro] + STAMP_OFFSET_NS)
                (imu.angular_velocity.x, imu.angular_velocity.y,
                 imu.angular_velocity.z) = (float(w) for w in sequence.gyro_rad_s[next_gyro])
                imu_pub.publish(imu)
                next_gyro += 1
            msg = EventPacket()
            msg.header.stamp = stamp_from_ns(packet.first_t_ns + STAMP_OFFSET_NS)
            msg.header.frame_id = 'camera_optical'
            msg.width, msg.height = sequence.width, sequence.height
            msg.encoding, msg.time_base, msg.seq = 'evt3', int(packet.time_base), index
            msg.events = packet.data
            events_pub.publish(msg)
            # Pace the input like a driver would not exceed: the node's queue holds it all.
            executor.spin_once(timeout_sec=0.0005)
            if progress and index % 100 == 0:
                progress(index, len(packets))
        totals = flow.pipeline.stats.totals

        def flow_idle():
            return (totals['packets'] >= len(packets)
                    and totals['handled_packets'] + totals['dropped_packets'] >= len(packets))
        assert spin_until(flow_idle, timeout_s), (
            f'the flow node took {totals["packets"]} of {len(packets)} packets, handled '
            f'{totals["handled_packets"]}')
        messages = [0, time.monotonic()]

        def egomotion_idle():
            count = ego.stream.counters.totals['messages']
            if count != messages[0]:
                messages[:] = [count, time.monotonic()]
            return time.monotonic() - messages[1] > 0.5 and ego.stream.drain(0.0)
        assert spin_until(egomotion_idle, timeout_s), 'the egomotion node did not finish'
        spin_until(lambda: len(twists) >= ego.stream.counters.totals['estimates'], 5.0)
        flows = totals['flows']
    finally:
        executor.shutdown()
        for each in (flow, ego, probe):
            each.destroy_node()
    t_s = np.array([(stamp_to_ns(t.header.stamp) - STAMP_OFFSET_NS) * 1e-9 for t in twists])
    direction = np.array([[t.twist.linear.x, t.twist.linear.y, t.twist.linear.z]
                          for t in twists]).reshape(-1, 3)
    omega = np.array([[t.twist.angular.x, t.twist.angular.y, t.twist.angular.z]
                      for t in twists]).reshape(-1, 3)
    foe_by_stamp = {stamp_to_ns(f.header.stamp): (f.point.x, f.point.y) for f in foes}
    foe = np.array([foe_by_stamp.get(stamp_to_ns(t.header.stamp), (np.nan, np.nan))
                    for t in twists]).reshape(-1, 2)
    return ChainRecords(t_s, direction, omega, foe, int(flows), time.monotonic() - start_s)
