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
CPU time of the encode and MLP ops per streaming block, for comparing builds of the kernels.

    python3 benchmarks/bench_encode_block.py [--speed 1.65 6.6] [--stride 1 8] [--threads 1]
        [--paths dense sparse] [--device cuda]

The bundled demo scene (346x260) is streamed time-compressed by each speed factor through
NormalFlowEstimator (block 20 ms); the inputs of its encode calls are recorded, then blocks
3-12 are encoded and run through the MLP repeatedly for --seconds. CPU time (process time:
all threads), not wall time, so that a shared or noisy machine disturbs it less; with
--threads 1 it is the op's single-core cost. To compare two builds of the extension, run this
with each (alternating, several times) and compare the columns. --paths times encode's two
paths (box sums over image rows, per-target window sums) on the same blocks, alternated block
by block, with the ratio against the first path; the 'auto' row is the kernel's own choice.
On CUDA, wall time with a device synchronisation per block.
"""

import argparse
import time

from veckm_flow_ros.runtime import set_omp_wait_policy


def recorded_blocks(model, speed, stride, block_ms):
    """Record the inputs of the estimator's encode calls on the demo scene at `speed` x."""
    from bench_estimator import compressed_stream
    from veckm_flow_ros import ops
    from veckm_flow_ros.core.estimator import NormalFlowEstimator
    calls = []
    encode = ops.encode

    def recording(*args, **kwargs):
        calls.append((args, kwargs))
        return encode(*args, **kwargs)
    ops.encode = recording
    try:
        packets, width, height, _ = compressed_stream(speed, 400_000)
        estimator = NormalFlowEstimator(model, width, height, block_s=block_ms * 1e-3,
                                        target_stride=stride)
        for packet in packets:
            for _ in estimator.push_iter(packet):
                pass
    finally:
        ops.encode = encode
    return calls[2:12]


def _time_paths(calls, model, paths, seconds, device):
    """Seconds per block of encode and of the MLP for each path, alternated block by block."""
    import torch

    from veckm_flow_ros import ops
    cuda = device.type == 'cuda'
    clock = time.perf_counter if cuda else time.process_time
    calls = [(tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in call_args),
              call_kwargs) for call_args, call_kwargs in calls]
    totals = {path: [0.0, 0.0] for path in paths}
    count = targets = 0
    wall_start = time.perf_counter()
    while time.perf_counter() - wall_start < seconds or count == 0:
        for call_args, call_kwargs in calls:
            for path in paths:
                with ops.forced_encode_path(path):
                    start = clock()
                    features, _ = ops.encode(*call_args, **call_kwargs)
                    if cuda:
                        torch.cuda.synchronize(device)
                    middle = clock()
                    model.predict_flow_px_s(features)
                    if cuda:
                        torch.cuda.synchronize(device)
                    totals[path][0] += middle - start
                    totals[path][1] += clock() - middle
            count += 1
            targets += len(features)
    return {path: (encode_s / count, mlp_s / count) for path, (encode_s, mlp_s)
            in totals.items()}, targets / count


def main(argv=None):
    set_omp_wait_policy()  # before anything imports torch
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[1])
    parser.add_argument('--model', default='veckm_r8_tau16ms')
    parser.add_argument('--speed', type=float, nargs='+', default=[1.65, 6.6],
                        help='demo scene speed-up (1.65: ~1 M events/s, 6.6: ~4 M)')
    parser.add_argument('--stride', type=int, nargs='+', default=[1, 8])
    parser.add_argument('--block-ms', type=float, default=20.0)
    parser.add_argument('--threads', type=int, default=1, help='torch CPU threads')
    parser.add_argument('--seconds', type=float, default=3.0, help='per case')
    parser.add_argument('--paths', nargs='+', choices=('auto', 'dense', 'sparse'),
                        help="time encode's paths side by side (ratio against the first)")
    parser.add_argument('--device', default='cpu', help='cpu or cuda (with --paths)')
    args = parser.parse_args(argv)
    import torch

    from veckm_flow_ros import ops
    from veckm_flow_ros.core.model import load_model
    torch.set_num_threads(args.threads)
    model = load_model(args.model)
    device = torch.device(args.device)
    if args.paths:
        model = model.to(device)
    clock = 'wall time, synchronised' if device.type == 'cuda' else \
        'process time, all threads'
    print(f'model {args.model}, block {args.block_ms:g} ms, {args.threads} thread(s), '
          f'torch {torch.__version__}, {device}; ms per block ({clock})')
    if args.paths:
        print(f'{"speed":>6} {"stride":>6} {"context ev":>11} {"targets":>8} {"path":>7} '
              f'{"encode ms":>10} {"MLP ms":>8} {"M targets/s":>12} {"encode ratio":>13}')
    else:
        print(f'{"speed":>6} {"stride":>6} {"context ev":>11} {"targets":>8} {"encode ms":>10} '
              f'{"MLP ms":>8} {"M targets/CPU-s":>16}')
    for speed in args.speed:
        for stride in args.stride:
            calls = recorded_blocks(model.to('cpu'), speed, stride, args.block_ms)
            if not calls:
                print(f'{speed:6g} {stride:6d}  (no complete block)')
                continue
            if args.paths:
                times, targets = _time_paths(calls, model.to(device), args.paths, args.seconds,
                                             device)
                context = sum(len(call_args[0]) for call_args, _ in calls) / len(calls)
                baseline = times[args.paths[0]][0]
                for path, (encode_s, mlp_s) in times.items():
                    print(f'{speed:6g} {stride:6d} {context:11,.0f} {targets:8,.0f} {path:>7} '
                          f'{encode_s * 1e3:10.3f} {mlp_s * 1e3:8.3f} '
                          f'{targets / (encode_s + mlp_s) / 1e6:12.2f} '
                          f'{baseline / encode_s:12.2f}x')
                continue
            encode_s = mlp_s = 0.0
            count = targets = 0
            wall_start = time.perf_counter()
            while time.perf_counter() - wall_start < args.seconds:
                for call_args, call_kwargs in calls:
                    start = time.process_time()
                    features, _ = ops.encode(*call_args, **call_kwargs)
                    middle = time.process_time()
                    model.predict_flow_px_s(features)
                    encode_s += middle - start
                    mlp_s += time.process_time() - middle
                    count += 1
                    targets += len(features)
            context = sum(len(call_args[0]) for call_args, _ in calls) / len(calls)
            print(f'{speed:6g} {stride:6d} {context:11,.0f} {targets / count:8,.0f} '
                  f'{encode_s / count * 1e3:10.2f} {mlp_s / count * 1e3:8.2f} '
                  f'{targets / (encode_s + mlp_s) / 1e6:16.2f}')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
