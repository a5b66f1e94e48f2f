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
Our model next to the published weights on real recordings: pictures and agreement.

    .venv/bin/python benchmarks/compare_real.py [--model NAME|PATH] [--out out/compare]

For every recording under --recordings (default ../shared/data/recordings), both models run
on the first --max-events events through NormalFlowEstimator (the node's code path). Printed
per recording: the share of events whose two flows point into the same half-plane (over all
events both give a non-zero flow, and over those with at least 10 context events in the
window), within 45 degrees, and the median speed ratio ours / published. For --windows time
windows of --window-events events each, one PNG:

    row 1: ours (colour wheel) | published (colour wheel, same scale) | agreement map
    row 2: events + our arrows | events + published arrows | per-event direction difference

Agreement map: per pixel, the mean cosine between the two flows of its events, green = same
direction, yellow = perpendicular, red = opposite; black = no event. The pictures are made
from data that is not ours: write them outside the repository (default out/, git-ignored).
The published weights (CC BY-NC) are only read from --published.

Each row also carries both models' warp score (offline/warp_score.py; median contrast ratio at
s = 1 and the best flow scale). --min-validity V applies the validity filter: flows whose
estimator validity (FlowBlock.validity) is below V are dropped from the agreement, the warp
score and the pictures (black); it needs an estimator that reports a validity.
--long-context-below-px-s PX_S: both models estimate their flows slower than PX_S again on
the long context, as the node (default: the node's long_context_below_px_s, 150 px/s; 0 =
off, the numbers measured before that default).
"""

import argparse
import json
import pathlib
import sys
import time

import cv2
import numpy as np
import torch

from veckm_flow_ros.cli.replay import add_long_context_argument, parse_benchmark_arguments
from veckm_flow_ros.core.model import load_model
from veckm_flow_ros.learning.simulate import SimulatedSequence
from veckm_flow_ros.offline import evaluate, visualize, warp_score

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / 'shared' / 'data'
# Our model (by radius and tau) -> the published model with the same radius and time slice.
PARTNERS = {(8, 16.0): '640x480_32ms_C64_k8', (10, 12.0): '640x480_24ms_C64_k10'}


def _log(message):
    print(message, flush=True)


def cosine_between(a, b):
    """Return (cosine (N,), scored (N,) bool): both flows finite and non-zero."""
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    scored = np.isfinite(na) & np.isfinite(nb) & (na > 0) & (nb > 0)
    cosine = np.einsum('ij,ij->i', np.nan_to_num(a), np.nan_to_num(b)) \
        / np.maximum(na * nb, 1e-12)
    return np.where(scored, cosine, np.nan), scored


def agreement_colors(cosine):
    """BGR uint8 (N, 3) for cosines in [-1, 1]: red (-1) -> yellow (0) -> green (1)."""
    c = np.clip(np.asarray(cosine, np.float64), -1, 1)
    red = np.where(c < 0, 255, 255 * (1 - c))
    green = np.where(c < 0, 255 * (1 + c), 255)
    return np.stack([np.zeros_like(c), green, red], 1).round().astype(np.uint8)


def agreement_image(x, y, cosine, width, height, zoom=1):
    """Per-pixel mean cosine of the scored events, coloured by agreement_colors."""
    keep = np.isfinite(cosine)
    index = y[keep].astype(np.int64) * width + x[keep].astype(np.int64)
    total = np.bincount(index, weights=cosine[keep], minlength=width * height)
    count = np.bincount(index, minlength=width * height)
    image = np.zeros((width * height, 3), np.uint8)
    has = count > 0
    image[has] = agreement_colors(total[has] / count[has])
    image = image.reshape(height, width, 3)
    if zoom > 1:
        image = np.repeat(np.repeat(image, zoom, 0), zoom, 1)
    return image


def difference_histogram(cosine, size):
    """Histogram picture (size = (w, h)) of the per-event angle between the two flows."""
    w, h = size
    image = np.zeros((h, w, 3), np.uint8)
    angles = np.degrees(np.arccos(np.clip(cosine[np.isfinite(cosine)], -1, 1)))
    if not len(angles):
        return image
    counts, _ = np.histogram(angles, bins=36, range=(0, 180))
    share = counts / counts.sum()
    left, bottom, plot_w, plot_h = 40, h - 40, w - 60, h - 90
    bar = plot_w / 36
    for k, value in enumerate(share):
        top = int(round(bottom - plot_h * value / max(share.max(), 1e-9)))
        color = tuple(int(c) for c in agreement_colors([np.cos(np.radians(5 * k + 2.5))])[0])
        cv2.rectangle(image, (int(left + k * bar), top), (int(left + (k + 1) * bar) - 1, bottom),
                      color, -1)
    font = cv2.FONT_HERSHEY_SIMPLEX
    for degrees in (0, 45, 90, 135, 180):
        px = int(left + plot_w * degrees / 180)
        cv2.putText(image, f'{degrees}', (px - 8, bottom + 18), font, 0.45, (220, 220, 220), 1,
                    cv2.LINE_AA)
    cv2.putText(image, 'angle between the two flows (deg), share of events', (left, 30), font,
                0.45, (220, 220, 220), 1, cv2.LINE_AA)
    cv2.putText(image, f'same half-plane {100 * np.mean(angles < 90):.1f} %', (left, 52), font,
                0.45, (220, 220, 220), 1, cv2.LINE_AA)
    return image


def window_panel(events, width, height, ours, theirs, cosine, labels, zoom):
    """Return the two-row picture of one window of events (see the module docstring)."""
    x, y, p = events.x, events.y, events.p
    speeds = np.concatenate([np.linalg.norm(f, axis=1) for f in (ours, theirs)])
    speeds = speeds[np.isfinite(speeds)]
    max_speed = visualize.nice_speed_px_s(float(np.percentile(speeds, 95))) \
        if len(speeds) else 1.0
    row1, row2 = [], []
    for label, flow in zip(labels, (ours, theirs)):
        row1.append((f'{label}: flow', visualize.render_flow_image(
            x, y, flow[:, 0], flow[:, 1], width, height, max_speed, zoom=zoom)))
        row2.append((f'{label}: arrows on events', visualize.render_arrow_image(
            x, y, p, x, y, flow[:, 0], flow[:, 1], width, height, max_speed, zoom=zoom)))
    # Over the events both models give a flow to (NaN > 0 would count as disagreement).
    finite = np.isfinite(cosine)
    agree = np.mean(cosine[finite] > 0) if finite.any() else float('nan')
    row1.append((f'agreement (green same, red opposite): {100 * agree:.1f} % same half-plane',
                 agreement_image(x, y, cosine, width, height, zoom)))
    row2.append(('direction difference', difference_histogram(
        cosine, (width * zoom, height * zoom))))
    top, bottom = visualize.side_by_side(row1), visualize.side_by_side(row2)
    return np.vstack([top, np.full((4, top.shape[1], 3), 80, np.uint8), bottom])


def compare_recording(path, ours, published, max_events, windows, window_events, out_dir,
                      ours_label, published_label, mean_flow=False, published_mean_flow=False,
                      min_validity=None, long_context_below_px_s=0.0):
    """Run both models on one recording; write the window PNGs; return the agreement row."""
    events, width, height = evaluate.decode_recording(path, max_events)
    if not len(events):
        return None
    sequence = SimulatedSequence(events, np.full((len(events), 2), np.nan, np.float32),
                                 np.zeros(len(events), bool), width, height)
    start = time.process_time()
    mine = evaluate.valid_flow(evaluate.predict_with_estimator(
        ours, sequence, mean_flow=mean_flow, long_context_below_px_s=long_context_below_px_s),
        min_validity)
    theirs = evaluate.valid_flow(evaluate.predict_with_estimator(
        published, sequence, mean_flow=published_mean_flow,
        long_context_below_px_s=long_context_below_px_s), min_validity)
    cpu_s = time.process_time() - start
    cosine, scored = cosine_between(mine, theirs)
    with np.errstate(divide='ignore', invalid='ignore'):
        speed_ratio = np.linalg.norm(mine, axis=1) / np.linalg.norm(theirs, axis=1)
    context = evaluate.context_counts(events, width, height, ours.pixel_radius, ours.tau_s)
    dense = scored & (context >= 10)
    row = {'events': int(len(events)), 'size': [width, height],
           'duration_s': float((events.t_ns[-1] - events.t_ns[0]) * 1e-9),
           'scored_share': float(scored.mean()),
           'agree_half_plane': float(np.mean(cosine[scored] > 0)),
           'agree_45deg': float(np.mean(cosine[scored] > np.cos(np.pi / 4))),
           'median_speed_ratio': float(np.median(speed_ratio[scored])),
           'context_at_least_10': {
               'share': float(dense.mean()),
               'agree_half_plane': float(np.mean(cosine[dense] > 0)) if dense.any()
               else float('nan')},
           'cpu_s_both_models': round(cpu_s, 1), 'min_validity': min_validity,
           'long_context_below_px_s': long_context_below_px_s,
           'kept_share': {'ours': float(np.isfinite(mine).all(axis=1).mean()),
                          'published': float(np.isfinite(theirs).all(axis=1).mean())},
           'warp_score': {
               label: warp_score.warp_score(events.t_ns, events.x, events.y, flow, width,
                                            height).summary()
               for label, flow in (('ours', mine), ('published', theirs))},
           'pictures': []}
    zoom = 2 if width < 480 else 1
    n = len(events)
    for k in range(windows):
        centre = int(n * (k + 1) / (windows + 1))
        lo = max(0, centre - window_events // 2)
        hi = min(n, lo + window_events)
        part = slice(lo, hi)
        picture = window_panel(events[part], width, height, mine[part], theirs[part],
                               cosine[part], (ours_label, published_label), zoom)
        t0 = (events.t_ns[lo] - events.t_ns[0]) * 1e-6
        t1 = (events.t_ns[hi - 1] - events.t_ns[0]) * 1e-6
        caption = (f'{path.name}: events {lo}..{hi} ({t0:.0f}-{t1:.0f} ms), '
                   f'{ours_label} vs {published_label}')
        strip = np.zeros((22, picture.shape[1], 3), np.uint8)
        cv2.putText(strip, caption, (4, 16), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (255, 255, 255), 1,
                    cv2.LINE_AA)
        file = out_dir / f'{path.name}_{k}.png'
        cv2.imwrite(str(file), np.vstack([strip, picture]))
        row['pictures'].append(str(file))
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--model', default=None,
                        help='our model: shipped name or checkpoint (default: the default)')
    parser.add_argument('--published', type=pathlib.Path, default=None,
                        help='published model folder (default: the partner of --model in '
                             '../shared/data/veckm_flow_cpp_models)')
    parser.add_argument('--recordings', type=pathlib.Path, default=SHARED / 'recordings')
    parser.add_argument('--out', type=pathlib.Path, default=ROOT / 'out' / 'compare',
                        help='output folder for the PNGs and agreement.json')
    parser.add_argument('--max-events', type=int, default=300_000,
                        help='events per recording')
    parser.add_argument('--windows', type=int, default=2, help='pictures per recording')
    parser.add_argument('--window-events', type=int, default=30_000,
                        help='events per picture')
    parser.add_argument('--mean-flow', action='store_true',
                        help='our flow = the rotation-ensemble mean (4 encodings per event)')
    parser.add_argument('--published-mean-flow', action='store_true',
                        help='the published flow = its rotation-ensemble mean too (removes the '
                             'bias both models have on sparse neighbourhoods)')
    parser.add_argument('--min-validity', type=float, default=None,
                        help='validity filter: drop flows whose estimator validity is below '
                             'this (0..1; the node publishes with 0.5, stream/parameters.py)')
    add_long_context_argument(parser, note='both models, the published weights included; 0 '
                              'reproduces the numbers measured before that default')
    parser.add_argument('--threads', type=int, default=None)
    args = parse_benchmark_arguments(parser, argv)
    if args.min_validity is not None and not 0 <= args.min_validity <= 1:
        parser.error(f'--min-validity must be in [0, 1], got {args.min_validity}')
    if args.threads:
        torch.set_num_threads(args.threads)
    ours = load_model(args.model)
    published_dir = args.published
    if published_dir is None:
        partner = PARTNERS.get((ours.pixel_radius, round(ours.tau_s * 1e3, 3)))
        if partner is None:
            print(f'no published partner for r = {ours.pixel_radius}, tau = {ours.tau_s}; '
                  'pass --published', file=sys.stderr)
            return 1
        published_dir = SHARED / 'veckm_flow_cpp_models' / partner
    if not published_dir.is_dir() or not args.recordings.is_dir():
        print(f'need {published_dir} and {args.recordings}', file=sys.stderr)
        return 1
    published = load_model(published_dir)
    ours_label = ours.metadata.get('name', 'ours') if ours.metadata else 'ours'
    if args.mean_flow:
        ours_label += ' (rotation mean)'
    published_label = f'published {published_dir.name}'
    if args.published_mean_flow:
        published_label += ' (rotation mean)'
    if args.min_validity is not None:
        ours_label += f' (validity >= {args.min_validity:g})'
        published_label += f' (validity >= {args.min_validity:g})'
    args.out.mkdir(parents=True, exist_ok=True)
    rows = {}
    for path in sorted(p for p in args.recordings.iterdir() if p.is_dir()):
        row = compare_recording(path, ours, published, args.max_events, args.windows,
                                args.window_events, args.out, ours_label, published_label,
                                args.mean_flow, args.published_mean_flow, args.min_validity,
                                args.long_context_below_px_s)
        if row is None:
            _log(f'{path.name}: no CD events')
            continue
        rows[path.name] = row
        _log(f'{path.name:<36} {row["events"]:>8} events {row["size"][0]}x{row["size"][1]}  '
             f'same half-plane {100 * row["agree_half_plane"]:6.2f}%  within 45 deg '
             f'{100 * row["agree_45deg"]:6.2f}%  speed ratio {row["median_speed_ratio"]:.2f}  '
             f'>= 10 context ({100 * row["context_at_least_10"]["share"]:.1f}% of events): '
             f'{100 * row["context_at_least_10"]["agree_half_plane"]:6.2f}%')
        warp = row['warp_score']
        _log(f'  warp score (s = 1 / best s, {warp["ours"]["windows"]} windows): ours '
             f'{warp["ours"]["score"]:.3f} / {warp["ours"]["best_s"]:.2f}, published '
             f'{warp["published"]["score"]:.3f} / {warp["published"]["best_s"]:.2f}; flows '
             f'kept {100 * row["kept_share"]["ours"]:.1f} % / '
             f'{100 * row["kept_share"]["published"]:.1f} %')
        for picture in row['pictures']:
            _log(f'  {picture}')
    (args.out / 'agreement.json').write_text(json.dumps(
        {'model': ours_label, 'published': published_label, 'min_validity': args.min_validity,
         'long_context_below_px_s': args.long_context_below_px_s,
         'recordings': rows}, indent=1))
    _log(f'wrote {args.out / "agreement.json"}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
