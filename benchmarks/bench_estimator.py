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
Streaming throughput of NormalFlowEstimator (the node's compute path) on CPU and CUDA.

    python3 benchmarks/bench_estimator.py [--device cpu cuda] [--speed 1 10 33 100]
                                          [--stride 1 8] [--block-ms 10] [--events 3000000]
                                          [--long-context-below-px-s 0 150]
                                          [--size 640x480 1280x720] [--count-syncs]
                                          [--cuda-forms sync-free compacting]

The bundled demo scene (346x260, 0.6 M events/s at 1x) is replayed time-compressed by each
speed factor (speed 33: ~20 M events/s), looped until --events events, in 1 ms packets of
sensor time, through one estimator per case (no ROS, no decoding: torch + numpy only, so it
runs on GPU machines without ROS wheels). Columns: input rate of the stream, events/s the
estimator sustained (wall), the real-time factor (> 1: keeps up), flows/s, and the p50/p99
wall time of a push() call that produced blocks, the share of flows estimated again by the
second look at slow flows ("2nd %", --long-context-below-px-s; 0: off, the estimator's own
default) and the ratio to the CPU row of the same case, measured in the same run. --size
tiles copies of the scene over a larger sensor (640x480: 2 x 2 copies, 1280x720: 4 x 3, cut at
the sensor's edges), each shifted in time by its share of the scene's span: the events per
speed factor grow with the area. --count-syncs (CUDA) runs the timed loop under torch's sync
debug mode ('warn') and adds the host synchronisations per block it reported ("syncs/blk";
the read of each block's flows is an event wait, not counted there) and the estimator's reads
of finished flows per block ("reads/blk", 1 expected); it slows the run, so its speeds are
not the benchmark's. --cuda-forms compacting adds rows of the estimator's CPU form run on
CUDA (sync_free=False: slow flows compacted before their second look, a host wait each;
device "cuda/c") to compare with the default sync-free form (fixed shapes).
"""

import argparse
import math
import pathlib
import time
import warnings

import numpy as np

from veckm_flow_ros.runtime import set_omp_wait_policy

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEMO_NPZ = ROOT / 'veckm_flow_ros' / 'data' / 'demo_scene.npz'


def _tiled(t_ns, x, y, p, width, height, size):
    """Return the scene tiled over a sensor of `size` (module docstring): (t, x, y, p, w, h)."""
    if size == (width, height):
        return t_ns, x, y, p, width, height
    columns, rows = -(-size[0] // width), -(-size[1] // height)
    copies = columns * rows
    span_ns = int(t_ns[-1]) + 1
    parts = []
    for k in range(copies):
        dx, dy = (k % columns) * width, (k // columns) * height
        inside = (x.astype(np.int64) + dx < size[0]) & (y.astype(np.int64) + dy < size[1])
        parts.append(((t_ns[inside] + k * span_ns // copies) % span_ns,
                      x[inside].astype(np.int64) + dx, y[inside].astype(np.int64) + dy,
                      p[inside]))
    t_all, x_all, y_all, p_all = (np.concatenate(column) for column in zip(*parts))
    order = np.argsort(t_all, kind='stable')
    return (t_all[order], x_all[order].astype(x.dtype), y_all[order].astype(y.dtype),
            p_all[order], size[0], size[1])


def compressed_stream(speed, total_events, packet_ns=1_000_000, size=None):
    """Yield EventArray packets of the demo scene compressed in time by `speed`, looped."""
    from veckm_flow_ros.eventio.events import EventArray
    data = np.load(DEMO_NPZ)
    t_ns = data['t'].astype(np.int64)
    t_ns = t_ns - t_ns[0]
    width, height = int(data['width']), int(data['height'])
    t_ns, x, y, p, width, height = _tiled(t_ns, data['x'], data['y'], data['p'], width, height,
                                          size or (width, height))
    span_ns = int(t_ns[-1]) + 1
    loops = max(1, math.ceil(total_events / len(t_ns)))
    t_all = np.concatenate([t_ns + k * span_ns for k in range(loops)])
    t_all = (t_all / speed).astype(np.int64)
    events = EventArray(t_all, np.tile(x, loops), np.tile(y, loops), np.tile(p, loops))
    edges = np.searchsorted(t_all, np.arange(0, int(t_all[-1]) + packet_ns, packet_ns))
    packets = [events[a:b] for a, b in zip(edges[:-1], edges[1:]) if b > a]
    return packets, width, height, int(t_all[-1]) * 1e-9


def run_case(model, device, packets, width, height, stride, block_ms, long_context_px_s=0.0,
             count_syncs=False, sync_free=None):
    """
    Stream the packets through a fresh estimator and return its figures.

    Returns (wall s, flows, push times s, flows looked at again, blocks, host syncs or None,
    reads of finished flows or None).
    """
    import torch

    from veckm_flow_ros.core.estimator import NormalFlowEstimator
    estimator = NormalFlowEstimator(model, width, height, device=device,
                                    block_s=block_ms * 1e-3, target_stride=stride,
                                    long_context_below_px_s=long_context_px_s,
                                    sync_free=sync_free)
    # Warm-up on a copy (CUDA context, allocator, cuBLAS) so the timed run starts hot.
    warm = NormalFlowEstimator(model, width, height, device=device, block_s=block_ms * 1e-3,
                               long_context_below_px_s=long_context_px_s)
    for packet in packets[:50]:
        warm.push(packet)
    warm.flush()
    if device == 'cuda':
        torch.cuda.synchronize()
    push_times = []
    flows = blocks_out = 0
    count_syncs = count_syncs and device == 'cuda'
    reads = estimator.host_reads if estimator.sync_free else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        if count_syncs:
            torch.cuda.set_sync_debug_mode('warn')
        start = time.perf_counter()
        for packet in packets:
            t0 = time.perf_counter()
            blocks = estimator.push(packet)
            if blocks:
                push_times.append(time.perf_counter() - t0)
                flows += sum(len(b) for b in blocks)
                blocks_out += len(blocks)
        if count_syncs:
            torch.cuda.set_sync_debug_mode('default')
        last = estimator.flush()
        flows += sum(len(b) for b in last)
        blocks_out += len(last)
        wall = time.perf_counter() - start
    syncs = sum('synchronizing' in str(w.message) for w in caught) if count_syncs else None
    if reads is not None:
        reads = estimator.host_reads - reads
    return (wall, flows, np.array(push_times), estimator.long_context_flows, blocks_out,
            syncs, reads)


def _per_block(count, blocks):
    return f'{"-":>9}' if count is None or not blocks else f'{count / blocks:>9.2f}'


def main():
    set_omp_wait_policy()  # before anything imports torch
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument('--model', default=None, help='model path or name (default: shipped)')
    parser.add_argument('--device', nargs='+', default=['cpu', 'cuda'])
    parser.add_argument('--speed', type=float, nargs='+', default=[1.0, 10.0, 33.0, 100.0])
    parser.add_argument('--stride', type=int, nargs='+', default=[1, 8])
    parser.add_argument('--block-ms', type=float, default=10.0)
    parser.add_argument('--events', type=int, default=3_000_000,
                        help='events per case (the scene is looped)')
    parser.add_argument('--cpu-events', type=int, default=600_000,
                        help='events per CPU case (slower)')
    parser.add_argument('--threads', type=int, default=0, help='torch CPU threads (0: default)')
    parser.add_argument('--long-context-below-px-s', type=float, nargs='+', default=[0.0],
                        metavar='PX_S', help='second look at flows slower than this [px/s] '
                        '(0: off; the node default is 150); one set of rows per value')
    parser.add_argument('--size', nargs='+', default=[],
                        help='sensor sizes WxH (the scene tiled over them; default: the '
                             "scene's own 346x260)")
    parser.add_argument('--cuda-forms', nargs='+', default=['sync-free'],
                        choices=['sync-free', 'compacting'],
                        help='forms of the estimator timed on CUDA (module docstring)')
    parser.add_argument('--count-syncs', action='store_true',
                        help='count host synchronisations per block on CUDA (slower; '
                             'module docstring)')
    args = parser.parse_args()
    sizes = [tuple(int(v) for v in size.lower().split('x')) for size in args.size] or [None]

    import torch

    from veckm_flow_ros.core.model import load_model
    if args.threads:
        torch.set_num_threads(args.threads)
    model = load_model(args.model)
    gpu = torch.cuda.get_device_name() if 'cuda' in args.device else 'none'
    print(f'model {model.name} (r={model.pixel_radius}, tau={model.tau_s * 1e3:g} ms), block '
          f'{args.block_ms:g} ms, torch {torch.__version__}, {torch.get_num_threads()} CPU '
          f'threads, GPU {gpu}')
    header = (f'{"size":<9} {"device":<6} {"2nd<":>5} {"speed":>6} {"stride":>6} {"events":>9} '
              f'{"input ev/s":>12} {"ev/s":>12} {"xRT":>6} {"flows/s":>12} {"p50 ms":>7} '
              f'{"p99 ms":>7} {"2nd %":>6} {"vs cpu":>7}' +
              (f' {"syncs/blk":>9} {"reads/blk":>9}' if args.count_syncs else ''))
    print(header)
    print('-' * len(header), flush=True)
    cases = [(size, long_context, speed, stride) for size in sizes
             for long_context in args.long_context_below_px_s
             for speed in args.speed for stride in args.stride]
    for size, long_context, speed, stride in cases:
        cpu_rate = None
        runs = [(device, None) for device in args.device if device != 'cuda']
        if 'cuda' in args.device:
            runs += [('cuda', form == 'sync-free') for form in args.cuda_forms]
        for device, sync_free in runs:
            total = args.cpu_events if device == 'cpu' else args.events
            packets, width, height, span_s = compressed_stream(speed, total, size=size)
            events = sum(len(p) for p in packets)
            wall, flows, push_times, again, blocks, syncs, reads = run_case(
                model, device, packets, width, height, stride, args.block_ms, long_context,
                args.count_syncs, sync_free)
            label = 'cuda/c' if sync_free is False else device
            rate = events / wall
            if device == 'cpu':
                cpu_rate = rate
            ratio = f'{rate / cpu_rate:>7.1f}' if cpu_rate and device != 'cpu' else \
                f'{"-":>7}'
            p50, p99 = (np.percentile(push_times, [50, 99]) * 1e3) if len(push_times) \
                else (math.nan, math.nan)
            print(f'{f"{width}x{height}":<9} {label:<6} {long_context:>5g} {speed:>6g} '
                  f'{stride:>6} {events:>9} '
                  f'{events / span_s:>12,.0f} {rate:>12,.0f} {span_s / wall:>6.2f} '
                  f'{flows / wall:>12,.0f} {p50:>7.1f} {p99:>7.1f} '
                  f'{100.0 * again / max(flows, 1):>6.1f} {ratio}' +
                  (f' {_per_block(syncs, blocks)} {_per_block(reads, blocks)}'
                   if args.count_syncs else ''), flush=True)


if __name__ == '__main__':
    main()
