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
`veckm-flow demo`: the bundled simulated recording through the replay path, with pictures.

Steps: load the shipped default model; replay veckm_flow_ros/data/demo_scene.mcap (evt3
EventPackets made by the project's simulator) exactly as `veckm-flow replay` does, writing a
flow bag, per-event flows, PNG frames and an mp4; score the flows against the recording's
exact ground truth (demo_scene.npz) next to the plane-fitting baseline; draw the predicted
flow beside the ground truth and the error against speed. When the real recordings of the
project's shared data are present (../shared/data/recordings from the project root), also
replay the 640x480 evt3 recording and draw one frame of it.
"""

import pathlib
import shutil

from veckm_flow_ros.cli import add_command

DATA_DIR = pathlib.Path(__file__).resolve().parents[1] / 'data'
DEMO_BAG = DATA_DIR / 'demo_scene.mcap'
DEMO_TRUTH = DATA_DIR / 'demo_scene.npz'
PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]
DEFAULT_RECORDINGS = PROJECT_ROOT.parent / 'shared' / 'data' / 'recordings'
REAL_EVT3 = 'py_test_events_1'
# Recordings of the validity picture: a hand (real motion) and background activity alone.
VALIDITY_RECORDINGS = ('py_test_events_1', 'codecs_test_data_libcaer_rollover')
VALIDITY_DURATION_S = 1.0
# The outputs this command writes (and replaces on the next run) inside --out-dir.
OUTPUT_NAMES = ('flow_bag', 'flows.npz', 'frames', 'demo.mp4', 'comparison.png',
                'error_vs_speed.png', 'metrics.txt', 'real_evt3_640x480.png',
                'real_evt3_640x480.mp4', 'validity_filter.png')
QUICK_DURATION_S = 0.1


def register(subparsers):
    parser = add_command(
        subparsers, 'demo', run,
        'replay the bundled simulated recording: pictures + evaluation table',
        'Replay the bundled recording (simulated, with exact ground truth) '
        'through the estimator with the shipped default model; write pictures, '
        'an mp4 and a flow bag, and print the evaluation table.')
    parser.add_argument('--out-dir', default='out/demo', help='where to write the outputs')
    parser.add_argument('--model', default=None,
                        help='model (default: the shipped default model)')
    parser.add_argument('--device', default='cpu', choices=('cpu', 'cuda'))
    parser.add_argument('--quick', action='store_true',
                        help=f'only the first {QUICK_DURATION_S} s, no baseline, no real '
                             'recording (for tests)')
    parser.add_argument('--recordings', default=str(DEFAULT_RECORDINGS),
                        help='directory of the real recordings (skipped when absent)')
    parser.add_argument('--threads', type=int, default=0,
                        help='torch CPU threads (0: torch default)')
    parser.add_argument('--no-progress', action='store_true', help='no progress bars')


def run(args) -> int:
    from veckm_flow_ros.cli.replay import set_threads
    from veckm_flow_ros.core.model import load_model, ModelError
    from veckm_flow_ros.offline.replay import (load_flows_npz, replay_bag, ReplayOptions,
                                               ReplayOutputs)
    from veckm_flow_ros.offline.sequences import load_sequence

    set_threads(args.threads)
    for path in (DEMO_BAG, DEMO_TRUTH):
        if not path.is_file():
            raise FileNotFoundError(f'the bundled demo recording {path} is missing; regenerate '
                                    'it with scripts/make_demo_data.py')
    try:
        model = load_model(args.model)
    except ModelError as error:
        if args.model is not None:
            raise
        raise ValueError(f'the demo needs the shipped default model: {error}') from None

    out_dir = pathlib.Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    _remove_previous_outputs(out_dir)
    duration_s = QUICK_DURATION_S if args.quick else None
    progress = not args.no_progress

    print(f'model      {model.name} (r = {model.pixel_radius} px, tau = '
          f'{model.tau_s * 1e3:g} ms)')
    print(f'recording  {DEMO_BAG} (simulated, ground truth in {DEMO_TRUTH.name})')
    options = ReplayOptions(device=args.device, duration_s=duration_s, progress=progress)
    outputs = ReplayOutputs(bag=out_dir / 'flow_bag', npz=out_dir / 'flows.npz',
                            video=out_dir / 'demo.mp4', png_dir=out_dir / 'frames')
    summary = replay_bag(DEMO_BAG, model, options, outputs)
    print(summary.table())

    sequence = load_sequence(DEMO_TRUTH)
    flows = load_flows_npz(outputs.npz)
    table, rows = evaluate_demo(sequence, flows, summary, baseline=not args.quick)
    print()
    print(table)
    (out_dir / 'metrics.txt').write_text(table + '\n')
    written = [str(out_dir / 'metrics.txt')]
    written.append(draw_comparison(sequence, flows, out_dir / 'comparison.png'))
    written.append(draw_error_vs_speed(sequence, flows, out_dir / 'error_vs_speed.png'))

    recordings = pathlib.Path(args.recordings)
    if not args.quick and (recordings / REAL_EVT3).exists():
        written += replay_real(recordings / REAL_EVT3, model, args.device, out_dir, progress)
        written += draw_validity_filter(recordings, model, args.device,
                                        out_dir / 'validity_filter.png', progress)
    elif not args.quick:
        print(f'\n(real recordings not found at {recordings}: skipped the 640x480 evt3 replay)')

    print('\noutputs:')
    for path in summary.written + written:
        print(f'  {path}')
    return 0


def draw_validity_filter(recordings: pathlib.Path, model, device, path: pathlib.Path,
                         progress) -> list:
    """
    Picture of the min_validity filter on real recordings: every flow | the published ones.

    Replays the first VALIDITY_DURATION_S of each of VALIDITY_RECORDINGS with every flow kept
    (min_validity 0), then shows the 50 ms with the most flows, without and with the node's
    default filter, and prints the share of flows the default keeps.
    """
    import tempfile

    import cv2
    import numpy as np

    from veckm_flow_ros.offline.replay import (load_flows_npz, replay_bag, ReplayOptions,
                                               ReplayOutputs)
    from veckm_flow_ros.offline.visualize import (auto_max_speed_px_s, render_flow_image,
                                                  side_by_side)
    from veckm_flow_ros.stream.parameters import parameter_default
    min_validity = parameter_default('min_validity')
    rows = []
    print(f'\nvalidity filter (min_validity {min_validity:g}, the default of the node) on the '
          f'first {VALIDITY_DURATION_S:g} s of:')
    for name in VALIDITY_RECORDINGS:
        if not (recordings / name).exists():
            continue
        with tempfile.TemporaryDirectory(prefix='veckm_flow_demo_') as work:
            npz = pathlib.Path(work) / 'flows.npz'
            replay_bag(recordings / name, model,
                       ReplayOptions(device=device, min_validity=0.0, progress=progress,
                                     duration_s=VALIDITY_DURATION_S),
                       ReplayOutputs(npz=npz))
            flows = load_flows_npz(npz)
        width, height = int(flows['width']), int(flows['height'])
        kept = flows['validity'] >= min_validity
        print(f'  {name}: {kept.sum():,} of {len(kept):,} flows published '
              f'({100 * kept.mean():.1f} %)')
        if not len(kept):
            continue
        t_ns = flows['t_ns']
        window_ns = 50_000_000
        starts = np.arange(t_ns[0], t_ns[-1] + 1, window_ns)
        counts = np.histogram(t_ns, np.append(starts, starts[-1] + window_ns))[0]
        busiest = starts[np.argmax(counts)]
        shown = (t_ns >= busiest) & (t_ns < busiest + window_ns)
        reference = shown & kept if (shown & kept).any() else shown
        max_speed_px_s = auto_max_speed_px_s(flows['u_px_s'][reference],
                                             flows['v_px_s'][reference])
        panels = []
        for label, mask in (('every flow', shown), (f'validity >= {min_validity:g}',
                                                    shown & kept)):
            panels.append((f'{name}: {label} ({mask.sum():,})', render_flow_image(
                flows['x'][mask], flows['y'][mask], flows['u_px_s'][mask],
                flows['v_px_s'][mask], width, height, max_speed_px_s, dot_radius_px=1)))
        rows.append(side_by_side(panels))
    if not rows:
        return []
    width = max(row.shape[1] for row in rows)
    image = np.vstack([np.pad(row, ((0, 0), (0, width - row.shape[1]), (0, 0)))
                       for row in rows])
    cv2.imwrite(str(path), image)
    return [str(path)]


def _remove_previous_outputs(out_dir: pathlib.Path):
    """Delete this command's own outputs from a previous run (nothing else in out_dir)."""
    for name in OUTPUT_NAMES:
        path = out_dir / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def _truth_of_flows(sequence, flows):
    from veckm_flow_ros.offline.sequences import ground_truth_at
    return ground_truth_at(sequence, flows['t_ns'], flows['x'], flows['y'])


def evaluate_demo(sequence, flows, summary, baseline=True):
    """
    Score the replayed flows (and the plane-fitting baseline) against the ground truth.

    Only events inside the replayed time span are scored (a --quick run covers less).
    Returns (table text, {row name: metrics}).
    """
    import numpy as np

    from veckm_flow_ros.core.metrics import format_table, MetricsAccumulator
    from veckm_flow_ros.offline.sequences import match_events
    events = sequence.events
    in_span = (events.t_ns >= (summary.t_first_ns or 0)) & (
        events.t_ns <= (summary.t_last_ns if summary.t_last_ns is not None else -1))
    # Per-event predictions in the sequence's order: the flow replayed at (t, x, y).
    predicted = np.full((len(events), 2), np.nan, np.float32)
    index = match_events(sequence, flows['t_ns'], flows['x'], flows['y'])
    found = index >= 0
    predicted[index[found]] = np.stack([flows['u_px_s'], flows['v_px_s']], 1)[found]
    accumulator = MetricsAccumulator()
    accumulator.add('VecKM (this package)', predicted, sequence.flow_px_s, in_span)
    if baseline:
        from veckm_flow_ros.offline.planefit import plane_fit_flow
        planes = plane_fit_flow(events[in_span], sequence.width, sequence.height)
        full = np.full((len(events), 2), np.nan, np.float32)
        full[in_span] = planes
        accumulator.add('plane fitting (baseline)', full, sequence.flow_px_s, in_span)
    rows = accumulator.per_sequence()
    return format_table(rows, title='demo_scene (exact ground truth)'), rows


def draw_comparison(sequence, flows, path: pathlib.Path) -> str:
    """Predicted normal flow beside the ground-truth optical flow for 40 ms mid-replay."""
    import cv2
    import numpy as np

    from veckm_flow_ros.offline.replay import picture_zoom
    from veckm_flow_ros.offline.visualize import render_comparison
    t_ns = flows['t_ns']
    middle = int(np.median(t_ns)) if len(t_ns) else 0
    start, end = middle - 20_000_000, middle + 20_000_000
    window = (t_ns >= start) & (t_ns < end)
    truth = _truth_of_flows(sequence, flows)[window]
    events = sequence.events
    in_window = (events.t_ns >= start) & (events.t_ns < end)
    image = render_comparison(
        flows['x'][window], flows['y'][window], flows['u_px_s'][window],
        flows['v_px_s'][window], truth[:, 0], truth[:, 1], sequence.width, sequence.height,
        dot_radius_px=1, zoom=picture_zoom(sequence.width),
        events=(events.x[in_window], events.y[in_window], events.p[in_window]))
    cv2.imwrite(str(path), image)
    return str(path)


def draw_error_vs_speed(sequence, flows, path: pathlib.Path) -> str:
    """Plot the replayed flows' error against ground-truth speed (evaluate.py's plot)."""
    import numpy as np

    from veckm_flow_ros.core import metrics
    from veckm_flow_ros.offline import evaluate
    truth = _truth_of_flows(sequence, flows)
    predicted = np.stack([flows['u_px_s'], flows['v_px_s']], 1)
    accumulator = metrics.MetricsAccumulator()
    accumulator.add('demo_scene', predicted, truth)
    report = evaluate.Report(accumulators={'VecKM (replay)': accumulator},
                             predictions={'VecKM (replay)': {
                                 'demo_scene': evaluate.Prediction(predicted)}},
                             ground_truth={'demo_scene': truth})
    evaluate.plot_error_vs_speed(report, path, title='demo_scene: replayed flows')
    return str(path)


def replay_real(bag_path: pathlib.Path, model, device, out_dir: pathlib.Path, progress):
    """Replay the real 640x480 evt3 recording; write its video and one mid-recording frame."""
    import tempfile

    from veckm_flow_ros.offline.replay import replay_bag, ReplayOptions, ReplayOutputs
    print(f'\nreal recording  {bag_path} (640x480 evt3, no ground truth)')
    video = out_dir / 'real_evt3_640x480.mp4'
    picture = out_dir / 'real_evt3_640x480.png'
    with tempfile.TemporaryDirectory(prefix='veckm_flow_demo_') as frames_dir:
        summary = replay_bag(bag_path, model, ReplayOptions(device=device, progress=progress),
                             ReplayOutputs(video=video, png_dir=frames_dir))
        frames = sorted(pathlib.Path(frames_dir).glob('frame_*.png'))
        if frames:
            shutil.copyfile(frames[len(frames) // 2], picture)
    summary.written = [path for path in summary.written if not path.startswith(frames_dir)]
    print(summary.table())
    return [str(video)] + ([str(picture)] if frames else [])
