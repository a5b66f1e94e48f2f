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
Streaming throughput of NormalFlowEstimator on decoded real recordings (no bag reading).

    .venv/bin/python benchmarks/bench_stream.py --model DIR [--threads 1] [--block-ms 5 20]
                                                [--causal] [--recordings DIR]

Each recording is decoded once (not timed); its packets (as recorded) are then pushed through
one estimator with a flow for every event. Columns: events, sensor span, wall and process CPU
time of the push/flush loop, events/s from each, and the real-time factor from the CPU time
(> 1: one core keeps up). With --threads 1 the CPU figures are what one core sustains even
when other processes share the machine.
"""

import argparse
import pathlib
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_RECORDINGS = ROOT.parent / 'shared' / 'data' / 'recordings'


def decode_recording(path):
    """Return (list of EventArray packets, width, height) of the first event topic of a bag."""
    from veckm_flow_ros.eventio.bag import read_event_messages
    from veckm_flow_ros.eventio.decode import PacketDecoder
    decoder = PacketDecoder()
    packets, width, height = [], 0, 0
    for item in read_event_messages(path):
        msg = item.msg
        result = decoder.decode(msg.encoding, msg.events, msg.time_base, msg.width, msg.height)
        if len(result.events):
            packets.append(result.events)
            width, height = int(msg.width), int(msg.height)
    return packets, width, height


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument('--model', required=True, help='model path or name')
    parser.add_argument('--threads', type=int, default=1, help='torch threads')
    parser.add_argument('--block-ms', type=float, nargs='+', default=[5.0, 20.0])
    parser.add_argument('--causal', action='store_true')
    parser.add_argument('--recordings', type=pathlib.Path, default=DEFAULT_RECORDINGS)
    parser.add_argument('--names', nargs='*', default=['py_test_events_1', 'py_test_events_2'])
    args = parser.parse_args()

    import torch

    from veckm_flow_ros.core.estimator import NormalFlowEstimator
    from veckm_flow_ros.core.model import load_model
    torch.set_num_threads(args.threads)
    model = load_model(args.model)
    print(f'model {model.name} (r={model.pixel_radius}, tau={model.tau_s * 1e3:g} ms), torch '
          f'threads {torch.get_num_threads()}, {"causal" if args.causal else "centred"}')
    header = (f'{"recording":<20} {"block ms":>8} {"events":>8} {"span s":>7} {"wall s":>7} '
              f'{"cpu s":>7} {"ev/s wall":>10} {"ev/s cpu":>10} {"xRT cpu":>8}')
    print(header)
    print('-' * len(header))
    for name in args.names:
        packets, width, height = decode_recording(args.recordings / name)
        events = sum(len(packet) for packet in packets)
        span_s = (int(packets[-1].t_ns[-1]) - int(packets[0].t_ns[0])) * 1e-9
        for block_ms in args.block_ms:
            estimator = NormalFlowEstimator(model, width, height, block_s=block_ms * 1e-3,
                                            causal=args.causal)
            flows = 0
            wall = time.perf_counter()
            cpu = time.process_time()
            for packet in packets:
                flows += sum(len(block) for block in estimator.push(packet))
            flows += sum(len(block) for block in estimator.flush())
            cpu = time.process_time() - cpu
            wall = time.perf_counter() - wall
            assert flows == events, (flows, events)
            print(f'{name[:20]:<20} {block_ms:>8g} {events:>8} {span_s:>7.3f} {wall:>7.2f} '
                  f'{cpu:>7.2f} {events / wall:>10.0f} {events / cpu:>10.0f} '
                  f'{span_s / cpu:>8.2f}', flush=True)
    np.seterr(all='ignore')


if __name__ == '__main__':
    main()
