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
veckm_flow_node over real DDS: sustained input rate, latency, CPU and memory.

    .venv/bin/python benchmarks/bench_node.py --model PATH [--speeds 1 4 10] [--wall-s 3]

For every (configuration, source, speed) it starts the node as its own process (the console
script's main()), a publisher process that sends EventPackets paced by their sensor times
(divided by the speed factor in replay mode) and stamped at sensor pace from the wall clock at
its start (at 1x that is what a driver stamps), and subscribes here to ~/flow (raw CDR: only
header stamp, point count and the oldest point's t are read) and /diagnostics. Sources:
- `real`: the evt3 640x480 recording ../shared/data/recordings/py_test_events_1 (decoded once,
  looped with continuous sensor time, re-encoded as evt3 packets of 1 ms);
- `synthetic`: a 640x480 grating of straight edges translating at 300 px/s, `--synthetic-rate`
  events/s at 1x (mono packets of 1 ms; a seamless period replayed by shifting time_base).
Speed, --mode rate (default): a camera with `speed` times the source's event rate -- the
source's sensor times are divided by `speed` and played in real time (the scene moves that
much faster), so each 20 ms block holds `speed` times the events, as with a busier camera.
--mode replay: the source as recorded, played `speed` times faster (like ros2 bag play
--rate): the node must get through `speed` sensor seconds (and blocks) per wall second.
Configurations: `every` (a flow for every event), `stride8` (target_stride = 8),
`every_unfiltered` (`every` with min_validity 0: every flow published, for an A/B of the
validity filter) and `every_short` / `stride8_short` (long_context_below_px_s 0: no second look
at slow flows, for an A/B of the long context).
Messages: one per --packet-wall-ms of wall time (default 1 ms, like a driver cutting packets
by time); in replay mode at speed s each carries s ms of sensor time.

Columns: input M events/s offered (events published / publish wall time); M flows/s received
(over the span of the output);
drops = packets the node dropped (queue over capacity) + packets lost in DDS (seq gaps);
latency p50/p99 = receive wall time of each ~/flow message - wall time at which its newest
flow's event was sent (the publisher stamps at sensor pace, so header.stamp maps back to the
send time at any speed): centred, tau - block / 2 + processing + transport; "p99 old" = the
same for the message's oldest flow (a block earlier: tau + block / 2 + ...); node CPU %
(100 = one core) over the replay; node peak RSS (VmHWM, MiB); lag = how long flows kept coming
after the input ended. "sustained" = no drops and lag < LAG_LIMIT_S (the node kept up);
"pub late" = p99 / max of how long after its due time the publisher sent each packet (the
harness's own stalls; the latencies count from the due time, so they include them). The
publisher stands in for a camera driver: it gets the Fast DDS profile the launch files give a
driver (--publisher-fastdds-profile: a 16 MiB shared-memory segment) and runs its send loop
without Python's garbage collector (a collection over the prepared messages stalled it by
100-400 ms in some runs).
All three processes share this machine's cores: the node's numbers include that contention.
A 3 s run at 1x gives ~90 ~/flow messages, so its p99 is about its worst message (start-up
included); `--wall-s 10` (~310 messages) gives a percentile.
"""

import argparse
import gc
import os
import pathlib
import struct
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RECORDING = ROOT.parent / 'shared' / 'data' / 'recordings' / 'py_test_events_1'
NODE_NAME = 'veckm_flow_bench'
WIDTH, HEIGHT = 640, 480
LAG_LIMIT_S = 0.25
QUIET_S = 2.0
SHUTDOWN_PROBLEMS = ('terminate called', 'Traceback', 'Exception ignored', 'Segmentation')
# /diagnostics keys of the flow node's long context (ros/node.py).
LONG_CONTEXT_KEY = ('flows estimated again with the long context, slower than '
                    'long_context_below_px_s (total)')
LONG_CONTEXT_SKIPPED_KEY = ('blocks computed without the long context while the node was '
                            'behind (total)')
CONFIGS = {'every': {'target_stride': 1}, 'stride8': {'target_stride': 8},
           'every_unfiltered': {'target_stride': 1, 'min_validity': 0.0},
           'every_short': {'target_stride': 1, 'long_context_below_px_s': 0.0},
           'stride8_short': {'target_stride': 8, 'long_context_below_px_s': 0.0}}
DRIVER_FASTDDS_PROFILE = ROOT / 'config' / 'fastdds_event_driver.xml'
FASTDDS_PROFILE_VARIABLES = ('FASTDDS_DEFAULT_PROFILES_FILE', 'FASTRTPS_DEFAULT_PROFILES_FILE')


# ------------------------------------------------------------------------------------------
# Sources: lists of (sensor time of the packet [ns], encoding, payload bytes, time_base, events)


def real_packets(loops: int, packet_ns: int, compress: float = 1.0):
    """
    Decode the evt3 recording once and re-encode it `loops` times with continuous time.

    compress > 1 divides its sensor times by that factor (a camera with `compress` times the
    event rate: the scene moves that much faster), before the re-encoding.
    """
    from veckm_flow_ros.eventio.bag import read_event_messages
    from veckm_flow_ros.eventio.decode import PacketDecoder
    from veckm_flow_ros.eventio.events import EventArray
    from veckm_flow_ros.eventio.packets import encode_packets
    decoder = PacketDecoder()
    chunks = [decoder.decode(m.msg.encoding, m.msg.events, m.msg.time_base, m.msg.width,
                             m.msg.height).events for m in read_event_messages(RECORDING)]
    events = EventArray.concatenate(chunks)
    t_ns = (events.t_ns - events.t_ns[0]) // compress + 100_000_000
    t_ns = (t_ns // 1000) * 1000  # evt3 keeps microseconds
    # Seamless: the next loop's first event 1 us after this loop's last (a gap here would
    # hold every block at the seam until the next event, in the latency percentiles).
    period_ns = int(t_ns[-1] - t_ns[0]) + 1000
    looped = EventArray(np.concatenate([t_ns + k * period_ns for k in range(loops)]),
                        np.tile(events.x, loops), np.tile(events.y, loops),
                        np.tile(events.p, loops))
    return [(p.first_t_ns, 'evt3', p.data, p.time_base, p.num_events)
            for p in encode_packets(looped, 'evt3', packet_duration_ns=packet_ns)]


def grating_events(rate_events_s: float, speed_px_s: float = 300.0, angle_rad: float = 0.5):
    """
    One seamless period of a translating grating of edges: (EventArray, period_ns).

    Each pixel fires when an edge passes: rate = W * H * speed / spacing, so the edge spacing
    is chosen for rate_events_s; the period is a whole number of edge passages.
    """
    from veckm_flow_ros.eventio.events import EventArray
    spacing_px = WIDTH * HEIGHT * speed_px_s / rate_events_s
    crossings = max(1, int(round(1.0 * speed_px_s / spacing_px)))  # ~1 s of sensor time
    period_s = crossings * spacing_px / speed_px_s
    ys, xs = np.mgrid[0:HEIGHT, 0:WIDTH]
    along = (xs * np.cos(angle_rad) + ys * np.sin(angle_rad)).ravel()
    first_s = np.mod(along, spacing_px) / speed_px_s
    t_s = (first_s[:, None] + np.arange(crossings)[None, :] * spacing_px / speed_px_s).ravel()
    rng = np.random.default_rng(0)
    t_s = np.mod(t_s + rng.uniform(0, 2e-4, len(t_s)), period_s)
    order = np.argsort(t_s, kind='stable')
    pixel = np.repeat(np.arange(WIDTH * HEIGHT), crossings)[order]
    events = EventArray(np.round(t_s[order] * 1e9).astype(np.int64), pixel % WIDTH,
                        pixel // WIDTH, np.ones(len(order), np.uint8))
    return events, int(round(period_s * 1e9))


def synthetic_packets(rate_events_s: float, sensor_s: float, packet_ns: int):
    from veckm_flow_ros.eventio.packets import encode_packets
    events, period_ns = grating_events(rate_events_s)
    base = encode_packets(events, 'mono', packet_duration_ns=packet_ns)
    packets = []
    loops = int(np.ceil(sensor_s * 1e9 / period_ns))
    for k in range(loops):
        shift = 100_000_000 + k * period_ns
        packets += [(p.first_t_ns + shift, 'mono', p.data, p.time_base + shift, p.num_events)
                    for p in base]
    return packets


# ------------------------------------------------------------------------------------------
# Publisher process


def driver_qos():
    """Return the QoS of the camera drivers' event publishers (best effort, keep last 1000)."""
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1000,
                      reliability=ReliabilityPolicy.BEST_EFFORT,
                      durability=DurabilityPolicy.VOLATILE)


def time_scale(mode: str, speed: float) -> float:
    """Sensor seconds per wall second: `speed` in replay mode, 1 in rate mode."""
    return speed if mode == 'replay' else 1.0


def run_publisher(args):
    """Publish the source at args.speed (see --mode), paced by wall time; print a summary."""
    import rclpy
    from event_camera_msgs.msg import EventPacket
    # rate: sensor time runs with the wall clock, the source has `speed` times its event rate;
    # replay: the source as recorded, played `speed` times faster (ros2 bag play --rate).
    clock = time_scale(args.mode, args.speed)
    sensor_s = clock * args.wall_s
    # One message per packet_wall_ms of wall time, as a driver cutting packets by time.
    packet_ns = int(round(args.packet_wall_ms * 1e6 * clock))
    density = args.speed if args.mode == 'rate' else 1.0
    if args.source == 'real':
        one_loop_s = 2.2 / density
        packets = real_packets(int(np.ceil(sensor_s / one_loop_s)), packet_ns, density)
    else:
        packets = synthetic_packets(args.synthetic_rate * density, sensor_s, packet_ns)
    t_end = packets[0][0] + int(sensor_s * 1e9)
    packets = [p for p in packets if p[0] < t_end]
    messages = []
    for seq, (_, encoding, data, time_base, _) in enumerate(packets):
        msg = EventPacket()
        msg.header.frame_id = 'bench_camera'
        msg.width, msg.height = WIDTH, HEIGHT
        msg.encoding, msg.time_base, msg.seq = encoding, int(time_base), seq
        msg.events = data
        messages.append(msg)
    rclpy.init()
    try:
        node = rclpy.create_node('bench_publisher')
        publisher = node.create_publisher(EventPacket, f'/{NODE_NAME}/events', driver_qos())
        deadline = time.monotonic() + 60
        while publisher.get_subscription_count() == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        # A driver has no garbage collector: a collection pass over the prepared messages
        # would stall the send loop (and show up as the node's latency).
        gc.collect()
        gc.freeze()
        gc.disable()
        t0_sensor = packets[0][0]
        cpu_start = time.process_time()
        start = time.perf_counter()
        start_wall_ns = time.time_ns()
        late_s = np.zeros(len(packets))  # how long after its due time each packet went out
        for k, ((t_sensor, *_), msg) in enumerate(zip(packets, messages)):
            due = start + (t_sensor - t0_sensor) * 1e-9 / clock
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            late_s[k] = time.perf_counter() - due
            # The camera's clock runs `speed` times faster than the wall: stamps keep the
            # sensor's pace (a driver stamps arrival time), so sensor -> ROS time stays 1:1.
            stamp_ns = start_wall_ns + (t_sensor - t0_sensor)
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp_ns, 1_000_000_000)
            publisher.publish(msg)
        elapsed = time.perf_counter() - start
        cpu_s = time.process_time() - cpu_start
        end_ns = time.time_ns()
        events = sum(p[4] for p in packets)
        print(f'PUBLISHED {len(packets)} {events} {elapsed:.6f} {end_ns} {start_wall_ns} '
              f'{cpu_s:.6f} {1e3 * np.percentile(late_s, 99):.3f} {1e3 * late_s.max():.3f}',
              flush=True)
        time.sleep(0.2)
        node.destroy_node()
    finally:
        rclpy.shutdown()
    return 0


# ------------------------------------------------------------------------------------------
# Measurement (this process)


def _cloud_stamp_and_width(raw: bytes):
    """Header stamp [ns] and point count of a serialized PointCloud2 (CDR, little endian)."""
    sec, nanosec, name_len = struct.unpack_from('<iII', raw, 4)
    offset = 4 + ((12 + name_len + 3) & ~3)
    _, width = struct.unpack_from('<II', raw, offset)
    return sec * 1_000_000_000 + nanosec, width


def _cloud_oldest_offset_ns(raw: bytes, width: int, point_step: int = 24) -> int:
    """
    Sensor time of the message's oldest flow relative to its stamp [ns, <= 0].

    The node's points are float32 x, y, t, u, v, validity (t: seconds relative to the
    stamp; eventio.flow_cloud); the data array ends the CDR buffer, followed by is_dense (1
    byte). Returns 0 if the layout differs.
    """
    size = width * point_step
    if width == 0 or len(raw) < size + 5 or \
            struct.unpack_from('<I', raw, len(raw) - 1 - size - 4)[0] != size:
        return 0
    data = np.frombuffer(raw, dtype='<f4', count=width * point_step // 4,
                         offset=len(raw) - 1 - size)
    return int(float(data[2::point_step // 4].min()) * 1e9)


def _proc_cpu_s(pid: int) -> float:
    fields = pathlib.Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def _proc_peak_rss_mib(pid: int) -> float:
    for line in pathlib.Path(f'/proc/{pid}/status').read_text().splitlines():
        if line.startswith('VmHWM:'):
            return int(line.split()[1]) / 1024
    return float('nan')


class Probe:
    """Subscriber of ~/flow (raw) and /diagnostics in this process, spun by a thread."""

    def __init__(self):
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import PointCloud2
        self.node = rclpy.create_node('bench_probe')
        qos = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
        self.records = []  # (receive wall ns, stamp ns, flows, oldest flow - stamp ns)
        self.diagnostics = {}
        self.node.create_subscription(PointCloud2, f'/{NODE_NAME}/flow', self._on_flow, qos,
                                      raw=True)
        self.node.create_subscription(DiagnosticArray, '/diagnostics', self._on_diagnostics,
                                      10)
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self.executor.spin, daemon=True)
        self.thread.start()

    def _on_flow(self, raw):
        now_ns = time.time_ns()
        stamp_ns, width = _cloud_stamp_and_width(raw)
        self.records.append((now_ns, stamp_ns, width, _cloud_oldest_offset_ns(raw, width)))

    def _on_diagnostics(self, msg):
        for status in msg.status:
            if status.name.startswith(NODE_NAME):
                self.diagnostics = {kv.key: kv.value for kv in status.values}

    def close(self):
        # Join the spin thread before rclpy shuts down: a daemon thread still inside rclpy's
        # C++ wait when the interpreter exits is unwound by pthread_exit through a noexcept
        # frame, and the process dies in std::terminate ('terminate called without an active
        # exception').
        self.executor.shutdown()
        self.thread.join(timeout=10)
        self.node.destroy_node()


def publisher_env(env: dict, profile: str) -> dict:
    """Return a process's environment with the Fast DDS profile ('' = Fast DDS defaults)."""
    env = dict(env)
    for name in FASTDDS_PROFILE_VARIABLES:
        if profile:
            env[name] = profile
        else:
            env.pop(name, None)
    return env


def measure(args, config_name: str, source: str, speed: float, probe) -> dict:
    env = dict(os.environ)
    node_cmd = [sys.executable, '-c', 'import sys; from veckm_flow_ros.ros import main; '
                'sys.exit(main())', '--ros-args', '-r', f'__node:={NODE_NAME}',
                '-p', f'model:={args.model}', '-p', 'diagnostics_period_s:=0.5']
    parameters = {'torch_threads': args.torch_threads, 'compute_threads': args.compute_threads,
                  'device': args.device}
    if args.block_ms is not None:
        parameters['block_ms'] = args.block_ms
    parameters.update(CONFIGS[config_name])  # a configuration's own values win
    for name, value in parameters.items():
        node_cmd += ['-p', f'{name}:={value}']
    # The node's log goes to a file (a pipe nobody reads could fill and stall the node).
    log = tempfile.TemporaryFile(mode='w+')
    node = subprocess.Popen(node_cmd, env=publisher_env(env, args.node_fastdds_profile),
                            cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=log, text=True)
    publisher = None
    row = None
    try:
        deadline = time.monotonic() + 60
        while probe.node.count_publishers(f'/{NODE_NAME}/flow') == 0:
            if node.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise RuntimeError(f'node did not start: {log.read()}')
            time.sleep(0.1)
        probe.records.clear()
        probe.diagnostics = {}
        publisher = subprocess.Popen(
            [sys.executable, __file__, '--role', 'publisher', '--source', source,
             '--speed', str(speed), '--wall-s', str(args.wall_s),
             '--synthetic-rate', str(args.synthetic_rate),
             '--packet-wall-ms', str(args.packet_wall_ms), '--mode', args.mode,
             '--recording', args.recording,
             '--size', f'{WIDTH if source == "synthetic" else 640}x'
                       f'{HEIGHT if source == "synthetic" else 480}'],
            env=publisher_env(env, args.publisher_fastdds_profile), cwd=ROOT,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        # CPU is counted from the first packet received to the end of the output.
        while not probe.records and publisher.poll() is None:
            time.sleep(0.01)
        if args.py_spy:  # sample the node's Python threads during the replay
            # Non-blocking: py-spy's default stops the node for each sample, which cut its
            # throughput 3x at 250 Hz and showed the worker waiting for input.
            subprocess.Popen([args.py_spy, 'record', '--nonblocking', '-r', '100', '-t',
                              '--idle', '-f', 'raw', '-d', str(int(args.wall_s)), '-o',
                              f'{args.profile_prefix}_{config_name}_{speed:g}x.txt', '--pid',
                              str(node.pid)], stdout=subprocess.DEVNULL)
        cpu_start, wall_start = _proc_cpu_s(node.pid), time.perf_counter()
        probe_cpu_start = time.process_time()
        out, _ = publisher.communicate(timeout=600)
        summary = [x for x in out.splitlines() if x.startswith('PUBLISHED')]
        if not summary:
            raise RuntimeError(f'the publisher failed: {out[-2000:]}')
        line = summary[0].split()
        packets, events, publish_s = int(line[1]), int(line[2]), float(line[3])
        publish_end_ns, start_wall_ns = int(line[4]), int(line[5])
        publisher_cpu_s = float(line[6])
        publisher_late_p99_ms, publisher_late_max_ms = float(line[7]), float(line[8])
        count = -1
        while len(probe.records) != count:  # wait until the output stops for QUIET_S
            count = len(probe.records)
            time.sleep(QUIET_S)
        cpu_s = _proc_cpu_s(node.pid) - cpu_start
        probe_cpu_s = time.process_time() - probe_cpu_start
        wall_s = time.perf_counter() - wall_start - QUIET_S
        time.sleep(0.6)  # one more diagnostics period for the final totals
        records = np.array(probe.records, dtype=np.int64).reshape(-1, 4)
        # Wall time at which the block's newest flow event was sent (stamps run at sensor pace).
        clock = time_scale(args.mode, speed)
        sent_ns = start_wall_ns + (records[:, 1] - start_wall_ns) / clock
        latency_ms = (records[:, 0] - sent_ns) * 1e-6
        # The same for the message's oldest flow (up to a block earlier).
        oldest_ms = latency_ms - records[:, 3] / clock * 1e-6
        diagnostics = probe.diagnostics
        dropped = int(diagnostics.get('dropped packets (total)', -1))
        lost = int(diagnostics.get('packets lost upstream (total)', -1))
        flows = int(records[:, 2].sum())
        again = int(diagnostics.get(LONG_CONTEXT_KEY, 0))
        skipped_blocks = int(diagnostics.get(LONG_CONTEXT_SKIPPED_KEY, 0))
        flows_total = int(diagnostics.get('flows (total)', 0))
        span_s = (records[-1, 0] - records[0, 0]) * 1e-9 if len(records) > 1 else float('nan')
        row = {
            'config': config_name, 'source': source, 'speed': speed,
            'input_events_s': events / publish_s, 'packets': packets, 'events': events,
            'flows': flows, 'flows_s': flows / max(span_s, 1e-9),
            # How long the output went on after the input stopped: > tau + ~0.1 s = lagging.
            'lag_s': (records[-1, 0] - publish_end_ns) * 1e-9 if len(records) else float('nan'),
            'dropped': dropped, 'lost': lost,
            # Share of the published flows the long context estimated again, and the blocks
            # that skipped it because the node was behind (long_context_below_px_s).
            'long_context_percent': 100 * again / max(flows_total, 1),
            'long_context_skipped_blocks': skipped_blocks,
            'p50_ms': float(np.percentile(latency_ms, 50)) if len(records) else float('nan'),
            'p99_ms': float(np.percentile(latency_ms, 99)) if len(records) else float('nan'),
            'p99_oldest_ms': (float(np.percentile(oldest_ms, 99)) if len(records)
                              else float('nan')),
            'cpu_percent': 100 * cpu_s / max(wall_s, 1e-9),
            # The benchmark's own processes on the same cores: publisher (while publishing)
            # and this probe process (over the same span as the node).
            'harness_cpu_percent': 100 * (publisher_cpu_s / max(publish_s, 1e-9)
                                          + probe_cpu_s / max(wall_s, 1e-9)),
            'rss_mib': _proc_peak_rss_mib(node.pid),
            # The harness's own delays, included in the latencies (stamps are due times).
            'publisher_late_p99_ms': publisher_late_p99_ms,
            'publisher_late_max_ms': publisher_late_max_ms,
        }
    finally:
        if publisher is not None and publisher.poll() is None:
            publisher.kill()
        node.terminate()
        try:
            node.wait(timeout=20)
        except subprocess.TimeoutExpired:
            node.kill()
            node.wait()
    # A clean stop: exit status 0 and nothing alarming in the log (SIGTERM is a normal stop).
    log.seek(0)
    problems = [line for line in log.read().splitlines()
                if any(word in line for word in SHUTDOWN_PROBLEMS)]
    log.close()
    if node.returncode != 0 or problems:
        print(f'node exited with status {node.returncode}: ' + ' | '.join(problems[:5]),
              file=sys.stderr)
    row['exit_ok'] = node.returncode == 0 and not problems
    return row


def print_table(rows):
    header = (f'{"config":8} {"source":9} {"speed":>5} {"in Mev/s":>9} {"Mflow/s":>8} '
              f'{"drops":>11} {"p50 ms":>7} {"p99 ms":>7} {"p99 old":>7} {"lag s":>6} '
              f'{"CPU %":>6} {"harn %":>6} {"pub late":>9} '
              f'{"RSS MiB":>8} {"2nd %":>6} {"skip":>5} sustained')
    print(header)
    print('-' * len(header))
    for r in rows:
        drops = f'{r["dropped"]}+{r["lost"]}'
        late = f'{r["publisher_late_p99_ms"]:.0f}/{r["publisher_late_max_ms"]:.0f}'
        sustained = ('yes' if r['dropped'] == 0 and r['lost'] == 0 and r['flows']
                     and r['lag_s'] < LAG_LIMIT_S else 'NO')
        print(f'{r["config"]:8} {r["source"]:9} {r["speed"]:>4g}x '
              f'{r["input_events_s"] / 1e6:>9.2f} {r["flows_s"] / 1e6:>8.2f} {drops:>11} '
              f'{r["p50_ms"]:>7.1f} {r["p99_ms"]:>7.1f} {r["p99_oldest_ms"]:>7.1f} '
              f'{r["lag_s"]:>6.2f} {r["cpu_percent"]:>6.0f} {r["harness_cpu_percent"]:>6.0f} '
              f'{late:>9} {r["rss_mib"]:>8.0f} {r["long_context_percent"]:>6.1f} '
              f'{r["long_context_skipped_blocks"]:>5d} {sustained}')
    print("p50/p99: latency of each message's newest flow; p99 old: of its oldest flow; "
          'CPU %: the node (100 = one core); harn %: publisher + probe on the same cores')
    print('2nd %: flows estimated again with the long context, % of all flows; skip: blocks '
          'that skipped it because the node was behind (long_context_below_px_s)')
    print('pub late: p99/max ms by which the publisher sent packets after their due time '
          '(its own stalls on the shared cores; included in the latencies)')
    print('drops = packets dropped by the node (queue over capacity) + lost in DDS (seq gaps); '
          f'lag = output time after the input ended; sustained = no drops and lag < '
          f'{LAG_LIMIT_S} s')


def main(argv=None):
    global RECORDING, WIDTH, HEIGHT  # set from the arguments: read by the sources, both roles
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[1])
    parser.add_argument('--role', choices=('main', 'publisher'), default='main')
    parser.add_argument('--model', help='model for the node (path or shipped name)')
    parser.add_argument('--configs', nargs='+', default=['every', 'stride8'],
                        choices=list(CONFIGS))
    parser.add_argument('--sources', nargs='+', default=['real', 'synthetic'],
                        choices=('real', 'synthetic'))
    parser.add_argument('--speeds', nargs='+', type=float, default=[1.0, 4.0, 10.0])
    parser.add_argument('--wall-s', type=float, default=3.0,
                        help='seconds of wall time each replay lasts')
    parser.add_argument('--synthetic-rate', type=float, default=5e5,
                        help='events/s of the synthetic source at 1x')
    parser.add_argument('--block-ms', type=float, default=None,
                        help="the node's block_ms [ms] (default: the node's default)")
    parser.add_argument('--mode', choices=('rate', 'replay'), default='rate',
                        help='rate (default): a camera with SPEED times the event rate of the '
                        'source (sensor times compressed, played in real time); replay: the '
                        'source as recorded, played SPEED times faster')
    parser.add_argument('--py-spy', default=None,
                        help='path of a py-spy executable: profile the node (raw folded stacks)')
    parser.add_argument('--profile-prefix', default='/tmp/bench_node_profile',
                        help='py-spy output: PREFIX_CONFIG_SPEEDx.txt')
    parser.add_argument('--packet-wall-ms', type=float, default=1.0,
                        help='wall time per published message [ms]: at speed s a message holds '
                        's x this much sensor time (a driver cuts packets by time)')
    parser.add_argument('--torch-threads', type=int, default=0)
    parser.add_argument('--compute-threads', type=int, default=0,
                        help="the node's compute_threads (blocks computed at once; 0 = auto)")
    parser.add_argument('--publisher-fastdds-profile', default=str(DRIVER_FASTDDS_PROFILE),
                        help='Fast DDS XML profile of the publisher process, as the launch '
                             'files give a camera driver (16 MiB shared-memory segment); empty '
                             '= Fast DDS defaults (512 KiB: bursts are lost at ~4 M events/s)')
    parser.add_argument('--node-fastdds-profile', default='',
                        help='Fast DDS XML profile of the node process (default: none, Fast '
                             'DDS defaults; the driver profile gives its ~/flow writer a '
                             '16 MiB shared-memory segment)')
    parser.add_argument('--device', default='cpu', help="the node's device (cpu or cuda)")
    parser.add_argument('--recording', default=str(RECORDING),
                        help='the evt3 640x480 bag of the real source')
    parser.add_argument('--size', default=f'{WIDTH}x{HEIGHT}',
                        help='sensor WxH of the synthetic source (the real one is 640x480)')
    parser.add_argument('--source', help=argparse.SUPPRESS)
    parser.add_argument('--speed', type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    RECORDING = pathlib.Path(args.recording)
    WIDTH, HEIGHT = (int(v) for v in args.size.lower().split('x'))
    if args.role == 'publisher':
        return run_publisher(args)
    if not args.model:
        parser.error('--model is required (e.g. ../shared/data/veckm_flow_cpp_models/'
                     '640x480_32ms_C64_k8)')
    os.environ.setdefault('ROS_DOMAIN_ID', str(150 + os.getpid() % 50))
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    import rclpy
    rclpy.init()
    rows = []
    try:
        probe = Probe()
        for config_name in args.configs:
            for source in args.sources:
                for speed in args.speeds:
                    row = measure(args, config_name, source, speed, probe)
                    rows.append(row)
                    if os.environ.get('BENCH_DEBUG'):
                        print(row, file=sys.stderr)
                    print(f'{config_name} {source} {speed:g}x: '
                          f'{row["input_events_s"] / 1e6:.2f} M ev/s in, '
                          f'{row["flows_s"] / 1e6:.2f} M flows/s, drops {row["dropped"]}+'
                          f'{row["lost"]}, p99 {row["p99_ms"]:.0f} ms', file=sys.stderr)
        probe.close()
    finally:
        rclpy.shutdown()
    print_table(rows)
    return 0


if __name__ == '__main__':
    sys.exit(main())
