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
Replay throughput on the real recordings and the bundled demo, against real time.

    .venv/bin/python benchmarks/bench_replay.py [--model M] [--threads 1] [--duration S]
                                                [--outputs] [--recordings DIR]

Each bag goes through replay.replay_bag (bag reading, decoding, time sync, the estimator) with
no outputs, or with --outputs also writing the flow bag, the npz and the mp4 (pictures at
25 Hz). Columns: events, sensor time span, wall time and process CPU time of the replay loop,
throughput in events/s and the real-time factor (sensor seconds per second; > 1 is faster than
real time) from the wall time and from the CPU time. With --threads 1 (default) the CPU-time
figures are what one core sustains even when other processes share the machine.
"""

import argparse
import pathlib
import tempfile

from veckm_flow_ros.runtime import set_omp_wait_policy

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_RECORDINGS = ROOT.parent / 'shared' / 'data' / 'recordings'
DEMO_BAG = ROOT / 'veckm_flow_ros' / 'data' / 'demo_scene.mcap'


def main():
    set_omp_wait_policy()  # before anything imports torch
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument('--model', default=None, help='model (default: shipped default)')
    parser.add_argument('--threads', type=int, default=1, help='torch threads (0: torch default)')
    parser.add_argument('--device', default='cpu', choices=('cpu', 'cuda'))
    parser.add_argument('--duration', type=float, default=None,
                        help='replay only the first SECONDS of each bag')
    parser.add_argument('--stride', type=int, default=1, help='target stride')
    parser.add_argument('--outputs', action='store_true',
                        help='also write flow bag, npz and mp4 (measures the outputs too)')
    parser.add_argument('--recordings', type=pathlib.Path, default=DEFAULT_RECORDINGS)
    args = parser.parse_args()

    import torch

    from veckm_flow_ros.core.model import load_model
    from veckm_flow_ros.offline.replay import replay_bag, ReplayOptions, ReplayOutputs
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    model = load_model(args.model)
    bags = [DEMO_BAG]
    if args.recordings.is_dir():
        bags += sorted(path for path in args.recordings.iterdir() if path.is_dir())
    print(f'model {model.name}, device {args.device}, torch threads '
          f'{torch.get_num_threads()}, stride {args.stride}, outputs '
          f'{"bag+npz+mp4" if args.outputs else "none"}')
    header = (f'{"bag":<34} {"encoding":<12} {"size":>8} {"events":>9} {"span s":>7} '
              f'{"wall s":>7} {"cpu s":>7} {"ev/s wall":>10} {"ev/s cpu":>10} '
              f'{"xRT wall":>8} {"xRT cpu":>8}')
    print(header)
    print('-' * len(header))
    for bag in bags:
        with tempfile.TemporaryDirectory() as tmp:
            outputs = ReplayOutputs()
            if args.outputs:
                outputs = ReplayOutputs(bag=pathlib.Path(tmp) / 'flow_bag',
                                        npz=pathlib.Path(tmp) / 'flows.npz',
                                        video=pathlib.Path(tmp) / 'flow.mp4')
            options = ReplayOptions(device=args.device, duration_s=args.duration,
                                    target_stride=args.stride, progress=False)
            summary = replay_bag(bag, model, options, outputs)
        span = summary.span_s
        cpu_rate = summary.events / summary.cpu_s if summary.cpu_s > 0 else 0.0
        cpu_factor = span / summary.cpu_s if summary.cpu_s > 0 else 0.0
        print(f'{bag.name[:34]:<34} {summary.encoding:<12} '
              f'{summary.width:>4}x{summary.height:<3} {summary.events:>9} {span:>7.3f} '
              f'{summary.wall_s:>7.2f} {summary.cpu_s:>7.2f} {summary.events_per_s:>10.0f} '
              f'{cpu_rate:>10.0f} {summary.real_time_factor:>8.2f} {cpu_factor:>8.2f}',
              flush=True)


if __name__ == '__main__':
    main()
