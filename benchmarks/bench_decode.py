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

    .venv/bin/python benchmarks/bench_decode.py [--events 2000000] [--repeats 3]
        [--encodings evt3 mono ...]

Sources: the real recordings in ../shared/data/recordings (their packets as recorded, and for
evt3 also all packets concatenated into one buffer, which evt3 allows) when present, and
synthetic streams of each encoding made with packets.py at --rate events/s (default 20 M/s,
a burst), cut into 1 ms packets (a typical driver message) and 50 ms packets: 'random'
(uniform pixels; evt3 needs ADDR_X words) and 'edges' (runs of 4..24 neighbouring pixels in a
row at one timestamp, as a moving edge gives; evt3 packs them into VECT_12 / VECT_8 words).

Columns: packets, events, MB of payload; for each backend the best of --repeats full passes
through PacketDecoder.decode: M events/s and microseconds per packet; cpp/numpy = ratio of the
two rates (same machine, same run). Times are the thread's CPU time (time.thread_time), which
on an idle machine equals wall time and on a shared one is not inflated by waiting for a core.
Single thread (torch.set_num_threads(1)).
"""

import argparse
import pathlib
import time

import numpy as np
import torch

from veckm_flow_ros.eventio.decode import extension_available, PacketDecoder
from veckm_flow_ros.eventio.events import EventArray
from veckm_flow_ros.eventio.packets import encode_packets, sort_for_vectors

RECORDINGS = pathlib.Path(__file__).resolve().parents[2] / 'shared' / 'data' / 'recordings'
WIDTH, HEIGHT = 640, 480


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--events', type=int, default=2_000_000,
                        help='events per synthetic stream (default 2e6)')
    parser.add_argument('--rate', type=float, default=20e6,
                        help='synthetic event rate in events/s (default 2e7)')
    parser.add_argument('--repeats', type=int, default=3, help='passes per measurement')
    parser.add_argument('--encodings', nargs='+',
                        default=['evt3', 'libcaer_cmp', 'libcaer', 'mono'],
                        help='encodings to measure')
    return parser.parse_args()


def synthetic_events(count, rate_per_s, seed=0):
    """Make uniformly random pixels, sorted times at 1 us resolution."""
    rng = np.random.default_rng(seed)
    t_ns = np.sort(rng.integers(0, int(count / rate_per_s * 1e9), count)) // 1000 * 1000
    return EventArray(t_ns, rng.integers(0, WIDTH, count), rng.integers(0, HEIGHT, count),
                      rng.integers(0, 2, count))


def edge_events(count, rate_per_s, seed=1):
    """Make runs of 4..24 neighbouring pixels of one row at one timestamp (90 % kept)."""
    rng = np.random.default_rng(seed)
    runs = count // 12
    length = rng.integers(4, 25, runs)
    t_ns = np.sort(rng.integers(0, int(count / rate_per_s * 1e9), runs)) // 1000 * 1000
    x0 = rng.integers(0, WIDTH - 24, runs)
    run = np.repeat(np.arange(runs), length)
    within = np.arange(len(run)) - np.repeat(np.cumsum(length) - length, length)
    keep = rng.random(len(run)) < 0.9
    run, within = run[keep], within[keep]
    events = EventArray(t_ns[run], x0[run] + within, rng.integers(0, HEIGHT, runs)[run],
                        rng.integers(0, 2, runs)[run])
    return sort_for_vectors(events)


def sources(args):
    """(name, encoding, [(data, time_base, width, height)]) per source."""
    if RECORDINGS.is_dir():
        from veckm_flow_ros.eventio.bag import read_event_messages
        for bag in sorted(path for path in RECORDINGS.iterdir() if path.is_dir()):
            messages = [item.msg for item in read_event_messages(bag)]
            if messages[0].encoding not in args.encodings:
                continue
            packets = [(np.ascontiguousarray(m.events), m.time_base, m.width, m.height)
                       for m in messages]
            yield f'real {bag.name}', messages[0].encoding, packets
            if messages[0].encoding == 'evt3':
                whole = np.concatenate([p[0] for p in packets])
                yield (f'real {bag.name} (one buffer)', 'evt3',
                       [(whole, 0, messages[0].width, messages[0].height)])
    scenes = [('random', synthetic_events(args.events, args.rate)),
              ('edges', edge_events(args.events, args.rate))]
    for encoding in args.encodings:
        for scene_name, scene in scenes:
            for duration_ms in (1, 50):
                encoded = encode_packets(scene, encoding, packet_duration_ns=duration_ms * 10**6)
                packets = [(np.frombuffer(p.data, np.uint8), p.time_base, WIDTH, HEIGHT)
                           for p in encoded]
                yield f'synthetic {scene_name} {duration_ms} ms packets', encoding, packets


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
    torch.set_num_threads(1)
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
