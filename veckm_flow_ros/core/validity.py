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

import torch

# Neighbour event rate [Hz per pixel] at which the validity is 0.5.
HALF_VALIDITY_RATE_HZ = 1.0


def neighbour_counts(x: torch.Tensor, y: torch.Tensor, target_index: torch.Tensor,
                     count: torch.Tensor, width: int, height: int) -> torch.Tensor:
    """
    Context events in each target's window that are not at the target's own pixel.

    x, y: int32 [N] pixels of the context events (all inside the image), target_index: int64
    [M] positions of the targets among them, count: int32 [M] the encoder's C_n (the window
    count, target included; ops.encode). Returns int64 [M] >= 0, on the device of x.
    """
    if len(target_index) == 0:
        return torch.zeros(0, dtype=torch.int64, device=x.device)
    pixel = y.to(torch.int64) * int(width) + x.to(torch.int64)
    per_pixel = torch.bincount(pixel, minlength=int(width) * int(height))
    own = per_pixel.index_select(0, pixel.index_select(0, target_index))
    return (count.to(torch.int64) - own).clamp_(min=0)


def validity_from_neighbours(neighbours: torch.Tensor, pixel_radius: int,
                             tau_s: float) -> torch.Tensor:
    """
    Validity float32 [M] in [0, 1) from neighbour counts (neighbour_counts) of a model.

    pixel_radius: r [px]; tau_s: the model's tau [s] (the context slice is 2 tau).
    """
    neighbour_pixels = (2 * int(pixel_radius) + 1) ** 2 - 1
    rate_hz = neighbours.to(torch.float32) / float(neighbour_pixels * 2.0 * tau_s)
    return rate_hz / (rate_hz + HALF_VALIDITY_RATE_HZ)
