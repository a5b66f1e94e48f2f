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
The egomotion stream's flow input: the ~/flow cloud's columns and the windows cut from them.

- read_flow_message() reads and screens a serialized ~/flow PointCloud2 in one compiled call
  (csrc/egomotion/flow_message.cpp) where it is the common case: a message whose flows are
  all kept. For anything else it returns None, and the caller parses the message
  (ros/cdr.py) and reads it with read_flow_cloud(), which names what is wrong.
- read_flow_cloud() takes the columns of a PointCloud2 by its field table: float32 x, y, t,
  u, v are required, validity or confidence (float32) is used as weight when present; other
  fields are ignored. A wrong layout is a ValueError naming the fields; a cloud of more
  than max_points is thinned evenly (counted by the caller).
- FlowWindows screens each message's flows (egomotion_input.screen_flows) and cuts them
  into windows of window_s by their sensor time (header stamp + t); see
  egomotion_stream.py's docstring.
"""

import collections
from dataclasses import dataclass
import functools
import time
from typing import List, Optional

import numpy as np

from veckm_flow_ros.core.egomotion_window import load_extension
from veckm_flow_ros.stream.egomotion_input import screen_flows

# sensor_msgs/msg/PointField datatype code for float32.
POINTFIELD_FLOAT32 = 7
REQUIRED_FIELDS = ('x', 'y', 't', 'u', 'v')
WEIGHT_FIELDS = ('validity', 'confidence')  # the first present weights the flows


@dataclass
class FlowColumns:
    """Columns of one ~/flow message: float32 arrays (views into the message data)."""

    x: np.ndarray
    y: np.ndarray
    t: np.ndarray        # [s] relative to header.stamp
    u: np.ndarray        # [px/s]
    v: np.ndarray        # [px/s]
    weight: Optional[np.ndarray] = None   # validity or confidence [0..1], None without
    capped: int = 0      # points left out by read_flow_cloud's max_points
    # (max_before_s, max_after_s, size) that read_flow_message screened every flow against
    # (FlowWindows does not screen them again for the same), None: not screened
    screened_for: Optional[tuple] = None
    in_order: Optional[bool] = None  # t non-decreasing (None: not known)

    def __len__(self):
        return len(self.x)


def read_flow_cloud(fields, point_step: int, data, is_bigendian: bool = False,
                    width: Optional[int] = None, height: int = 1,
                    max_points: Optional[int] = None) -> FlowColumns:
    """
    Return the flow columns of a PointCloud2 (the ~/flow layout, see eventio/flow_cloud.py).

    fields: (name, offset_bytes, datatype, count) per PointField. Raises ValueError naming
    what is wrong: a missing or non-float32 required field, a field outside point_step,
    big-endian data, a data length that is not width x height points. max_points: a larger
    cloud is thinned evenly to at most this many (copied, so that the message's buffer is
    not held; FlowColumns.capped says how many were left out), before any per-point work.
    """
    dtype = _flow_dtype(tuple(tuple(field) for field in fields), point_step, bool(is_bigendian))
    buffer = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
    if len(buffer) % point_step:
        raise ValueError(f'flow cloud data has {len(buffer)} bytes, not a multiple of '
                         f'point_step {point_step}')
    count = len(buffer) // point_step
    if width is not None and int(width) * int(height) != count:
        raise ValueError(f'flow cloud says {width}x{height} points but its data holds {count}')
    points = np.frombuffer(buffer, dtype=dtype, count=count)
    capped = 0
    if max_points is not None and count > max_points:
        points = points[::-(-count // int(max_points))].copy()
        capped = count - len(points)
    weight = points[dtype.names[5]] if len(dtype.names) > 5 else None
    if weight is not None:
        unknown = np.isnan(weight)
        if unknown.any():
            # NaN = not computed (a flow node or bag that writes the field without a score):
            # such flows count as fully valid, and a column with no score at all as no weight.
            weight = None if unknown.all() else np.where(unknown, 1.0, weight).astype(
                np.float32)
    return FlowColumns(points['x'], points['y'], points['t'], points['u'], points['v'], weight,
                       capped)


def read_flow_message(raw, max_points: Optional[int], max_before_s: float,
                      max_after_s: float, size=None):
    """
    Return (stamp_ns, frame_id, FlowColumns) of a serialized ~/flow PointCloud2, or None.

    The common case in one compiled call: the message is well formed, its layout is one
    read_flow_cloud takes (float32 fields; NaN weights become 1, as there) and every flow passes
    egomotion_input.screen_flows with these bounds (t [s] from the header stamp in
    -max_before_s..max_after_s, size = (width, height) [px] or None); a cloud of more than
    max_points is thinned as read_flow_cloud thins it. The columns are float32 copies,
    marked as screened for these bounds. None for anything else: read the message with
    ros/cdr.py's parse_pointcloud2_cdr and read_flow_cloud, which name what is wrong.
    """
    capacity = len(raw) // 20  # x, y, t, u, v take at least 20 bytes per point
    if max_points is not None and max_points >= 1:
        capacity = min(capacity, int(max_points))
    out = np.empty((6, capacity), np.float32)
    width, height = (0, 0) if size is None else size
    result = load_extension().read_flow_message(
        raw, out, 0 if max_points is None else int(max_points), -max_before_s, max_after_s,
        width, height)
    if result is None:
        return None
    stamp_ns, frame_id, count, capped, has_weight, in_order = result
    x, y, t, u, v, weight = out[:, :count]
    return stamp_ns, frame_id, FlowColumns(
        x, y, t, u, v, weight if has_weight else None, capped,
        screened_for=(max_before_s, max_after_s, size), in_order=in_order)


@functools.lru_cache(maxsize=16)
def _flow_dtype(fields: tuple, point_step: int, is_bigendian: bool) -> np.dtype:
    """
    Check a flow cloud's layout; return the structured dtype of its used fields.

    The fields x, y, t, u, v, then the weight field when there is one. Cached: a stream's
    messages share one layout.
    """
    table = {name: (offset, datatype, count) for name, offset, datatype, count in fields}
    names = tuple(name for name, *_ in fields)
    missing = [name for name in REQUIRED_FIELDS if name not in table]
    if missing:
        raise ValueError(f'flow cloud without field(s) {", ".join(missing)}: fields {names}, '
                         f'expected float32 {", ".join(REQUIRED_FIELDS)} (+ validity or '
                         'confidence), as veckm_flow_node publishes')
    if is_bigendian:
        raise ValueError('flow cloud is big-endian; only little-endian clouds are read')
    if not 0 < point_step < 2**31:  # (numpy's itemsize is a C int)
        raise ValueError(f'flow cloud point_step is {point_step} bytes')
    used = list(REQUIRED_FIELDS) + [name for name in WEIGHT_FIELDS if name in table][:1]
    formats = {}
    for name in used:
        offset, datatype, count = table[name]
        if datatype != POINTFIELD_FLOAT32 or count != 1:
            raise ValueError(f'flow cloud field {name!r} has datatype {datatype} x {count}, '
                             f'expected float32 ({POINTFIELD_FLOAT32}) x 1')
        if offset < 0 or offset + 4 > point_step:
            raise ValueError(f'flow cloud field {name!r} at byte {offset} lies outside '
                             f'point_step {point_step}')
        formats[name] = offset
    return np.dtype({'names': list(formats), 'formats': ['<f4'] * len(formats),
                     'offsets': list(formats.values()), 'itemsize': point_step})


@dataclass
class FlowWindow:
    """
    The (subsampled) flows of one window and its times.

    t0_s, t1_s: start and end [s] (flow sensor time, as ROS time: header.stamp + t);
    stamp_ns: the window centre [ns] (stamp of the outputs); x, y [px], u, v [px/s]:
    float32 arrays; weight: float32 [0..1] or None; received_flows: flows that fell into the
    window before subsampling; closed_s: time.monotonic() when the message that closed it
    arrived (the start of the latency measurement); generation: the number of time resets
    before it (the estimator forgets its previous window when this changes).
    """

    t0_s: float
    t1_s: float
    stamp_ns: int
    x: np.ndarray
    y: np.ndarray
    u: np.ndarray
    v: np.ndarray
    weight: Optional[np.ndarray]
    received_flows: int
    frame_id: str
    closed_s: float
    generation: int = 0

    def __len__(self):
        return len(self.x)


class FlowWindows:
    """
    Cut flow messages into windows of window_s of sensor time (see the module docstring).

    add() returns the windows the message closed (zero, one or several); counters: gaps,
    time_resets, dropped_flows (of a window dropped by a reset), refused (flows refused by
    egomotion_input.screen_flows, per counter name; last_refused: those of the last message
    with an example each). A flow's t must lie within [-max_flow_age_s, +window_s] of its
    header stamp: one flow seconds ahead would move the window there and hold every later
    flow in it, one far behind would mix old motion into the window.
    """

    def __init__(self, window_s: float, max_flows: int, max_flow_age_s: float = 0.2):
        if not window_s > 0 or max_flows < 1 or not max_flow_age_s > 0:
            raise ValueError(f'window_s and max_flow_age_s must be > 0 s and max_flows >= 1, '
                             f'got {window_s} s, {max_flow_age_s} s, {max_flows}')
        self.window_s = float(window_s)
        self.max_flow_age_s = float(max_flow_age_s)
        self.keep_flows = 2 * int(max_flows)  # kept per window before the stride doubles
        self.gaps = 0
        self.time_resets = 0
        self.dropped_flows = 0
        self.refused = collections.Counter()
        self.last_refused = {}
        self._origin_ns = None      # times are float64 seconds relative to this stamp
        self._newest_stamp_ns = None
        self._start_s = 0.0
        self._stride = 1
        self._clear()

    def _clear(self):
        self._chunks = []           # lists of (x, y, u, v, weight) arrays, already strided
        self._kept = 0
        self._received = 0

    @property
    def bad_times(self) -> int:
        return self.refused['flows_with_bad_times']

    def add(self, stamp_ns: int, columns: FlowColumns, frame_id: str = '',
            now_s: Optional[float] = None, size=None) -> List[FlowWindow]:
        """
        Add one message's flows (header stamp [ns], columns); return the closed windows.

        size: (width, height) [px] of the calibration: flows outside it are refused.
        """
        now_s = time.monotonic() if now_s is None else now_s
        stamp_ns = int(stamp_ns)
        window_ns = int(self.window_s * 1e9)
        if self._newest_stamp_ns is not None and stamp_ns < self._newest_stamp_ns - window_ns:
            self.time_resets += 1
            self.dropped_flows += self._received
            self._origin_ns = None
            self._newest_stamp_ns = stamp_ns
        size = None if size is None else tuple(size)
        if columns.screened_for == (self.max_flow_age_s, self.window_s, size):
            self.last_refused = {}  # read_flow_message kept every flow for these bounds
        else:
            columns, self.last_refused = screen_flows(columns, self.max_flow_age_s,
                                                      self.window_s, size)
        for name, (count, _) in self.last_refused.items():
            self.refused[name] += count
        if len(columns) == 0:
            if self._origin_ns is not None:
                self._newest_stamp_ns = max(self._newest_stamp_ns, stamp_ns)
            return []
        t_s = (columns.t.astype(np.float64)
               + (stamp_ns - (stamp_ns if self._origin_ns is None else self._origin_ns)) * 1e-9)
        if self._origin_ns is None:
            self._origin_ns = stamp_ns
            self._newest_stamp_ns = stamp_ns
            self._start_s = float(t_s.min())
            self._stride = 1
            self._clear()
        self._newest_stamp_ns = max(self._newest_stamp_ns, stamp_ns)
        closed = []
        values = (columns.x, columns.y, columns.u, columns.v, columns.weight)
        # The flow node's messages are in time order: then a window ends at one index
        # (slices, no copies). (read_flow_message's in_order compares the float32 t: where
        # those do not decrease, neither do t + offset rounded to float64.)
        in_order = (columns.in_order if columns.in_order is not None
                    else len(t_s) < 2 or bool((t_s[1:] >= t_s[:-1]).all()))
        while True:
            end_s = self._start_s + self.window_s
            if in_order:
                split = int(t_s.searchsorted(end_s))
                if split == len(t_s):
                    self._append(values)
                    return closed
                self._append(tuple(None if a is None else a[:split] for a in values))
                t_s = t_s[split:]
                values = tuple(None if a is None else a[split:] for a in values)
                first_s = float(t_s[0])
            else:
                inside = t_s < end_s
                if inside.all():
                    self._append(values)
                    return closed
                self._append(tuple(None if a is None else a[inside] for a in values))
                later = ~inside
                t_s = t_s[later]
                values = tuple(None if a is None else a[later] for a in values)
                first_s = float(t_s.min())
            closed.append(self._close(end_s, frame_id, now_s))
            if first_s >= end_s + self.window_s:
                self.gaps += 1
                self._start_s = first_s  # no empty windows across a gap
            else:
                self._start_s = end_s

    def _append(self, values):
        count = len(values[0])
        if count == 0:
            return
        phase = -self._received % self._stride
        self._received += count
        chunk = tuple(None if a is None else a[phase::self._stride] for a in values)
        self._chunks.append(chunk)
        self._kept += len(chunk[0])
        if self._kept > self.keep_flows:
            # Every other kept flow: the same even subsample as a doubled stride from the start.
            merged = self._merged()
            self._chunks = [tuple(None if a is None else a[::2] for a in merged)]
            self._kept = len(self._chunks[0][0])
            self._stride *= 2

    def _merged(self):
        columns = []
        for index in range(5):
            parts = [chunk[index] for chunk in self._chunks]
            if any(part is None for part in parts):
                columns.append(None)
            else:
                columns.append(np.concatenate(parts) if parts else np.empty(0, np.float32))
        return columns

    def _close(self, end_s: float, frame_id: str, now_s: float) -> FlowWindow:
        x, y, u, v, weight = self._merged()
        centre_s = self._start_s + self.window_s / 2
        window = FlowWindow(
            t0_s=self._origin_ns * 1e-9 + self._start_s, t1_s=self._origin_ns * 1e-9 + end_s,
            stamp_ns=self._origin_ns + int(round(centre_s * 1e9)), x=x, y=y, u=u, v=v,
            weight=weight, received_flows=self._received, frame_id=frame_id,
            closed_s=now_s, generation=self.time_resets)
        # The next window starts with half the stride: it adapts down when the rate drops.
        self._stride = max(1, self._stride // 2)
        self._clear()
        return window
