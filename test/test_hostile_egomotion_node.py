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
veckm_egomotion_node against a lying IMU, camera_info and flow, on a real ROS 2 graph.

rclpy + Fast DDS, the harness of test_egomotion_node.py: valid traffic around each bad input.
No output carries a value derived from refused input, ~/min_time_to_contact never fires on
garbage, /diagnostics leaves OK while input is refused or outputs stop, the log names what
was refused, a new calibration's tables are built off the executor, and bad start-up files
give one line without a traceback.
"""

import math
import os
import subprocess
import sys

import numpy as np
import pytest

rclpy = pytest.importorskip('rclpy')
pytest.importorskip('geometry_msgs')

from diagnostic_msgs.msg import DiagnosticStatus  # noqa: E402, I100
from sensor_msgs.msg import Imu  # noqa: E402

from conftest import ROS_DOMAIN_ID  # noqa: E402, I100
from test_egomotion_node import (camera_info, FORWARD, harness_factory,  # noqa: E402, F401
                                 MESSAGE_S, T0_NS)
from veckm_flow_ros.core.camera import CameraModel  # noqa: E402
from veckm_flow_ros.ros.messages import stamp_from_ns  # noqa: E402


def publish_imu(harness, omega, t0_ns, t1_ns, rate_hz=200.0, frame_id='imu_link',
                refused=False):
    """Publish IMU messages; refused: the node refuses them (the harness does not wait)."""
    for t_ns in np.arange(t0_ns, t1_ns, int(1e9 / rate_hz)):
        msg = Imu()
        msg.header.stamp = stamp_from_ns(int(t_ns))
        msg.header.frame_id = frame_id
        msg.angular_velocity.x, msg.angular_velocity.y, msg.angular_velocity.z = (
            float(w) for w in omega)
        harness.imu_pub.publish(msg)
        harness.imu_messages += not refused


def publish_flows_with_imu(harness, duration_s, imu):
    """FORWARD flows; before each message imu(harness, t0_ns, t1_ns) publishes its IMU."""
    velocity, omega = FORWARD
    for _ in range(int(round(duration_s / MESSAGE_S))):
        imu(harness, harness.stamp_ns, harness.stamp_ns + int(MESSAGE_S * 1e9))
        harness.publish_flows(velocity, omega, MESSAGE_S, seed=harness.flow_messages)


def refused_imu(harness):
    totals = harness.node.stream.counters.totals
    return sum(totals[name] for name in totals if name.startswith('imu_samples'))


def statuses(harness):
    return [harness.diagnostic_values(i) for i in range(len(harness.diagnostics))]


def test_garbage_gyroscope_never_reaches_the_outputs(harness_factory, capfd):  # noqa: F811
    harness = harness_factory(diagnostics_period_s=0.2)
    harness.publish_camera_info(camera_info())
    velocity, omega = FORWARD

    def imu(harness, t0_ns, t1_ns):
        publish_imu(harness, omega, t0_ns, t1_ns)                         # the camera's IMU
        publish_imu(harness, [0.0, 1e300, 0.0], t0_ns + 2_000_000, t1_ns,  # corrupt
                    refused=True)
        publish_imu(harness, -omega, t0_ns + 1_000_000, t1_ns, frame_id='imu2',  # another
                    refused=True)
    publish_flows_with_imu(harness, 0.2, imu)
    assert harness.wait_idle()
    assert harness.spin_until(lambda: refused_imu(harness) >= 1.9 * harness.imu_messages, 5.0)
    assert len(harness.twists) == 6 and len(harness.min_ttcs) == 6
    for twist, min_ttc in zip(harness.twists, harness.min_ttcs):
        angular = twist.twist.angular
        # the gyroscope less its bias estimate (at most 0.025 rad/s per axis)
        assert np.allclose([angular.x, angular.y, angular.z], omega, atol=0.026)
        assert not min_ttc.data <= 0.0  # NaN or a positive time
    totals = harness.node.stream.counters.totals
    assert totals['imu_samples_out_of_range'] > 0 and totals['imu_samples_other_frame'] > 0
    assert harness.spin_until(lambda: any(
        status.level == DiagnosticStatus.WARN and 'imu samples out of range' in status.message
        for status, _ in statuses(harness)), 5.0)
    err = capfd.readouterr().err
    assert "~/imu: gyroscope of frame 'imu_link'" in err
    assert 'refused input: ' in err and 'imu samples out of range ([0.0, 1e+300, 0.0] rad/s' in err


def test_a_gyroscope_in_deg_s_is_not_used_and_warned(harness_factory, capfd):  # noqa: F811
    harness = harness_factory(diagnostics_period_s=0.2)
    harness.publish_camera_info(camera_info())
    velocity, omega = FORWARD
    publish_flows_with_imu(harness, 0.3, lambda harness, t0_ns, t1_ns: publish_imu(
        harness, np.degrees(omega), t0_ns, t1_ns))
    assert harness.wait_idle()
    assert len(harness.twists) == 9
    for twist in harness.twists[1:]:  # the first window's check already disagrees
        angular = twist.twist.angular
        assert np.linalg.norm([angular.x, angular.y, angular.z]) < 1.0  # the flow's
    # The flow's estimate is published whole: with its time to contact (depths 2-6 m at 1 m/s).
    assert len(harness.min_ttcs) == 9
    assert all(1.0 < min_ttc.data < 8.0 for min_ttc in harness.min_ttcs[1:]), harness.min_ttcs
    assert harness.spin_until(lambda: any(
        status.level == DiagnosticStatus.WARN and (
            status.message.startswith('gyroscope not used: the gyroscope')
            or 'windows gyro disagrees' in status.message)
        for status, _ in statuses(harness)), 5.0)
    assert "disagrees with the flow's rotation" in capfd.readouterr().err


def test_all_nan_flows_raise_the_level_and_are_named(harness_factory, capfd):  # noqa: F811
    from veckm_flow_ros.eventio.flow_cloud import make_flow_points
    from veckm_flow_ros.ros.cdr import pointcloud2_cdr
    harness = harness_factory(diagnostics_period_s=0.2)
    harness.publish_camera_info(camera_info())
    for _ in range(30):
        harness.stamp_ns += int(MESSAGE_S * 1e9)
        count = 1000
        points = make_flow_points(np.full(count, 100.0), np.full(count, 100.0),
                                  np.linspace(-MESSAGE_S, 0, count), np.full(count, np.nan),
                                  np.zeros(count))
        harness.publish_flow(pointcloud2_cdr(points, harness.stamp_ns, 'camera_optical'))
    assert harness.wait_idle()
    assert harness.twists == []
    assert harness.node.stream.counters.totals['flows_with_bad_values'] == 30_000
    assert harness.spin_until(lambda: any(
        status.level == DiagnosticStatus.WARN
        and status.message.startswith('no estimates: every flow refused')
        for status, _ in statuses(harness)), 5.0)
    err = capfd.readouterr().err
    assert 'refused input: 1000 flows with bad values (u, v = nan, 0 px/s)' in err


def test_camera_info_of_another_size_is_refused(harness_factory, capfd):  # noqa: F811
    harness = harness_factory()
    harness.publish_camera_info(camera_info())
    velocity, omega = FORWARD
    harness.publish_flows(velocity, omega, 0.05)
    half = CameraModel.pinhole(173, 130, 125.0)
    harness.publish_camera_info(camera_info(half))
    harness.publish_flows(velocity, omega, 0.1)
    assert harness.wait_idle()
    stream = harness.node.stream
    assert stream.camera.width == 346 and stream.counters.totals['bad_camera_infos'] == 1
    assert len(harness.twists) == 4
    assert ('~/camera_info ignored: camera size 173x130 px disagrees with the flows'
            in capfd.readouterr().err)


def test_a_large_calibration_is_built_off_the_executor(harness_factory):  # noqa: F811
    harness = harness_factory(diagnostics_period_s=0.1)
    harness.publish_camera_info(camera_info())
    large = CameraModel.pinhole(1280, 960, 700.0, d=[-0.2, 0.05, 0.001, -0.001, 0.0])
    harness.camera_info_pub.publish(camera_info(large))
    stream = harness.node.stream
    assert harness.spin_until(stream.calibration_pending, 5.0)
    seen = len(harness.diagnostics)
    # The executor keeps serving the timer (and services) while the tables are built.
    assert harness.spin_until(lambda: not stream.calibration_pending(), 60.0)
    assert len(harness.diagnostics) - seen >= 2
    assert stream.camera.width == 1280
    assert math.isclose(stream.camera.K[0, 0], 700.0)


def _start(*ros_args):
    env = dict(os.environ, ROS_DOMAIN_ID=str(ROS_DOMAIN_ID),
               ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST')
    return subprocess.run([sys.executable, '-m', 'veckm_flow_ros.ros.egomotion_node',
                           '--ros-args', *ros_args], capture_output=True, text=True,
                          timeout=60, env=env)


@pytest.mark.parametrize('case', ['camera_yaml folder', 'missing params file',
                                  'malformed params file'])
def test_bad_start_up_files_give_one_line(tmp_path, case):
    malformed = tmp_path / 'params.yaml'
    malformed.write_text('a: [\n')
    ros_args = {'camera_yaml folder': ['-p', f'camera_yaml:={tmp_path}'],
                'missing params file': ['--params-file', str(tmp_path / 'absent.yaml')],
                'malformed params file': ['--params-file', str(malformed)]}[case]
    result = _start(*ros_args)
    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith('veckm_egomotion_node: error: '), lines
    assert str(tmp_path) in lines[0]


def test_flow_messages_lost_before_the_node_took_them_are_counted(harness_factory):  # noqa
    from veckm_flow_ros.eventio.flow_cloud import make_flow_points
    from veckm_flow_ros.ros.cdr import pointcloud2_cdr
    harness = harness_factory()
    points = make_flow_points(np.full(10, 100.0), np.full(10, 100.0), np.zeros(10),
                              np.ones(10), np.zeros(10))
    harness.publish_flow(pointcloud2_cdr(points, T0_NS, 'camera'))  # the node knows us
    burst = 2000  # far beyond the subscription's keep-last 10 between two takes
    for index in range(1, burst + 1):
        harness.flow_pub.publish(pointcloud2_cdr(points, T0_NS + index * 100_000, 'camera'))
    # One more after the burst, so that a lost tail shows as a gap too.
    harness.flow_messages = 0
    totals = harness.node.stream.counters.totals
    harness.flow_pub.publish(pointcloud2_cdr(points, T0_NS + (burst + 1) * 100_000, 'camera'))
    sent = burst + 2
    assert harness.spin_until(lambda: totals['messages'] + totals['flow_messages_lost']
                              >= sent, 20.0), (totals['messages'], totals['flow_messages_lost'])
    assert totals['messages'] + totals['flow_messages_lost'] == sent
    assert totals['flow_messages_lost'] > 0
