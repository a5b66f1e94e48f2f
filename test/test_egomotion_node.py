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
veckm_egomotion_node on a real ROS 2 graph (rclpy + Fast DDS, no mocks).

The node under test and a probe node share one executor in this process; the probe publishes
~/flow (PointCloud2 bytes exactly as veckm_flow_node serializes them), ~/camera_info and
~/imu, and receives ~/twist, ~/foe, ~/time_to_contact, ~/min_time_to_contact and
/diagnostics. Bad input (camera_info with a zero focal length or a wrong D, a flow cloud
without the expected fields, an IMU without angular velocity, no IMU at all) is counted and
the node keeps publishing. The chained test runs veckm_flow_node on a simulated 3D recording
(EventPackets over DDS) and this node on its real ~/flow, and bounds the translation
direction error of the real ~/twist messages.
"""

import math
import os
import subprocess
import sys

import numpy as np
import pytest

rclpy = pytest.importorskip('rclpy')
pytest.importorskip('geometry_msgs')

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus  # noqa: E402, I100
from geometry_msgs.msg import PointStamped, TwistStamped  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import CameraInfo, Image, Imu, PointCloud2  # noqa: E402
from std_msgs.msg import Float32  # noqa: E402

from conftest import ROS_DOMAIN_ID  # noqa: E402, I100
from node_harness import closing_factory, NodeHarness  # noqa: E402
from test_egomotion_stream import angle_deg, CAMERA, rigid_scene_flows  # noqa: E402
from veckm_flow_ros.core.camera import CameraModel  # noqa: E402
from veckm_flow_ros.eventio.flow_cloud import make_flow_points  # noqa: E402
from veckm_flow_ros.ros import egomotion_node  # noqa: E402
from veckm_flow_ros.ros.cdr import pointcloud2_cdr  # noqa: E402
from veckm_flow_ros.ros.messages import stamp_from_ns, stamp_to_ns  # noqa: E402

NODE = f'/{egomotion_node.NODE_NAME}'
T0_NS = 1_700_000_000_000_000_000
MESSAGE_S = 0.01
OPTIONAL_OUTPUTS = ('~/foe', '~/time_to_contact', '~/min_time_to_contact')
RELIABLE = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)


def camera_info(camera=CAMERA, k=None, d=None, model=None) -> CameraInfo:
    msg = CameraInfo()
    msg.width, msg.height = camera.width, camera.height
    msg.k = [float(v) for v in (camera.K.reshape(-1) if k is None else k)]
    msg.d = [float(v) for v in (camera.D if d is None else d)]
    msg.distortion_model = camera.distortion_model if model is None else model
    return msg


class Harness(NodeHarness):
    """The egomotion node plus a probe (publisher of its inputs, subscriber of its outputs)."""

    def __init__(self, context, **parameters):
        super().__init__(context, egomotion_node.EgomotionNode, 'egomotion_probe', parameters)
        self.flow_pub = self.probe.create_publisher(PointCloud2, f'{NODE}/flow', RELIABLE)
        self.camera_info_pub = self.probe.create_publisher(CameraInfo, f'{NODE}/camera_info',
                                                           RELIABLE)
        self.imu_pub = self.probe.create_publisher(Imu, f'{NODE}/imu', RELIABLE)
        self.twists, self.foes, self.ttc_images, self.min_ttcs, self.diagnostics = (
            [], [], [], [], [])
        self.output_subscriptions = {}
        for msg_type, name, received in (
                (TwistStamped, 'twist', self.twists), (PointStamped, 'foe', self.foes),
                (Image, 'time_to_contact', self.ttc_images),
                (Float32, 'min_time_to_contact', self.min_ttcs)):
            self.output_subscriptions[f'~/{name}'] = self.probe.create_subscription(
                msg_type, f'{NODE}/{name}', received.append, RELIABLE)
        self.probe.create_subscription(DiagnosticArray, '/diagnostics', self.diagnostics.append,
                                       egomotion_node.OUTPUT_QOS)
        self.stamp_ns = T0_NS
        self.flow_messages = 0
        self.imu_messages = 0
        self.wait_for_discovery(lambda: self.flow_pub.get_subscription_count() > 0
                                and self.camera_info_pub.get_subscription_count() > 0
                                and (self.imu_pub.get_subscription_count() > 0
                                     or not self.node.config['use_imu'])
                                and self.probe.count_publishers(f'{NODE}/twist') > 0
                                and all(map(self.node.subscribed, OPTIONAL_OUTPUTS)))

    def publish_camera_info(self, msg: CameraInfo):
        """Publish ~/camera_info; spin until the node took it and built its tables."""
        self.camera_info_pub.publish(msg)
        self.spin_for(0.1)
        assert self.spin_until(lambda: not self.node.stream.calibration_pending(), 10.0)

    def publish_flows(self, velocity, omega, duration_s, flows_per_message=1500, imu_hz=0.0,
                      imu_omega=None, seed=0):
        """
        Exact rigid-scene normal flows, one message per MESSAGE_S of sensor time.

        imu_hz > 0: also gyroscope samples of imu_omega (the IMU frame; default omega).
        """
        for index in range(int(round(duration_s / MESSAGE_S))):
            self.stamp_ns += int(MESSAGE_S * 1e9)
            x, y, u, v = rigid_scene_flows(CAMERA, velocity, omega, flows_per_message,
                                           seed=seed + index)
            t = np.linspace(-MESSAGE_S, 0.0, len(x))
            points = make_flow_points(x, y, t, u, v)
            if imu_hz:
                self.publish_imu(omega if imu_omega is None else imu_omega,
                                 self.stamp_ns - int(MESSAGE_S * 1e9), self.stamp_ns, imu_hz)
            self.publish_flow(pointcloud2_cdr(points, self.stamp_ns, 'camera_optical'))

    def publish_flow(self, msg):
        """Publish one ~/flow message; spin until the node took it and the IMU messages."""
        self.flow_pub.publish(msg)
        self.flow_messages += 1
        stream = self.node.stream
        assert self.spin_until(lambda: self.flows_received() >= self.flow_messages and (
            stream.imu_samples + stream.counters.totals['bad_imu_messages']
            >= self.imu_messages), 5.0)

    def flows_received(self) -> int:
        totals = self.node.stream.counters.totals
        return totals['messages'] + totals['bad_flow_messages']

    def publish_imu(self, omega, t0_ns, t1_ns, rate_hz, covariance0=0.0):
        for t_ns in np.arange(t0_ns, t1_ns, int(1e9 / rate_hz)):
            msg = Imu()
            msg.header.stamp = stamp_from_ns(int(t_ns))
            msg.angular_velocity.x, msg.angular_velocity.y, msg.angular_velocity.z = (
                float(w) for w in omega)
            msg.angular_velocity_covariance[0] = covariance0
            self.imu_pub.publish(msg)
            self.imu_messages += 1

    def wait_idle(self, timeout_s: float = 20.0) -> bool:
        """Spin until every flow message arrived and the estimator thread is idle."""
        def idle():
            return (self.flows_received() >= self.flow_messages
                    and self.node.stream.drain(0.0))
        ok = self.spin_until(idle, timeout_s)
        self.spin_for(0.2)  # the last outputs travel to the probe
        return ok

    def diagnostic_values(self, index=-1):
        (status,) = self.diagnostics[index].status
        return status, {item.key: item.value for item in status.values}


@pytest.fixture
def harness_factory(ros_context):
    def make(**parameters):
        # The probe publishes faster than real time: no window may be dropped.
        parameters.setdefault('max_queued_windows', 100)
        return Harness(ros_context, **parameters)
    yield from closing_factory(make)


FORWARD = (np.array([0.2, -0.1, 1.0]), np.array([0.05, -0.1, 0.2]))


# ---- start-up -------------------------------------------------------------------------------


def test_parameters_are_declared_with_ranges_and_read_only(harness_factory, ros_context):
    node = harness_factory().node
    for name in ('window_s', 'max_flows', 'imu_time_offset_s'):
        descriptor = node.describe_parameter(name)
        assert descriptor.read_only and len(descriptor.description) > 20, name
        assert descriptor.floating_point_range or descriptor.integer_range, name
    result = node.set_parameters([Parameter('window_s', value=0.05)])[0]
    assert not result.successful and node.config['window_s'] == 0.03
    with pytest.raises(rclpy.exceptions.ParameterException, match='window_s'):
        egomotion_node.EgomotionNode(context=ros_context, parameter_overrides=[
            Parameter('window_s', value=5.0)])
    with pytest.raises(rclpy.exceptions.ParameterException, match='ttc_rows'):
        egomotion_node.EgomotionNode(context=ros_context, parameter_overrides=[
            Parameter('ttc_rows', value=0)])
    with pytest.raises(ValueError, match='imu_rotation_xyzw has zero length'):
        egomotion_node.EgomotionNode(context=ros_context, parameter_overrides=[
            Parameter('imu_rotation_xyzw', value=[0.0, 0.0, 0.0, 0.0])])


def test_console_entry_point_reports_start_up_errors_without_traceback(tmp_path):
    env = dict(os.environ, ROS_DOMAIN_ID=str(ROS_DOMAIN_ID),
               ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST')
    bad_yaml = tmp_path / 'camera.yaml'
    bad_yaml.write_text('image_width: 346\nimage_height: 260\ncamera_matrix: {data: '
                        '[0, 0, 173, 0, 0, 130, 0, 0, 1]}\n')
    result = subprocess.run(
        [sys.executable, '-m', 'veckm_flow_ros.ros.egomotion_node', '--ros-args', '-p',
         f'camera_yaml:={bad_yaml}'], capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 1, result.stderr
    assert 'veckm_egomotion_node: error:' in result.stderr
    assert 'focal lengths must be > 0 px, got fx=0' in result.stderr
    assert 'Traceback' not in result.stderr


def test_raw_imu_parsing_matches_rclpy():
    from rclpy.serialization import serialize_message
    from veckm_flow_ros.ros.cdr import parse_imu_angular_velocity_cdr
    for frame_id, covariance0 in (('', 0.0), ('imu', -1.0), ('imu_link_long_name', 0.02)):
        msg = Imu()
        msg.header.stamp = stamp_from_ns(T0_NS + 123_456_789)
        msg.header.frame_id = frame_id
        msg.orientation.w = 0.5
        msg.orientation_covariance[8] = 7.0
        msg.angular_velocity.x, msg.angular_velocity.y, msg.angular_velocity.z = 0.1, -2.5, 3e-3
        msg.angular_velocity_covariance[0] = covariance0
        msg.linear_acceleration.z = 9.81
        parsed = parse_imu_angular_velocity_cdr(serialize_message(msg))
        assert parsed == (T0_NS + 123_456_789, (0.1, -2.5, 3e-3), covariance0, frame_id)
    with pytest.raises(ValueError, match='truncated Imu'):
        parse_imu_angular_velocity_cdr(serialize_message(Imu())[:60])


def test_raw_flow_cloud_parsing_matches_rclpy():
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import PointField
    from veckm_flow_ros.ros.cdr import parse_pointcloud2_cdr
    for frame_id, names, count in (('', ('x',), 0), ('camera', ('x', 'y', 't', 'u', 'v'), 3),
                                   ('cam_optical_long', ('x', 'y', 't', 'u', 'v', 'validity'),
                                    7)):
        msg = PointCloud2()
        msg.header.stamp = stamp_from_ns(T0_NS + 987_654_321)
        msg.header.frame_id = frame_id
        msg.fields = [PointField(name=name, offset=4 * i, datatype=PointField.FLOAT32,
                                 count=1) for i, name in enumerate(names)]
        msg.height, msg.width = 1, count
        msg.point_step, msg.row_step = 4 * len(names), 4 * len(names) * count
        msg.is_bigendian, msg.is_dense = False, True
        msg.data = np.arange(count * len(names), dtype='<f4').tobytes()
        cloud = parse_pointcloud2_cdr(serialize_message(msg))
        assert (cloud['stamp_ns'], cloud['frame_id'], cloud['height'], cloud['width']) == (
            T0_NS + 987_654_321, frame_id, 1, count)
        assert cloud['fields'] == [(name, 4 * i, PointField.FLOAT32, 1)
                                   for i, name in enumerate(names)]
        assert (cloud['is_bigendian'], cloud['point_step'], cloud['row_step']) == (
            False, msg.point_step, msg.row_step)
        assert bytes(cloud['data']) == bytes(msg.data)
    with pytest.raises(ValueError, match='truncated PointCloud2'):
        parse_pointcloud2_cdr(serialize_message(msg)[:40])
    with pytest.raises(ValueError, match='data bytes but only'):
        parse_pointcloud2_cdr(serialize_message(msg)[:-20])


def test_raw_outputs_deserialize_as_rclpy_messages():
    from rclpy.serialization import deserialize_message, serialize_message
    from veckm_flow_ros.ros import cdr
    grid = np.array([[1.5, np.nan, 3.0], [0.25, 2.0, np.inf]], np.float32)
    for frame_id in ('', 'c', 'cam', 'camera_optical', 'kamera_ö'):
        stamp_ns = T0_NS + len(frame_id) * 123_456_789
        twist, foe, image = TwistStamped(), PointStamped(), Image()
        for msg in (twist, foe, image):
            msg.header.stamp, msg.header.frame_id = stamp_from_ns(stamp_ns), frame_id
        twist.twist.linear.x, twist.twist.linear.y, twist.twist.linear.z = 0.6, -0.0, 0.8
        twist.twist.angular.x, twist.twist.angular.y, twist.twist.angular.z = 0.1, -2.5, 3e-3
        foe.point.x, foe.point.y, foe.point.z = 172.25, np.nan, 1.0
        image.height, image.width, image.encoding, image.step = 2, 3, '32FC1', 12
        image.data = grid.tobytes()
        for msg, raw in (
                (twist, cdr.twist_stamped_cdr(stamp_ns, frame_id, (0.6, -0.0, 0.8),
                                              (0.1, -2.5, 3e-3))),
                (foe, cdr.point_stamped_cdr(stamp_ns, frame_id, 172.25, np.nan, 1.0)),
                (image, egomotion_node.ttc_image_cdr(grid, stamp_ns, frame_id)),
                (Float32(data=0.75), cdr.float32_cdr(0.75))):
            # Same length and the same message back (padding bytes may differ: rclpy's are
            # not zeroed).
            assert len(raw) == len(serialize_message(msg))
            assert repr(deserialize_message(raw, type(msg))) == repr(msg)


# ---- outputs --------------------------------------------------------------------------------


def test_outputs_of_a_forward_motion(harness_factory):
    harness = harness_factory()
    harness.publish_camera_info(camera_info())
    velocity, omega = FORWARD
    harness.publish_flows(velocity, omega, 0.35)
    assert harness.wait_idle()
    windows = harness.node.stream.counters.totals['windows']
    assert windows == 11  # 0.35 s of 30 ms windows, the last one still open
    assert len(harness.twists) == windows
    for twist in harness.twists:
        assert twist.header.frame_id == 'camera_optical'
        linear, angular = twist.twist.linear, twist.twist.angular
        direction = [linear.x, linear.y, linear.z]
        assert np.linalg.norm(direction) == pytest.approx(1.0)
        assert angle_deg(direction, velocity) < 10.0  # plumbing, not the estimator
        assert np.allclose([angular.x, angular.y, angular.z], omega, atol=0.03)
    # Stamps: window centres, 30 ms apart, inside the flows' time.
    stamps = np.array([stamp_to_ns(t.header.stamp) for t in harness.twists])
    assert np.allclose(np.diff(stamps), 30e6, atol=1e3)
    assert T0_NS < stamps[0] < T0_NS + 30e6
    # The focus of expansion is the published direction's image point (same window).
    foe, linear = harness.foes[-1], harness.twists[-1].twist.linear
    assert foe.header.stamp == harness.twists[-1].header.stamp and foe.point.z == 1.0
    own_foe = CAMERA.project(linear.x / linear.z, linear.y / linear.z)
    assert math.hypot(foe.point.x - own_foe[0], foe.point.y - own_foe[1]) < 1e-3
    true_foe = CAMERA.project(velocity[0] / velocity[2], velocity[1] / velocity[2])
    assert math.hypot(foe.point.x - true_foe[0], foe.point.y - true_foe[1]) < 50.0
    image = harness.ttc_images[-1]
    assert (image.encoding, image.height, image.width, image.step) == ('32FC1', 6, 8, 32)
    grid = np.frombuffer(bytes(image.data), '<f4').reshape(6, 8)
    # Depths 2-6 m at v_z = 1 (unit speed in scene units per s): time to contact 2-6 s.
    assert np.nanmin(grid) > 1.0 and np.nanmax(grid) < 8.0 and np.isfinite(grid).mean() > 0.5
    assert harness.min_ttcs[-1].data == pytest.approx(float(np.nanmin(grid)), rel=1e-6)


def test_optional_outputs_follow_their_subscriptions(harness_factory):
    """~/foe and the time-to-contact topics: published while subscribed, only then."""
    harness = harness_factory()
    harness.publish_camera_info(camera_info())
    velocity, omega = FORWARD
    harness.publish_flows(velocity, omega, 0.1)
    assert harness.wait_idle()
    assert len(harness.twists) == len(harness.foes) == len(harness.min_ttcs) == 3
    for topic in OPTIONAL_OUTPUTS:
        harness.probe.destroy_subscription(harness.output_subscriptions.pop(topic))
    assert harness.spin_until(lambda: not any(map(harness.node.subscribed, OPTIONAL_OUTPUTS)),
                              10.0)
    harness.publish_flows(velocity, omega, 0.09)
    assert harness.wait_idle()
    assert len(harness.twists) == 6 and len(harness.foes) == len(harness.min_ttcs) == 3
    # Subscribed again: the next windows publish them again, with a time to contact.
    harness.probe.create_subscription(Float32, f'{NODE}/min_time_to_contact',
                                      harness.min_ttcs.append, RELIABLE)
    assert harness.spin_until(lambda: harness.node.subscribed('~/min_time_to_contact'), 10.0)
    assert not harness.node.subscribed('~/foe')
    harness.publish_flows(velocity, omega, 0.09)
    assert harness.wait_idle() and harness.spin_until(lambda: len(harness.min_ttcs) == 6, 5.0)
    assert len(harness.twists) == 9 and len(harness.foes) == 3
    assert all(1.0 < m.data < 8.0 for m in harness.min_ttcs[3:]), harness.min_ttcs


def test_sideways_motion_marks_the_focus_of_expansion_invalid(harness_factory):
    harness = harness_factory()
    harness.publish_camera_info(camera_info())
    harness.publish_flows(np.array([1.0, 0.1, 0.05]), np.zeros(3), 0.1)
    assert harness.wait_idle()
    assert harness.foes, 'no ~/foe'
    for foe in harness.foes:
        assert foe.point.z == 0.0 and math.isnan(foe.point.x) and math.isnan(foe.point.y)
    for twist in harness.twists:
        assert abs(twist.twist.linear.z) < 0.25


@pytest.mark.parametrize('use_imu', [False, True], ids=['flow', 'gyro'])
def test_pure_rotation_publishes_an_undetermined_heading(harness_factory, use_imu):
    """Panning: angular velocity published, linear NaN, a reason counted, no stop trigger."""
    harness = harness_factory(diagnostics_period_s=0.2, use_imu=use_imu)
    harness.publish_camera_info(camera_info())
    omega = np.array([0.3, -0.6, 0.15])
    harness.publish_flows(np.zeros(3), omega, 0.2, imu_hz=200.0 if use_imu else 0.0)
    assert harness.wait_idle()
    totals = harness.node.stream.counters.totals
    assert totals['windows'] == 6 and len(harness.twists) == 6, totals
    for twist in harness.twists:
        linear, angular = twist.twist.linear, twist.twist.angular
        assert all(math.isnan(value) for value in (linear.x, linear.y, linear.z)), linear
        assert np.allclose([angular.x, angular.y, angular.z], omega, atol=0.02)
    assert len(harness.foes) == len(harness.min_ttcs) == len(harness.ttc_images) == 6
    for foe in harness.foes:
        assert foe.point.z == 0.0 and math.isnan(foe.point.x) and math.isnan(foe.point.y)
    for min_ttc, image in zip(harness.min_ttcs, harness.ttc_images):
        assert math.isnan(min_ttc.data)  # never 0 or negative: the stop trigger stays off
        assert np.all(np.isnan(np.frombuffer(bytes(image.data), '<f4')))
    reasons = {name: totals[f'undetermined_{name}'] for name in
               ('rotation_dominated', 'translation_unexplained', 'too_few_flows')}
    assert totals['headings'] == 0 and totals['estimates'] == 6, totals
    # Exact flows of a pure rotation: no translational flow. Without a gyroscope the fitted
    # omega leaves a little (ratio ~4e-4: rotation_dominated) or too little to explain
    # (translation_unexplained); the exact gyroscope, taken as it is (its bias estimate does
    # not stand out), leaves nothing to explain.
    assert reasons['too_few_flows'] == 0, reasons
    assert reasons['translation_unexplained' if use_imu else 'rotation_dominated'] >= 1, reasons
    assert sum(reasons.values()) == 6, reasons

    def reported(index):
        status, values = harness.diagnostic_values(index)
        return (status.level == DiagnosticStatus.OK and 'without heading' in status.message
                and values['heading (last window)'].startswith('undetermined (')
                and sum(int(values[f'undetermined {name} (total)']) for name in reasons) > 0)
    assert harness.spin_until(lambda: any(map(reported, range(len(harness.diagnostics)))),
                              5.0), [harness.diagnostic_values(i)[0].message
                                     for i in range(len(harness.diagnostics))]
    assert harness.spin_until(lambda: sum(int(harness.diagnostic_values()[1][
        f'undetermined {name} (total)']) for name in reasons) == 6, 5.0)
    _, values = harness.diagnostic_values()
    if use_imu:  # the bias estimate per axis, small against the rotation
        assert all(abs(float(values[f'gyroscope bias {axis} [rad/s]'])) < 0.03
                   for axis in 'xyz'), values
    else:
        assert values['gyroscope bias x [rad/s]'] == 'none'


def test_windows_with_too_few_usable_flows_warn_and_publish_nothing(harness_factory):
    """Flows below min_validity: the solver's too_few_flows; outputs stop, WARN names it."""
    harness = harness_factory(diagnostics_period_s=0.2, use_imu=False, min_validity=0.5)
    harness.publish_camera_info(camera_info())
    velocity, omega = FORWARD
    for index in range(12):
        harness.stamp_ns += int(MESSAGE_S * 1e9)
        x, y, u, v = rigid_scene_flows(CAMERA, velocity, omega, 1500, seed=index)
        points = make_flow_points(x, y, np.linspace(-MESSAGE_S, 0.0, len(x)), u, v,
                                  validity=np.full(len(x), 0.1, np.float32))
        harness.publish_flow(pointcloud2_cdr(points, harness.stamp_ns, 'camera_optical'))
    assert harness.wait_idle()
    totals = harness.node.stream.counters.totals
    assert totals['undetermined_too_few_flows'] == totals['windows'] == 3, totals
    assert not harness.twists and not harness.min_ttcs
    assert harness.spin_until(lambda: any(
        status.level == DiagnosticStatus.WARN and 'too_few_flows' in status.message
        for status in (harness.diagnostic_values(i)[0]
                       for i in range(len(harness.diagnostics)))), 5.0)


# ---- bad and missing input ------------------------------------------------------------------


def test_bad_camera_info_is_counted_and_the_last_good_one_kept(harness_factory, capfd):
    harness = harness_factory(diagnostics_period_s=0.2)
    velocity, omega = FORWARD
    harness.publish_camera_info(camera_info(k=[0, 0, 173, 0, 0, 130, 0, 0, 1]))
    harness.publish_flows(velocity, omega, 0.1)
    assert harness.wait_idle()
    totals = harness.node.stream.counters.totals
    assert totals['bad_camera_infos'] == 1 and totals['windows_without_camera'] == 3
    assert harness.twists == []
    assert harness.spin_until(lambda: any(
        harness.diagnostic_values(i)[0].level == DiagnosticStatus.WARN
        for i in range(len(harness.diagnostics))), 5.0)
    harness.publish_camera_info(camera_info())
    harness.publish_camera_info(camera_info(d=[0.1, 0.0, 0.0]))  # plumb_bob needs 5
    harness.publish_camera_info(camera_info(model='rational_polynomial'))
    harness.publish_flows(velocity, omega, 0.1)
    assert harness.wait_idle()
    assert totals['bad_camera_infos'] == 3 and totals['camera_changes'] == 1
    assert len(harness.twists) == 3  # the good calibration stayed in use
    err = capfd.readouterr().err
    assert '~/camera_info ignored: focal lengths must be > 0 px, got fx=0' in err
    assert 'no calibration yet, windows are skipped' in err
    # Throttled: the second and third bad messages followed within 5 s of the first.
    assert err.count('~/camera_info ignored') == 1
    status, values = harness.diagnostic_values()
    assert values['bad camera infos (total)'] == '3'
    assert values['calibration'].startswith('CameraModel(346x260 px')


def test_camera_info_larger_than_the_bound_is_ignored(harness_factory, capfd):
    # A lying CameraInfo must not size the per-pixel tables (32 bytes per pixel: 60000 x
    # 60000 px would be 115 GB): it is named, counted and ignored, the calibration kept.
    harness = harness_factory(max_sensor_width_px=1280, max_sensor_height_px=720)
    velocity, omega = FORWARD
    harness.publish_camera_info(camera_info())
    huge = camera_info()
    huge.width, huge.height = 60000, 60000
    harness.publish_camera_info(huge)
    wide = camera_info()
    wide.width = 1281
    harness.publish_camera_info(wide)
    harness.publish_flows(velocity, omega, 0.1)
    assert harness.wait_idle()
    totals = harness.node.stream.counters.totals
    assert totals['bad_camera_infos'] == 2 and totals['camera_changes'] == 1
    assert len(harness.twists) == 3 and harness.node.stream.camera.width == 346
    err = capfd.readouterr().err
    assert ('~/camera_info ignored: camera size 60000x60000 px exceeds max_sensor_width_px x '
            'max_sensor_height_px (1280x720 px); keeping the previous calibration') in err


def test_camera_yaml_larger_than_the_bound_stops_the_start(ros_context, tmp_path):
    path = tmp_path / 'camera.yaml'
    CameraModel.pinhole(4096, 3000, 2000.0).to_yaml(path)
    with pytest.raises(ValueError, match=r'camera.yaml: camera size 4096x3000 px exceeds '
                                         r'max_sensor_width_px x max_sensor_height_px '
                                         r'\(2048x2048 px\)'):
        egomotion_node.EgomotionNode(context=ros_context, parameter_overrides=[
            Parameter('camera_yaml', value=str(path))])


def test_equidistant_camera_info(harness_factory):
    fisheye = CAMERA.from_camera_info(346, 260, CAMERA.K.reshape(-1), [0.02, -0.01, 0.0, 0.0],
                                      'equidistant')
    harness = harness_factory()
    harness.publish_camera_info(camera_info(fisheye))
    assert harness.node.stream.camera.distortion_model == 'equidistant'
    assert np.allclose(harness.node.stream.camera.D, [0.02, -0.01, 0.0, 0.0])


def test_missing_imu_estimates_from_the_flow_and_says_so(harness_factory, capfd):
    harness = harness_factory(diagnostics_period_s=0.2)
    harness.publish_camera_info(camera_info())
    velocity, omega = FORWARD
    harness.publish_flows(velocity, omega, 0.2)
    assert harness.wait_idle()
    assert harness.twists
    assert harness.spin_until(lambda: harness.diagnostics and harness.diagnostic_values()[1][
        'angular velocity'] == 'estimated from the flow (no ~/imu samples)', 5.0)
    statuses = [harness.diagnostic_values(i)[0] for i in range(len(harness.diagnostics))]
    # (Before the calibration's tables are built: WARN, no camera calibration.)
    statuses = [status for status in statuses
                if status.message != 'no camera calibration (~/camera_info)']
    assert any(status.message == 'ok, no IMU: angular velocity from the flow'
               for status in statuses)  # while flows came; 'no input' after
    assert all(status.level == DiagnosticStatus.OK for status in statuses), [
        status.message for status in statuses]
    values = harness.diagnostic_values()[1]
    assert int(values['windows without gyro (total)']) == len(harness.twists)
    err = capfd.readouterr().err
    assert err.count('angular velocity estimated from the flow: no ~/imu samples') == 1


def test_imu_gives_the_angular_velocity(harness_factory):
    # The IMU is mounted with its x axis along the camera's z (90 deg about y).
    half = math.sqrt(0.5)
    harness = harness_factory(imu_rotation_xyzw=[0.0, -half, 0.0, half],
                              diagnostics_period_s=0.2)
    harness.publish_camera_info(camera_info())
    velocity, omega = FORWARD
    rotation = np.array([[0, 0, -1], [0, 1, 0], [1, 0, 0]], float)  # camera <- IMU
    assert np.allclose(rotation @ [1, 0, 0], [0, 0, 1])
    harness.publish_imu(rotation.T @ omega, T0_NS - int(0.05e9), T0_NS, 500.0,
                        covariance0=-1.0)  # REP 145: no angular velocity
    harness.publish_flows(velocity, omega, 0.2, imu_hz=500.0, imu_omega=rotation.T @ omega)
    assert harness.wait_idle()
    assert harness.node.stream.counters.totals['bad_imu_messages'] == 25
    assert harness.twists
    for index, twist in enumerate(harness.twists[1:]):
        angular = twist.twist.angular
        # The gyroscope less the estimator's bias estimate (at most max_gyro_bias_rad_s,
        # 0.025 rad/s per axis).
        assert np.allclose([angular.x, angular.y, angular.z], omega, atol=0.026), (
            index, harness.node.stream.counters.totals['windows_without_gyro'])
        linear = twist.twist.linear
        # Plumbing (IMU axes and time), not accuracy (exact flows and gyroscope: the bias
        # estimate is not subtracted where it does not stand out of its own scatter).
        assert angle_deg([linear.x, linear.y, linear.z], velocity) < 2.0
    assert harness.spin_until(lambda: harness.diagnostics and harness.diagnostic_values()[1][
        'angular velocity'] == 'gyroscope (~/imu)', 5.0)


def test_flow_with_wrong_fields_is_counted_and_the_node_keeps_going(harness_factory, capfd):
    harness = harness_factory(diagnostics_period_s=0.2)
    harness.publish_camera_info(camera_info())
    wrong = np.zeros(10, np.dtype([('x', '<f4'), ('y', '<f4'), ('vx', '<f4'), ('vy', '<f4')]))
    msg = PointCloud2()
    msg.header.stamp = stamp_from_ns(T0_NS)
    from sensor_msgs.msg import PointField
    msg.fields = [PointField(name=name, offset=4 * i, datatype=PointField.FLOAT32, count=1)
                  for i, name in enumerate(wrong.dtype.names)]
    msg.point_step, msg.width, msg.height = 16, 10, 1
    msg.row_step = 160
    msg.data = wrong.tobytes()
    harness.publish_flow(msg)
    velocity, omega = FORWARD
    harness.publish_flows(velocity, omega, 0.1)
    assert harness.wait_idle()
    totals = harness.node.stream.counters.totals
    assert totals['bad_flow_messages'] == 1 and len(harness.twists) == 3
    err = capfd.readouterr().err
    assert ("~/flow message ignored: flow cloud without field(s) t, u, v: fields ('x', 'y', "
            "'vx', 'vy')") in err
    assert harness.spin_until(lambda: any(
        harness.diagnostic_values(i)[0].message == 'problems: bad flow messages'
        for i in range(len(harness.diagnostics))), 5.0)


def test_time_going_back_restarts_the_windows(harness_factory):
    harness = harness_factory()
    harness.publish_camera_info(camera_info())
    velocity, omega = FORWARD
    harness.publish_flows(velocity, omega, 0.1)
    harness.stamp_ns = T0_NS  # a bag loop
    harness.publish_flows(velocity, omega, 0.1)
    assert harness.wait_idle()
    totals = harness.node.stream.counters.totals
    assert totals['time_resets'] == 1
    # 0.1 s from T0: windows closed at 30, 60 and 90 ms, twice; the open one (90-100 ms)
    # of the first pass is dropped at the reset.
    assert len(harness.twists) == 6
    assert harness.node.stream.windows.dropped_flows == 1500
    stamps = [stamp_to_ns(twist.header.stamp) for twist in harness.twists]
    assert stamps[:3] == stamps[3:]


# ---- the two nodes chained on a simulated recording -----------------------------------------


CHAIN_DURATION_S = 0.3
# Median direction error bounds [deg] (use_imu -> bound), from the medians measured on this
# sequence with the default flow model and estimator (2026-11-27, the simulator that
# integrates pixel areas at surface boundaries): 7.6 deg with the gyroscope (5.4-7.2 on
# 2026-11-27 08:33-08:39), 8.7-9.4 deg without since the rotation start (67.9 before); bounds
# 1.3x, 1.6x without (its windows move more between runs). (On the earlier point-sampled
# simulator: 20.7 and 63.9 deg.) A backwards direction (z flipped) gives ~160 deg; the
# exact-flow tests above catch x or y flips.
CHAIN_BOUND_DEG = {True: 10.0, False: 15.0}
# Share of the windows with a heading (measured 2026-11-29: 9 of 9 with the gyroscope, 8 of 9
# without).
CHAIN_MIN_HEADINGS = {True: 0.9, False: 0.6}


@pytest.fixture(scope='module')
def approach_sequence():
    """0.3 s of the simulator's 'approach' trajectory (346x260, 0.14 M events)."""
    from veckm_flow_ros.learning.simulate3d import make_scene3d, simulate3d
    return simulate3d(make_scene3d('approach', seed=3), duration_s=CHAIN_DURATION_S, seed=3)


@pytest.mark.parametrize('use_imu', [True, False], ids=['gyro', 'no_imu'])
def test_chained_on_a_simulated_recording(ros_context, approach_sequence, use_imu):
    """Check the direction error of ~/twist: EventPackets -> flow node -> egomotion node."""
    from egomotion_chain import direction_errors_deg, run_chain
    sequence = approach_sequence
    records = run_chain(ros_context, sequence, use_imu=use_imu)
    # Every full 30 ms window of flow gives a twist (the last one stays open).
    assert len(records.t_s) >= int(CHAIN_DURATION_S / 0.03) - 2
    # A unit direction, or NaN where the window's flow signs contradict its heading
    # (signs_disagree: 1 of 9 windows without the gyroscope, 2026-11-29).
    heading = np.all(np.isfinite(records.direction), axis=1)
    assert np.allclose(np.linalg.norm(records.direction[heading], axis=1), 1.0)
    assert np.count_nonzero(heading) >= CHAIN_MIN_HEADINGS[use_imu] * len(heading)
    errors = direction_errors_deg(sequence, records)[heading]
    bound_deg = CHAIN_BOUND_DEG[use_imu]
    assert np.median(errors) < bound_deg, np.round(errors, 1)
    _, omega = sequence.twist_at(records.t_s)
    omega_error = np.linalg.norm(records.omega_rad_s - omega, axis=1)
    if use_imu:  # the gyroscope's own noise and bias, turned nowhere (identity mount)
        assert np.all(omega_error < 0.05), omega_error
