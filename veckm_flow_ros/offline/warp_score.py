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
A quality score of per-event flow that needs no ground truth: the flow warp contrast ratio.

Events of a short window, moved along their own flows to the window's centre time, pile up
sharply when the flows are right; wrong flows smear them. The score of one window is

    contrast(image of the events warped by s * flow) / contrast(image of the events unwarped)

where an image is the bilinear vote of the events (weights as given) on the sensor plane plus
a margin, blurred by a Gaussian of blur_sigma_px (1 px) so that sub-pixel misplacement is not
penalised, and contrast is the variance of its pixels. Only events with a finite flow (and a
positive weight) take part, the same set in both images. A score above 1 means the flows
explain the motion of the events; s = 0 gives exactly 1. Sweeping a global scale s over the
flows gives a curve whose peak sits at s = 1 for unbiased magnitudes; a model that predicts
half the true speed peaks near s = 2.

    result = warp_score(t_ns, x, y, flow_px_s, width, height)
    result.summary()   # {'score': median at s=1, 'best_s': ..., 'windows': ...}

Windows are consecutive, window_s long, from the first scored event; only complete windows
with at least min_events scored events count; with more than max_windows of them, an evenly
spaced subset is used. The per-window ratios are kept (WarpScore.ratios); summaries are medians
over windows. Pure numpy + OpenCV (no ROS, no torch); docs/warp_score.md discusses what the
score can and cannot say.
"""

from dataclasses import dataclass
import math
from typing import Dict, Optional, Sequence

import cv2
import numpy as np

# 50 ms: an edge at 100 px/s sweeps 5 px, five times the blur; on the real test recordings
# that show (slow) motion 20 ms windows leave every model within 2 % of 1, while on simulated
# translation, rotation, zoom and affine motion up to 800 px/s the ground truth still peaks at
# s = 0.97..1.04 with 50 ms (docs/warp_score.md).
DEFAULT_WINDOW_S = 0.050
# With fewer events the image is a set of isolated blobs whose contrast no warp changes.
DEFAULT_MIN_EVENTS = 1000
DEFAULT_SCALES = tuple(round(0.2 * k, 1) for k in range(16))  # 0, 0.2, ..., 3.0
DEFAULT_BLUR_SIGMA_PX = 1.0
DEFAULT_MARGIN_PX = 32
DEFAULT_MAX_WINDOWS = 60
JITTER_SEED = 20261126


@dataclass
class WarpScore:
    """
    Contrast ratios of every counted window at every scale.

    scales float64 (S,), ascending, holding 0 and 1; ratios float64 (W, S): contrast of the
    window warped by scales[k] * flow over its unwarped contrast; window_start_ns int64 (W,);
    events int64 (W,): scored events of each window; window_s: window length [s].
    """

    scales: np.ndarray
    ratios: np.ndarray
    window_start_ns: np.ndarray
    events: np.ndarray
    window_s: float

    @property
    def windows(self) -> int:
        return int(len(self.ratios))

    def curve(self) -> np.ndarray:
        """Median ratio over windows at every scale (S,); NaN when no window counted."""
        if not self.windows:
            return np.full(len(self.scales), np.nan)
        return np.median(self.ratios, axis=0)

    def at(self, scale: float = 1.0) -> float:
        """Median ratio over windows at one of the swept scales."""
        match = np.flatnonzero(np.isclose(self.scales, scale))
        if not len(match):
            raise ValueError(f'scale {scale} was not swept (scales {self.scales.tolist()})')
        return float(self.curve()[match[0]])

    def best(self):
        """
        Return (best scale, median ratio there) of the median curve.

        The scale is refined by a parabola through the best grid point and its neighbours
        (equal spacing assumed); the ratio is the measured one at the best grid point.
        """
        curve = self.curve()
        if not self.windows:
            return float('nan'), float('nan')
        k = int(np.argmax(curve))
        scale = float(self.scales[k])
        if 0 < k < len(curve) - 1:
            left, middle, right = curve[k - 1], curve[k], curve[k + 1]
            bend = left - 2 * middle + right
            step = 0.5 * (self.scales[k + 1] - self.scales[k - 1])
            if bend < 0:
                scale += step * float(np.clip(0.5 * (left - right) / bend, -0.5, 0.5))
        return scale, float(curve[k])

    def summary(self) -> Dict[str, float]:
        """Return score (median at s = 1), mean_score, best_s, best_score, windows, events."""
        best_s, best_score = self.best()
        one = np.flatnonzero(np.isclose(self.scales, 1.0))[0]
        return {'score': self.at(1.0),
                'mean_score': float(np.mean(self.ratios[:, one])) if self.windows
                else float('nan'),
                'best_s': best_s, 'best_score': best_score, 'windows': self.windows,
                'events': int(self.events.sum())}


def warp_score(t_ns, x, y, flow_px_s, width: int, height: int, *,
               weight: Optional[np.ndarray] = None, window_s: float = DEFAULT_WINDOW_S,
               min_events: int = DEFAULT_MIN_EVENTS,
               scales: Sequence[float] = DEFAULT_SCALES,
               blur_sigma_px: float = DEFAULT_BLUR_SIGMA_PX,
               margin_px: int = DEFAULT_MARGIN_PX,
               max_windows: Optional[int] = DEFAULT_MAX_WINDOWS) -> WarpScore:
    """
    Score per-event flow by the contrast of the warped events (see the module docstring).

    t_ns int (N,) sensor time [ns], sorted; x, y (N,) pixel coordinates; flow_px_s (N, 2)
    float (u right, v down) [px/s], NaN where an event has no flow; width, height: sensor
    size [px]; weight (N,) bool or float >= 0, optional: votes are weighted by it and events
    of weight 0 take no part (e.g. a validity mask); window_s [s]; min_events: fewest scored
    events for a window to count; scales: flow scales to sweep (0 and 1 are added);
    blur_sigma_px: Gaussian blur of both images [px]; margin_px: canvas border around the
    sensor that keeps events warped just outside it [px]; max_windows: most windows scored
    (evenly spaced), None for all.
    """
    t_ns = np.asarray(t_ns)
    n = len(t_ns)
    x = np.asarray(x, np.float64).reshape(-1)
    y = np.asarray(y, np.float64).reshape(-1)
    flow = np.asarray(flow_px_s, np.float64)
    if flow.shape != (n, 2) or x.shape != (n,) or y.shape != (n,):
        raise ValueError(f'warp_score needs x, y of shape ({n},) and flow_px_s of shape '
                         f'({n}, 2) to match t_ns, got {x.shape}, {y.shape}, {flow.shape}')
    if not np.issubdtype(t_ns.dtype, np.integer):
        raise ValueError(f't_ns must hold integer nanoseconds, got dtype {t_ns.dtype}')
    if int(width) <= 0 or int(height) <= 0:
        raise ValueError(f'sensor size must be positive, got {width}x{height} px')
    if not (math.isfinite(window_s) and window_s > 0):
        raise ValueError(f'window_s must be > 0 seconds, got {window_s}')
    if int(min_events) < 1:
        raise ValueError(f'min_events must be >= 1, got {min_events}')
    if not (math.isfinite(blur_sigma_px) and blur_sigma_px >= 0):
        raise ValueError(f'blur_sigma_px must be >= 0, got {blur_sigma_px}')
    if int(margin_px) < 0:
        raise ValueError(f'margin_px must be >= 0, got {margin_px}')
    if max_windows is not None and int(max_windows) < 1:
        raise ValueError(f'max_windows must be >= 1 or None, got {max_windows}')
    scales = np.asarray(scales, np.float64).reshape(-1)
    if not np.all(np.isfinite(scales)):
        raise ValueError(f'scales must be finite, got {scales.tolist()}')
    scales = np.unique(np.concatenate([scales, [0.0, 1.0]]))
    if n and np.any(np.diff(t_ns) < 0):
        first = int(np.flatnonzero(np.diff(t_ns) < 0)[0]) + 1
        raise ValueError(f'event times must be sorted; event {first} (t = {t_ns[first]} ns) '
                         f'comes before its predecessor')

    scored = np.isfinite(flow).all(axis=1)
    votes = np.ones(n)
    if weight is not None:
        votes = np.asarray(weight, np.float64).reshape(-1)
        if votes.shape != (n,):
            raise ValueError(f'weight must have shape ({n},), got {votes.shape}')
        if np.any(~np.isfinite(votes)) or np.any(votes < 0):
            raise ValueError('weight must be finite and >= 0 (a mask or validity in [0, 1])')
        scored &= votes > 0
    index = np.flatnonzero(scored)
    empty = WarpScore(scales, np.empty((0, len(scales))), np.empty(0, np.int64),
                      np.empty(0, np.int64), float(window_s))
    if not len(index):
        return empty
    t_ns = t_ns[index].astype(np.int64)
    x, y, flow, votes = x[index], y[index], flow[index], votes[index]

    window_ns = int(round(window_s * 1e9))
    complete = int((t_ns[-1] - t_ns[0]) // window_ns)
    starts = t_ns[0] + window_ns * np.arange(complete, dtype=np.int64)
    bounds = np.searchsorted(t_ns, np.concatenate([starts, [t_ns[0] + window_ns * complete]]))
    counts = np.diff(bounds)
    kept = np.flatnonzero(counts >= int(min_events))
    if max_windows is not None and len(kept) > int(max_windows):
        kept = kept[np.round(np.linspace(0, len(kept) - 1, int(max_windows))).astype(int)]
    if not len(kept):
        return empty

    # Events sit on pixel centres; bilinear votes at fractional positions spread wider than
    # votes on centres, which alone would favour the unwarped image. Spreading every event
    # uniformly over its pixel (fixed seed) gives both images the same spread.
    jitter = np.random.default_rng(JITTER_SEED).uniform(-0.5, 0.5, (len(t_ns), 2))
    x = x + jitter[:, 0]
    y = y + jitter[:, 1]
    canvas = _Canvas(int(width), int(height), int(margin_px), float(blur_sigma_px))
    ratios = np.empty((len(kept), len(scales)))
    for row, k in enumerate(kept):
        lo, hi = bounds[k], bounds[k + 1]
        centre_ns = starts[k] + window_ns // 2
        # float64 after the subtraction: times relative to the window stay exact.
        lead_s = (centre_ns - t_ns[lo:hi]).astype(np.float64) * 1e-9
        contrasts = np.array([
            canvas.contrast(x[lo:hi] + s * lead_s * flow[lo:hi, 0],
                            y[lo:hi] + s * lead_s * flow[lo:hi, 1], votes[lo:hi])
            for s in scales])
        base = contrasts[np.flatnonzero(scales == 0.0)[0]]
        ratios[row] = contrasts / base if base > 0 else np.nan
    good = np.isfinite(ratios).all(axis=1)
    return WarpScore(scales, ratios[good], starts[kept][good], counts[kept][good],
                     float(window_s))


class _Canvas:
    """The sensor plane plus a margin: bilinear votes, Gaussian blur, variance."""

    def __init__(self, width, height, margin_px, blur_sigma_px):
        self.margin = margin_px
        self.width = width + 2 * margin_px
        self.height = height + 2 * margin_px
        self.sigma = blur_sigma_px
        self.radius = int(math.ceil(3 * blur_sigma_px)) if blur_sigma_px > 0 else 0

    def contrast(self, x, y, votes) -> float:
        """
        Variance over the canvas of the blurred image of bilinear votes at (x, y) [px].

        Votes whose four pixels are not all on the canvas are dropped. The image is only
        built over the box that holds the votes (plus the blur's reach): the pixels outside
        it are zero, so the variance over the whole canvas follows from its sums.
        """
        cx = x + self.margin
        cy = y + self.margin
        x0 = np.floor(cx)
        y0 = np.floor(cy)
        fx = cx - x0
        fy = cy - y0
        x0 = x0.astype(np.int64)
        y0 = y0.astype(np.int64)
        inside = (x0 >= 0) & (x0 < self.width - 1) & (y0 >= 0) & (y0 < self.height - 1)
        if not inside.all():
            x0, y0, fx, fy, votes = x0[inside], y0[inside], fx[inside], fy[inside], \
                votes[inside]
        pixels = self.width * self.height
        if not len(x0):
            return 0.0
        left, top = int(x0.min()) - self.radius, int(y0.min()) - self.radius
        box_w = int(x0.max()) + 2 + self.radius - left
        box_h = int(y0.max()) + 2 + self.radius - top
        base = (y0 - top) * box_w + (x0 - left)
        right_votes = fx * votes
        left_votes = votes - right_votes
        index = np.concatenate([base, base + 1, base + box_w, base + box_w + 1])
        weight = np.concatenate([left_votes * (1 - fy), right_votes * (1 - fy),
                                 left_votes * fy, right_votes * fy])
        image = np.bincount(index, weight, minlength=box_w * box_h).reshape(box_h, box_w)
        # float32 halves the memory traffic of the blur; sums of 1e5-1e6 pixels keep about
        # five digits, enough for ratios printed to three.
        image = image.astype(np.float32)
        if self.sigma > 0:
            size = 2 * self.radius + 1
            image = cv2.GaussianBlur(image, (size, size), self.sigma,
                                     borderType=cv2.BORDER_CONSTANT)
        flat = image.reshape(-1)
        mean = float(flat.sum(dtype=np.float64)) / pixels
        return float(np.dot(flat, flat)) / pixels - mean * mean


def format_table(scores: Dict[str, Dict[str, dict]], title: str = '',
                 recordings: Optional[Sequence[str]] = None) -> str:
    """
    Return a fixed-width table of {method: {recording: summary}}, one row per pair.

    Columns: the median score at s = 1, the best s and the median score there, the counted
    windows and their events; '-' where no window counted. Rows are grouped by recording, in
    the order of `recordings` (default: first seen).
    """
    header = (f'{title or "recording":<34} {"method":<34} {"score":>6} {"best s":>6} '
              f'{"@best":>6} {"windows":>7} {"events":>9}')
    lines = [header, '-' * len(header)]
    if recordings is None:
        recordings = list(dict.fromkeys(name for rows in scores.values() for name in rows))
    for recording in recordings:
        for method, rows in scores.items():
            if recording not in rows:
                continue
            row = rows[recording]
            if row['windows']:
                numbers = (f'{row["score"]:>6.3f} {row["best_s"]:>6.2f} '
                           f'{row["best_score"]:>6.3f}')
            else:
                numbers = f'{"-":>6} {"-":>6} {"-":>6}'
            lines.append(f'{recording[:34]:<34} {method[:34]:<34} {numbers} '
                         f'{row["windows"]:>7d} {row["events"]:>9d}')
    return '\n'.join(lines)
