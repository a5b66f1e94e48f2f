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
The validity filter (docs/validity.md): which events keep a flow, and what it costs.

    python3 benchmarks/bench_validity.py [--recordings DIR] [--noise-hz 1.0] [--repeats 5]
                                         [--parts kept cost] [--long-context-below-px-s 150]

Everything runs through NormalFlowEstimator at the node's defaults (the model's automatic
block, 2 tau centred; every event a target; min_validity and the long context for flows
slower than long_context_below_px_s from stream/parameters.py), one torch thread.
--long-context-below-px-s PX_S sets the latter for every run (default: the node's, 150 px/s;
0 = off, the numbers measured before that default).

kept: for each real recording (--recordings, default ../shared/data/recordings) the share of
its events that keep a flow; for the held-out synthetic set (offline/evaluate.py) with its
background activity set to --noise-hz for every scene (and each scene's own rate): the share
of signal events that keep a flow (pooled, and in the scene that keeps the fewest) and of
noise events, and %Pos / relative PEE of the signal events' flows, all (min_validity 0) and
kept only (noise has no ground truth, it is never scored).

cost: CPU time per block (thread time; interleaved repeats: median and fastest) of the
estimator plus packing the block's ~/flow points (flow_cloud, as the node does before
serialising), on the demo scene and the real recordings, for three variants measured in the
same run: `none` (the validity step replaced by a constant: the estimator before validity),
`off` (validity computed, min_validity 0) and `default` (validity computed and filtered);
each against `none`. On a busy machine the A/B ratios carry a few % of noise; the last
column, the share of each run's own CPU time spent in the validity step (timed inside the
same blocks), does not depend on the other runs.
"""

import argparse
import pathlib
import sys
import time

import numpy as np
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED_RECORDINGS = ROOT.parent / 'shared' / 'data' / 'recordings'
DEMO_NPZ = ROOT / 'veckm_flow_ros' / 'data' / 'demo_scene.npz'
PACKET_NS = 1_000_000


def _log(message):
    print(message, flush=True)


def make_estimator(model, width, height, min_validity, long_context_below_px_s,
                   validity=True):
    """Return the node's estimator for this sensor (validity=False: a constant validity)."""
    from veckm_flow_ros.core.estimator import automatic_block_s, NormalFlowEstimator

    class Timed(NormalFlowEstimator):
        validity_s = 0.0  # thread time spent in the validity step

        def _validity(self, x, y, target_index, count):
            start = time.thread_time()
            if validity:
                result = super()._validity(x, y, target_index, count)
            else:
                result = torch.ones(len(count), dtype=torch.float32, device=count.device)
            self.validity_s += time.thread_time() - start
            return result
    return Timed(model, width, height, block_s=automatic_block_s(model.tau_s),
                 min_validity=min_validity, long_context_below_px_s=long_context_below_px_s)


def kept_mask(model, events, width, height, min_validity, long_context_below_px_s):
    """Return (bool [N]: which events got a published flow, flows float32 [N, 2])."""
    from veckm_flow_ros.core.estimator import FlowBlock
    estimator = make_estimator(model, width, height, min_validity, long_context_below_px_s)
    blocks = []
    for start in range(0, len(events), 200_000):
        blocks += estimator.push(events[start:start + 200_000])
    block = FlowBlock.concatenate(blocks + estimator.flush())
    kept = np.zeros(len(events), bool)
    kept[block.event_index] = True
    flow = np.full((len(events), 2), np.nan, np.float32)
    flow[block.event_index, 0], flow[block.event_index, 1] = block.u_px_s, block.v_px_s
    return kept, flow


def available_recordings(directory):
    """Return recordings(directory), or {} (logged) when the folder is missing or empty."""
    data = recordings(directory) if pathlib.Path(directory).is_dir() else {}
    if not data:
        _log(f'no recordings under {directory}: real rows left out')
    return data


def cost_inputs(data):
    """Return the cost tables' inputs: the bundled demo scene, recordings over 10k events."""
    from veckm_flow_ros.eventio.events import EventArray
    demo = np.load(DEMO_NPZ)
    inputs = {'demo_scene (synthetic)': (
        EventArray(demo['t'].astype(np.int64), demo['x'], demo['y'], demo['p']),
        int(demo['width']), int(demo['height']))}
    inputs.update({name: value for name, value in data.items() if len(value[0]) > 10_000})
    return inputs


def recordings(directory):
    """{name: (events, width, height)} of the recordings under `directory` (sorted by name)."""
    from veckm_flow_ros.offline.evaluate import decode_recording
    found = {}
    for path in sorted(pathlib.Path(directory).iterdir()):
        if path.is_dir():
            found[path.name] = decode_recording(path)
    return found


def kept_table(model, data, noise_hz, min_validity, long_context_below_px_s):
    from veckm_flow_ros.core.metrics import flow_metrics
    from veckm_flow_ros.offline.evaluate import heldout_sequences
    _log(f'\nkept (min_validity {min_validity:g}): real recordings')
    _log(f'{"recording":<36} {"events":>9} {"span s":>7} {"Hz/px":>6} {"kept %":>7}')
    for name, (events, width, height) in data.items():
        kept, _ = kept_mask(model, events, width, height, min_validity,
                            long_context_below_px_s)
        span_s = max(int(events.t_ns[-1]) - int(events.t_ns[0]), 1) * 1e-9
        _log(f'{name:<36} {len(events):>9,} {span_s:>7.3f} '
             f'{len(events) / span_s / width / height:>6.2f} {100 * kept.mean():>7.2f}')
    header = (f'{"held-out set, noise":<22} {"signal ev":>10} {"noise ev":>9} '
              f'{"signal kept %":>13} {"worst scene %":>13} {"noise kept %":>12} '
              f'{"%Pos all":>8} {"%Pos kept":>9} '
              f'{"rPEE all":>8} {"rPEE kept":>9}')
    _log('\nkept: held-out synthetic set (signal events scored, noise never)\n' + header)
    for label, rate in ((f'{noise_hz:g} Hz/px', noise_hz), ("each scene's own", None)):
        start = time.perf_counter()
        sequences = heldout_sequences(noise_rate_hz_per_px=rate)
        flows, truths, kept_all, noise_all = [], [], [], []
        for sequence in sequences.values():
            kept, flow = kept_mask(model, sequence.events, sequence.width, sequence.height,
                                   min_validity, long_context_below_px_s)
            flows.append(flow)
            truths.append(sequence.flow_px_s)
            kept_all.append(kept)
            noise_all.append(sequence.is_noise)
        worst = min(np.mean(kept[~noise]) for kept, noise in zip(kept_all, noise_all))
        flow, truth = np.concatenate(flows), np.concatenate(truths)
        kept, noise = np.concatenate(kept_all), np.concatenate(noise_all)
        # kept: the published flows only; all: min_validity 0 (every event has a flow).
        kept_scores = flow_metrics(flow, truth, mask=kept)
        _, flow_all = zip(*(kept_mask(model, s.events, s.width, s.height, 0.0,
                                      long_context_below_px_s)
                            for s in sequences.values()))
        all_scores = flow_metrics(np.concatenate(flow_all), truth)
        _log(f'{label:<22} {int((~noise).sum()):>10,} {int(noise.sum()):>9,} '
             f'{100 * kept[~noise].mean():>13.2f} {100 * worst:>13.2f} '
             f'{100 * kept[noise].mean():>12.2f} '
             f'{100 * all_scores["pos"]:>8.2f} {100 * kept_scores["pos"]:>9.2f} '
             f'{all_scores["rel_pee"]:>8.3f} {kept_scores["rel_pee"]:>9.3f}   '
             f'({time.perf_counter() - start:.0f} s)')


def packets_of(events):
    edges = np.searchsorted(events.t_ns, np.arange(int(events.t_ns[0]),
                                                   int(events.t_ns[-1]) + PACKET_NS, PACKET_NS))
    return [events[a:b] for a, b in zip(edges[:-1], edges[1:]) if b > a]


def block_cpu_s(model, packets, width, height, variant, min_validity,
                long_context_below_px_s):
    """
    Return the CPU time per block [s], flows per block and the validity step's CPU share.

    CPU time of this thread: estimator pushes + ~/flow point packing.
    """
    estimator = make_estimator(model, width, height,
                               min_validity if variant == 'default' else 0.0,
                               long_context_below_px_s, validity=variant != 'none')
    total_s, blocks, flows, _ = time_pushes(estimator, packets)
    return total_s / max(blocks, 1), flows / max(blocks, 1), estimator.validity_s / total_s


def time_pushes(estimator, packets):
    """
    Push `packets` through a warmed-up estimator, packing each block's ~/flow points.

    Returns (thread CPU s, blocks, flows, input events).
    """
    from veckm_flow_ros.eventio.flow_cloud import block_flow_points, pointcloud2_fields
    estimator.warm_up()
    blocks = flows = events = 0
    start = time.thread_time()
    for packet in packets:
        events += len(packet)
        for block in estimator.push(packet):
            points, _ = block_flow_points(block)
            pointcloud2_fields(points)
            blocks += 1
            flows += len(block)
    return time.thread_time() - start, blocks, flows, events


def cost_table(model, data, repeats, min_validity, long_context_below_px_s):
    _log(f'\ncost: CPU ms per block ({repeats} interleaved repeats, 1 thread), estimator + '
         '~/flow points; median and fastest repeat, each against `none`')
    _log(f'{"input":<36} {"variant":<8} {"flows/block":>11} {"median ms":>9} {"vs none":>8} '
         f'{"min ms":>7} {"vs none":>8} {"validity step %":>15}')
    for name, (events, width, height) in data.items():
        packets = packets_of(events)
        times = {variant: [] for variant in ('none', 'off', 'default')}
        flows, shares = {}, {variant: [] for variant in times}
        for _ in range(repeats):
            for variant in times:
                seconds, flows[variant], share = block_cpu_s(
                    model, packets, width, height, variant, min_validity,
                    long_context_below_px_s)
                times[variant].append(seconds)
                shares[variant].append(share)
        median, fastest = np.median(times['none']), np.min(times['none'])
        for variant, values in times.items():
            _log(f'{name:<36} {variant:<8} {flows[variant]:>11.0f} '
                 f'{1e3 * np.median(values):>9.2f} {np.median(values) / median:>8.3f} '
                 f'{1e3 * np.min(values):>7.2f} {np.min(values) / fastest:>8.3f} '
                 f'{100 * np.median(shares[variant]):>15.2f}')


def main():
    from veckm_flow_ros.cli.replay import add_long_context_argument, parse_benchmark_arguments
    from veckm_flow_ros.runtime import set_omp_wait_policy
    set_omp_wait_policy()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument('--model', default=None, help='model path or name (default: shipped)')
    parser.add_argument('--recordings', default=str(SHARED_RECORDINGS),
                        help='folder of recorded bags (default: ../shared/data/recordings)')
    parser.add_argument('--noise-hz', type=float, default=1.0,
                        help='background activity of the held-out scenes [Hz per pixel]')
    parser.add_argument('--repeats', type=int, default=5, help='interleaved cost repeats')
    parser.add_argument('--parts', nargs='+', default=['kept', 'cost'],
                        choices=('kept', 'cost'))
    add_long_context_argument(parser, note='every run; 0 reproduces the numbers measured '
                              'before that default')
    args = parse_benchmark_arguments(parser)
    torch.set_num_threads(1)
    from veckm_flow_ros.core.model import load_model
    from veckm_flow_ros.stream.parameters import parameter_default
    model = load_model(args.model)
    min_validity = parameter_default('min_validity')
    _log(f'model {model.name} (r={model.pixel_radius}, tau={model.tau_s * 1e3:g} ms), '
         f'block {2 * model.tau_s * 1e3:g} ms centred, min_validity {min_validity:g}, long '
         f'context below {args.long_context_below_px_s:g} px/s, torch {torch.__version__}, '
         '1 thread')
    data = available_recordings(args.recordings)
    if 'kept' in args.parts:
        kept_table(model, data, args.noise_hz, min_validity, args.long_context_below_px_s)
    if 'cost' in args.parts:
        cost_table(model, cost_inputs(data), args.repeats, min_validity,
                   args.long_context_below_px_s)


if __name__ == '__main__':
    main()
