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
veckm_egomotion_node over real DDS at a given flow rate: windows, latency, CPU.

    .venv/bin/python benchmarks/bench_egomotion_node.py [--rates 0 100000 1000000] [--wall-s 6]
                                                        [--baseline-tree DIR [--swap]]
                                                        [--all-outputs]

--baseline-tree DIR: DIR's node (another checkout, extensions built in place) runs beside
this tree's at the same time, fed the same messages, one row each, and a table of the
ratios (this / baseline) follows: both see the same load, which runs one after the other do
not (this machine drifts by 2-3 points of a core between runs). The node started and fed
first reads 5-9 % more CPU than the same code in the second place (measured with the same
code in both, 2026-11-29): --swap puts the baseline first, and a comparison reports runs in
both places.
For every (rate, configuration) it starts the node as its own process (the console script's
main(), a 346x260 calibration from camera_yaml) and publishes here, paced in real time,
~/flow messages of --message-ms (24 ms: the flow node's automatic block with the default
model) holding rate x message flows each: exact normal flows of a rigid scene (random
points 2-6 m away, the camera moving forward and turning), serialized as veckm_flow_node
serializes them, stamped with the wall clock (sensor time = wall time). Configurations
`gyro` also publish ~/imu at 200 Hz; `biased` (not run by default) gives the magnitudes
errors of the flow model's kind, so that without a gyroscope the estimator takes its
rotation start; max_flows is the node's parameter (flows per window
given to the estimator). Both processes get the driver's Fast DDS profile (16 MiB
shared-memory segment: a ~/flow message at 1 M flows/s is ~480 KB).

This process subscribes to ~/twist and /diagnostics; --all-outputs also to ~/foe,
~/time_to_contact and ~/min_time_to_contact (the node computes and publishes those only
while something subscribes).
Each run first publishes until the node has published /diagnostics twice (it has started
and spins: the messages it received before come in one burst), then measures.
Columns: flows/s offered; twists/s received here (1 / window_s when the node keeps up);
dropped windows during the measured run (the estimator thread fell behind); window
compute p50 / p99 [ms] (the estimator, from the node's /diagnostics); node latency p50 /
p99 [ms] (arrival of the ~/flow message that closed a window -> its outputs published,
/diagnostics); end-to-end p50 / p99
[ms] (end of a window in sensor = wall time -> its ~/twist received here: includes waiting
for the next ~/flow message, which closes the window); node CPU (% of one core, from
/proc over the measured span, after 1.5 s of warm-up), the estimator thread's share of it
(thread CPU time around estimate(), /diagnostics), and the node CPU minus the idle node's
(rate 0, same configuration: with `gyro` the IMU messages, measured in the same run) per
100 k flows/s; direction error [deg] (median over
the received twists against the simulated motion).
Both processes share this machine's cores.
"""

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
import time

from bench_egomotion import flow_model_gain
from bench_node import _proc_cpu_s, FASTDDS_PROFILE_VARIABLES
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NODE_NAME = 'veckm_egomotion_bench'
PROFILE = ROOT / 'config' / 'fastdds_event_driver.xml'
WIDTH, HEIGHT, FOCAL_PX = 346, 260, 250.0
VELOCITY = np.array([0.2, -0.1, 1.0])
OMEGA_RAD_S = np.array([0.05, -0.1, 0.2])
WARM_UP_S = 1.5
CONFIGS = {'flow 4000': {'use_imu': False, 'max_flows': 4000},
           'flow 4000 biased': {'use_imu': False, 'max_flows': 4000, 'biased': True},
           'gyro 4000': {'use_imu': True, 'max_flows': 4000},
           'flow 1000': {'use_imu': False, 'max_flows': 1000},
           'gyro 1000': {'use_imu': True, 'max_flows': 1000}}


def rigid_scene_messages(camera, flows_per_message: int, count: int, seed: int = 0,
                         biased=False):
    """
    `count` sets of exact normal flows (x, y, u, v) of the rigid scene, for reuse.

    biased: magnitudes with errors of the flow model's kind (bench_egomotion's
    flow_model_gain), so that the estimator without a gyroscope takes the rotation start as
    on the flow model's flows.
    """
    rng = np.random.default_rng(seed)
    cell_gain = np.exp(0.3 * rng.standard_normal((HEIGHT // 32 + 1, WIDTH // 32 + 1)))
    sets = []
    for _ in range(count):
        x_px = rng.uniform(0, WIDTH - 1, flows_per_message)
        y_px = rng.uniform(0, HEIGHT - 1, flows_per_message)
        x, y = camera.normalize(x_px, y_px)
        inverse_depth = 1.0 / rng.uniform(2.0, 6.0, flows_per_message)
        (vx, vy, vz), (wx, wy, wz) = VELOCITY, OMEGA_RAD_S
        dx = (x * vz - vx) * inverse_depth + x * y * wx - (1 + x * x) * wy + y * wz
        dy = (y * vz - vy) * inverse_depth + (1 + y * y) * wx - x * y * wy - x * wz
        u, v = camera.velocity_to_pixels(x, y, dx, dy)
        angle = rng.uniform(0, np.pi, flows_per_message)
        magnitude = u * np.cos(angle) + v * np.sin(angle)
        if biased:
            magnitude = magnitude * flow_model_gain(x_px, y_px, magnitude, angle, rng,
                                                    cell_gain)
        sets.append((x_px, y_px, magnitude * np.cos(angle), magnitude * np.sin(angle)))
    return sets


class Probe:
    """
    Publisher of ~/flow and ~/imu, subscriber of ~/twist and /diagnostics (this process).

    names: the nodes' names (one node, or this tree's and the baseline's side by side):
    every message goes to each of them; twists and diagnostics are kept per name.
    """

    def __init__(self, names, all_outputs=False):
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from geometry_msgs.msg import PointStamped, TwistStamped
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import Image, Imu, PointCloud2
        from std_msgs.msg import Float32
        self.node = rclpy.create_node('egomotion_bench_probe')
        self.names = list(names)
        qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        self.flow_pubs = [self.node.create_publisher(PointCloud2, f'/{name}/flow', qos)
                          for name in self.names]
        self.imu_pubs = [self.node.create_publisher(Imu, f'/{name}/imu', qos)
                         for name in self.names]
        self.reset()
        for name in self.names:
            self.node.create_subscription(
                TwistStamped, f'/{name}/twist',
                lambda msg, name=name: self.twists[name].append((time.time_ns(), msg)), qos)
            if all_outputs:  # the node computes and publishes these only while subscribed
                for msg_type, topic in ((PointStamped, 'foe'), (Image, 'time_to_contact'),
                                        (Float32, 'min_time_to_contact')):
                    self.node.create_subscription(msg_type, f'/{name}/{topic}',
                                                  lambda msg: None, qos)
        self.node.create_subscription(DiagnosticArray, '/diagnostics', self._on_diagnostics, 10)
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self.executor.spin, daemon=True)
        self.thread.start()

    def _on_diagnostics(self, msg):
        for status in msg.status:
            name = status.name.split(':')[0]
            if name in self.diagnostics:
                self.diagnostics[name].append((time.monotonic(),
                                               {kv.key: kv.value for kv in status.values}))

    def reset(self):
        self.twists = {name: [] for name in self.names}  # (receive wall ns, message)
        self.diagnostics = {name: [] for name in self.names}

    def close(self):
        self.executor.shutdown()
        self.thread.join(timeout=10)
        self.node.destroy_node()


def publish_stream(probe, camera, rate_flows_s, message_s, wall_s, use_imu,
                   until=lambda: False, biased=False):
    """
    Publish ~/flow (and ~/imu) paced in real time for wall_s; return flows published.

    until: stop earlier once this returns True (checked before each message). biased: the
    magnitudes of rigid_scene_messages(biased=True).
    """
    from sensor_msgs.msg import Imu
    from veckm_flow_ros.eventio.flow_cloud import make_flow_points
    from veckm_flow_ros.ros.cdr import pointcloud2_cdr
    from veckm_flow_ros.ros.messages import stamp_from_ns
    per_message = int(round(rate_flows_s * message_s))
    sets = rigid_scene_messages(camera, max(per_message, 1), 8, biased=biased) \
        if per_message else []
    t_rel = np.linspace(-message_s, 0.0, max(per_message, 1))
    start_s = time.monotonic()
    next_s, next_imu_s, flows, index = start_s + message_s, start_s, 0, 0
    while time.monotonic() - start_s < wall_s and not until():
        now_s = time.monotonic()
        if use_imu and now_s >= next_imu_s:
            imu = Imu()
            imu.header.stamp = stamp_from_ns(time.time_ns())
            imu.angular_velocity.x, imu.angular_velocity.y, imu.angular_velocity.z = (
                float(w) for w in OMEGA_RAD_S)
            for publisher in probe.imu_pubs:
                publisher.publish(imu)
            next_imu_s += 0.005
        if now_s >= next_s:
            if per_message:
                x, y, u, v = sets[index % len(sets)]
                points = make_flow_points(x, y, t_rel, u, v)
                message = pointcloud2_cdr(points, time.time_ns(), 'camera')
                for publisher in probe.flow_pubs:
                    publisher.publish(message)
                flows += per_message
                index += 1
            next_s += message_s
        time.sleep(max(0.0, min(next_s, next_imu_s if use_imu else next_s)
                       - time.monotonic()))
    return flows


def _median(rows, key):
    values = [float(values[key]) for _, values in rows if values.get(key, 'nan') != 'nan']
    return float(np.median(values)) if values else float('nan')


def _max(rows, key):
    values = [float(values[key]) for _, values in rows if values.get(key, 'nan') != 'nan']
    return float(np.max(values)) if values else float('nan')


def stop_node(node, timeout_s=10.0):
    """SIGTERM the node process; SIGKILL it when it has not exited after timeout_s."""
    node.terminate()
    try:
        node.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        node.kill()
        node.wait()


def wait_for_nodes(probe, nodes, timeout_s=30.0):
    """Wait until every node process subscribes to its ~/flow; raise if one exits."""
    deadline = time.monotonic() + timeout_s
    while any(publisher.get_subscription_count() == 0 for publisher in probe.flow_pubs):
        for node in nodes:
            if time.monotonic() > deadline or node.poll() is not None:
                raise RuntimeError(f'the node did not start: {node.stderr.read()}')
        time.sleep(0.05)


def warm_up(args, probe, camera, rate, config, timeout_s=60.0):
    """
    Publish as measured until every node has published /diagnostics twice (it spins).

    The node subscribes before it spins: the messages of its first second or two reach it
    in one burst (seen: 1.9 s late, ten messages within 2 ms), which closes several windows
    at once and overflows its queue. That is start-up, not the steady state measured here.
    Return each node's dropped windows (total) so far.
    """
    def spinning():
        return all(len(rows) >= 2 for rows in probe.diagnostics.values())
    published = publish_stream(probe, camera, rate, args.message_ms * 1e-3, timeout_s,
                               config['use_imu'], until=spinning,
                               biased=config.get('biased', False))
    if not spinning():
        raise RuntimeError(f'a node published no /diagnostics within {timeout_s:g} s '
                           f'({published} flows sent)')
    return {name: int(rows[-1][1].get('dropped windows (total)', 0))
            for name, rows in probe.diagnostics.items()}


def start_node(tree, name, camera_yaml, config, window_s):
    """Start the egomotion node of the source tree `tree` as its own process `name`."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    for variable in FASTDDS_PROFILE_VARIABLES:
        env[variable] = str(PROFILE)
    command = [sys.executable, '-m', 'veckm_flow_ros.ros.egomotion_node', '--ros-args',
               '-r', f'__node:={name}', '-p', f'camera_yaml:={camera_yaml}',
               '-p', f'use_imu:={str(config["use_imu"]).lower()}',
               '-p', f'max_flows:={config["max_flows"]}', '-p', 'diagnostics_period_s:=1.0',
               '-p', f'window_s:={window_s}']
    # The tree is the working directory: `python -m` puts it first on sys.path.
    return subprocess.Popen(command, env=env, cwd=tree, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def measure(args, probe, trees, camera_yaml, rate, config_name, config) -> list:
    """One row per tree: its node measured while all of them receive the same messages."""
    nodes = [start_node(tree, name, camera_yaml, config, args.window_s)
             for name, tree in zip(probe.names, trees)]
    try:
        wait_for_nodes(probe, nodes)
        from veckm_flow_ros.core.camera import CameraModel
        camera = CameraModel.from_yaml(camera_yaml)
        probe.reset()
        dropped_before = warm_up(args, probe, camera, rate, config)
        probe.reset()
        measured = {}

        def mark():
            measured['cpu_s'] = [_proc_cpu_s(node.pid) for node in nodes]
            measured['wall_s'] = time.monotonic()
        timer = threading.Timer(WARM_UP_S, mark)
        timer.start()
        flows = publish_stream(probe, camera, rate, args.message_ms * 1e-3,
                               args.wall_s, config['use_imu'],
                               biased=config.get('biased', False))
        timer.join()
        cpu_s, end_s = [_proc_cpu_s(node.pid) for node in nodes], time.monotonic()
        time.sleep(1.2)  # the last windows and a /diagnostics period arrive
        rows = []
        for index, name in enumerate(probe.names):
            cpu_percent = (100.0 * (cpu_s[index] - measured['cpu_s'][index])
                           / (end_s - measured['wall_s']))
            diagnostics = probe.diagnostics[name]
            steady = [row for row in diagnostics if row[0] > measured['wall_s']]
            twists = probe.twists[name]
            end_to_end_ms = [
                (received - (msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec)
                 - args.window_s / 2 * 1e9) / 1e6 for received, msg in twists]
            errors = []
            for _, msg in twists:
                direction = np.array([msg.twist.linear.x, msg.twist.linear.y,
                                      msg.twist.linear.z])
                cosine = direction @ VELOCITY / np.linalg.norm(VELOCITY)
                errors.append(np.degrees(np.arccos(np.clip(cosine, -1.0, 1.0))))
            totals = diagnostics[-1][1] if diagnostics else {}
            rows.append({
                'tree': name, 'rate': rate, 'config': config_name,
                'offered': flows / args.wall_s, 'twists_per_s': len(twists) / args.wall_s,
                'dropped': int(totals.get('dropped windows (total)', -1)) - dropped_before[name],
                'compute_p50': _median(steady, 'window compute p50 [ms]'),
                'compute_p99': _max(steady, 'window compute p99 [ms]'),
                'latency_p50': _median(steady, 'window latency p50 [ms]'),
                'latency_p99': _max(steady, 'window latency p99 [ms]'),
                'e2e_p50': float(np.percentile(end_to_end_ms, 50)) if twists else float('nan'),
                'e2e_p99': float(np.percentile(end_to_end_ms, 99)) if twists else float('nan'),
                'cpu': cpu_percent,
                'estimator_cpu': _median(steady, 'estimator CPU [% of a core]'),
                'error_deg': float(np.median(errors)) if errors else float('nan'),
            })
        return rows
    finally:
        for node in nodes:
            stop_node(node)


def per_100k(row, idle_cpu: dict) -> float:
    """Node CPU above the idle node's (same tree and configuration) per 100 k flows/s."""
    if not row['offered']:
        return float('nan')
    return (row['cpu'] - idle_cpu.get((row['tree'], row['config']), float('nan'))) \
        / (row['offered'] / 1e5)


def print_table(rows, idle_cpu: dict):
    trees = len({row['tree'] for row in rows}) > 1
    print(('| node ' if trees else '') +
          '| flows/s | config | twists/s | dropped windows | compute p50/p99 [ms] | '
          'node latency p50/p99 [ms] | end-to-end p50/p99 [ms] | node CPU [% core] | '
          'of it estimator | CPU - idle per 100 k flows/s | direction error [deg] |')
    print('|---' * (12 if trees else 11) + '|')
    for row in rows:
        print((f'| {row["tree"]} ' if trees else '') +
              f'| {row["offered"]:,.0f} | {row["config"]} | {row["twists_per_s"]:.1f} | '
              f'{row["dropped"]} | {row["compute_p50"]:.1f} / {row["compute_p99"]:.1f} | '
              f'{row["latency_p50"]:.1f} / {row["latency_p99"]:.1f} | '
              f'{row["e2e_p50"]:.1f} / {row["e2e_p99"]:.1f} | {row["cpu"]:.1f} | '
              f'{row["estimator_cpu"]:.1f} | '
              f'{per_100k(row, idle_cpu):.1f} | {row["error_deg"]:.2f} |')


def print_ratios(rows, idle_cpu: dict, baseline_name: str):
    """Print this tree's CPU above idle per 100 k flows/s over the baseline's (same run)."""
    print()
    print('| flows/s | config | CPU - idle per 100 k flows/s: this / baseline |')
    print('|---|---|---|')
    baseline = {(row['rate'], row['config']): row for row in rows
                if row['tree'] == baseline_name}
    for row in rows:
        other = baseline.get((row['rate'], row['config']))
        if row['tree'] == NODE_NAME and row['rate'] and other is not None:
            ratio = per_100k(row, idle_cpu) / per_100k(other, idle_cpu)
            print(f'| {row["offered"]:,.0f} | {row["config"]} | {ratio:.2f} |')


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[1])
    parser.add_argument('--rates', type=float, nargs='+', default=[0, 100_000, 1_000_000],
                        help='flow rates [flows/s]; 0 = the idle node (CPU baseline)')
    parser.add_argument('--configs', nargs='+', choices=list(CONFIGS),
                        default=[name for name in CONFIGS if not CONFIGS[name].get('biased')])
    parser.add_argument('--wall-s', type=float, default=6.0, help='publishing time per run [s]')
    parser.add_argument('--message-ms', type=float, default=24.0,
                        help='sensor time per ~/flow message [ms]')
    parser.add_argument('--window-s', type=float, default=0.03, help='node window_s [s]')
    parser.add_argument('--all-outputs', action='store_true',
                        help='also subscribe to ~/foe, ~/time_to_contact and '
                             '~/min_time_to_contact (default: ~/twist and /diagnostics)')
    parser.add_argument('--baseline-tree', type=pathlib.Path, default=None, metavar='DIR',
                        help='also run the node of this source tree (a checkout with its '
                             'extensions built in place) side by side, fed the same '
                             'messages, and print the ratio')
    parser.add_argument('--swap', action='store_true',
                        help="start and feed the baseline's node first (the first place "
                             'reads a few %% more CPU)')
    args = parser.parse_args(argv)
    if args.swap and args.baseline_tree is None:
        parser.error('--swap needs --baseline-tree')
    for name in FASTDDS_PROFILE_VARIABLES:
        os.environ[name] = str(PROFILE)
    import rclpy
    from veckm_flow_ros.core.camera import CameraModel
    rclpy.init()
    names, trees = [NODE_NAME], [ROOT]
    baseline_name = f'{NODE_NAME}_baseline'
    if args.baseline_tree is not None:
        names.append(baseline_name)
        trees.append(args.baseline_tree.resolve())
    if args.swap:
        names, trees = names[::-1], trees[::-1]
    probe = Probe(names, args.all_outputs)
    rows = []
    idle_cpu = {}
    try:
        with tempfile.TemporaryDirectory() as folder:
            camera_yaml = pathlib.Path(folder) / 'camera.yaml'
            CameraModel.pinhole(WIDTH, HEIGHT, FOCAL_PX).to_yaml(camera_yaml)
            for rate in args.rates:
                for config_name in args.configs:
                    print(f'rate {rate:,.0f} flows/s, {config_name} ...', file=sys.stderr,
                          flush=True)
                    for row in measure(args, probe, trees, camera_yaml, rate, config_name,
                                       CONFIGS[config_name]):
                        if rate == 0:
                            idle_cpu[(row['tree'], config_name)] = row['cpu']
                        rows.append(row)
    finally:
        probe.close()
        rclpy.shutdown()
    print_table(rows, idle_cpu)
    if len(names) > 1:
        print_ratios(rows, idle_cpu, baseline_name)


if __name__ == '__main__':
    main()
