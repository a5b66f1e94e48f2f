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
Window preparation of the egomotion estimator: pixel normal flows to one equation per flow.

A flow of unit pixel direction n_px and magnitude m_px [px/s] at a distorted pixel becomes
n = M^T n_px / |M^T n_px|, m = m_px / |M^T n_px| (M = K2 J, docs/egomotion.md), and the rows
a = A^T n, g = B^T n of the constraint m = rho (a . v) + g . omega. InputStage builds the
per-pixel map (normalized coordinates, M^T, depth cell, time-to-contact region) once per
camera; its prepare() runs the compiled input stage (csrc/egomotion/prepare.cpp: subsampling
to max_flows, the validity and sensor checks, the map look-up, the weights, the sort by
depth cell) and returns a Window.
"""

from typing import Optional

import numpy as np

from veckm_flow_ros.core.pixel_map import build_pixel_map

# The input dtypes the compiled input stage reads as they are (numpy's dtype.char, native
# byte order): the others are converted to float64 first.
_COLUMN_CODES = frozenset('bBhHiIlLqQfd')


def load_extension():
    """Return the compiled module veckm_flow_ros._egomotion, or raise ImportError saying how."""
    try:
        from veckm_flow_ros import _egomotion
    except ImportError as error:
        raise ImportError(
            f'the egomotion extension veckm_flow_ros._egomotion does not import ({error}); '
            'build it with `python3 setup.py build_ext --inplace` (or scripts/setup.sh)'
        ) from error
    return _egomotion


class Window:
    """
    The usable flows of one window in normalized form (see the module doc).

    The flows are sorted by depth cell (cell k holds flows starts[k]:starts[k + 1]);
    input_order: their increasing positions in the input. Per-flow tables are stored one row
    per quantity (k, N), as the compiled stages read them.
    """

    def __init__(self, a_rows, g_rows, m, weight, validity, slow, cell, starts, region,
                 input_order):
        self.a_rows, self.g_rows = a_rows, g_rows  # (3, N) float64 each
        self.a, self.g, self.m = a_rows.T, g_rows.T, m  # (N, 3) views, (N,) [1/s]
        self.weight = weight                      # (N,) fit weight: validity / (|flow| + floor)
        self.validity = validity                  # (N,) input weight alone
        self.slow = slow                          # (N,) s^2 / (s^2 + slow_flow_px_s^2)
        self.robust = np.ones_like(m)             # (N,) Huber weights (set by the solves)
        self.cell = cell                          # (N,) int64 depth cell index, sorted
        self.starts = starts                      # (C,) int64 first flow of each cell
        self.num_cells = len(starts)
        self.region = region                      # (N,) int64 time-to-contact region index
        self.input_order = input_order            # (N,) int64

    def __len__(self):
        return len(self.m)


class InputStage:
    """
    The per-pixel map of a camera and the compiled input stage.

    camera: CameraModel (the flows' pixels are its distorted pixels); config:
    EgomotionConfig (max_flows, min_validity, flow_floor_px_s, slow_flow_px_s, cell_px,
    min_cell_flows, ttc_grid); extension: the module of load_extension().
    """

    def __init__(self, camera, config, extension):
        self.camera, self.config, self._extension = camera, config, extension
        # The precomputed per-pixel maps: undistorted normalized coordinates and M^T of
        # the module doc, so a window costs a table look-up per flow.
        # One row of 8 float32 per pixel (32 bytes, two per cache line): x, y, M^T, cell,
        # region (core/pixel_map.py, built in blocks of rows: bounded memory). A paced window
        # starts with cold caches, and one gather of a row costs about one cache miss where
        # three tables cost three. float32: 1e-7 relative, far below any flow error; the
        # indices are exact (below 2^24: cell_px >= 2 and at most 64 x 64 regions).
        self.pixel_map, self.num_cells = build_pixel_map(camera, config.cell_px,
                                                         config.ttc_grid)

    def prepare(self, x_px, y_px, u_px_s, v_px_s, weight) -> Optional[Window]:
        """
        Return the usable flows (N,) of one window as a Window, or None when there are none.

        x_px, y_px, u_px_s, v_px_s, weight: as EgomotionEstimator.estimate (any numeric
        dtype); arrays of different lengths raise ValueError naming them.
        """
        columns = [np.asarray(c).reshape(-1) for c in (x_px, y_px, u_px_s, v_px_s)]
        names = ('x_px', 'y_px', 'u_px_s', 'v_px_s')
        if weight is not None:
            columns.append(np.asarray(weight).reshape(-1))
            names += ('weight',)
        lengths = {name: len(c) for name, c in zip(names, columns)}
        if len(set(lengths.values())) != 1:
            raise ValueError(f'egomotion inputs differ in length: {lengths}')
        config = self.config
        # (other dtypes, e.g. bool, float16 or byte-swapped, as float64 first)
        columns = [c if c.dtype.char in _COLUMN_CODES and c.dtype.isnative else
                   c.astype(np.float64) for c in columns]
        count = min(len(columns[0]), config.max_flows)
        floats, ints = np.empty(10 * count), np.empty(3 * count, np.int64)
        starts = np.empty(self.num_cells, np.int64)
        num_flows, num_cells = self._extension.prepare(
            *columns[:4], columns[4] if weight is not None else None, self.pixel_map, floats,
            ints, starts, (self.camera.width, self.camera.height, config.max_flows,
                           config.min_validity, config.flow_floor_px_s, config.slow_flow_px_s,
                           self.num_cells, config.min_cell_flows))
        if num_flows == 0:
            return None
        floats = floats[:10 * num_flows].reshape(10, num_flows)
        ints = ints[:3 * num_flows].reshape(3, num_flows)
        return Window(floats[:3], floats[3:6], floats[6], floats[7], floats[8], floats[9],
                      ints[0], starts[:num_cells], ints[1], ints[2])
