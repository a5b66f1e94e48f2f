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
How far two flow models can agree: pairwise direction agreement, with ground truth beside it.

    python3 benchmarks/agreement_matrix.py [--models M ...] [--published DIR ...]
        [--recordings DIR] [--noise-hz 1.0] [--min-validity 0.5] [--max-events 300000]
        [--long-context-below-px-s 150]

"Direction agreement" is the share of events, among those both models keep, whose two flows
lie in the same half-plane (cosine > 0): the measure of `benchmarks/compare_real.py`. On real
recordings nothing says which model is right, so a low agreement alone does not tell a good
model from a bad one. This benchmark puts the same measure where the truth is known:

- held-out synthetic set (offline/evaluate.py, the background activity of every scene set to
  --noise-hz): for every model its %Pos against ground truth (signal events it keeps) and,
  for every pair, their agreement on the signal events both keep, next to the agreement two
  models with those %Pos would reach if their errors were independent (p_a p_b + (1 - p_a)
  (1 - p_b): both right or both wrong in the same half-plane, which a wrong normal flow
  almost always is: it points away from the truth);
- real recordings (--recordings, default ../shared/data/recordings; the first --max-events
  events of each): the same pairwise agreement.

Every model runs through NormalFlowEstimator at the node's defaults (its automatic block, 2
tau centred; every event a target; the validity filter at --min-validity; the long context
for flows slower than --long-context-below-px-s, default the node's 150 px/s, 0 = off as
before that default), one torch thread; the published weights too.
Our models are shipped names or checkpoints; the published VecKM weights (CC BY-NC) are
read from folders (default: every folder under ../shared/data/veckm_flow_cpp_models).
"""

import argparse
import itertools
import pathlib
import time

import numpy as np
import torch

from veckm_flow_ros.cli.replay import add_long_context_argument, parse_benchmark_arguments
from veckm_flow_ros.core.estimator import automatic_block_s
from veckm_flow_ros.core.model import load_model
from veckm_flow_ros.learning.simulate import SimulatedSequence
from veckm_flow_ros.offline import evaluate

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / 'shared' / 'data'
REAL = ('py_test_events_1', 'py_test_events_2')


def _log(message):
    print(message, flush=True)


def model_flows(model, sequence, min_validity, long_context_below_px_s):
    """Flow (N, 2) px/s of every event through the node's estimator; NaN where not kept."""
    prediction = evaluate.predict_with_estimator(
        model, sequence, block_s=automatic_block_s(model.tau_s), min_validity=min_validity,
        long_context_below_px_s=long_context_below_px_s)
    return prediction.flow_px_s


def same_half_plane(a, b, mask=None):
    """(share of rows where a and b have cosine > 0, rows scored) over rows both finite."""
    both = np.isfinite(a).all(axis=1) & np.isfinite(b).all(axis=1)
    if mask is not None:
        both &= mask
    if not both.any():
        return float('nan'), 0
    dot = np.einsum('ij,ij->i', a[both].astype(np.float64), b[both].astype(np.float64))
    return float(np.mean(dot > 0)), int(both.sum())


def pair_table(labels, flows, truth=None, signal=None):
    """Rows of the pairwise table: (a, b, agreement, scored, independent-error prediction)."""
    positive = {}
    if truth is not None:
        for label in labels:
            positive[label] = same_half_plane(flows[label], truth, signal)[0]
    rows = []
    for a, b in itertools.combinations(labels, 2):
        agree, scored = same_half_plane(flows[a], flows[b], signal)
        expected = float('nan')
        if truth is not None:
            pa, pb = positive[a], positive[b]
            expected = pa * pb + (1 - pa) * (1 - pb)
        rows.append((a, b, agree, scored, expected))
    return positive, rows


def print_pairs(title, rows, with_expected):
    _log(f'\n{title}')
    header = f'{"model A":<26} {"model B":<26} {"agree %":>8} {"scored":>9}'
    if with_expected:
        header += f' {"if independent %":>17}'
    _log(header)
    for a, b, agree, scored, expected in rows:
        line = f'{a:<26} {b:<26} {100 * agree:>8.2f} {scored:>9,}'
        if with_expected:
            line += f' {100 * expected:>17.2f}'
        _log(line)


def concatenated(per_sequence):
    return {label: np.concatenate(parts) for label, parts in per_sequence.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--models', nargs='+', default=['veckm_r10_tau12ms'],
                        help='our models (shipped names or checkpoints)')
    parser.add_argument('--published', nargs='*', type=pathlib.Path, default=None,
                        help='published model folders (default: all under '
                             '../shared/data/veckm_flow_cpp_models)')
    parser.add_argument('--recordings', type=pathlib.Path, default=SHARED / 'recordings')
    parser.add_argument('--noise-hz', type=float, default=1.0,
                        help='background activity of the held-out scenes [Hz per pixel]')
    parser.add_argument('--min-validity', type=float, default=0.5,
                        help='validity filter of every model (the node default: 0.5)')
    parser.add_argument('--max-events', type=int, default=300_000,
                        help='events per real recording')
    add_long_context_argument(parser, note='every model, the published weights included; 0 '
                              'reproduces the numbers measured before that default')
    parser.add_argument('--skip-synthetic', action='store_true')
    args = parse_benchmark_arguments(parser, argv)
    if not 0 <= args.min_validity <= 1:
        parser.error(f'--min-validity must be in [0, 1], got {args.min_validity}')
    if args.noise_hz < 0:
        parser.error(f'--noise-hz must be >= 0 Hz/px, got {args.noise_hz}')
    torch.set_num_threads(1)
    published = args.published
    if published is None:
        folder = SHARED / 'veckm_flow_cpp_models'
        published = sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() \
            else []
        if not published:
            _log(f'no published models under {folder}: only our models are compared')
    models = {}
    for name in args.models:
        model = load_model(name)
        models[(model.metadata or {}).get('name', str(name))] = model
    for path in published:
        models[f'published {path.name}'] = load_model(path)
    labels = list(models)

    if not args.skip_synthetic:
        start = time.perf_counter()
        sequences = evaluate.heldout_sequences(noise_rate_hz_per_px=args.noise_hz)
        flows = {label: [] for label in labels}
        truths, signals = [], []
        for sequence in sequences.values():
            for label, model in models.items():
                flows[label].append(model_flows(model, sequence, args.min_validity,
                                                args.long_context_below_px_s))
            truths.append(sequence.flow_px_s)
            signals.append(~sequence.is_noise)
        flows = concatenated(flows)
        truth, signal = np.concatenate(truths), np.concatenate(signals)
        positive, rows = pair_table(labels, flows, truth, signal)
        _log(f'\nheld-out synthetic set, {len(sequences)} scenes, {args.noise_hz:g} Hz/px noise, '
             f'min_validity {args.min_validity:g}, long context below '
             f'{args.long_context_below_px_s:g} px/s ({time.perf_counter() - start:.0f} s): '
             'signal events')
        _log(f'{"model":<36} {"%Pos (kept)":>11} {"kept %":>7}')
        for label in labels:
            kept = np.isfinite(flows[label]).all(axis=1)
            _log(f'{label:<36} {100 * positive[label]:>11.2f} '
                 f'{100 * kept[signal].mean():>7.2f}')
        print_pairs('held-out synthetic set: agreement on signal events both keep', rows, True)

    for name in REAL:
        path = args.recordings / name
        if not path.is_dir():
            _log(f'\n{path}: missing, left out')
            continue
        start = time.perf_counter()
        events, width, height = evaluate.decode_recording(path, args.max_events)
        sequence = SimulatedSequence(events, np.full((len(events), 2), np.nan, np.float32),
                                     np.zeros(len(events), bool), width, height)
        flows = {label: model_flows(model, sequence, args.min_validity,
                                    args.long_context_below_px_s)
                 for label, model in models.items()}
        _, rows = pair_table(labels, flows)
        print_pairs(f'{name} ({len(events):,} events, {width}x{height}, min_validity '
                    f'{args.min_validity:g}, long context below '
                    f'{args.long_context_below_px_s:g} px/s, '
                    f'{time.perf_counter() - start:.0f} s): agreement on '
                    'events both keep', rows, False)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
