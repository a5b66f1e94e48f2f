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
CPU time of the MLP ops with the portable micro-kernels against the default ones, same run.

    python3 benchmarks/bench_cpu_kernels.py [--rows 20000] [--rounds 8] [--threads 1]

The portable micro-kernels (GCC vector extensions: NEON on aarch64, the baseline SSE2 on
x86-64) are what an aarch64 build runs; on an x86-64 CPU with AVX2 + FMA the default is the
AVX2 kernels, and VECKM_CPU_KERNELS=portable selects the portable ones at the next call. The
two are timed in alternating rounds (process CPU time per call, median over rounds) on the
shipped model's weights and random features, and the ratio portable / default printed. On
x86-64 this is the cost of losing AVX2 + FMA, not a measurement of any ARM CPU.
"""

import argparse
import os
import statistics
import time

from veckm_flow_ros.runtime import set_omp_wait_policy


def cpu_ms_per_call(function, calls):
    start = time.process_time()
    for _ in range(calls):
        function()
    return (time.process_time() - start) * 1e3 / calls


def main(argv=None):
    set_omp_wait_policy()  # before anything imports torch
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[1])
    parser.add_argument('--rows', type=int, default=20000, help='feature rows per call')
    parser.add_argument('--rounds', type=int, default=8, help='alternating rounds per kernel')
    parser.add_argument('--calls', type=int, default=5, help='calls per round')
    parser.add_argument('--threads', type=int, default=1)
    parser.add_argument('--model', default='veckm_r8_tau16ms')
    args = parser.parse_args(argv)

    import torch
    from veckm_flow_ros import ops
    from veckm_flow_ros.core.model import load_model
    torch.set_num_threads(args.threads)
    model = load_model(args.model)
    blocks, groups = model.c4_fourier_blocks
    features = torch.randn(args.rows, 2 * model.num_features,
                           generator=torch.Generator().manual_seed(0))
    ops_to_time = {
        'flow_mlp (dense)': lambda: ops.flow_mlp(features, model.w1, model.w2, model.w3, 60.0),
        'flow_mlp_c4': lambda: ops.flow_mlp_c4(features, blocks, model.w3, groups, 60.0),
    }
    times = {(name, kernels): [] for name in ops_to_time for kernels in ('default', 'portable')}
    for _ in range(args.rounds):
        for kernels in ('default', 'portable'):
            if kernels == 'portable':
                os.environ['VECKM_CPU_KERNELS'] = 'portable'
            else:
                os.environ.pop('VECKM_CPU_KERNELS', None)
            for name, function in ops_to_time.items():
                function()  # warm: packing, scratch pages
                times[name, kernels].append(cpu_ms_per_call(function, args.calls))
    os.environ.pop('VECKM_CPU_KERNELS', None)

    print(f'{args.rows} rows, {args.threads} thread(s), model {args.model}; CPU ms per call, '
          f'median of {args.rounds} alternating rounds of {args.calls} calls (min-max)')
    print(f'{"op":18s} {"default (AVX2 on x86-64)":>26s} {"portable":>22s} '
          f'{"portable/default":>17s}')
    for name in ops_to_time:
        default, portable = times[name, 'default'], times[name, 'portable']
        cell = [f'{statistics.median(t):7.2f} ({min(t):.2f}-{max(t):.2f})'
                for t in (default, portable)]
        ratio = statistics.median(p / d for p, d in zip(portable, default))
        print(f'{name:18s} {cell[0]:>26s} {cell[1]:>22s} {ratio:16.2f}x')


if __name__ == '__main__':
    main()
