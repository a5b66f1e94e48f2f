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
veckm_flow_ros/sequences.py). Each sequence's events go through NormalFlowEstimator (the code
path of the node and of replay) in 1 ms packets; the metrics (DESIGN §2.7, metrics.py) are
%Pos, PEE in px/s, relative PEE and coverage, per sequence and pooled over all events.
"""

import argparse
import pathlib

import numpy as np

PACKET_NS = 1_000_000
BASELINES = ('planefit',)


def register(subparsers):
    parser = subparsers.add_parser(
        'evaluate', help='score the model (and baselines) on sequences with ground truth',
        description='Score per-event normal flow against ground-truth optical flow on '
                    'simulator .npz sequences or EVIMO2-style .npy directories: %%Pos, PEE '
                    '(px/s), relative PEE and coverage, per sequence and overall.',
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument('sequences', nargs='+', metavar='SEQ',
                        help='simulator .npz file or EVIMO2-style directory')
    parser.add_argument('--model', default=None,
                        help='model: shipped name, .npz checkpoint or published folder '
                             '(default: the shipped default model)')
    parser.add_argument('--baseline', action='append', default=[], choices=BASELINES,
                        help='also score a baseline (repeatable)')
    parser.add_argument('--plot', default=None, metavar='OUT.png',
                        help='plot PEE and %%Pos against ground-truth speed')
    parser.add_argument('--device', default='cpu', choices=('cpu', 'cuda'))
    parser.add_argument('--stride', type=int, default=1, metavar='K',
                        help='score every K-th event (context uses all)')
    parser.add_argument('--block-ms', type=float, default=5.0, help='target block length [ms]')
    parser.add_argument('--causal', action='store_true', help='past-only context')
    parser.add_argument('--duration', type=float, default=None, metavar='SECONDS',
                        help='only the first SECONDS of each sequence')
    parser.set_defaults(func=run)


def predict_sequence(model, sequence, *, device='cpu', block_s=0.005, causal=False,
                     target_stride=1):
    """
    Run NormalFlowEstimator over a sequence's events in 1 ms packets.

    Returns (pred_px_s, targets): float32 (N, 2) flow per event of the sequence (NaN where
    no valid flow) and bool (N,) marking the events the estimator was asked to predict.
    """
    from veckm_flow_ros.estimator import NormalFlowEstimator
    events = sequence.events
    n = len(events)
    predicted = np.full((n, 2), np.nan, np.float32)
    targets = np.arange(n) % target_stride == 0
    if n == 0:
        return predicted, targets
    estimator = NormalFlowEstimator(model, sequence.width, sequence.height, device=device,
                                    block_s=block_s, causal=causal,
                                    target_stride=target_stride)
    edges = np.arange(int(events.t_ns[0]), int(events.t_ns[-1]) + PACKET_NS, PACKET_NS)
    bounds = np.unique(np.append(np.searchsorted(events.t_ns, edges), n))
    blocks = []
    for start, end in zip(bounds[:-1], bounds[1:]):
        blocks += estimator.push(events[start:end])
    blocks += estimator.flush()
    for block in blocks:
        keep = np.ones(len(block.event_index), bool) if block.valid is None \
            else np.asarray(block.valid, bool)
        index = block.event_index[keep]
        predicted[index, 0] = block.u_px_s[keep]
        predicted[index, 1] = block.v_px_s[keep]
    return predicted, targets


def _first_seconds(sequence, duration_s):
    if duration_s is None or len(sequence) == 0:
        return sequence
    t_ns = sequence.events.t_ns
    end = np.searchsorted(t_ns, t_ns[0] + int(round(duration_s * 1e9)))
    return sequence[:end]


def run(args) -> int:
    from veckm_flow_ros.metrics import format_table, MetricsAccumulator
    from veckm_flow_ros.model import load_model
    from veckm_flow_ros.sequences import load_sequence
    if args.stride < 1:
        raise ValueError(f'--stride must be >= 1, got {args.stride}')
    if args.duration is not None and args.duration <= 0:
        raise ValueError(f'--duration must be > 0 seconds, got {args.duration}')
    model = load_model(args.model)
    methods = ['VecKM'] + list(dict.fromkeys(args.baseline))
    accumulators = {method: MetricsAccumulator() for method in methods}
    plot_data = {method: [] for method in methods}
    names = _unique_names(args.sequences)
    for path, name in zip(args.sequences, names):
        sequence = _first_seconds(load_sequence(path), args.duration)
        print(f'{name}: {len(sequence):,} events, {sequence.width}x{sequence.height}',
              flush=True)
        predictions = {}
        predictions['VecKM'], targets = predict_sequence(
            model, sequence, device=args.device, block_s=args.block_ms * 1e-3,
            causal=args.causal, target_stride=args.stride)
        if 'planefit' in methods:
            from veckm_flow_ros.planefit import plane_fit_flow
            predictions['planefit'] = plane_fit_flow(sequence.events, sequence.width,
                                                     sequence.height)
        for method, predicted in predictions.items():
            accumulators[method].add(name, predicted, sequence.flow_px_s, targets)
            plot_data[method].append((predicted[targets], sequence.flow_px_s[targets]))
    print()
    for method in methods:
        rows = dict(accumulators[method].per_sequence())
        if len(rows) > 1:
            rows['overall (all events)'] = accumulators[method].overall()
        title = f'{method} ({model.name})' if method == 'VecKM' else method
        print(format_table(rows, title=title))
        print()
    if args.plot:
        joined = {method: (np.concatenate([p for p, _ in parts]),
                           np.concatenate([g for _, g in parts]))
                  for method, parts in plot_data.items()}
        plot_error_vs_speed(joined, args.plot)
        print(f'wrote {args.plot}')
    return 0


def _unique_names(paths):
    names = []
    for path in paths:
        path = pathlib.Path(path)
        name = path.stem if path.suffix == '.npz' else path.name
        while name in names:
            name = f'{name}+'
        names.append(name)
    return names


def plot_error_vs_speed(results: dict, path, bins: int = 12):
    """
    Plot mean PEE (px/s), relative PEE and %Pos against ground-truth speed; save a PNG.

    results: {label: (pred_px_s (N, 2), gt_px_s (N, 2))}. Speeds are binned on a log scale
    between the 1st and 99th percentile of the scored ground-truth speeds.
    """
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    from veckm_flow_ros.metrics import per_event_errors
    speeds = [np.hypot(gt[:, 0], gt[:, 1]) for _, gt in results.values()]
    finite = np.concatenate([s[np.isfinite(s) & (s > 0)] for s in speeds] or [np.empty(0)])
    if finite.size == 0:
        raise ValueError('no event with ground-truth flow to plot')
    low, high = np.percentile(finite, [1, 99])
    edges = np.geomspace(max(low, 1e-3), max(high, low * 1.01 + 1e-3), bins + 1)
    centres = np.sqrt(edges[:-1] * edges[1:])
    figure, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for label, (predicted, gt) in results.items():
        errors = per_event_errors(predicted, gt)
        speed = np.hypot(gt[:, 0], gt[:, 1])
        which = np.digitize(speed, edges) - 1
        valid = errors['valid']
        series = {'pee': [], 'rel': [], 'pos': []}
        for b in range(bins):
            in_bin = valid & (which == b)
            count = int(in_bin.sum())
            series['pee'].append(errors['pee_px_s'][in_bin].mean() if count else np.nan)
            series['rel'].append(100 * errors['rel_pee'][in_bin].mean() if count else np.nan)
            series['pos'].append(100 * errors['pos'][in_bin].mean() if count else np.nan)
        for axis, key in zip(axes, ('pee', 'rel', 'pos')):
            axis.plot(centres, series[key], marker='o', label=label)
    for axis, ylabel in zip(axes, ('PEE [px/s]', 'relative PEE [%]', '%Pos [%]')):
        axis.set_xscale('log')
        axis.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        axis.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        axis.set_xlabel('ground-truth speed [px/s]')
        axis.set_ylabel(ylabel)
        axis.grid(True, which='both', alpha=0.3)
    axes[0].legend()
    figure.suptitle('Normal-flow error against ground-truth speed')
    figure.tight_layout()
    pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return str(path)
