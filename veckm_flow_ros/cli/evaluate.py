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
`veckm-flow evaluate SEQ...`: accuracy against ground-truth optical flow, as a table.

Sequences are simulator .npz files or EVIMO2-style .npy directories (layouts in
veckm_flow_ros/sequences.py). The model runs through NormalFlowEstimator (the code path of the
node and of replay); scoring, the baseline and the plot come from veckm_flow_ros/evaluate.py
and metrics.py: %Pos, PEE in px/s, relative PEE and coverage, per sequence, pooled over all
events and averaged over sequences.

Flows slower than `--long-context-below-px-s` (default: the node's long_context_below_px_s,
150 px/s) are estimated again on the long context, for every model scored; 0 turns it off.
`--min-validity` (default 0: every flow scored) and `--block-ms` (default 10 ms) are the
evaluation's own defaults, not the node's.

`--set heldout|dense|lowcontrast` adds a simulated evaluation set of offline/evaluate.py
(simulated for --duration seconds when given).

Recorded bags (no ground truth) are accepted too: they get the warp score of
offline/warp_score.py (contrast of the events warped along their flows), printed for every
sequence when any SEQ is a bag or with --warp-score.
"""

import pathlib

from veckm_flow_ros.cli import add_command
from veckm_flow_ros.cli.replay import add_long_context_argument, check_long_context_argument

BASELINES = {'planefit': 'plane fit'}
SETS = ('heldout', 'dense', 'lowcontrast')
# The warp score's defaults, repeated here so that --help needs no numpy import.
DEFAULT_WINDOW_S = 0.050
DEFAULT_MIN_EVENTS = 1000


def register(subparsers):
    parser = add_command(
        subparsers, 'evaluate', run,
        'score the model (and baselines) on sequences or recorded bags',
        'Score per-event normal flow against ground-truth optical flow on '
        'simulator .npz sequences or EVIMO2-style .npy directories: %Pos, PEE '
        '(px/s), relative PEE and coverage, per sequence and overall. Recorded '
        'bags have no ground truth; they get the warp score: the contrast of '
        'short windows of events warped along their flows to a common time, over '
        'the contrast of the unwarped events (> 1: the flows explain the motion), '
        'for flows scaled by s (best s != 1: a magnitude bias).')
    parser.add_argument('sequences', nargs='*', metavar='SEQ',
                        help='simulator .npz file, EVIMO2-style directory or ROS 2 bag (folder '
                             'with metadata.yaml, or a .db3/.mcap file); event times must '
                             'be finite and sorted (unsorted times are refused, naming the '
                             'first out-of-order event, never sorted)')
    parser.add_argument('--set', action='append', default=[], choices=SETS, dest='sets',
                        help='also score a simulated set with ground truth: heldout '
                             '(unseen textures and motions), dense (fine texture, many '
                             'events per pixel), lowcontrast (the same at 0.3-0.5 contrast '
                             'thresholds); repeatable')
    parser.add_argument('--model', default=None,
                        help='model: shipped name, .npz checkpoint or published folder '
                             '(default: the shipped default model)')
    parser.add_argument('--compare-model', action='append', default=[], metavar='MODEL',
                        help='also score this model (shipped name, checkpoint or a published '
                             'VecKM_flow_cpp folder from a path of yours; repeatable)')
    parser.add_argument('--baseline', action='append', default=[], choices=sorted(BASELINES),
                        help='also score a baseline (repeatable)')
    parser.add_argument('--plot', default=None, metavar='OUT.png',
                        help='plot relative PEE and %%Pos against ground-truth speed')
    parser.add_argument('--device', default='cpu', choices=('cpu', 'cuda'))
    parser.add_argument('--block-ms', type=float, default=10.0, help='target block length [ms]')
    parser.add_argument('--duration', type=float, default=None, metavar='SECONDS',
                        help='only the first SECONDS of each sequence')
    parser.add_argument('--confidence', action='store_true',
                        help='also compute the confidence and print metrics of the most '
                             'confident flows')
    parser.add_argument('--min-validity', type=float, default=0.0,
                        help='score only the flows of validity at least this, as the node '
                             'publishes them (0..1; 0 keeps every flow; the node uses 0.5, '
                             'docs/validity.md)')
    add_long_context_argument(parser, note='applies to --model and every --compare-model')
    parser.add_argument('--warp-score', action='store_true',
                        help='print the warp score table also when every SEQ has ground truth '
                             '(it then has a row for the ground-truth flow)')
    parser.add_argument('--warp-window-ms', type=float, default=1e3 * DEFAULT_WINDOW_S,
                        help='warp score window length [ms]')
    parser.add_argument('--warp-min-events', type=int, default=DEFAULT_MIN_EVENTS,
                        help='warp score: fewest events with a flow for a window to count')


def first_seconds(sequence, duration_s):
    """Return the events of the first duration_s seconds of a sequence (all when None)."""
    import numpy as np
    if duration_s is None or len(sequence) == 0:
        return sequence
    t_ns = sequence.events.t_ns
    end = np.searchsorted(t_ns, t_ns[0] + int(round(duration_s * 1e9)))
    return sequence[:end]


def simulate_set(name, duration_s=None):
    """Simulate the set `name` (SETS) of offline/evaluate.py, of duration_s when given."""
    from veckm_flow_ros.offline import evaluate
    if name == 'heldout':
        return evaluate.heldout_sequences(**({'duration_s': duration_s} if duration_s else {}))
    if name == 'dense':
        return evaluate.dense_sequences(*((duration_s, duration_s / 2) if duration_s else ()))
    return evaluate.lowcontrast_sequences(*((duration_s,) if duration_s else ()))


def run(args) -> int:
    from veckm_flow_ros.core.metrics import format_table
    from veckm_flow_ros.core.model import load_model
    from veckm_flow_ros.offline import evaluate, warp_score
    if args.duration is not None and args.duration <= 0:
        raise ValueError(f'--duration must be > 0 seconds, got {args.duration}')
    if args.block_ms <= 0:
        raise ValueError(f'--block-ms must be > 0, got {args.block_ms}')
    if not args.warp_window_ms > 0:
        raise ValueError(f'--warp-window-ms must be > 0, got {args.warp_window_ms}')
    if not 0.0 <= args.min_validity <= 1.0:
        raise ValueError(f'--min-validity must be in [0, 1], got {args.min_validity}')
    check_long_context_argument(args)
    if args.warp_min_events < 1:
        raise ValueError(f'--warp-min-events must be >= 1, got {args.warp_min_events}')
    if not args.sequences and not args.sets:
        raise ValueError('nothing to evaluate: give sequence paths (SEQ) or --set '
                         f'{"|".join(SETS)}')
    model = load_model(args.model)
    others = [load_model(path) for path in args.compare_model]
    sequences = {}
    for set_name in dict.fromkeys(args.sets):
        print(f'simulating the {set_name} set ...', flush=True)
        for name, sequence in simulate_set(set_name, args.duration).items():
            sequences[f'{set_name}/{name}'] = sequence
            print(f'{set_name}/{name}: {len(sequence):,} events, '
                  f'{sequence.width}x{sequence.height}')
    for path, name in zip(args.sequences, _unique_names(args.sequences)):
        sequences[name] = first_seconds(evaluate.load_recording(path), args.duration)
        sequence = sequences[name]
        truth = '' if evaluate.has_ground_truth(sequence) else ', no ground truth'
        print(f'{name}: {len(sequence):,} events, {sequence.width}x{sequence.height}{truth}')
    model_name = f'VecKM {model.name}'
    long_context = args.long_context_below_px_s
    methods = {model_name: evaluate.model_method(model, block_s=args.block_ms * 1e-3,
                                                 with_confidence=args.confidence,
                                                 device=args.device,
                                                 min_validity=args.min_validity,
                                                 long_context_below_px_s=long_context)}
    for other in others:
        name = f'VecKM {other.name}'
        while name in methods:
            name += '+'
        methods[name] = evaluate.model_method(
            other, block_s=args.block_ms * 1e-3, device=args.device,
            min_validity=args.min_validity, long_context_below_px_s=long_context)
    for baseline in dict.fromkeys(args.baseline):
        methods[BASELINES[baseline]] = evaluate.planefit_method()
    report = evaluate.evaluate(methods, sequences)
    if report.ground_truth:
        print()
        print(report.table(per_sequence=True))
    if args.warp_score or len(report.ground_truth) < len(sequences):
        scores = evaluate.warp_scores(report, sequences, window_s=args.warp_window_ms * 1e-3,
                                      min_events=args.warp_min_events)
        print()
        print(f'warp score: contrast of {args.warp_window_ms:g} ms windows of events warped '
              'along their flows, over the unwarped contrast (median over windows; > 1: the '
              'flows explain the motion; best s: the flow scale with the highest score)')
        print(warp_score.format_table(scores, recordings=list(sequences)))
    if args.confidence and report.ground_truth:
        flow, confidence, gt = report.pooled(model_name)
        rows = {f'top {100 * row["keep"]:.0f}% (conf >= {row["min_confidence"]:.2f})': row
                for row in evaluate.confidence_curve(flow, confidence, gt)}
        print()
        print(format_table(rows, title=f'{model_name}: most confident flows'))
    if args.plot and not report.ground_truth:
        print(f'\nno plot: {args.plot} needs a sequence with ground truth')
    elif args.plot:
        pathlib.Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
        evaluate.plot_error_vs_speed(report, args.plot)
        print(f'\nwrote {args.plot}')
    return 0


def _unique_names(paths):
    names = []
    for path in paths:
        path = pathlib.Path(path)
        name = path.stem if path.suffix in ('.npz', '.db3', '.mcap') else path.name
        while name in names:
            name = f'{name}+'
        names.append(name)
    return names
