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

"""The streaming estimator's event buffer: host columns, mirrored on a CUDA device."""

from typing import Optional

import numpy as np
import torch

from veckm_flow_ros.core.device_staging import EventUploader


class EventBuffer:
    """
    The buffered events in time order: one growable array per column, live in [start, end).

    Appending is O(new events) (amortised), dropping the oldest is O(1), and a time range is
    a contiguous slice (no copy): blocks and contexts are found by binary search. Out-of-order
    input (tolerated up to TIME_RESET_TOLERANCE_NS) is merged in by a stable sort, so events
    of equal time keep their arrival order. On a CUDA device t, x and y are mirrored there as
    they arrive, so each event crosses the bus once rather than once per block using it: one
    packed, asynchronous copy per push (core/device_staging.py), no host synchronisation.
    """

    def __init__(self, device: torch.device, mirror: Optional[bool] = None):
        # mirror: keep device copies (default: on a device other than the CPU); True on the
        # CPU runs the same upload path there (tests).
        self.device = device
        self._mirrored = device.type != 'cpu' if mirror is None else bool(mirror)
        self._uploader = EventUploader(device) if self._mirrored else None
        self._allocate(0)

    def _allocate(self, capacity):
        self.t_ns = np.empty(capacity, np.int64)
        self.x = np.empty(capacity, np.int32)
        self.y = np.empty(capacity, np.int32)
        self.index = np.empty(capacity, np.int64)
        self.start = self.end = 0
        self._mirror = None
        if self._mirrored:
            self._mirror = [torch.empty(capacity, dtype=dtype, device=self.device)
                            for dtype in (torch.int64, torch.int32, torch.int32)]

    def __len__(self):
        return self.end - self.start

    def clear(self):
        self.start = self.end = 0

    def append(self, t_ns, x, y, index):
        count = len(t_ns)
        sorted_in = count < 2 or bool(np.all(t_ns[1:] >= t_ns[:-1]))
        if sorted_in and (self.end == self.start or t_ns[0] >= self.t_ns[self.end - 1]):
            self._reserve(count)
            span = slice(self.end, self.end + count)
            self.t_ns[span], self.x[span], self.y[span], self.index[span] = t_ns, x, y, index
            self.end += count
            self._upload(span.start, span.stop)
            return
        # Disorder: merge with the live events by a stable sort (rare; O(buffer)).
        live = slice(self.start, self.end)
        columns = [np.concatenate([old[live], new]) for old, new in
                   ((self.t_ns, t_ns), (self.x, x), (self.y, y), (self.index, index))]
        order = np.argsort(columns[0], kind='stable')
        self.start = self.end = 0
        self._reserve(len(order))
        for old, new in zip((self.t_ns, self.x, self.y, self.index), columns):
            old[:len(order)] = new[order]
        self.end = len(order)
        self._upload(0, self.end)

    def drop_before(self, position):
        """Forget the events before buffer position `position` (absolute)."""
        self.start = min(max(self.start, position), self.end)

    def _reserve(self, count):
        live = self.end - self.start
        capacity = len(self.t_ns)
        if self.end + count <= capacity:
            return
        # Compact in place while the live events fill at most 3/4 of it (then at least a
        # quarter of the capacity is appended between two compactions: amortised O(1)).
        target = capacity
        if 4 * (live + count) > 3 * capacity:
            target = max(3 * (live + count) // 2, 4096)
        if target != capacity:
            old = (self.t_ns, self.x, self.y, self.index, self._mirror)
            live_slice = slice(self.start, self.end)
            self._allocate(target)
            for new, column in zip((self.t_ns, self.x, self.y, self.index), old[:4]):
                new[:live] = column[live_slice]
            if self._mirror is not None:
                for new, column in zip(self._mirror, old[4]):
                    new[:live] = column[live_slice]
        else:
            for column in (self.t_ns, self.x, self.y, self.index):
                column[:live] = column[self.start:self.end]
            if self._mirror is not None:
                for column in self._mirror:
                    column[:live] = column[self.start:self.end].clone()
        self.start, self.end = 0, live

    def _upload(self, begin, end):
        if self._mirror is None or end <= begin:
            return
        uploaded = self._uploader.upload(self.t_ns[begin:end], self.x[begin:end],
                                         self.y[begin:end])
        for mirror, column in zip(self._mirror, uploaded):
            mirror[begin:end].copy_(column)

    def search(self, t_ns, side='left'):
        """Absolute buffer position of the first live event with time >= t_ns (> for right)."""
        return self.start + int(np.searchsorted(self.t_ns[self.start:self.end], t_ns, side))

    def device_columns(self, begin, end):
        """t_ns, x, y of positions [begin, end) as tensors on the device (views, no copy)."""
        if self._mirror is None:
            return (torch.from_numpy(self.t_ns[begin:end]), torch.from_numpy(self.x[begin:end]),
                    torch.from_numpy(self.y[begin:end]))
        return tuple(column[begin:end] for column in self._mirror)
