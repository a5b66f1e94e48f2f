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
CPU of veckm_egomotion_node per thread over DDS at one flow rate: where the node's CPU goes.

    .venv/bin/python benchmarks/profile_egomotion_node.py [--rate 100000] [--imu]
                                                          [--max-flows 4000] [--wall-s 8]

Starts the node as its own process (its main(), as the console script does) and feeds it as
benchmarks/bench_egomotion_node.py does (exact normal flows of a rigid scene in ~/flow
messages of 24 ms, paced in real time; --imu: ~/imu at 200 Hz too). Prints the CPU of each
of the node's threads over the measured span (from /proc/<pid>/task/*/stat, after the
bench's warm-up), % of one core, named by the Python thread names (the node process writes
its threads' native ids to a file) or else by the OS (Fast DDS names its threads `dds.*`;
a thread with neither name is a native library's, e.g. a BLAS worker), and the total.
The node runs the code on PYTHONPATH (e.g. PYTHONPATH=/path/to/other/checkout for a
baseline; the package must be importable in the node process).
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Run in the node process: write {native id: thread name} after the node started, run main().
NODE_PROGRAM = """
import json, sys, threading, time
def dump(path=sys.argv[1]):
    time.sleep(2.0)
    with open(path, 'w') as out:
        json.dump({str(t.native_id): t.name for t in threading.enumerate()}, out)
threading.Thread(target=dump, daemon=True, name='thread_names').start()
sys.argv = [sys.argv[0]] + sys.argv[2:]
from veckm_flow_ros.ros.egomotion_node import main
sys.exit(main())
"""


def thread_cpu_s(pid: int) -> dict:
    """CPU time [s] (user + system) and OS name of each thread of process pid."""
    threads = {}
    for tid in os.listdir(f'/proc/{pid}/task'):
        try:
            stat = pathlib.Path(f'/proc/{pid}/task/{tid}/stat').read_text()
            comm = pathlib.Path(f'/proc/{pid}/task/{tid}/comm').read_text().strip()
        except OSError:
            continue  # the thread ended
        fields = stat.rsplit(')', 1)[1].split()
        threads[tid] = (comm, (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK'))
    return threads


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[1])
    parser.add_argument('--rate', type=float, default=100_000, help='flows/s offered')
    parser.add_argument('--imu', action='store_true', help='publish ~/imu at 200 Hz')
    parser.add_argument('--max-flows', type=int, default=4000, help="the node's max_flows")
    parser.add_argument('--wall-s', type=float, default=8.0, help='publishing time [s]')
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / 'benchmarks'))
    import bench_egomotion_node as bench
    for name in bench.FASTDDS_PROFILE_VARIABLES:
        os.environ[name] = str(bench.PROFILE)
    import rclpy
    from veckm_flow_ros.core.camera import CameraModel
    rclpy.init()
    probe = bench.Probe([bench.NODE_NAME])
    try:
        with tempfile.TemporaryDirectory() as folder:
            camera_yaml = pathlib.Path(folder) / 'camera.yaml'
            camera = CameraModel.pinhole(bench.WIDTH, bench.HEIGHT, bench.FOCAL_PX)
            camera.to_yaml(camera_yaml)
            names_file = pathlib.Path(folder) / 'threads.json'
            command = [sys.executable, '-c', NODE_PROGRAM, str(names_file), '--ros-args',
                       '-r', f'__node:={bench.NODE_NAME}', '-p', f'camera_yaml:={camera_yaml}',
                       '-p', f'use_imu:={str(args.imu).lower()}',
                       '-p', f'max_flows:={args.max_flows}', '-p', 'window_s:=0.03']
            # cwd: not a checkout, so that PYTHONPATH alone picks the code (python -c puts
            # the working directory first on sys.path).
            node = subprocess.Popen(command, cwd=folder, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True)
            try:
                bench.wait_for_nodes(probe, [node])
                probe.reset()
                start = {}

                def mark():
                    start['cpu'], start['wall_s'] = thread_cpu_s(node.pid), time.monotonic()
                timer = threading.Timer(bench.WARM_UP_S, mark)
                timer.start()
                flows = bench.publish_stream(probe, camera, args.rate, 0.024, args.wall_s,
                                             args.imu)
                timer.join()
                end, span_s = thread_cpu_s(node.pid), time.monotonic() - start['wall_s']
                names = json.loads(names_file.read_text()) if names_file.exists() else {}
                twists = len(probe.twists[bench.NODE_NAME])
            finally:
                bench.stop_node(node)
    finally:
        probe.close()
        rclpy.shutdown()
    rows = []
    for tid, (comm, cpu_s) in end.items():
        share = 100.0 * (cpu_s - start['cpu'].get(tid, (comm, 0.0))[1]) / span_s
        rows.append((share, names.get(tid) or f'{comm} (not a Python thread)'))
    print(f'{flows / args.wall_s:,.0f} flows/s, {"gyro" if args.imu else "flow"} '
          f'{args.max_flows}, {twists / args.wall_s:.1f} twists/s, {span_s:.1f} s measured\n')
    print('| thread | CPU [% of a core] |')
    print('|---|---|')
    for share, name in sorted(rows, reverse=True):
        if share >= 0.05:
            print(f'| {name} | {share:.1f} |')
    print(f'| total ({len(rows)} threads) | {sum(share for share, _ in rows):.1f} |')


if __name__ == '__main__':
    main()
