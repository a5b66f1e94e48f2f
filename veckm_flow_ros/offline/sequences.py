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
Load event sequences that carry per-event ground-truth optical flow, for evaluation.

Two layouts are accepted; both load into a `simulate.SimulatedSequence` (events, flow_px_s
(N, 2) float32 with NaN where there is no ground truth, is_noise, width, height):

1. The project's simulator file (`veckm-flow simulate`, simulate.save_npz): one `.npz` with
   t (int64 ns), x, y (uint16), p (uint8), gt_u, gt_v (float32 px/s), is_noise, width, height.

2. An EVIMO2-style directory of `.npy` arrays (one row per event, sorted by time):

       dataset_events_t.npy     (N,)   float seconds, or integer nanoseconds
       dataset_events_xy.npy    (N, 2) integer pixel x (right), y (down)
       dataset_events_p.npy     (N,)   polarity 0/1              [optional; 1 when absent]
       dataset_events_flow.npy  (N, 2) float optical flow u, v in px/s (x right, y down);
                                       NaN (or +-inf) where there is no ground truth
       meta.json                {"width": W, "height": H}        [optional; otherwise the
                                                                  size is max(x)+1, max(y)+1]

   (EVIMO2 itself ships per-frame flow; resample it per event into dataset_events_flow.npy.)

Both layouts follow one rule for event times (eventio.npz.event_times_ns): finite, and in
time order -- a file with unsorted times is refused, naming the first out-of-order event,
never sorted silently (the ground truth and the events must stay paired as written).
"""

import json
import os
import pathlib
from typing import Union

import numpy as np

from veckm_flow_ros.eventio.events import EventArray
from veckm_flow_ros.eventio.npz import event_times_ns, read_npy

PathLike = Union[str, os.PathLike]

EVIMO2_FILES = {
    't': 'dataset_events_t.npy',
    'xy': 'dataset_events_xy.npy',
    'p': 'dataset_events_p.npy',
    'flow': 'dataset_events_flow.npy',
}


def load_sequence(path: PathLike):
    """
    Load a ground-truth sequence (simulator .npz or EVIMO2-style directory, see module doc).

    Returns a simulate.SimulatedSequence. Raises FileNotFoundError for a missing path and
    ValueError, naming the file, for anything else that does not fit the layouts.
    """
    path = pathlib.Path(path)
    if not path.exists():
        raise FileNotFoundError(f'sequence not found: {path}')
    if path.is_dir():
        return load_evimo2_directory(path)
    if path.suffix == '.npz':
        from veckm_flow_ros.learning.simulate import load_npz
        try:
            return load_npz(path)
        except (KeyError, TypeError, ValueError) as error:
            message = str(error) if str(path) in str(error) else f'{path}: {error}'
            raise ValueError(f'cannot read simulator sequence {message}') from None
    raise ValueError(f'{path}: not a sequence; expected a simulator .npz or a directory with '
                     f'{EVIMO2_FILES["t"]}, {EVIMO2_FILES["xy"]} and {EVIMO2_FILES["flow"]}')


def _load_array(path: pathlib.Path) -> np.ndarray:
    return read_npy(path, 'EVIMO2-style array')


def load_evimo2_directory(directory: PathLike):
    """Load the EVIMO2-style directory layout of the module doc; returns SimulatedSequence."""
    from veckm_flow_ros.learning.simulate import SimulatedSequence
    directory = pathlib.Path(directory)
    missing = [name for key, name in EVIMO2_FILES.items()
               if key != 'p' and not (directory / name).is_file()]
    if missing:
        raise ValueError(f'{directory} is not an EVIMO2-style sequence: missing '
                         f'{", ".join(missing)} (layout in veckm_flow_ros/sequences.py)')
    t = _load_array(directory / EVIMO2_FILES['t']).reshape(-1)
    xy = _load_array(directory / EVIMO2_FILES['xy'])
    flow = _load_array(directory / EVIMO2_FILES['flow'])
    n = len(t)
    if xy.shape != (n, 2):
        raise ValueError(f'{directory / EVIMO2_FILES["xy"]} has shape {xy.shape}; expected '
                         f'({n}, 2) to match {EVIMO2_FILES["t"]}')
    if flow.shape != (n, 2):
        raise ValueError(f'{directory / EVIMO2_FILES["flow"]} has shape {flow.shape}; '
                         f'expected ({n}, 2) to match {EVIMO2_FILES["t"]}')
    p_path = directory / EVIMO2_FILES['p']
    p = _load_array(p_path).reshape(-1) if p_path.is_file() else np.ones(n, np.uint8)
    if len(p) != n:
        raise ValueError(f'{p_path} holds {len(p)} values; expected {n}')
    t_ns, _ = event_times_ns(t, str(directory / EVIMO2_FILES['t']))
    if not np.issubdtype(xy.dtype, np.integer):
        if not np.all(np.isfinite(xy)) or np.any(xy != np.round(xy)):
            raise ValueError(f'{directory / EVIMO2_FILES["xy"]} must hold integer pixels')
    xy = xy.astype(np.int64)
    if n and xy.min() < 0:
        raise ValueError(f'{directory / EVIMO2_FILES["xy"]} holds negative coordinates')
    width, height = _size(directory, xy)
    if n and (xy[:, 0].max() >= width or xy[:, 1].max() >= height):
        raise ValueError(f'{directory}: events reach x={xy[:, 0].max()}, y={xy[:, 1].max()}, '
                         f'outside the {width}x{height} sensor of meta.json')
    flow = flow.astype(np.float32)
    flow[~np.isfinite(flow).all(axis=1)] = np.nan
    events = EventArray(t_ns, xy[:, 0], xy[:, 1], (p > 0).astype(np.uint8))
    return SimulatedSequence(events, flow, np.zeros(n, bool), width, height,
                             {'source': str(directory), 'layout': 'evimo2-npy'})


def _size(directory: pathlib.Path, xy: np.ndarray):
    meta_path = directory / 'meta.json'
    if meta_path.is_file():
        try:
            meta = json.loads(meta_path.read_text())
            return int(meta['width']), int(meta['height'])
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f'{meta_path} must be {{"width": W, "height": H}}: {error}') \
                from None
    if len(xy) == 0:
        raise ValueError(f'{directory} holds no events and no meta.json with the sensor size')
    return int(xy[:, 0].max()) + 1, int(xy[:, 1].max()) + 1


def match_events(sequence, t_ns, x, y) -> np.ndarray:
    """
    Find events of `sequence` by time and pixel, e.g. the events of flows from a replay.

    t_ns int (M,) sensor ns; x, y pixel coordinates (M,) (any numeric dtype, integer-valued,
    rounded). Returns int64 (M,) indices into sequence.events, -1 where no event has that time
    and pixel. Of several events with the same time and pixel, the first is returned.
    """
    events = sequence.events
    width = np.int64(sequence.width)
    size = width * np.int64(sequence.height)

    def keys(t, xs, ys):
        xs = np.rint(np.asarray(xs, np.float64)).astype(np.int64)
        ys = np.rint(np.asarray(ys, np.float64)).astype(np.int64)
        return np.asarray(t, np.int64) * size + ys * width + xs

    reference = keys(events.t_ns, events.x, events.y)
    order = np.argsort(reference, kind='stable')
    reference = reference[order]
    query = keys(t_ns, x, y)
    index = np.full(len(query), -1, np.int64)
    if len(reference) == 0:
        return index
    position = np.minimum(np.searchsorted(reference, query), len(reference) - 1)
    hit = reference[position] == query
    index[hit] = order[position[hit]]
    return index


def ground_truth_at(sequence, t_ns, x, y) -> np.ndarray:
    """
    Ground-truth flow of the events at (t_ns, x, y) (see match_events): float32 (M, 2) px/s.

    NaN where no event of the sequence matches (or its ground truth is NaN).
    """
    index = match_events(sequence, t_ns, x, y)
    result = np.full((len(index), 2), np.nan, np.float32)
    found = index >= 0
    result[found] = sequence.flow_px_s[index[found]]
    return result
