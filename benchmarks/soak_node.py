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
Soak: veckm_flow_node for a long run over real DDS, sampled every minute.

    .venv/bin/python benchmarks/soak_node.py --minutes 30 --rate 1e6

The node runs as its own process with its defaults (a flow for every event). A publisher
process plays the real evt3 recording ../shared/data/recordings/py_test_events_1, decoded
once, its sensor times compressed so that it carries --rate events/s, encoded once as mono
packets of 1 ms and looped for --minutes by shifting time_base (constant memory, continuous
sensor time, header stamps from the wall clock at sensor pace, as a driver stamps). This
process subscribes to ~/flow and /diagnostics and prints one row per minute: input and output
rates, latency p50/p99 over the minute (receive time - send time of the block's newest event),
the node's RSS (VmRSS) and its drop, loss and failure counters. At the end: the RSS drift
between minute 5 and the last minute, and the p99 range over minutes 2..end.
"""

import argparse
import gc
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench_node  # noqa: E402, I100 - the node benchmark's probe and helpers

ROOT = bench_node.ROOT
NODE_NAME = bench_node.NODE_NAME
PACKET_NS = 1_000_000


def looped_packets(rate_events_s: float):
    """One loop of the recording at rate_events_s as mono packets: (packets, period_ns)."""
    from veckm_flow_ros.eventio.bag import read_event_messages
    from veckm_flow_ros.eventio.decode import PacketDecoder
    from veckm_flow_ros.eventio.events import EventArray
    from veckm_flow_ros.eventio.packets import encode_packets
    decoder = PacketDecoder()
    events = EventArray.concatenate([
        decoder.decode(m.msg.encoding, m.msg.events, m.msg.time_base, m.msg.width,
                       m.msg.height).events for m in read_event_messages(bench_node.RECORDING)])
    span_ns = int(events.t_ns[-1] - events.t_ns[0])
    # Sensor time scaled by recorded rate / wanted rate (< 1: a busier camera).
    scale = len(events) / (span_ns * 1e-9) / rate_events_s
    t_ns = ((events.t_ns - events.t_ns[0]) * scale).astype(np.int64)
    period_ns = int(t_ns[-1]) + 1000  # the next loop's first event 1 us after the last
    packets = encode_packets(EventArray(t_ns, events.x, events.y, events.p), 'mono',
                             packet_duration_ns=PACKET_NS)
    return packets, period_ns


def run_publisher(args):
    """Publish the looped recording for args.minutes; print a summary line at the end."""
    import rclpy
    from event_camera_msgs.msg import EventPacket
    packets, period_ns = looped_packets(args.rate)
    messages = []
    for packet in packets:
        msg = EventPacket()
        msg.header.frame_id = 'soak_camera'
        msg.width, msg.height = bench_node.WIDTH, bench_node.HEIGHT
        msg.encoding = 'mono'
        msg.events = packet.data
        messages.append(msg)
    rclpy.init()
    try:
        node = rclpy.create_node('soak_publisher')
        publisher = node.create_publisher(EventPacket, f'/{NODE_NAME}/events',
                                          bench_node.driver_qos())
        while publisher.get_subscription_count() == 0:
            time.sleep(0.05)
        time.sleep(0.5)
        gc.collect()
        gc.freeze()
        gc.disable()  # as a driver: no collection stalls in the send loop
        start = time.perf_counter()
        start_wall_ns = time.time_ns()
        end_s = args.minutes * 60.0
        seq, events, loop = 0, 0, 0
        while True:
            shift_ns = loop * period_ns
            for packet, msg in zip(packets, messages):
                t_ns = packet.first_t_ns + shift_ns
                if t_ns * 1e-9 >= end_s:
                    print(f'PUBLISHED {seq} {events} {start_wall_ns}', flush=True)
                    return 0
                delay = start + t_ns * 1e-9 - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                msg.time_base = int(packet.time_base + shift_ns)
                msg.seq = seq
                msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(
                    start_wall_ns + t_ns, 1_000_000_000)
                publisher.publish(msg)
                seq += 1
                events += packet.num_events
            loop += 1
    finally:
        rclpy.shutdown()


def _rss_mib(pid: int) -> float:
    for line in pathlib.Path(f'/proc/{pid}/status').read_text().splitlines():
        if line.startswith('VmRSS:'):
            return int(line.split()[1]) / 1024
    return float('nan')


def run_soak(args):
    import rclpy
    rclpy.init()
    probe = bench_node.Probe()
    log = tempfile.NamedTemporaryFile(mode='w+', suffix='_soak_node.log', delete=False)
    node = subprocess.Popen(
        [sys.executable, '-c', 'import sys; from veckm_flow_ros.ros import main; '
         'sys.exit(main())', '--ros-args', '-r', f'__node:={NODE_NAME}',
         '-p', 'diagnostics_period_s:=1.0'], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log,
        env=bench_node.publisher_env(dict(os.environ), args.node_fastdds_profile))
    publisher = None
    rows = []
    try:
        while probe.node.count_publishers(f'/{NODE_NAME}/flow') == 0:
            if node.poll() is not None:
                raise RuntimeError(f'the node did not start; its log: {log.name}')
            time.sleep(0.1)
        publisher = subprocess.Popen(
            [sys.executable, __file__, '--role', 'publisher', '--minutes', str(args.minutes),
             '--rate', str(args.rate)], cwd=ROOT,
            env=bench_node.publisher_env(dict(os.environ),
                                         str(bench_node.DRIVER_FASTDDS_PROFILE)),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        while not probe.records and publisher.poll() is None:
            time.sleep(0.01)
        start = time.monotonic()
        taken = 0
        print(f'{"min":>4} {"in M ev/s":>9} {"out M fl/s":>10} {"p50 ms":>7} {"p99 ms":>7} '
              f'{"RSS MiB":>8} {"dropped":>7} {"lost":>5} {"failed":>6} {"resets":>6}',
              flush=True)
        for minute in range(1, args.minutes + 1):
            while time.monotonic() < start + 60 * minute and publisher.poll() is None:
                time.sleep(0.5)
            records = np.array(probe.records[taken:], dtype=np.int64).reshape(-1, 4)
            taken += len(records)
            diagnostics = dict(probe.diagnostics)
            latency_ms = (records[:, 0] - records[:, 1]) * 1e-6
            row = {
                'minute': minute,
                'in': float(diagnostics.get('input events/s', 'nan')) / 1e6,
                'out': records[:, 2].sum() / 60e6,
                'p50': float(np.percentile(latency_ms, 50)) if len(records) else np.nan,
                'p99': float(np.percentile(latency_ms, 99)) if len(records) else np.nan,
                'rss': _rss_mib(node.pid),
                'dropped': diagnostics.get('dropped packets (total)', '?'),
                'lost': diagnostics.get('packets lost upstream (total)', '?'),
                'failed': diagnostics.get('failed block computations (total)', '?'),
                'resets': diagnostics.get('stream resets (total)', '?'),
            }
            rows.append(row)
            print(f'{minute:>4} {row["in"]:>9.2f} {row["out"]:>10.2f} {row["p50"]:>7.1f} '
                  f'{row["p99"]:>7.1f} {row["rss"]:>8.0f} {row["dropped"]:>7} '
                  f'{row["lost"]:>5} {row["failed"]:>6} {row["resets"]:>6}', flush=True)
            if publisher.poll() is not None:
                break
    finally:
        if publisher is not None and publisher.poll() is None:
            publisher.terminate()
        node.terminate()
        node.wait(timeout=30)
        probe.close()
        rclpy.shutdown()
    if len(rows) >= 6:
        first = rows[4]['rss']
        last = rows[-1]['rss']
        p99 = [row['p99'] for row in rows[1:]]
        print(f'RSS minute 5 -> {rows[-1]["minute"]}: {first:.0f} -> {last:.0f} MiB '
              f'({100 * (last - first) / first:+.1f} %); p99 over minutes '
              f'2-{rows[-1]["minute"]}: {min(p99):.1f}-{max(p99):.1f} ms; node log: {log.name}')
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--minutes', type=int, default=30)
    parser.add_argument('--rate', type=float, default=1e6, help='input events/s')
    parser.add_argument('--node-fastdds-profile', default=str(bench_node.DRIVER_FASTDDS_PROFILE),
                        help="Fast DDS XML profile of the node process (default: the drivers' "
                             "16 MiB shared-memory profile; '' = Fast DDS defaults, whose 512 KiB "
                             'segment is smaller than one ~/flow message at 1 M flows/s)')
    parser.add_argument('--role', choices=('soak', 'publisher'), default='soak')
    args = parser.parse_args()
    from veckm_flow_ros.runtime import set_omp_wait_policy
    set_omp_wait_policy()
    os.environ.setdefault('ROS_DOMAIN_ID', str(150 + os.getpid() % 50))
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    if args.role == 'publisher':
        return run_publisher(args)
    if not bench_node.RECORDING.is_dir():
        print(f'error: the recording {bench_node.RECORDING} is not there', file=sys.stderr)
        return 1
    return run_soak(args)


if __name__ == '__main__':
    sys.exit(main())
