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
Warp score (offline/warp_score.py) of our model, the published weights and plane fitting.

    .venv/bin/python benchmarks/warp_score_real.py [--set real|simulated|both|timing]
        [--published 640x480_32ms_C64_k8 ...] [--windows-ms 50 20] [--min-validity V]
        [--block-ms 5 ...] [--no-planefit]

real: every bag under --recordings (default ../shared/data/recordings), all events (or the
first --max-events), every method through the code path of `veckm-flow evaluate`. Printed per
recording and method: the median score at s = 1, the best flow scale s and the score there,
the counted windows, and the seconds the warp score itself took.

simulated: the sanity check of the score, on simulated scenes (240x180, 0.2 s, fixed seeds):
the ground-truth optical flow, the ground-truth normal flow (simulate.normal_flow_px_s), the
optical flow scaled by 2 and 0.5 and reversed, the optical flow with 30 deg direction noise
and 30 % log-normal magnitude noise, then the same methods as on the real recordings. Each
method is scored on the events it gives a flow to; the row "ours ... @ plane fit events"
scores our flow on only the events plane fitting gives a flow to.

timing: the seconds the warp score alone takes on a synthetic 1-minute 640x480 stream of
200k events/s (edges moving at 300 px/s with their exact flow), with the default cap of
windows and with every window.

--block-ms B ...: the estimator's block length [ms] for every model (default 5; 0: the node's
automatic block, 2 tau of each model); with several, each model runs at each (method names
end in "@ B ms").

--min-validity V scores only the flows whose estimator validity (FlowBlock.validity) is at
least V; plane fitting, which has no validity, keeps its own acceptance test.

--long-context-below-px-s PX_S: every model (ours and the published weights) estimates its
flows slower than PX_S again on the long context, as the node (default: the node's
long_context_below_px_s, 150 px/s; 0 = off, the numbers measured before that default).
The published weights (CC BY-NC) are only read from --published-dir.
"""

import argparse
import pathlib
import sys
import time

import numpy as np
import torch

from veckm_flow_ros.cli.replay import add_long_context_argument, parse_benchmark_arguments
from veckm_flow_ros.core.model import load_model
from veckm_flow_ros.learning import simulate
from veckm_flow_ros.offline import evaluate, warp_score

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / 'shared' / 'data'
PUBLISHED = ('640x480_32ms_C64_k8', '640x480_32ms_C64_k10', '640x480_24ms_C64_k8',
             '640x480_24ms_C64_k10')
# (motion, texture, seed, speed px/s)
SCENES = [('translation', 'noise', 11, 300.0), ('rotation', 'edges', 12, 400.0),
          ('zoom', 'checker', 13, 300.0), ('objects', 'polygons', 14, 600.0),
          ('affine', 'gratings', 15, 500.0), ('rotation', 'blobs', 17, 800.0)]


def _log(message):
    print(message, flush=True)


def noisy(flow_px_s, seed=0, angle_deg=30.0, log_sigma=0.3):
    """Flow rotated by N(0, angle_deg) and scaled by exp(N(0, log_sigma)) per event."""
    rng = np.random.default_rng(seed)
    angle = np.radians(angle_deg) * rng.standard_normal(len(flow_px_s))
    gain = np.exp(log_sigma * rng.standard_normal(len(flow_px_s)))
    c, s = np.cos(angle) * gain, np.sin(angle) * gain
    u, v = flow_px_s[:, 0], flow_px_s[:, 1]
    return np.stack([c * u - s * v, s * u + c * v], 1).astype(np.float32)


def score_methods(methods, sequences, windows_ms, min_validity, extra_flows=None,
                  common_for=None, common_with='plane fit'):
    """
    Run the methods; return rows {(recording, method, window_ms): summary + seconds}.

    common_for: a method also scored on only the events that common_with gives a flow to.
    """
    report = evaluate.evaluate(methods, sequences)
    rows = {}
    for name, sequence in sequences.items():
        flows = dict((extra_flows or {}).get(name, {}))
        for method, predictions in report.predictions.items():
            # Plane fitting has no validity: its own acceptance test is its filter.
            prediction = predictions[name]
            flows[method] = evaluate.valid_flow(
                prediction, None if prediction.validity is None else min_validity)
        if common_with in flows and common_for in flows:
            # Our flow on only the events plane fitting gives a flow to: the same events.
            subset = flows[common_for].copy()
            subset[~np.isfinite(flows[common_with]).all(axis=1)] = np.nan
            flows[f'{common_for} @ {common_with} events'] = subset
        events = sequence.events
        for method, flow in flows.items():
            for window_ms in windows_ms:
                start = time.perf_counter()
                result = warp_score.warp_score(events.t_ns, events.x, events.y, flow,
                                               sequence.width, sequence.height,
                                               window_s=window_ms * 1e-3)
                row = result.summary()
                row['seconds'] = time.perf_counter() - start
                rows[(name, method, window_ms)] = row
    return rows


def print_rows(rows, windows_ms):
    header = f'{"recording":<34} {"method":<40}' + ''.join(
        f' | {window:>3g} ms: {"score":>6} {"best s":>6} {"@best":>6} {"win":>4} {"s":>5}'
        for window in windows_ms)
    _log(header)
    _log('-' * len(header))
    pairs = list(dict.fromkeys((name, method) for name, method, _ in rows))
    for name, method in pairs:
        line = f'{name[:34]:<34} {method[:40]:<40}'
        for window in windows_ms:
            row = rows[(name, method, window)]
            if row['windows']:
                line += (f' | {"":>6} {row["score"]:>6.3f} {row["best_s"]:>6.2f} '
                         f'{row["best_score"]:>6.3f} {row["windows"]:>4d} '
                         f'{row["seconds"]:>5.2f}')
            else:
                line += f' | {"":>6} {"-":>6} {"-":>6} {"-":>6} {0:>4d} {row["seconds"]:>5.2f}'
        _log(line)


def time_one_minute(rate_hz=200_000, seconds=60.0, width=640, height=480):
    """Print the warp score's wall time on a synthetic stream (no model involved)."""
    count = int(rate_hz * seconds)
    rng = np.random.default_rng(0)
    t_s = np.sort(rng.uniform(0, seconds, count))
    y = rng.integers(0, height, count).astype(np.uint16)
    edge = rng.integers(0, 30, count)
    x = (np.round(10 + 21 * edge + 300.0 * t_s) % width).astype(np.uint16)
    t_ns = np.round(t_s * 1e9).astype(np.int64)
    flow = np.tile(np.array([300.0, 0.0], np.float32), (count, 1))
    for max_windows in (warp_score.DEFAULT_MAX_WINDOWS, None):
        start = time.perf_counter()
        result = warp_score.warp_score(t_ns, x, y, flow, width, height,
                                       max_windows=max_windows)
        _log(f'{count:,} events over {seconds:g} s, {width}x{height}, max_windows '
             f'{max_windows}: {result.windows} windows, '
             f'{time.perf_counter() - start:.1f} s wall; score {result.at(1.0):.3f}, '
             f'best s {result.best()[0]:.2f}')
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--set', choices=('real', 'simulated', 'both', 'timing'),
                        default='both')
    parser.add_argument('--model', default=None, help='our model (default: the default)')
    parser.add_argument('--published', nargs='*', default=list(PUBLISHED),
                        help='published model folders (names under --published-dir)')
    parser.add_argument('--published-dir', type=pathlib.Path,
                        default=SHARED / 'veckm_flow_cpp_models')
    parser.add_argument('--recordings', type=pathlib.Path, default=SHARED / 'recordings')
    parser.add_argument('--max-events', type=int, default=None, help='events per recording')
    parser.add_argument('--windows-ms', type=float, nargs='+',
                        default=[1e3 * warp_score.DEFAULT_WINDOW_S, 20.0],
                        help='warp score window lengths [ms]')
    parser.add_argument('--min-validity', type=float, default=None,
                        help='score only flows with estimator validity >= this (0..1; the '
                             'node publishes with 0.5, stream/parameters.py)')
    parser.add_argument('--block-ms', type=float, nargs='+', default=[5.0],
                        help="estimator block length(s) [ms] of the models (0: the node's "
                             'automatic 2 tau)')
    add_long_context_argument(parser, note='every model, the published weights included; 0 '
                              'reproduces the numbers measured before that default')
    parser.add_argument('--no-planefit', action='store_true', help='leave plane fitting out')
    parser.add_argument('--threads', type=int, default=None)
    args = parse_benchmark_arguments(parser, argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.set == 'timing':
        return time_one_minute()
    if args.min_validity is not None and not 0 <= args.min_validity <= 1:
        parser.error(f'--min-validity must be in [0, 1], got {args.min_validity}')
    if any(not 0 <= block_ms <= 1000 for block_ms in args.block_ms):
        parser.error(f'--block-ms must be in [0, 1000] ms (0: automatic), got {args.block_ms}')
    from veckm_flow_ros.core.estimator import automatic_block_s

    def model_methods(label, model):
        """{name: method} of `model` at each --block-ms."""
        found = {}
        for block_ms in args.block_ms:
            block_s = block_ms * 1e-3 or automatic_block_s(model.tau_s)
            suffix = f' @ {block_s * 1e3:g} ms' if len(args.block_ms) > 1 else ''
            found[label + suffix] = evaluate.model_method(
                model, block_s, long_context_below_px_s=args.long_context_below_px_s)
        return found
    ours = load_model(args.model)
    methods = model_methods(f'ours {ours.name}', ours)
    ours_method = next(iter(methods))
    for name in args.published:
        folder = args.published_dir / name
        if not folder.is_dir():
            _log(f'skipping published {name}: {folder} not found')
            continue
        methods.update(model_methods(f'published {name}', load_model(folder)))
    if not args.no_planefit:
        methods['plane fit'] = evaluate.planefit_method()
    _log(f'methods: {", ".join(methods)}; torch threads {torch.get_num_threads()}; '
         f'min validity {args.min_validity}; long context below '
         f'{args.long_context_below_px_s:g} px/s')

    if args.set in ('simulated', 'both'):
        sequences, extra = {}, {}
        for motion, texture, seed, speed in SCENES:
            scene = simulate.make_scene(motion, texture, seed=seed, width=240, height=180,
                                        speed_px_s=speed)
            sequence = simulate.simulate(scene, 0.2, seed=seed)
            name = f'sim {motion}-{texture} {speed:g}px/s'
            sequences[name] = sequence
            truth = sequence.flow_px_s
            extra[name] = {'GT optical flow': truth,
                           'GT normal flow': simulate.normal_flow_px_s(scene, sequence),
                           'GT x 2': 2 * truth, 'GT x 0.5': 0.5 * truth, 'GT reversed': -truth,
                           'GT + noise': noisy(truth, seed)}
            _log(f'{name}: {len(sequence):,} events')
        rows = score_methods(methods, sequences, args.windows_ms, args.min_validity, extra,
                             common_for=ours_method)
        _log('')
        print_rows(rows, args.windows_ms)

    if args.set in ('real', 'both'):
        if not args.recordings.is_dir():
            _log(f'no recordings at {args.recordings}')
            return 1
        sequences = {}
        for path in sorted(p for p in args.recordings.iterdir() if evaluate.is_bag(p)):
            sequence = evaluate.load_recording(path, args.max_events)
            span_s = (sequence.events.t_ns[-1] - sequence.events.t_ns[0]) * 1e-9 \
                if len(sequence) else 0.0
            _log(f'{path.name}: {len(sequence):,} events, {sequence.width}x{sequence.height}, '
                 f'{span_s:.3f} s')
            sequences[path.name] = sequence
        start = time.perf_counter()
        rows = score_methods(methods, sequences, args.windows_ms, args.min_validity,
                             common_for=ours_method)
        _log(f'\nall methods and scores: {time.perf_counter() - start:.0f} s')
        print_rows(rows, args.windows_ms)
    return 0


if __name__ == '__main__':
    sys.exit(main())
