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
The one event container used by the whole package (decoders, windowing, model, replay).

Times are int64 nanoseconds of *sensor* time; pixel coordinates are uint16 (x right, y down);
polarity is uint8 (1 = ON / brighter, 0 = OFF). Columns are separate contiguous arrays so that
they can be handed to torch without copies.
"""

from dataclasses import dataclass
from typing import Sequence

import numpy as np


def as_columns(columns, dtypes: dict):
    """Turn each attribute of `columns` named in `dtypes` into a contiguous array of its dtype."""
    for name, dtype in dtypes.items():
        setattr(columns, name, np.ascontiguousarray(getattr(columns, name), dtype=dtype))


@dataclass
class EventArray:
    """N events as column arrays: t_ns int64[N], x uint16[N], y uint16[N], p uint8[N]."""

    t_ns: np.ndarray
    x: np.ndarray
    y: np.ndarray
    p: np.ndarray

    DTYPES = {'t_ns': np.int64, 'x': np.uint16, 'y': np.uint16, 'p': np.uint8}

    def __post_init__(self):
        as_columns(self, self.DTYPES)
        n = len(self.t_ns)
        if not (len(self.x) == len(self.y) == len(self.p) == n):
            raise ValueError(
                f'EventArray columns differ in length: t_ns={n}, x={len(self.x)}, '
                f'y={len(self.y)}, p={len(self.p)}')

    def __len__(self):
        return len(self.t_ns)

    def __getitem__(self, index):
        """Select events with a slice, boolean mask or index array; returns an EventArray."""
        return EventArray(self.t_ns[index], self.x[index], self.y[index], self.p[index])

    @staticmethod
    def empty():
        return EventArray(np.empty(0, np.int64), np.empty(0, np.uint16),
                          np.empty(0, np.uint16), np.empty(0, np.uint8))

    @staticmethod
    def concatenate(arrays: Sequence['EventArray']) -> 'EventArray':
        arrays = [a for a in arrays if len(a)]
        if not arrays:
            return EventArray.empty()
        if len(arrays) == 1:
            return arrays[0]
        return EventArray(np.concatenate([a.t_ns for a in arrays]),
                          np.concatenate([a.x for a in arrays]),
                          np.concatenate([a.y for a in arrays]),
                          np.concatenate([a.p for a in arrays]))


@dataclass
class TriggerArray:
    """External trigger edges: t_ns int64[N], channel uint8[N], edge uint8[N] (1 = rising)."""

    t_ns: np.ndarray
    channel: np.ndarray
    edge: np.ndarray

    DTYPES = {'t_ns': np.int64, 'channel': np.uint8, 'edge': np.uint8}

    def __post_init__(self):
        as_columns(self, self.DTYPES)

    def __len__(self):
        return len(self.t_ns)

    @staticmethod
    def empty():
        return TriggerArray(np.empty(0, np.int64), np.empty(0, np.uint8), np.empty(0, np.uint8))
