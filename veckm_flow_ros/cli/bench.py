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

"""veckm-flow bench: flows/s of the Algorithm-1 baseline and our CPU/CUDA ops (synthetic)."""

import json
import math
import sys

from veckm_flow_ros.cli import add_command


def register(subparsers):
    parser = add_command(
        subparsers, 'bench', run, 'throughput of encoding + MLP (baseline vs ops)',
        'Time the Algorithm-1 baseline and the compiled ops on synthetic moving '
        'edges (640x480; dense: 200k events all targets; sparse: 10k targets '
        'among 500k events) at r = 8 and 10.')
    parser.add_argument('--json', action='store_true',
                        help='print a JSON list of rows {impl, radius, workload, flows_per_s, '
                             'peak_mem_mb} instead of a table')
    parser.add_argument('--device', action='append', choices=('cpu', 'cuda'),
                        help='device(s) to time besides the baseline (default: cpu, and cuda '
                             'when available); repeat the option for several')
    parser.add_argument('--repeats', type=int, default=3,
                        help='timed repeats per case, best kept (default: 3)')


def run(args) -> int:
    import torch

    from veckm_flow_ros.offline import benchmark
    devices = args.device or (['cpu', 'cuda'] if torch.cuda.is_available() else ['cpu'])
    if 'cuda' in devices and not torch.cuda.is_available():
        raise ValueError('--device cuda given but torch.cuda.is_available() is False')
    if args.repeats < 1:
        raise ValueError(f'--repeats must be >= 1, got {args.repeats}')
    rows = benchmark.run_benchmark(
        devices=devices, repeats=args.repeats,
        progress=lambda text: print(f'bench: {text}', file=sys.stderr, flush=True))
    if args.json:
        print(json.dumps([{'impl': row.impl, 'radius': row.radius, 'workload': row.workload,
                           'flows_per_s': row.flows_per_s,
                           'cpu_flows_per_s': _or_none(row.cpu_flows_per_s),
                           'flows_per_s_with_transfers': _or_none(
                               row.flows_per_s_with_transfers),
                           'peak_mem_mb': row.peak_mem_mb}
                          for row in rows]))
    else:
        gpu = f', GPU {torch.cuda.get_device_name()}' if 'cuda' in devices else ''
        print(f'torch {torch.__version__}, {torch.get_num_threads()} CPU threads{gpu}')
        print(benchmark.format_table(rows))
    return 0


def _or_none(value):
    return None if math.isnan(value) else value
