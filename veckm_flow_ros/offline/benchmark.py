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
Throughput benchmark of the encoding + MLP: Algorithm-1 baselines vs our CPU / CUDA ops.

Workloads (synthetic, seeded: random straight edges moving across a 640x480 sensor):
- dense: 200k events in one 24 ms slice, every event a target;
- sparse: 500k events, 10k of them (evenly spaced) are targets.
Each row reports flows/s end to end (encoding + MLP, inputs already on the device) from the
wall time and, for CPU runs, from the process CPU time (what the cores actually spent: on a
shared machine the wall time also counts waiting), and the peak memory of the run; the ratio
to the Algorithm-1 baseline (wall) is measured in the same run. CUDA rows are timed with CUDA
events on the current stream (inputs resident on the GPU, no host transfers) and, in a second
figure, including the transfers a caller pays: events copied from host memory to the GPU and
the flows copied back. Every CUDA row has a baseline on the same card, timed in the same run:
'cuda-naive', the paper's Algorithm 1 written literally as a CUDA kernel (ops.encode_naive:
per target, its (2r+1)^2 window read pixel by pixel for each channel), with the same MLP; the
'x naive' column is the measured speed-up of the 'cuda' row over it. On a CPU with AVX2 a
'cpu-c4' row runs the same encoding and the C4-equivariant MLP of the shipped default model in
its Fourier form (ops.flow_mlp_c4), so its ratio to the 'cpu' row (dense MLP kernel) is
measured in the same run too.
Only torch and numpy are needed (no ROS), so it runs on GPU machines without ROS wheels.
"""

import dataclasses
import math
import resource
import time
from typing import List, Optional

import numpy as np
import torch

from veckm_flow_ros import ops
from veckm_flow_ros.core import reference

WIDTH, HEIGHT = 640, 480
TAU_S = 0.012
WORKLOADS = {'dense': (200_000, None), 'sparse': (500_000, 10_000)}
RADII = (8, 10)


@dataclasses.dataclass
class BenchRow:
    """
    One measurement of an implementation on a workload.

    flows_per_s from the wall time (CUDA: from CUDA events, inputs on the GPU);
    cpu_flows_per_s from the process CPU time (CPU runs; NaN for CUDA);
    flows_per_s_with_transfers (CUDA runs; NaN otherwise) counts the host->GPU copy of the
    events and the GPU->host copy of the flows; peak memory in MB.
    """

    impl: str
    radius: int
    workload: str
    flows_per_s: float
    peak_mem_mb: float
    num_flows: int
    cpu_flows_per_s: float = math.nan
    flows_per_s_with_transfers: float = math.nan


def synthetic_edges(num_events: int, seed: int = 0, num_edges: int = 60,
                    duration_s: float = 2 * TAU_S, width: int = WIDTH, height: int = HEIGHT):
    """
    Return (t_ns int64, x int32, y int32) of straight edges moving at random velocities.

    Events are time-sorted; each edge gets an equal share of events at random points along
    it (up to 600 px/s in x and y), on a width x height sensor.
    """
    rng = np.random.default_rng(seed)
    per_edge = num_events // num_edges
    t_s, x, y = [], [], []
    for edge in range(num_edges):
        count = per_edge if edge < num_edges - 1 else num_events - per_edge * (num_edges - 1)
        centre = rng.uniform((0, 0), (width, height))
        angle = rng.uniform(0, math.pi)
        length = rng.uniform(40, 240)
        velocity = rng.uniform(-600, 600, 2)
        t = rng.uniform(0, duration_s, count)
        along = rng.uniform(-length / 2, length / 2, count)
        t_s.append(t)
        x.append(centre[0] + along * math.cos(angle) + velocity[0] * t)
        y.append(centre[1] + along * math.sin(angle) + velocity[1] * t)
    t_s, x, y = np.concatenate(t_s), np.concatenate(x), np.concatenate(y)
    order = np.argsort(t_s, kind='stable')
    x = np.clip(np.round(x[order]), 0, width - 1).astype(np.int32)
    y = np.clip(np.round(y[order]), 0, height - 1).astype(np.int32)
    return (t_s[order] * 1e9).astype(np.int64), x, y


def random_model_tensors(d: int = 64, hidden: int = 128, seed: int = 0):
    """Frequencies and MLP weights with the published shapes (values do not affect speed)."""
    generator = torch.Generator().manual_seed(seed)
    freqs = [5.0 * torch.randn(d, generator=generator) for _ in range(3)]
    weights = [torch.randn(shape, generator=generator) / math.sqrt(shape[0])
               for shape in ((2 * d, hidden), (hidden, hidden), (hidden, 2))]
    return freqs, weights


def _c4_mlp():
    """
    MLP of the shipped default model in its C4 Fourier form (ops.flow_mlp_c4), or None.

    The 'cpu-c4' rows: the same encoding, then the C4-equivariant MLP of the same shape run
    with 6/16 of the dense multiply-adds (the default CPU path for our c4 models).
    """
    from veckm_flow_ros.core.model import load_model
    if not ops.has_flow_mlp_c4():
        return None
    model = load_model()
    if model.c4_fourier_blocks is None:
        return None
    blocks, groups = model.c4_fourier_blocks
    return lambda features: ops.flow_mlp_c4(features, blocks, model.w3, groups, 60.0)


def _targets(num_events, num_targets):
    if num_targets is None:
        return np.arange(num_events, dtype=np.int64)
    return np.linspace(0, num_events - 1, num_targets).round().astype(np.int64)


def _peak_mb(device):
    if device.type == 'cuda':
        return torch.cuda.max_memory_allocated(device) / 2**20
    # ru_maxrss is the process high-water mark (kB on Linux): it never goes down.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _time(function, device, repeats):
    """Best wall and best process CPU time (seconds) over `repeats` calls after a warm-up."""
    function()  # warm-up (allocations, lazy init)
    best, best_cpu = math.inf, math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        start_cpu = time.process_time()
        function()
        best = min(best, time.perf_counter() - start)
        best_cpu = min(best_cpu, time.process_time() - start_cpu)
    return best, best_cpu


def _time_cuda(function, repeats):
    """Best time (seconds) of `repeats` calls between CUDA events on the current stream."""
    function()  # warm-up (allocator, cuBLAS handles, module load)
    torch.cuda.synchronize()
    best = math.inf
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        function()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) * 1e-3)
    return best


def run_benchmark(devices=('cpu',), radii=RADII, workloads=tuple(WORKLOADS),
                  baseline_max_targets: int = 20_000, repeats: int = 3,
                  progress: Optional[callable] = None) -> List[BenchRow]:
    """
    Measure every implementation on every (radius, workload); returns BenchRows.

    The Algorithm-1 baseline (reference.encode_algorithm1 on the CPU) is timed on at most
    baseline_max_targets of the targets (its cost is linear in the targets; the full dense
    workload would take minutes) and reported as flows/s.
    """
    (freq_t, freq_x, freq_y), (w1, w2, w3) = random_model_tensors()
    c4_mlp = _c4_mlp()
    rows = []
    for workload in workloads:
        num_events, num_targets = WORKLOADS[workload]
        t_ns, x, y = synthetic_edges(num_events, seed=1)
        targets = _targets(num_events, num_targets)
        for radius in radii:
            impls = [('algorithm1', torch.device('cpu'))]
            for device in map(torch.device, devices):
                if device.type == 'cuda':
                    impls.append(('cuda-naive', device))  # the same-card baseline
                impls.append((device.type, device))
            if c4_mlp is not None and 'cpu' in [torch.device(d).type for d in devices]:
                impls.append(('cpu-c4', torch.device('cpu')))
            for impl, device in impls:
                if progress:
                    progress(f'{impl} r={radius} {workload}')
                if device.type == 'cuda':
                    torch.cuda.reset_peak_memory_stats(device)
                inputs = [torch.from_numpy(a).to(device) for a in (t_ns, x, y)]
                model = [a.to(device) for a in (freq_t, freq_x, freq_y, w1, w2, w3)]
                if impl == 'algorithm1':
                    subset = targets[:baseline_max_targets]
                else:
                    subset = targets
                target_index = torch.from_numpy(subset).to(device)

                def run_once():
                    encode = {'algorithm1': reference.encode_algorithm1,
                              'cuda-naive': ops.encode_naive}.get(impl, ops.encode)
                    features, _ = encode(*inputs, target_index, WIDTH, HEIGHT, *model[:3],
                                         TAU_S, radius)
                    if impl == 'cpu-c4':
                        return c4_mlp(features)
                    return ops.flow_mlp(features, *model[3:], 60.0)

                with_transfers = math.nan
                if device.type == 'cuda':
                    seconds, cpu_seconds = _time_cuda(run_once, repeats), math.nan
                else:
                    seconds, cpu_seconds = _time(run_once, device,
                                                 repeats if impl != 'algorithm1' else 1)
                if impl == 'cuda':
                    host = [torch.from_numpy(a).pin_memory() for a in (t_ns, x, y, subset)]

                    def run_with_transfers():
                        on_device = [a.to(device, non_blocking=True) for a in host]
                        features, _ = ops.encode(*on_device, WIDTH, HEIGHT, *model[:3], TAU_S,
                                                 radius)
                        return ops.flow_mlp(features, *model[3:], 60.0).cpu()

                    with_transfers = len(subset) / _time_cuda(run_with_transfers, repeats)
                cpu_rate = len(subset) / cpu_seconds if device.type == 'cpu' and cpu_seconds > 0 \
                    else math.nan
                rows.append(BenchRow(impl, radius, workload, len(subset) / seconds,
                                     _peak_mb(device), len(subset), cpu_rate, with_transfers))
    return rows


def format_table(rows: List[BenchRow]) -> str:
    """
    Render rows as a text table with the speed-ups measured in the same run.

    'x baseline': over algorithm1 (torch, CPU) of the same case; 'x naive': of a CUDA row over
    cuda-naive (Algorithm 1 as a CUDA kernel) of the same case, on the same card.
    """
    def rates(impl):
        return {(row.radius, row.workload): row.flows_per_s for row in rows if row.impl == impl}

    def ratio(row, baseline):
        case = (row.radius, row.workload)
        return row.flows_per_s / baseline[case] if case in baseline else float('nan')

    baseline, naive = rates('algorithm1'), rates('cuda-naive')
    lines = [f'{"impl":<11} {"r":>3} {"workload":<8} {"flows":>8} {"flows/s":>12} '
             f'{"x baseline":>10} {"x naive":>8} {"flows/cpu-s":>12} {"+transfers/s":>13} '
             f'{"peak MB":>9}']
    for row in rows:
        vs_naive = ratio(row, naive) if row.impl == 'cuda' else float('nan')
        lines.append(f'{row.impl:<11} {row.radius:>3} {row.workload:<8} {row.num_flows:>8} '
                     f'{row.flows_per_s:>12,.0f} {ratio(row, baseline):>10.1f} '
                     f'{vs_naive:>8.1f} {row.cpu_flows_per_s:>12,.0f} '
                     f'{row.flows_per_s_with_transfers:>13,.0f} {row.peak_mem_mb:>9.0f}')
    return '\n'.join(lines)
