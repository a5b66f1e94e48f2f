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
The validity of a flow: how much moving structure surrounds its event (docs/validity.md).

An event of a moving edge has many events around it in the model's context (its window of
(2r+1)^2 pixels over the 2 tau slice); an isolated background-activity event has few, and a
hot pixel has many, but all at its own pixel. The validity counts the context events in the
window that are not at the event's own pixel (the encoder's count C_n minus the events at
the target's pixel), turns them into a rate per pixel,

    neighbour_rate_hz = (C_n - own pixel events) / (((2r+1)^2 - 1) * 2 tau)   [Hz per pixel]

and maps that rate to [0, 1):

    validity = neighbour_rate_hz / (neighbour_rate_hz + HALF_VALIDITY_RATE_HZ)

so 0.5 means the window fires at HALF_VALIDITY_RATE_HZ per pixel, 0 means no neighbour at
all. It needs no training (the same for every model) and costs one pass over the context
events (a per-pixel histogram) per block.
"""

import threading

import torch

# Neighbour event rate [Hz per pixel] at which the validity is 0.5.
HALF_VALIDITY_RATE_HZ = 1.0


class NeighbourCounter:
    """
    Counts the context events in each target's window that are not at the target's own pixel.

    One per sensor size. Each thread gets its own per-pixel table of int32 counts (width x
    height, kept all zero between calls): a call adds the context events into it, reads the
    targets' pixels and takes the events out again, O(context events) -- a histogram
    allocated and zeroed per block cost 4x as much on a 640x480 sensor with 4k-event blocks.
    """

    def __init__(self, width: int, height: int):
        self.width, self.height = int(width), int(height)
        # int32 pixel indices (half the memory traffic) unless the sensor is too large.
        self._index_dtype = torch.int32 if self.width * self.height < 2 ** 31 else torch.int64
        self._local = threading.local()

    def _table(self, device: torch.device) -> torch.Tensor:
        table = getattr(self._local, 'table', None)
        if table is None or table.device != device:
            table = torch.zeros(self.width * self.height, dtype=torch.int32, device=device)
            self._local.table = table
        return table

    def __call__(self, x: torch.Tensor, y: torch.Tensor, target_index: torch.Tensor,
                 count: torch.Tensor) -> torch.Tensor:
        """
        Return the neighbour counts int32 [M] >= 0, on the device of x.

        x, y: int32 [N] pixels of the context events (all inside the image), target_index:
        int64 [M] positions of the targets among them, count: int32 [M] the encoder's C_n
        (the window count, target included; ops.encode).
        """
        if len(target_index) == 0:
            return torch.zeros(0, dtype=torch.int32, device=x.device)
        # A new tensor (never a view of the caller's columns, which are updated in place).
        pixel = y.to(self._index_dtype).mul(self.width).add_(x.to(self._index_dtype))
        table = self._table(pixel.device)
        ones = torch.ones(1, dtype=torch.int32, device=pixel.device).expand(len(pixel))
        table.index_add_(0, pixel, ones)
        try:
            own = table.index_select(0, pixel.index_select(0, target_index))
        finally:
            table.index_add_(0, pixel, -ones)  # all zero again
        return count.to(torch.int32).sub(own).clamp_(min=0)


def neighbour_counts(x: torch.Tensor, y: torch.Tensor, target_index: torch.Tensor,
                     count: torch.Tensor, width: int, height: int) -> torch.Tensor:
    """Return NeighbourCounter(width, height)(x, y, target_index, count) (one call)."""
    return NeighbourCounter(width, height)(x, y, target_index, count)


def validity_from_neighbours(neighbours: torch.Tensor, pixel_radius: int,
                             tau_s: float) -> torch.Tensor:
    """
    Return the validity float32 [M] in [0, 1) of neighbour counts (NeighbourCounter).

    pixel_radius: r [px]; tau_s: the model's tau [s] (the context slice is 2 tau).
    """
    neighbour_pixels = (2 * int(pixel_radius) + 1) ** 2 - 1
    # rate / (rate + HALF) with rate = n / (pixels * 2 tau), as n / (n + HALF * pixels * 2 tau)
    half_count = HALF_VALIDITY_RATE_HZ * neighbour_pixels * 2.0 * float(tau_s)
    neighbours = neighbours.to(torch.float32)
    return neighbours.div_(neighbours + half_count)
