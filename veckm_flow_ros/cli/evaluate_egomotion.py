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
veckm-flow evaluate-egomotion: egomotion accuracy on held-out simulated 3D sequences.

Simulates `--count` held-out sequences (learning/simulate3d.heldout_3d_specs; or reads
`--sequences` files written by `veckm-flow simulate --scene 3d`), runs the flow estimator
and the egomotion estimator with and without the simulated gyroscope, and prints a markdown
table per sequence, per trajectory and overall (offline/evaluate_egomotion has the metrics).
Writes the table, the per-window errors and a plot to --out-dir.
"""

import pathlib

import numpy as np

from veckm_flow_ros.cli import add_command


def register(subparsers):
    from veckm_flow_ros.core.egomotion import EgomotionConfig
    from veckm_flow_ros.learning.simulate3d import TRAJECTORIES
    parser = add_command(
        subparsers, 'evaluate-egomotion', run,
        'egomotion accuracy on held-out simulated 3D sequences',
        'Translation-direction, angular-velocity, FOE and time-to-contact errors '
        'of the egomotion estimator on simulated 3D sequences, with and without '
        'gyroscope.')
    parser.add_argument('--count', type=int, default=8,
                        help='held-out sequences to simulate (trajectories in turn)')
    parser.add_argument('--trajectories', nargs='+', default=list(TRAJECTORIES),
                        choices=TRAJECTORIES, metavar='KIND',
                        help='trajectories of the held-out sequences, in turn (some of '
                             f'{", ".join(TRAJECTORIES)}); a subset takes seeds apart from '
                             'the mixed set of all four')
    parser.add_argument('--duration', type=float, default=0.5, metavar='SECONDS',
                        help='length of each simulated sequence [s]')
    parser.add_argument('--sequences', nargs='*', default=[], metavar='SEQ.npz',
                        help='evaluate these simulated 3D sequences too (files of '
                             '`veckm-flow simulate --scene 3d`)')
    parser.add_argument('--flow', default='estimated', choices=('estimated', 'exact'),
                        help="flows: the flow estimator's, or the simulator's exact optical "
                             "flow projected onto the flow estimator's normal directions "
                             '(isolates the egomotion estimator)')
    parser.add_argument('--stride', type=int, default=1, metavar='K',
                        help='flow of every K-th event (the egomotion estimator subsamples '
                             'to max_flows per window anyway)')
    parser.add_argument('--window-ms', type=float, default=30.0, help='window length [ms]')
    defaults = EgomotionConfig()
    parser.add_argument('--ttc-grid', type=int, nargs=2, default=list(defaults.ttc_grid),
                        metavar=('ROWS', 'COLS'), help='regions of the time-to-contact grid')
    parser.add_argument('--ttc-neighbour-weight', type=float,
                        default=defaults.ttc_neighbour_weight, metavar='W',
                        help="weight of the neighbouring regions' flows in a region's time "
                             'to contact (0: each region alone)')
    parser.add_argument('--model', default=None,
                        help='flow model (default: the shipped default model)')
    parser.add_argument('--out-dir', default=None, metavar='DIR',
                        help='write table.md, windows.npz and errors.png here')
    parser.add_argument('--confidence', action='store_true',
                        help="weight the flows by the flow estimator's confidence (~4x the "
                             'flow cost)')
    parser.add_argument('--cache-dir', default=None, metavar='DIR',
                        help='keep simulated sequences here and reuse them on later runs')
    parser.add_argument('--motions', default=None, choices=('tuning', 'heldout'),
                        help='instead: the motion suite (learning/motion_suite.py: corridor, '
                        'sideways, panning, approach, drone, turning; --count sequences per '
                        'kind of this split), per kind and translational/rotational ratio')
    parser.add_argument('--motion-flow', default='normal',
                        choices=('normal', 'full', 'components', 'model'),
                        help='with --motions: exact normal flow at the image gradient, the '
                        'full flow as one normal flow along itself, the full flow as two '
                        'normal flows (its x and y components), or the flow model on '
                        'simulated events (slow)')
    parser.add_argument('--quiet', action='store_true', help='no progress output')


def run(args) -> int:
    from veckm_flow_ros.core.egomotion import EgomotionConfig
    from veckm_flow_ros.offline import evaluate_egomotion as evaluation
    if args.count < 0:
        raise ValueError(f'--count must be >= 0, got {args.count}')
    if args.count == 0 and not args.sequences:
        raise ValueError('nothing to evaluate: --count 0 and no --sequences')
    if not args.duration > 0:
        raise ValueError(f'--duration must be > 0 s, got {args.duration}')
    if args.stride < 1:
        raise ValueError(f'--stride must be >= 1, got {args.stride}')
    for path in args.sequences:
        if not pathlib.Path(path).is_file():
            raise FileNotFoundError(f'sequence file {path} does not exist')
    from veckm_flow_ros.learning.simulate3d import heldout_3d_specs
    config = EgomotionConfig(window_s=args.window_ms * 1e-3, ttc_grid=tuple(args.ttc_grid),
                             ttc_neighbour_weight=args.ttc_neighbour_weight).check()
    if args.motions:
        from veckm_flow_ros.offline import evaluate_motions
        rows = evaluate_motions.evaluate(args.motions, args.count, duration_s=args.duration,
                                         flow=args.motion_flow, config=config,
                                         cache_dir=args.cache_dir, quiet=args.quiet,
                                         model=args.model)
        print(evaluate_motions.table(rows))
        return 0
    results = evaluation.evaluate_specs(
        heldout_3d_specs(args.count, args.trajectories), args.duration, config,
        flow=args.flow, model=args.model, stride=args.stride, confidence=args.confidence,
        quiet=args.quiet, sequences=args.sequences, cache_dir=args.cache_dir)
    table = evaluation.results_table(results)
    print(table)
    if args.out_dir:
        out = pathlib.Path(args.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / 'table.md').write_text(table + '\n')
        evaluation.plot_results(results, out / 'errors.png')
        columns = {}
        for index, result in enumerate(results):
            prefix = f's{index}_'
            for mode in evaluation.MODES:
                columns[prefix + f'{mode}_direction_deg'] = result.direction_deg[mode]
                columns[prefix + f'{mode}_foe_px'] = result.foe_px[mode]
            columns[prefix + 'observable'] = result.observable
            columns[prefix + 'omega_deg_s'] = result.omega_deg_s
            columns[prefix + 'speed_per_depth'] = result.truth['speed_per_depth']
        np.savez(out / 'windows.npz', names=np.array([r.name for r in results]), **columns)
        print(f'wrote {out / "table.md"}, {out / "windows.npz"}, {out / "errors.png"}')
    return 0
