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
veckm_egomotion_node under lying input over real DDS: silences, bad outputs, RSS.

    .venv/bin/python benchmarks/hostile_egomotion_node.py [--cases flow_t_ahead huge_clouds]

One node process (the console script's main(), a 346x260 calibration from camera_yaml, the
gyroscope on ~/imu) receives, paced in real time, 100 k flows/s of exact rigid-scene normal
flow in 10 ms ~/flow messages, ~/imu at 200 Hz and ~/camera_info at 10 Hz (the benchmark's
scene, bench_egomotion_node.py). Each case sends its bad input for a while among that
traffic, then 1.5 s of valid traffic. Per case: the longest time without a ~/twist from the
case's start until 1.5 s after its bad input ended, the same from the end of the bad input
on ('after' - what the acceptance bounds: one window plus the queue's latency), twists
whose angular velocity is beyond 5 rad/s or whose ~/min_time_to_contact is 0 or less, the
median direction error of the case's twists, and the node's windows dropped. At the end the
node's RSS (VmRSS) before the first case and after the last. --node-fastdds-profile runs the
node with a Fast DDS profile (config/fastdds_egomotion.xml: readers free each message once
taken, so a huge ~/flow message does not stay in the node's memory).
"""

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench_egomotion_node as bench  # noqa: E402, I100

MESSAGE_S = 0.01
FLOWS_PER_MESSAGE = 1000
AFTER_S = 1.5


def rss_mb(pid: int) -> float:
    with open(f'/proc/{pid}/status') as status:
        for line in status:
            if line.startswith('VmRSS:'):
                return int(line.split()[1]) / 1024
    return float('nan')


class Sender:
    """The valid traffic (flows, IMU, camera_info), with hooks for a case's bad input."""

    def __init__(self, probe, camera):
        from geometry_msgs.msg import TwistStamped  # noqa: F401 - message types loaded
        from sensor_msgs.msg import CameraInfo
        from std_msgs.msg import Float32
        self.probe, self.camera = probe, camera
        qos = 100
        self.camera_info_pub = probe.node.create_publisher(
            CameraInfo, f'/{bench.NODE_NAME}/camera_info', qos)
        self.min_ttcs = []
        probe.node.create_subscription(Float32, f'/{bench.NODE_NAME}/min_time_to_contact',
                                       lambda msg: self.min_ttcs.append(
                                           (time.monotonic(), msg.data)), qos)
        self.sets = bench.rigid_scene_messages(camera, FLOWS_PER_MESSAGE, 8)
        self.index = 0

    def camera_info(self, camera, k=None, d=None):
        from sensor_msgs.msg import CameraInfo
        msg = CameraInfo()
        msg.width, msg.height = camera.width, camera.height
        msg.k = [float(v) for v in (camera.K.reshape(-1) if k is None else k)]
        msg.d = [float(v) for v in (camera.D if d is None else d)]
        msg.distortion_model = camera.distortion_model
        return msg

    def run(self, wall_s, flow_hook=None, imu_hook=None, camera_hook=None):
        """Publish valid traffic for wall_s; the hooks may change or replace messages."""
        from sensor_msgs.msg import Imu
        from veckm_flow_ros.eventio.flow_cloud import make_flow_points
        from veckm_flow_ros.ros.cdr import pointcloud2_cdr
        from veckm_flow_ros.ros.messages import stamp_from_ns
        t_rel = np.linspace(-MESSAGE_S, 0.0, FLOWS_PER_MESSAGE)
        start_s = time.monotonic()
        next_flow_s, next_imu_s, next_camera_s = start_s + MESSAGE_S, start_s, start_s
        while time.monotonic() - start_s < wall_s:
            now_s = time.monotonic()
            if now_s >= next_imu_s:
                imu = Imu()
                imu.header.stamp = stamp_from_ns(time.time_ns())
                imu.header.frame_id = 'imu_link'
                imu.angular_velocity.x, imu.angular_velocity.y, imu.angular_velocity.z = (
                    float(w) for w in bench.OMEGA_RAD_S)
                for msg in (imu_hook(imu) if imu_hook else [imu]):
                    self.probe.imu_pubs[0].publish(msg)
                next_imu_s += 0.005
            if now_s >= next_camera_s:
                msg = self.camera_info(self.camera)
                self.camera_info_pub.publish(camera_hook(msg) if camera_hook else msg)
                next_camera_s += 0.1
            if now_s >= next_flow_s:
                x, y, u, v = self.sets[self.index % len(self.sets)]
                points = make_flow_points(x, y, t_rel, u, v, validity=np.ones(len(x)))
                if flow_hook:
                    points = flow_hook(points)
                self.probe.flow_pubs[0].publish(pointcloud2_cdr(points, time.time_ns(), 'camera'))
                self.index += 1
                next_flow_s += MESSAGE_S
            time.sleep(max(0.0, min(next_flow_s, next_imu_s, next_camera_s)
                           - time.monotonic()))


def huge_cloud(points):
    return np.tile(points, 5000)  # 5 M points, 120 MB


def first(count, change):
    """Return a hook that changes the first `count` messages only."""
    state = {'left': count}

    def hook(message):
        if state['left'] <= 0:
            return message
        state['left'] -= 1
        return change(message)
    return hook


def _set(field, values):
    def change(points):
        points = points.copy()
        points[field] = values(points)
        return points
    return change


def _imu_rates(rates, frame_id=None, stamp_offset_ns=0):
    def change(imu):
        from veckm_flow_ros.ros.messages import stamp_from_ns, stamp_to_ns
        imu.angular_velocity.x, imu.angular_velocity.y, imu.angular_velocity.z = rates
        if frame_id:
            imu.header.frame_id = frame_id
        imu.header.stamp = stamp_from_ns(stamp_to_ns(imu.header.stamp) + stamp_offset_ns)
        return [imu]
    return change


def _one_flow_ahead(points):
    points = points.copy()
    points['t'][len(points) // 2] = 9.9
    return points


def _wrong_weights(points):
    points = points.copy()
    wrong = np.arange(0, len(points), 100)  # 1 %: wrong flows of weight 3e38
    points['u'][wrong], points['v'][wrong], points['validity'][wrong] = 5000.0, -5000.0, 3e38
    return points


# name -> (duration_s of the bad input, hooks)
CASES = {
    'flow_t_ahead': (0.05, {'flow_hook': first(1, _one_flow_ahead)}),
    'flow_t_spread': (0.05, {'flow_hook': first(1, _set('t', lambda p: np.linspace(
        -10.0, 10.0, len(p))))}),
    'weight_3e38': (1.0, {'flow_hook': _wrong_weights}),
    'all_nan_flows': (0.3, {'flow_hook': _set('u', lambda p: np.nan)}),
    'gyro_1e300': (1.0, {'imu_hook': _imu_rates((0.0, 1e300, 0.0))}),
    'gyro_saturated': (1.0, {'imu_hook': _imu_rates((34.9, -34.9, 34.9))}),
    'gyro_deg_s': (1.0, {'imu_hook': _imu_rates(tuple(np.degrees(bench.OMEGA_RAD_S)))}),
    'second_imu': (1.0, {'imu_hook': lambda imu: _imu_rates((0.0, 0.0, 0.0))(imu) + [
        _imu_rates(tuple(-5 * bench.OMEGA_RAD_S), 'imu2')(imu)[0]]}),
    'imu_silent': (1.0, {'imu_hook': lambda imu: []}),
    'imu_day_off': (1.0, {'imu_hook': _imu_rates(tuple(bench.OMEGA_RAD_S),
                                                 stamp_offset_ns=-86400 * 10**9)}),
    'camera_half_size': (0.05, {'camera_hook': None}),
    'camera_fx_1e300': (0.05, {'camera_hook': None}),
    'huge_clouds': (0.5, {'flow_hook': first(3, huge_cloud)}),
}


def run_case(sender, probe, name, node_pid):
    duration_s, hooks = CASES[name]
    hooks = dict(hooks)
    from veckm_flow_ros.core.camera import CameraModel
    if name == 'camera_half_size':
        half = CameraModel.pinhole(173, 130, 125.0)
        hooks['camera_hook'] = lambda msg: sender.camera_info(half)
    elif name == 'camera_fx_1e300':
        k = sender.camera.K.reshape(-1).copy()
        k[0] = k[4] = 1e300
        hooks['camera_hook'] = lambda msg: sender.camera_info(sender.camera, k=k)
    start_s = time.monotonic()
    diagnostics = probe.diagnostics[bench.NODE_NAME]
    dropped = int(diagnostics[-1][1].get('dropped windows (total)', 0)) if diagnostics else 0
    sender.run(duration_s, **hooks)
    bad_end_s = time.monotonic()
    sender.run(AFTER_S)
    time.sleep(0.2)
    clock_offset_s = time.monotonic() - time.time_ns() * 1e-9  # wall -> monotonic
    received = [(at_ns * 1e-9 + clock_offset_s, msg)
                for at_ns, msg in probe.twists[bench.NODE_NAME]]
    twists = [msg for at_s, msg in received if at_s >= start_s]
    arrivals = np.sort([start_s, bad_end_s + AFTER_S]
                       + [at_s for at_s, _ in received if at_s >= start_s])
    after = arrivals[arrivals >= bad_end_s]
    angular = [np.linalg.norm([m.twist.angular.x, m.twist.angular.y, m.twist.angular.z])
               for m in twists]
    errors = [np.degrees(np.arccos(np.clip(np.array(
        [m.twist.linear.x, m.twist.linear.y, m.twist.linear.z]) @ bench.VELOCITY
        / np.linalg.norm(bench.VELOCITY), -1, 1))) for m in twists]
    min_ttcs = [value for at_s, value in sender.min_ttcs if at_s >= start_s]
    diagnostics = probe.diagnostics[bench.NODE_NAME]
    dropped_now = int(diagnostics[-1][1].get('dropped windows (total)', 0)) \
        if diagnostics else 0
    return {'case': name, 'silent_s': float(np.max(np.diff(arrivals))),
            'silent_after_s': float(np.max(np.diff(np.concatenate([[bad_end_s], after])))),
            'twists': len(twists), 'bad_angular': int(np.sum(np.array(angular) > 5.0)),
            'ttc_le_0': int(np.sum(np.array(min_ttcs) <= 0.0)),
            'error_deg': float(np.median(errors)) if errors else float('nan'),
            'dropped': dropped_now - dropped, 'rss_mb': rss_mb(node_pid)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--cases', nargs='+', default=list(CASES), choices=list(CASES))
    parser.add_argument('--log', action='store_true', help="print the node's log at the end")
    parser.add_argument('--node-fastdds-profile', default=None, metavar='XML',
                        help='run the node with this Fast DDS profile and '
                             'RMW_FASTRTPS_USE_QOS_FROM_XML=1 (e.g. config/fastdds_egomotion.xml)')
    args = parser.parse_args(argv)
    for name in bench.FASTDDS_PROFILE_VARIABLES:
        os.environ[name] = str(bench.PROFILE)
    import rclpy
    from veckm_flow_ros.core.camera import CameraModel
    camera = CameraModel.pinhole(bench.WIDTH, bench.HEIGHT, bench.FOCAL_PX)
    rclpy.init()
    probe = bench.Probe([bench.NODE_NAME])
    sender = Sender(probe, camera)
    with tempfile.TemporaryDirectory() as folder:
        camera_yaml = pathlib.Path(folder) / 'camera.yaml'
        camera.to_yaml(camera_yaml)
        command = [sys.executable, '-m', 'veckm_flow_ros.ros.egomotion_node', '--ros-args',
                   '-r', f'__node:={bench.NODE_NAME}', '-p', f'camera_yaml:={camera_yaml}']
        env = dict(os.environ)
        if args.node_fastdds_profile:
            env.update({name: str(pathlib.Path(args.node_fastdds_profile).resolve())
                        for name in bench.FASTDDS_PROFILE_VARIABLES})
            env['RMW_FASTRTPS_USE_QOS_FROM_XML'] = '1'
        node = subprocess.Popen(command, cwd=bench.ROOT, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        try:
            bench.wait_for_nodes(probe, [node])
            sender.run(3.0)  # start-up burst and warm-up
            rss_before = rss_mb(node.pid)
            rows = [run_case(sender, probe, name, node.pid) for name in args.cases]
            rss_after = rss_mb(node.pid)
        finally:
            bench.stop_node(node)
        log = node.stderr.read()
    print('| case | longest silence [s] | after the bad input [s] | twists | |angular| > 5 '
          'rad/s | min TTC <= 0 | direction error [deg] | dropped windows | RSS [MB] |')
    print('|---|---|---|---|---|---|---|---|---|')
    for row in rows:
        print(f'| {row["case"]} | {row["silent_s"]:.2f} | {row["silent_after_s"]:.2f} | '
              f'{row["twists"]} | {row["bad_angular"]} | {row["ttc_le_0"]} | '
              f'{row["error_deg"]:.1f} | {row["dropped"]} | {row["rss_mb"]:.0f} |')
    print(f'node RSS before the cases {rss_before:.0f} MB, after {rss_after:.0f} MB '
          f'({rss_after - rss_before:+.0f} MB)')
    if args.log:
        print(log)
    refused = [line for line in log.splitlines() if 'refused input' in line]
    print(f'{len(refused)} "refused input" log lines; node log lines: '
          f'{len(log.splitlines())}')
    probe.close()
    rclpy.shutdown()
    return 0


if __name__ == '__main__':
    sys.exit(main())
