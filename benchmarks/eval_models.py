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
Accuracy of the shipped models against the published weights and plane fitting.

    .venv/bin/python benchmarks/eval_models.py [--published DIR] [--out DIR] [--count 12]

1. Held-out synthetic set (evaluate.heldout_sequences: textures and motions never used in
   training, DAVIS346 size): %Pos, PEE, relative PEE, coverage per method, pooled over events
   and averaged over sequences; the same on the events plane fitting covers; error vs speed
   plot. With --sets dense (or both), also the dense/hard set (evaluate.dense_sequences: fine
   band-limited noise at 100-700 events per pixel and second under fast translation, zoom-out
   with rotation and affine motion, one 1280 x 720 scene; 1 Hz/px background noise). With
   --sets lowcontrast, the low-contrast set (evaluate.lowcontrast_sequences: the dense set's
   DAVIS346 scenes at 0.3 and 0.5 contrast thresholds, 10-100 events per pixel and second).
2. Confidence: metrics of the most confident fraction of the flows (rotation ensemble).
3. Real recordings (../shared/data/recordings, no ground truth): share of events on which our
   flow and the published model's flow point into the same half-plane (n_ours . n_pub > 0)
   and lie within 45 degrees; also on the events where both models' rotation-ensemble
   confidences reach 0.3 / 0.5 (structure rather than background noise).

Every model, ours and the published weights alike, runs through NormalFlowEstimator with the
node's long context: flows slower than --long-context-below-px-s (default: the node's
long_context_below_px_s, 150 px/s) are estimated again on a context twice as long; 0 turns
it off (the numbers measured before that default).

The published weights (CC BY-NC) are only read from --published; nothing of them is stored.
Prints tables; with --out also writes results.json and speed.png.
"""

import argparse
import json
import pathlib
import sys
import time

import numpy as np
import torch

from veckm_flow_ros.cli.replay import add_long_context_argument, parse_benchmark_arguments
from veckm_flow_ros.core import metrics
from veckm_flow_ros.core.estimator import automatic_block_s
from veckm_flow_ros.core.model import list_shipped_models, load_model
from veckm_flow_ros.offline import evaluate

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / 'shared' / 'data'
# Our shipped model -> the published model with the same radius and time slice.
PAIRS = {'veckm_r8_tau16ms': '640x480_32ms_C64_k8', 'veckm_r10_tau12ms': '640x480_24ms_C64_k10'}
RECORDINGS = ('py_test_events_1', 'py_test_events_2', 'codecs_test_data_libcaer_rollover')
CONFIDENCE_SPLITS = (0.3, 0.5)
# Agreement also on the events with at least this many context events (self included) in the
# model's window: 1 = all, 2 = not isolated (an isolated event's feature is a constant).
CONTEXT_SPLITS = (2, 5, 10)


def model_pair_key(model):
    """Key of PAIRS for a model of ours: its radius and tau (any name, e.g. a candidate)."""
    return f'veckm_r{model.pixel_radius}_tau{model.tau_s * 1e3:g}ms'


def _log(message):
    print(message, flush=True)


def real_agreement(ours, published, recordings_dir, max_events, mean_flow=False,
                   long_context_below_px_s=0.0):
    """
    Per recording: share of events where both flows agree in direction.

    mean_flow: our flow is the rotation-ensemble mean (the published one stays plain).
    long_context_below_px_s: both models' long context (NormalFlowEstimator; 0 = off).
    """
    from veckm_flow_ros.learning.simulate import SimulatedSequence
    rows = {}
    for name in RECORDINGS:
        path = recordings_dir / name
        if not path.exists():
            continue
        events, width, height = evaluate.decode_recording(path, max_events)
        sequence = SimulatedSequence(events, np.full((len(events), 2), np.nan, np.float32),
                                     np.zeros(len(events), bool), width, height)
        # The plain flows are those of a run without confidence; the confidences split the
        # events into structured ones (both models confident) and the rest (mostly noise).
        mine = evaluate.predict_with_estimator(
            ours, sequence, with_confidence=True, mean_flow=mean_flow,
            long_context_below_px_s=long_context_below_px_s)
        theirs = evaluate.predict_with_estimator(
            published, sequence, with_confidence=True,
            long_context_below_px_s=long_context_below_px_s)
        a, b = mine.flow_px_s, theirs.flow_px_s
        na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
        scored = np.isfinite(na) & np.isfinite(nb) & (na > 0) & (nb > 0)
        cosine = np.einsum('ij,ij->i', a, b) / np.maximum(na * nb, 1e-12)
        # A zero flow (no motion claimed, e.g. a noise event) has no direction: not scored.
        row = {'events': int(len(events)), 'size': [width, height],
               'scored_share': float(scored.mean()),
               'agree_half_plane': float(np.mean(cosine[scored] > 0)),
               'agree_45deg': float(np.mean(cosine[scored] > np.cos(np.pi / 4))),
               'median_speed_ratio': float(np.median(na[scored] / nb[scored]))}
        context = evaluate.context_counts(events, width, height, ours.pixel_radius, ours.tau_s)
        for minimum in CONTEXT_SPLITS:
            selected = scored & (context >= minimum)
            row[f'context_at_least_{minimum}'] = {
                'share': float(selected.mean()),
                'agree_half_plane': float(np.mean(cosine[selected] > 0))
                if selected.any() else float('nan'),
                'median_speed_ratio': float(np.median(na[selected] / nb[selected]))
                if selected.any() else float('nan')}
        for threshold in CONFIDENCE_SPLITS:
            confident = scored & (mine.confidence >= threshold) \
                & (theirs.confidence >= threshold)
            row[f'both_confidence_{threshold}'] = {
                'share': float(confident.mean()),
                'agree_half_plane': float(np.mean(cosine[confident] > 0))
                if confident.any() else float('nan')}
        rows[name] = row
    return rows


def _per_sequence_table(report):
    """Per sequence, one column per method: '%Pos / relative PEE %' (Markdown)."""
    methods = list(report.accumulators)
    rows = {method: report.accumulators[method].per_sequence() for method in methods}
    lines = ['| sequence | ' + ' | '.join(methods) + ' |',
             '|---|' + '---|' * len(methods)]
    for sequence in report.ground_truth:
        cells = [f'{100 * rows[m][sequence]["pos"]:.1f} / '
                 f'{100 * rows[m][sequence]["rel_pee"]:.0f} %' for m in methods]
        lines.append(f'| {sequence} | ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--published', type=pathlib.Path,
                        default=SHARED / 'veckm_flow_cpp_models',
                        help='folder holding the published 640x480_*ms_C64_k* folders')
    parser.add_argument('--recordings', type=pathlib.Path, default=SHARED / 'recordings')
    parser.add_argument('--count', type=int, default=12, help='held-out sequences')
    parser.add_argument('--duration-s', type=float, default=0.15)
    parser.add_argument('--real-events', type=int, default=300_000,
                        help='events per real recording')
    parser.add_argument('--models', nargs='*', default=None,
                        help='shipped model names or checkpoint paths (default: all shipped)')
    parser.add_argument('--all-published', action='store_true',
                        help='score every published model, not only the partners of --models')
    parser.add_argument('--published-models', nargs='*', default=None, metavar='FOLDER',
                        help='published folders to score (names under --published; default: '
                             'the partners of --models)')
    parser.add_argument('--sets', nargs='+', choices=('heldout', 'dense', 'lowcontrast'),
                        default=['heldout'],
                        help='synthetic sets to score: heldout (default), dense, lowcontrast')
    parser.add_argument('--dense-duration-s', type=float, default=0.08,
                        help="duration of the dense set's 346 x 260 scenes (1280 x 720: half)")
    parser.add_argument('--lowcontrast-duration-s', type=float, default=0.05,
                        help="duration of the low-contrast set's scenes")
    parser.add_argument('--skip-real', action='store_true',
                        help='skip the real recordings')
    parser.add_argument('--no-planefit', action='store_true', help='skip plane fitting')
    parser.add_argument('--skip-confidence', action='store_true',
                        help='skip the confidence curve')
    parser.add_argument('--mean-flow', action='store_true',
                        help='also score each of our models with the rotation-ensemble mean '
                             'as its flow (name + " mean4")')
    parser.add_argument('--block-ms', type=float, default=0.0,
                        help='estimator block length [ms] for the held-out set; 0 (default): '
                             "each model's automatic block, 2 tau, as the node and replay")
    add_long_context_argument(parser, note='every model, the published weights included; 0 '
                              'reproduces the numbers measured before that default')
    parser.add_argument('--out', type=pathlib.Path, default=None)
    parser.add_argument('--threads', type=int, default=None)
    args = parse_benchmark_arguments(parser, argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.published.is_dir():
        print(f'published weights not found at {args.published}; pass --published',
              file=sys.stderr)
        return 1
    names = args.models or list_shipped_models()
    ours = {pathlib.Path(name).stem: load_model(name) for name in names}
    partners = sorted(set(PAIRS.values())) if args.all_published else sorted(
        {PAIRS[model_pair_key(model)] for model in ours.values()
         if model_pair_key(model) in PAIRS})
    if args.published_models is not None:
        partners = args.published_models
        missing = [name for name in partners if not (args.published / name).is_dir()]
        if missing:
            print(f'published model folder(s) {missing} not found in {args.published}',
                  file=sys.stderr)
            return 1
    published = {folder: load_model(args.published / folder) for folder in partners
                 if (args.published / folder).is_dir()}
    results = {'long_context_below_px_s': args.long_context_below_px_s}

    start = time.perf_counter()

    def block_s(model):
        return args.block_ms * 1e-3 or automatic_block_s(model.tau_s)

    def model_method(model, **options):
        """Return the method of `model` at its block and the long context of the flag."""
        return evaluate.model_method(model, block_s(model),
                                     long_context_below_px_s=args.long_context_below_px_s,
                                     **options)
    _log(f'long context below {args.long_context_below_px_s:g} px/s (every model)')
    methods = {name: model_method(model) for name, model in ours.items()}
    if args.mean_flow:
        methods.update({f'{name} mean4': model_method(model, mean_flow=True)
                        for name, model in ours.items()})
    methods.update({f'published {name}': model_method(model)
                    for name, model in published.items()})
    if not args.no_planefit:
        methods['plane fit'] = evaluate.planefit_method()
    synthetic = {
        'dense': lambda: evaluate.dense_sequences(args.dense_duration_s,
                                                  args.dense_duration_s / 2),
        'lowcontrast': lambda: evaluate.lowcontrast_sequences(args.lowcontrast_duration_s)}
    for set_name, simulate_set in synthetic.items():
        if set_name not in args.sets:
            continue
        simulated = time.perf_counter()
        sequences = simulate_set()
        _log(f'{set_name} set: {len(sequences)} sequences, '
             f'{sum(len(s) for s in sequences.values())} events '
             f'({time.perf_counter() - simulated:.0f} s to simulate)')
        set_report = evaluate.evaluate(methods, sequences, log=_log)
        _log(f'\n{set_name} set\n' + set_report.table())
        results[set_name] = {
            'pooled': set_report.overall(), 'sequence_mean': set_report.sequence_mean(),
            'per_sequence': {name: acc.per_sequence()
                             for name, acc in set_report.accumulators.items()}}
        _log('\n' + _per_sequence_table(set_report))
        del sequences, set_report
    if 'heldout' not in args.sets:
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / 'results.json').write_text(json.dumps(results, indent=1))
        _log(f'total {time.perf_counter() - start:.0f} s')
        return 0
    sequences = evaluate.heldout_sequences(args.count, duration_s=args.duration_s)
    _log(f'held-out set: {len(sequences)} sequences, '
         f'{sum(len(s) for s in sequences.values())} events')
    report = evaluate.evaluate(methods, sequences, log=_log)
    _log('\nheld-out set\n' + report.table())
    _log('\n' + _per_sequence_table(report))
    results['heldout'] = {'pooled': report.overall(), 'sequence_mean': report.sequence_mean(),
                          'per_sequence': {name: acc.per_sequence()
                                           for name, acc in report.accumulators.items()}}

    gt = report.pooled(next(iter(methods)))[2]
    # A model may give a zero flow (no motion claimed); metrics skip it, so compare also on the
    # events every learned model covers, and with a zero flow counted as a wrong direction.
    learned = [name for name in methods if name != 'plane fit']
    every = np.ones(len(gt), bool)
    for name in learned:
        flow = report.pooled(name)[0]
        every &= np.isfinite(flow).all(1) & np.any(flow != 0, axis=1)
    on_every = {name: metrics.flow_metrics(report.pooled(name)[0], gt, every)
                for name in learned}
    _log('\n' + metrics.format_table(on_every, title='on events every learned model covers'))
    results['heldout_all_learned_covered'] = on_every
    overall = report.overall()
    results['heldout_pos_zero_is_wrong'] = {
        name: overall[name]['pos'] * overall[name]['coverage'] for name in learned}
    _log('%Pos with a zero flow counted wrong: ' + ', '.join(
        f'{name} {100 * value:.2f}' for name, value in
        results['heldout_pos_zero_is_wrong'].items()))
    if 'plane fit' in methods:
        # The same scores on the events plane fitting gives a flow for (its own coverage).
        plane_flow = report.pooled('plane fit')[0]
        covered = np.isfinite(plane_flow).all(1)
        on_plane = {name: metrics.flow_metrics(report.pooled(name)[0], gt, covered)
                    for name in methods}
        _log('\n' + metrics.format_table(on_plane, title='on plane-fit-covered events'))
        results['heldout_planefit_covered'] = on_plane

    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        evaluate.plot_error_vs_speed(report, args.out / 'speed.png',
                                     title='held-out synthetic set')

    # Confidence curve of each of our models.
    results['confidence'] = {}
    for name, model in ([] if args.skip_confidence else ours.items()):
        method = model_method(model, with_confidence=True)
        flows, scores = [], []
        for sequence in sequences.values():
            prediction = method(sequence)
            flows.append(prediction.flow_px_s)
            scores.append(prediction.confidence)
        curve = evaluate.confidence_curve(np.concatenate(flows), np.concatenate(scores), gt)
        results['confidence'][name] = curve
        _log(f'\nconfidence filter, {name}:')
        for row in curve:
            _log(f'  keep {100 * row["keep"]:5.1f}%  (confidence >= {row["min_confidence"]:.3f})'
                 f'  %Pos {100 * row["pos"]:6.2f}  relPEE {100 * row["rel_pee"]:6.2f}%  '
                 f'PEE {row["pee_px_s"]:7.2f} px/s')

    if args.recordings.is_dir() and not args.skip_real:
        results['real'] = {}
        variants = [(name, model, False) for name, model in ours.items()]
        if args.mean_flow:
            variants += [(f'{name} mean4', model, True) for name, model in ours.items()]
        for name, model, mean_flow in variants:
            partner = PAIRS.get(model_pair_key(model))
            if partner not in published:
                continue
            rows = real_agreement(model, published[partner], args.recordings, args.real_events,
                                  mean_flow, args.long_context_below_px_s)
            results['real'][name] = rows
            _log(f'\nreal recordings, {name} vs published {partner}:')
            for recording, row in rows.items():
                _log(f'  {recording:<36} {row["events"]:>8} events  same half-plane '
                     f'{100 * row["agree_half_plane"]:6.2f}%  within 45 deg '
                     f'{100 * row["agree_45deg"]:6.2f}%  speed ratio '
                     f'{row["median_speed_ratio"]:.2f}  (scored {100 * row["scored_share"]:.1f}%)')
                for threshold in CONFIDENCE_SPLITS:
                    split = row[f'both_confidence_{threshold}']
                    _log(f'    both confidences >= {threshold}: {100 * split["share"]:5.1f}% of '
                         f'events, same half-plane {100 * split["agree_half_plane"]:6.2f}%')
                for minimum in CONTEXT_SPLITS:
                    split = row[f'context_at_least_{minimum}']
                    _log(f'    >= {minimum:2d} context events: {100 * split["share"]:5.1f}% of '
                         f'events, same half-plane {100 * split["agree_half_plane"]:6.2f}%, '
                         f'speed ratio {split["median_speed_ratio"]:.2f}')
    if args.out:
        (args.out / 'results.json').write_text(json.dumps(results, indent=1))
        _log(f'\nwrote {args.out / "results.json"} and {args.out / "speed.png"}')
    _log(f'total {time.perf_counter() - start:.0f} s')
    return 0


if __name__ == '__main__':
    sys.exit(main())
