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
Throughput of the EventPacket decoders: C++ kernels vs the numpy reference, same run.

    .venv/bin/python benchmarks/bench_decode.py [--events 2000000] [--repeats 5]

Sources: the real recordings in ../shared/data/recordings (their packets as recorded, when
present) and synthetic streams of each encoding made with packets.py from a random 640x480
scene at 20 M events/s, cut into 1 ms packets (~20 k events, a typical driver message) and
into 50 ms packets (a burst or a replay that concatenates). evt3 also runs on a sensor-like
ordering (sort_for_vectors) that uses VECT_12 / VECT_8 words.

Columns: packets, events, MB of payload; for each backend the best of --repeats full passes
through PacketDecoder.decode (Python wrapper included): M events/s decoded and microseconds per
packet, from the CPU time of this process (time.process_time, so that other processes on a
shared machine do not inflate it; the decoders are single-threaded); cpp/numpy = ratio of the
two speeds in the same run.
"""

import argparse
import pathlib
import time

import numpy as np

from veckm_flow_ros.decode import extension_available, PacketDecoder
from veckm_flow_ros.events import EventArray
from veckm_flow_ros.packets import encode_packets, sort_for_vectors

RECORDINGS = pathlib.Path(__file__).resolve().parents[2] / 'shared' / 'data' / 'recordings'
WIDTH, HEIGHT = 640, 480


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--events', type=int, default=2_000_000,
                        help='events per synthetic stream (default 2e6)')
    parser.add_argument('--rate', type=float, default=20e6,
                        help='synthetic event rate in events/s (default 2e7)')
    parser.add_argument('--repeats', type=int, default=5, help='passes per measurement')
    return parser.parse_args()


def synthetic_events(count, rate_per_s, seed=0):
    rng = np.random.default_rng(seed)
    t_ns = np.sort(rng.integers(0, int(count / rate_per_s * 1e9), count)) // 1000 * 1000
    return EventArray(t_ns, rng.integers(0, WIDTH, count), rng.integers(0, HEIGHT, count),
                      rng.integers(0, 2, count))


def sources(args):
    """(name, encoding, [(data, time_base, width, height)], events expected) per source."""
    if RECORDINGS.is_dir():
        from veckm_flow_ros.bag import read_event_messages
        for bag in sorted(path for path in RECORDINGS.iterdir() if path.is_dir()):
            messages = [item.msg for item in read_event_messages(bag)]
            packets = [(np.ascontiguousarray(m.events), m.time_base, m.width, m.height)
                       for m in messages]
            yield f'real {bag.name}', messages[0].encoding, packets
    events = synthetic_events(args.events, args.rate)
    scenes = [('random', events), ('vectors', sort_for_vectors(
        EventArray(events.t_ns // 100_000 * 100_000, events.x, events.y // 8, events.p)))]
    for encoding in ('evt3', 'libcaer_cmp', 'libcaer', 'mono'):
        for scene_name, scene in scenes:
            if scene_name == 'vectors' and encoding != 'evt3':
                continue
            for duration_ms in (1, 50):
                encoded = encode_packets(scene, encoding, packet_duration_ns=duration_ms * 10**6)
                packets = [(np.frombuffer(p.data, np.uint8), p.time_base, WIDTH, HEIGHT)
                           for p in encoded]
                yield f'synthetic {scene_name} {duration_ms} ms', encoding, packets


def best_pass(packets, encoding, backend, repeats):
    best, count = float('inf'), 0
    for _ in range(repeats):
        decoder = PacketDecoder(backend)
        start = time.process_time()
        for data, time_base, width, height in packets:
            decoder.decode(encoding, data, time_base, width, height)
        best = min(best, time.process_time() - start)
        count = decoder.events
    return best, count


def main():
    args = parse_args()
    backends = ['cpp', 'numpy'] if extension_available() else ['numpy']
    header = f'{"source":<44} {"encoding":<12} {"packets":>7} {"M events":>8} {"MB":>6}'
    for backend in backends:
        header += f' {backend + " Mev/s":>12} {"us/packet":>9}'
    if len(backends) == 2:
        header += f' {"cpp/numpy":>9}'
    print(header)
    for name, encoding, packets in sources(args):
        megabytes = sum(len(p[0]) for p in packets) / 1e6
        speeds, row = [], ''
        count = 0
        for backend in backends:
            seconds, count = best_pass(packets, encoding, backend, args.repeats)
            speeds.append(count / seconds / 1e6)
            row += f' {speeds[-1]:>12.1f} {seconds / len(packets) * 1e6:>9.1f}'
        if len(speeds) == 2:
            row += f' {speeds[0] / speeds[1]:>9.1f}'
        print(f'{name:<44} {encoding:<12} {len(packets):>7} {count / 1e6:>8.3f} '
              f'{megabytes:>6.1f}' + row, flush=True)


if __name__ == '__main__':
    main()
