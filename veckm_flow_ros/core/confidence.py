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
Per-flow confidence from an ensemble of views of the neighbourhood.

The model sees each neighbourhood again rotated by 90, 180 and 270 degrees. Rotating the
event cloud by a symmetry G of the square is exactly the same as encoding the unrotated
events with the frequency vectors G^T (X, Y) (the pixel lattice and the square window map
onto themselves), so no event is moved. Each prediction is rotated back with G^T; a model
that has understood the neighbourhood predicts the same flow for all copies. The agreement of
the K back-rotated flows n_k gives the confidence in [0, 1]:

    direction = | mean_k n_k / |n_k| |            (mean resultant length; 1 = all parallel)
    magnitude = exp(-std_k |n_k| / mean_k |n_k|)  (1 = equal lengths)
    confidence = direction * magnitude

Cost: K encodings instead of one (K = 4 by default).

An exactly equivariant model (model.equivariance 'c4' or 'd4', train.EquivariantFlowMLP)
predicts the same flow for every rotated copy by construction, so its views are the
symmetries it is not built for: the time-reversed copy (complex-conjugated features: every
offset in t, x and y negated, which is time reversal and a point reflection, so the same
flow) and, for 'c4', the mirrored copies. Cost: 'd4' one encoding and two MLP passes, 'c4'
two encodings and four MLP passes.

The mean of the turned-back flows (mean_flow=True) is itself a better flow than the plain
prediction: for a model that is not equivariant it cancels its orientation-dependent bias
(held-out set, the earlier plain r10 model: 92.6 -> 96.9 %Pos); for the shipped equivariant
r10 model 95.5 -> 96.3 %Pos at block 20 ms (model card). With the confidence it costs nothing more.
"""

from typing import Optional, Tuple

import torch

from veckm_flow_ros import ops
from veckm_flow_ros.core.model import VecKMFlowModel

# Flows slower than this [px/s] count as no motion (no direction) in agreement().
ZERO_FLOW_PX_S = 1e-3
# Rotations by 0, 90, 180, 270 degrees in image coordinates (x right, y down).
ROTATIONS = (((1, 0), (0, 1)), ((0, -1), (1, 0)), ((-1, 0), (0, -1)), ((0, 1), (-1, 0)))


MIRROR = ((-1, 0), (0, 1))


def ensemble_views(model: VecKMFlowModel, num_rotations: int = 4):
    """
    Return the views of the model's ensemble: a list of (G as a 2x2 tuple, conjugate flag).

    Rotations for a model that is not equivariant; the time-reversed copy (and for 'c4' the
    mirrored ones) for an equivariant model. num_rotations applies to the rotations only.
    """
    if not 1 <= num_rotations <= len(ROTATIONS):
        raise ValueError(f'num_rotations must be in 1..{len(ROTATIONS)}, got {num_rotations}')
    identity = ROTATIONS[0]
    if model.equivariance == 'd4':
        return [(identity, False), (identity, True)]
    if model.equivariance == 'c4':
        return [(identity, False), (MIRROR, False), (identity, True), (MIRROR, True)]
    return [(matrix, False) for matrix in ROTATIONS[:num_rotations]]


def ensemble_flows(model: VecKMFlowModel, t_ns, x, y, target_index, width: int, height: int,
                   num_rotations: int = 4, counts: Optional[list] = None) -> torch.Tensor:
    """
    Flows of the views (ensemble_views), turned back: float32 [K, M, 2] in px/s.

    Arguments as for ops.encode (t_ns int64 [N], x, y int32 [N], target_index int64 [M], on
    the model's device). Copy 0 is the plain prediction of the model. counts: a list that
    receives the encoder's window counts C_n (int32 [M], the same for every view).
    """
    flows = []
    encoded = {}
    half = model.num_features
    for matrix, conjugate in ensemble_views(model, num_rotations):
        if matrix not in encoded:
            g = torch.tensor(matrix, dtype=torch.float32, device=model.freq_x.device)
            rotated = g.T @ torch.stack([model.freq_x, model.freq_y], 0)
            encoded[matrix], count = ops.encode(t_ns, x, y, target_index, width, height,
                                                model.freq_t, rotated[0].contiguous(),
                                                rotated[1].contiguous(), model.tau_s,
                                                model.pixel_radius)
            if counts is not None and not counts:
                counts.append(count)
        features = encoded[matrix]
        if conjugate:
            features = torch.cat([features[:, :half], -features[:, half:]], 1)
        flow = model.predict_flow_px_s(features)
        g = torch.tensor(matrix, dtype=torch.float32, device=flow.device)
        flows.append(flow @ g)  # G^T applied to each row vector: (G^T n)^T = n^T G
    return torch.stack(flows, 0)


def agreement(flows: torch.Tensor) -> torch.Tensor:
    """Confidence float32 [M] in [0, 1] from back-rotated flows [K, M, 2] (see module doc)."""
    norm = torch.linalg.norm(flows, dim=2)
    unit = flows / norm.clamp(min=1e-12)[..., None]
    direction = torch.linalg.norm(unit.mean(0), dim=1)
    mean_norm = norm.mean(0)
    spread = norm.std(0, unbiased=False) / mean_norm.clamp(min=1e-12)
    confidence = direction * torch.exp(-spread)
    # A zero flow in any copy has no direction: no confidence. "Zero" includes float rounding
    # noise: an equivariant model answers a symmetric neighbourhood (an isolated event) with
    # exactly zero in exact arithmetic, and with ~1e-8 px/s in float, in device-dependent
    # directions.
    confidence = torch.where((norm > ZERO_FLOW_PX_S).all(0), confidence,
                             torch.zeros_like(confidence))
    return confidence.clamp(0.0, 1.0).to(torch.float32)


def predict_with_confidence(model: VecKMFlowModel, t_ns, x, y, target_index, width: int,
                            height: int, num_rotations: int = 4, mean_flow: bool = False,
                            counts: Optional[list] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """
    Return (flow float32 [M, 2] px/s, confidence float32 [M] in [0, 1]).

    The flow is the model's plain prediction (identical to running without confidence), or
    with mean_flow=True the mean of the back-rotated ensemble flows; the confidence is the
    agreement of the rotation ensemble. Drop-in for the estimator's encode + MLP step; counts
    as for ensemble_flows.
    """
    flows = ensemble_flows(model, t_ns, x, y, target_index, width, height, num_rotations,
                           counts)
    return (flows.mean(0) if mean_flow else flows[0]), agreement(flows)
