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
Block length and cheap ensembles: held-out accuracy at the node's defaults, and CPU cost.

    python3 benchmarks/bench_block_views.py [--blocks-ms 16 18 20 22 24] [--noise-hz 1.0]
                                            [--parts accuracy real cost] [--repeats 5]
                                            [--phases 0 0.333 0.667]
                                            [--long-context-below-px-s 150]

Everything runs through NormalFlowEstimator, centred blocks, every event a target, one torch
thread, for each block length of --blocks-ms (the node's automatic block is 2 tau), with the
node's long context: kept flows slower than --long-context-below-px-s (default: the node's
long_context_below_px_s, 150 px/s; 0 = off, the numbers measured before that default) are
estimated again on a context twice as long (in every view below: that view's slow flows, by
the same view of the long-context model).

accuracy: the held-out synthetic set (offline/evaluate.py) with --noise-hz background activity
in every scene; signal events scored (noise never), all flows and the flows the default
validity filter keeps (min_validity of stream/parameters.py). Three flows per event from one
pass: `plain` (the model's prediction, what the node publishes), `tr` (mean of the plain and
the time-reversed view: complex-conjugated features, one encoding and two MLP passes) and
`full` (the mean of the whole ensemble of core/confidence.py: the node's rotation_mean_flow).

real: the share of each real recording's events (--recordings) that keep a flow at each block
length (the noise-only recording codecs_test_data_libcaer_rollover: goal <= 10 %).

cost: thread CPU time of the estimator's pushes (1 ms packets) plus packing the ~/flow points,
per block and per input event, on the demo scene and the real recordings; `plain` at each
block length and `tr` at each block length, interleaved repeats, median; ratios against
`plain` at the longest block (the node's default).
"""

import argparse
import pathlib
import sys
import time

import numpy as np
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / 'benchmarks'))
VIEWS = ('plain', 'tr', 'full')


def _log(message):
    print(message, flush=True)


def time_reversed_mean(model, features):
    """Mean flow [M, 2] px/s of the plain and the time-reversed (conjugated) features."""
    half = model.num_features
    reversed_features = torch.cat([features[:, :half], -features[:, half:]], 1)
    return 0.5 * (model.predict_flow_px_s(features) + model.predict_flow_px_s(reversed_features))


def view_flows(model, views, context, target_index, width, height):
    """Flows [M, 2 * len(views)] px/s of the targets (a column pair per view), context counts."""
    from veckm_flow_ros import ops
    from veckm_flow_ros.core.confidence import ensemble_flows
    t_ns, x, y = context
    features, count = ops.encode(t_ns, x, y, target_index, width, height, model.freq_t,
                                 model.freq_x, model.freq_y, model.tau_s, model.pixel_radius)
    flows = []
    for view in views:
        if view == 'plain':
            flows.append(model.predict_flow_px_s(features))
        elif view == 'tr':
            flows.append(time_reversed_mean(model, features))
        else:
            flows.append(ensemble_flows(model, t_ns, x, y, target_index, width, height).mean(0))
    return torch.cat(flows, 1), count


def views_estimator(model, width, height, block_s, views, min_validity=0.0,
                    long_context_below_px_s=0.0):
    """
    Return an estimator whose blocks carry `views_px_s` float32 [M, 2 * len(views)].

    With long_context_below_px_s each view is taken as the node would publish it: its kept
    flows slower than that are replaced by the same view of the long-context model.
    """
    from veckm_flow_ros.core.estimator import NormalFlowEstimator

    class Views(NormalFlowEstimator):

        def _encode_and_predict(self, context, targets):
            if isinstance(targets, tuple):
                target_index = torch.arange(*targets, dtype=torch.int64)
            else:
                target_index = torch.from_numpy(np.ascontiguousarray(targets, dtype=np.int64))
            flows, count = view_flows(self.model, views, context, target_index, self.width,
                                      self.height)
            _, x, y = context
            return flows, None, self._validity(x, y, target_index, count)

        def _estimate_slow_again(self, long_context, long_targets, flow, confidence,
                                 validity):
            pairs = flow.reshape(len(flow), len(views), 2).clone()
            slow = (torch.linalg.vector_norm(pairs, dim=2) < self.long_context_below_px_s) \
                & (validity >= self.min_validity)[:, None]
            which = torch.nonzero(slow.any(dim=1)).flatten()
            if len(which) == 0:
                return flow, confidence, 0
            positions = torch.from_numpy(np.ascontiguousarray(long_targets, dtype=np.int64))
            again, _ = view_flows(self._long_model, views, long_context,
                                  positions.index_select(0, which), self.width, self.height)
            rows, replace = pairs[which], slow[which]
            rows[replace] = again.reshape(len(which), len(views), 2)[replace]
            pairs[which] = rows
            again_count = int(slow[:, 0].sum())  # the first view's, as for the node
            with self._count_lock:
                self.long_context_flows += again_count
            return pairs.reshape(len(flow), -1), confidence, again_count

        def _published_block(self, flow, confidence, validity, about):
            block = super()._published_block(flow[:, :2], confidence, validity, about)
            block.views_px_s = flow[np.isfinite(flow[:, :2]).all(axis=1)]
            return block
    return Views(model, width, height, block_s=block_s, min_validity=min_validity,
                 long_context_below_px_s=long_context_below_px_s)


def accuracy_table(model, blocks_ms, noise_hz, min_validity, phases, long_context_below_px_s):
    from veckm_flow_ros.core.metrics import flow_metrics
    from veckm_flow_ros.offline.evaluate import heldout_sequences
    sequences = heldout_sequences(noise_rate_hz_per_px=noise_hz)
    truth = np.concatenate([s.flow_px_s for s in sequences.values()])
    noise = np.concatenate([s.is_noise for s in sequences.values()])
    _log(f'\naccuracy: held-out set, {noise_hz:g} Hz/px background activity in every scene, '
         f'{int((~noise).sum()):,} signal events scored; kept = validity >= {min_validity:g}; '
         f'block boundaries shifted by {phases} of a block (pooled over the shifts; '
         f'"range": the lowest and highest %Pos kept of a single shift)')
    _log(f'{"block ms":>8} {"view":<6} {"signal kept %":>13} {"%Pos all":>8} '
         f'{"%Pos kept":>9} {"range":>13} {"rPEE all":>8} {"rPEE kept":>9} {"s":>5}')
    for block_ms in blocks_ms:
        start = time.perf_counter()
        flows, kept, per_phase = [], [], []
        for phase in phases:
            phase_flows, phase_kept = _phase_flows(model, sequences, block_ms, phase,
                                                   min_validity, long_context_below_px_s)
            flows.append(phase_flows)
            kept.append(phase_kept)
            per_phase.append([flow_metrics(phase_flows[:, 2 * n:2 * n + 2], truth,
                                           mask=phase_kept)['pos'] for n in range(len(VIEWS))])
        flow, kept = np.concatenate(flows), np.concatenate(kept)
        seconds = time.perf_counter() - start
        all_truth, all_noise = np.concatenate([truth] * len(phases)), \
            np.concatenate([noise] * len(phases))
        for number, view in enumerate(VIEWS):
            view_flow = flow[:, 2 * number:2 * number + 2]
            all_scores = flow_metrics(view_flow, all_truth)
            kept_scores = flow_metrics(view_flow, all_truth, mask=kept)
            low = 100 * min(pos[number] for pos in per_phase)
            high = 100 * max(pos[number] for pos in per_phase)
            _log(f'{block_ms:>8g} {view:<6} {100 * kept[~all_noise].mean():>13.2f} '
                 f'{100 * all_scores["pos"]:>8.2f} {100 * kept_scores["pos"]:>9.2f} '
                 f'{f"{low:.2f}-{high:.2f}":>13} '
                 f'{all_scores["rel_pee"]:>8.3f} {kept_scores["rel_pee"]:>9.3f} '
                 f'{seconds:>5.0f}')


def _phase_flows(model, sequences, block_ms, phase, min_validity, long_context_below_px_s):
    """Flows [N, 2 * len(VIEWS)] and kept [N] of the set, block starts shifted by `phase`."""
    flows, kept = [], []
    for sequence in sequences.values():
        estimator = views_estimator(model, sequence.width, sequence.height,
                                    block_ms * 1e-3, VIEWS,
                                    long_context_below_px_s=long_context_below_px_s)
        # The first block starts phase * block before the first event (0: at it).
        estimator._block_start_ns = int(sequence.events.t_ns[0]) - \
            int(round(phase * block_ms * 1e6))
        blocks = []
        for begin in range(0, len(sequence.events), 200_000):
            blocks += estimator.push(sequence.events[begin:begin + 200_000])
        blocks += estimator.flush()
        flow = np.full((len(sequence.events), 2 * len(VIEWS)), np.nan, np.float32)
        valid = np.zeros(len(sequence.events), bool)
        for block in blocks:
            flow[block.event_index] = block.views_px_s
            valid[block.event_index] = block.validity >= min_validity
        flows.append(flow)
        kept.append(valid)
    return np.concatenate(flows), np.concatenate(kept)


def real_table(model, data, blocks_ms, min_validity, long_context_below_px_s):
    _log(f'\nreal recordings: share of events keeping a flow (min_validity {min_validity:g})')
    _log(f'{"recording":<36} ' + ' '.join(f'{f"{b:g} ms %":>9}' for b in blocks_ms))
    from veckm_flow_ros.core.estimator import NormalFlowEstimator
    for name, (events, width, height) in data.items():
        shares = []
        for block_ms in blocks_ms:
            estimator = NormalFlowEstimator(model, width, height, block_s=block_ms * 1e-3,
                                            min_validity=min_validity,
                                            long_context_below_px_s=long_context_below_px_s)
            shares.append(len(estimator.estimate_all(events)) / max(len(events), 1))
        _log(f'{name:<36} ' + ' '.join(f'{100 * share:>9.2f}' for share in shares))


def cpu_per_block(model, packets, width, height, block_ms, view, min_validity,
                  long_context_below_px_s):
    """Return (thread CPU s per block, per input event, flows per block)."""
    from veckm_flow_ros.core.estimator import NormalFlowEstimator
    if view == 'plain':
        estimator = NormalFlowEstimator(model, width, height, block_s=block_ms * 1e-3,
                                        min_validity=min_validity,
                                        long_context_below_px_s=long_context_below_px_s)
    else:
        estimator = views_estimator(model, width, height, block_ms * 1e-3, (view,),
                                    min_validity, long_context_below_px_s)
    from bench_validity import time_pushes
    total_s, blocks, flows, events = time_pushes(estimator, packets)
    return total_s / max(blocks, 1), total_s / max(events, 1), flows / max(blocks, 1)


def cost_table(model, inputs, blocks_ms, repeats, min_validity, long_context_below_px_s):
    from bench_validity import packets_of
    _log(f'\ncost: thread CPU per block and per input event ({repeats} interleaved repeats, '
         f'median), estimator + ~/flow points, min_validity {min_validity:g}; ratio per event '
         f'against plain at {max(blocks_ms):g} ms')
    _log(f'{"input":<36} {"block ms":>8} {"view":<6} {"flows/block":>11} {"ms/block":>8} '
         f'{"us/event":>8} {"vs base":>7}')
    for name, (events, width, height) in inputs.items():
        packets = packets_of(events)
        variants = [(block_ms, view) for block_ms in blocks_ms for view in ('plain', 'tr')]
        times = {variant: [] for variant in variants}
        flows = {}
        for _ in range(repeats):
            for variant in variants:
                per_block, per_event, flows[variant] = cpu_per_block(
                    model, packets, width, height, *variant, min_validity,
                    long_context_below_px_s)
                times[variant].append((per_block, per_event))
        base = np.median([t[1] for t in times[(max(blocks_ms), 'plain')]])
        for variant in variants:
            per_block = np.median([t[0] for t in times[variant]])
            per_event = np.median([t[1] for t in times[variant]])
            _log(f'{name:<36} {variant[0]:>8g} {variant[1]:<6} {flows[variant]:>11.0f} '
                 f'{1e3 * per_block:>8.2f} {1e6 * per_event:>8.3f} {per_event / base:>7.3f}')


def main():
    from veckm_flow_ros.cli.replay import add_long_context_argument, parse_benchmark_arguments
    from veckm_flow_ros.runtime import set_omp_wait_policy
    set_omp_wait_policy()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument('--model', default=None, help='model path or name (default: shipped)')
    parser.add_argument('--blocks-ms', type=float, nargs='+', default=[16, 18, 20, 22, 24],
                        help='block lengths [ms]')
    parser.add_argument('--cost-blocks-ms', type=float, nargs='+', default=None,
                        help='block lengths of the cost part [ms] (default: --blocks-ms)')
    parser.add_argument('--noise-hz', type=float, default=1.0,
                        help='background activity of the held-out scenes [Hz per pixel]')
    parser.add_argument('--phases', type=float, nargs='+', default=[0.0],
                        help='shifts of the block boundaries, fractions of a block in [0, 1) '
                             '(accuracy part; the estimator starts its first block at the '
                             'first event: 0)')
    parser.add_argument('--recordings', default=None,
                        help='folder of recorded bags (default: ../shared/data/recordings)')
    parser.add_argument('--repeats', type=int, default=5, help='interleaved cost repeats')
    parser.add_argument('--parts', nargs='+', default=['accuracy', 'real', 'cost'],
                        choices=('accuracy', 'real', 'cost'))
    add_long_context_argument(parser, note='every part; 0 reproduces the numbers measured '
                              'before that default')
    args = parse_benchmark_arguments(parser)
    if any(not 0 < block_ms <= 1000 for block_ms in args.blocks_ms):
        parser.error(f'--blocks-ms must be in (0, 1000] ms, got {args.blocks_ms}')
    long_context = args.long_context_below_px_s
    torch.set_num_threads(1)
    from bench_validity import available_recordings, cost_inputs, SHARED_RECORDINGS
    from veckm_flow_ros.core.model import load_model
    from veckm_flow_ros.stream.parameters import parameter_default
    model = load_model(args.model)
    min_validity = parameter_default('min_validity')
    _log(f'model {model.name} (r={model.pixel_radius}, tau={model.tau_s * 1e3:g} ms, '
         f'equivariance {model.equivariance}), centred blocks {args.blocks_ms} ms, long '
         f'context below {long_context:g} px/s, torch {torch.__version__}, 1 thread')
    if 'accuracy' in args.parts:
        accuracy_table(model, args.blocks_ms, args.noise_hz, min_validity, args.phases,
                       long_context)
    data = available_recordings(args.recordings or SHARED_RECORDINGS)
    if 'real' in args.parts:
        real_table(model, data, args.blocks_ms, min_validity, long_context)
    if 'cost' in args.parts:
        cost_table(model, cost_inputs(data), args.cost_blocks_ms or args.blocks_ms,
                   args.repeats, min_validity, long_context)


if __name__ == '__main__':
    main()
