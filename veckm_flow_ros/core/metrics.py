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
Accuracy of per-event normal flow against ground-truth optical flow (docs/algorithm.md, Metrics).

For an event with ground-truth optical flow u and predicted (generalized) normal flow n:

    %Pos          n . u > 0 (the prediction points into the half-plane of the true motion)
    PEE [px/s]    | |n| - (n . u) / |n| |  (zero exactly on the circle |n - u/2| = |u|/2)
    relative PEE  PEE / |u| (scale-free)
    coverage      share of events with ground truth that received a valid prediction

Events without ground truth (NaN, e.g. simulated noise) or with u = 0 are not scored. A
prediction is valid when finite and non-zero; the other scores are averaged over the events
that are scored and have a valid prediction. `MetricsAccumulator` pools events over several
sequences (overall = event-weighted) and keeps each sequence's row.
"""

from dataclasses import dataclass, field
import math
from typing import Dict, Optional

import numpy as np

METRIC_NAMES = ('events', 'coverage', 'pos', 'pee_px_s', 'rel_pee')


def _as_flow(name, flow):
    flow = np.asarray(flow, dtype=np.float64)
    if flow.ndim != 2 or flow.shape[1] != 2:
        raise ValueError(f'{name} must be (N, 2) flow in px/s, got shape {flow.shape}')
    return flow


def per_event_errors(pred_px_s, gt_px_s):
    """
    Per-event terms of the metrics.

    pred_px_s, gt_px_s: (N, 2) flows in px/s. Returns a dict of (N,) arrays: `scored` (bool,
    ground truth present and non-zero), `valid` (bool, scored and prediction finite and
    non-zero), `pos` (bool), `pee_px_s` and `rel_pee` (float64, NaN where not valid).
    """
    pred = _as_flow('pred_px_s', pred_px_s)
    gt = _as_flow('gt_px_s', gt_px_s)
    if len(pred) != len(gt):
        raise ValueError(f'{len(pred)} predictions for {len(gt)} ground-truth flows')
    gt_norm = np.hypot(gt[:, 0], gt[:, 1])
    pred_norm = np.hypot(pred[:, 0], pred[:, 1])
    scored = np.isfinite(gt_norm) & (gt_norm > 0)
    valid = scored & np.isfinite(pred_norm) & (pred_norm > 0)
    dot = np.einsum('ij,ij->i', pred, gt)
    with np.errstate(invalid='ignore', divide='ignore'):
        pee = np.abs(pred_norm - dot / pred_norm)
        rel = pee / gt_norm
    pee = np.where(valid, pee, np.nan)
    rel = np.where(valid, rel, np.nan)
    return {'scored': scored, 'valid': valid, 'pos': valid & (dot > 0),
            'pee_px_s': pee, 'rel_pee': rel}


def flow_metrics(pred_px_s, gt_px_s, mask=None) -> Dict[str, float]:
    """
    Metrics of one set of events.

    pred_px_s, gt_px_s: (N, 2) px/s; mask: optional (N,) bool selecting the events to score.
    Returns {'events': scored count, 'coverage', 'pos', 'pee_px_s', 'rel_pee'}; fractions in
    [0, 1], NaN when nothing could be scored.
    """
    accumulator = MetricsAccumulator()
    accumulator.add('all', pred_px_s, gt_px_s, mask)
    return accumulator.overall()


@dataclass
class _Sums:
    scored: int = 0
    valid: int = 0
    pos: int = 0
    pee: float = 0.0
    rel: float = 0.0

    def add(self, other):
        self.scored += other.scored
        self.valid += other.valid
        self.pos += other.pos
        self.pee += other.pee
        self.rel += other.rel

    def result(self):
        def ratio(a, b):
            return a / b if b else math.nan
        return {'events': self.scored, 'coverage': ratio(self.valid, self.scored),
                'pos': ratio(self.pos, self.valid), 'pee_px_s': ratio(self.pee, self.valid),
                'rel_pee': ratio(self.rel, self.valid)}


@dataclass
class MetricsAccumulator:
    """Per-sequence and pooled (event-weighted) metrics over several sequences."""

    sequences: Dict[str, _Sums] = field(default_factory=dict)

    def add(self, name, pred_px_s, gt_px_s, mask: Optional[np.ndarray] = None):
        """Score (N, 2) predictions of sequence `name` (adds to it if already present)."""
        errors = per_event_errors(pred_px_s, gt_px_s)
        scored, valid = errors['scored'], errors['valid']
        if mask is not None:
            mask = np.asarray(mask, dtype=bool)
            scored, valid = scored & mask, valid & mask
        sums = _Sums(int(scored.sum()), int(valid.sum()), int((errors['pos'] & valid).sum()),
                     float(np.sum(errors['pee_px_s'][valid])),
                     float(np.sum(errors['rel_pee'][valid])))
        self.sequences.setdefault(name, _Sums()).add(sums)

    def per_sequence(self) -> Dict[str, Dict[str, float]]:
        return {name: sums.result() for name, sums in self.sequences.items()}

    def overall(self) -> Dict[str, float]:
        total = _Sums()
        for sums in self.sequences.values():
            total.add(sums)
        return total.result()


def format_table(rows: Dict[str, Dict[str, float]], title='') -> str:
    """
    Return a fixed-width text table: one row per name, columns of METRIC_NAMES.

    Fractions print as percentages (coverage, %Pos, relative PEE).
    """
    header = f'{title or "sequence":<34} {"events":>9} {"cover%":>7} {"%Pos":>7} ' \
             f'{"PEE px/s":>9} {"relPEE%":>8}'
    lines = [header, '-' * len(header)]
    for name, row in rows.items():
        lines.append(f'{name[:34]:<34} {row["events"]:>9d} {100 * row["coverage"]:>7.2f} '
                     f'{100 * row["pos"]:>7.2f} {row["pee_px_s"]:>9.2f} '
                     f'{100 * row["rel_pee"]:>8.2f}')
    return '\n'.join(lines)
