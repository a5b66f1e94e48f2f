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

The bundled demo scene (640x480) is streamed time-compressed by each speed factor through
NormalFlowEstimator (block 20 ms); the inputs of its encode calls are recorded, then blocks
3-12 are encoded and run through the MLP repeatedly for --seconds. CPU time (process time:
all threads), not wall time, so that a shared or noisy machine disturbs it less; with
--threads 1 it is the op's single-core cost. To compare two builds of the extension, run this
with each (alternating, several times) and compare the columns.
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
    args = parser.parse_args(argv)
    import torch

    from veckm_flow_ros import ops
    from veckm_flow_ros.core.model import load_model
    torch.set_num_threads(args.threads)
    model = load_model(args.model)
    print(f'model {args.model}, block {args.block_ms:g} ms, {args.threads} thread(s), '
          f'torch {torch.__version__}; CPU ms per block (process time, all threads)')
    print(f'{"speed":>6} {"stride":>6} {"context ev":>11} {"targets":>8} {"encode ms":>10} '
          f'{"MLP ms":>8} {"M targets/CPU-s":>16}')
    for speed in args.speed:
        for stride in args.stride:
            calls = recorded_blocks(model, speed, stride, args.block_ms)
            if not calls:
                print(f'{speed:6g} {stride:6d}  (no complete block)')
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
