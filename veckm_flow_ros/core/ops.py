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
Typed wrappers of the compiled VecKM ops (torch.ops.veckm_flow.encode / flow_mlp).

The kernels live in csrc/ (CPU: OpenMP, CUDA when built with it); importing this module
loads veckm_flow_ros._C, which registers them. Fake (meta) implementations make the ops usable
under torch.compile and torch.library.opcheck.
"""

from typing import Tuple

import torch

import veckm_flow_ros._C  # noqa: F401  (registers torch.ops.veckm_flow.*)


def encode(t_ns: torch.Tensor, x: torch.Tensor, y: torch.Tensor, target_index: torch.Tensor,
           width: int, height: int, freq_t: torch.Tensor, freq_x: torch.Tensor,
           freq_y: torch.Tensor, tau_s: float, pixel_radius: int
           ) -> Tuple[torch.Tensor, torch.Tensor]:
    """
    Encode target events with the VecKM local event encoding (DESIGN.md section 2.2).

    f_n[k] = sqrt(D)/C_n sum_j exp(i[(t_j - t_n)/tau T[k] + (x_j - x_n)/r X[k]
    + (y_j - y_n)/r Y[k]]), over the events j whose pixel lies in the (2r+1)^2 window of the
    target's pixel (the target included); C_n is their number.

    Inputs:
        t_ns: int64 [N], event times in ns (absolute sensor stamps are fine; differences
            are taken in int64 before any float conversion).
        x, y: int32, int16 or uint16 [N], pixel coordinates (x right, y down). Events outside
            [0, width) x [0, height) are not context.
        target_index: int64 [M], indices into the events of the targets to encode.
        width, height: image size in pixels.
        freq_t, freq_x, freq_y: float32 [D], the model's frequencies T, X, Y.
        tau_s: t_radius of the model in seconds (half its time slice).
        pixel_radius: r in pixels.

    Outputs:
        features: float32 [M, 2D], concat(Re f, Im f).
        count: int32 [M], C_n; 0 for a target outside the image (its features are 0: invalid).
    """
    return torch.ops.veckm_flow.encode.default(
        t_ns, x, y, target_index, int(width), int(height), freq_t, freq_x, freq_y,
        float(tau_s), int(pixel_radius))


def flow_mlp(features: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, w3: torch.Tensor,
             flow_scale: float = 1.0) -> torch.Tensor:
    """
    Run the flow MLP: relu(relu(features @ w1) @ w2) @ w3 * flow_scale.

    features float32 [M, 2D]; w1 [2D, H], w2 [H, H], w3 [H, 2] float32. Returns float32
    [M, 2] (u, v); in px/s when flow_scale is the model's flow_scale_px_s.
    """
    return torch.ops.veckm_flow.flow_mlp.default(features, w1, w2, w3, float(flow_scale))


def flow_mlp_c4(features: torch.Tensor, blocks, w3: torch.Tensor, input_groups: int,
                flow_scale: float = 1.0) -> torch.Tensor:
    """
    Run a C4-equivariant flow MLP in its Fourier form (CPU with AVX2 and FMA only).

    blocks, input_groups: from symmetry.c4_fourier_blocks(model); features, w3 and the result
    as for flow_mlp (the same flows as the dense weights, up to float32 rounding).
    """
    return torch.ops.veckm_flow.flow_mlp_c4.default(features, list(blocks), w3,
                                                    int(input_groups), float(flow_scale))


def has_flow_mlp_c4() -> bool:
    """Whether this CPU runs flow_mlp_c4 (x86-64 with AVX2 and FMA)."""
    global _HAS_FLOW_MLP_C4
    if _HAS_FLOW_MLP_C4 is None:
        try:
            blocks = [torch.zeros(n, n) for n in (16, 16, 32, 16, 16, 32)]
            flow_mlp_c4(torch.zeros(1, 64), blocks, torch.zeros(64, 2), 2)
            _HAS_FLOW_MLP_C4 = True
        except RuntimeError:
            _HAS_FLOW_MLP_C4 = False
    return _HAS_FLOW_MLP_C4


_HAS_FLOW_MLP_C4 = None


@torch.library.register_fake('veckm_flow::encode')
def _encode_fake(t_ns, x, y, target_index, width, height, freq_t, freq_x, freq_y, tau_s,
                 pixel_radius):
    torch._check(t_ns.dim() == 1 and x.shape == t_ns.shape and y.shape == t_ns.shape)
    torch._check(freq_t.dim() == 1)
    m = target_index.shape[0]
    d = freq_t.shape[0]
    return (t_ns.new_empty((m, 2 * d), dtype=torch.float32),
            t_ns.new_empty((m,), dtype=torch.int32))


@torch.library.register_fake('veckm_flow::flow_mlp')
def _flow_mlp_fake(features, w1, w2, w3, flow_scale):
    torch._check(features.dim() == 2 and features.shape[1] == w1.shape[0])
    return features.new_empty((features.shape[0], 2))


@torch.library.register_fake('veckm_flow::flow_mlp_c4')
def _flow_mlp_c4_fake(features, blocks, w3, input_groups, flow_scale):
    torch._check(features.dim() == 2 and features.shape[1] == 4 * blocks[0].shape[0])
    return features.new_empty((features.shape[0], 2))
