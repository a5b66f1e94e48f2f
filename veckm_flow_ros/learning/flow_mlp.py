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
The MLP a model is trained as: FlowMLP, or EquivariantFlowMLP (exactly equivariant).

EquivariantFlowMLP averages its weights over a symmetry group. weights() returns the layers as
VecKMFlowModel keeps them; the trained model is an ordinary MLP of the same shape and cost
(learning/train.py).
"""

import math

import numpy as np
import torch


class FlowMLP(torch.nn.Module):
    """relu(relu(X W1) W2) W3 without biases; X float [B, 2D] -> flow [B, 2] (model unit)."""

    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.layer1 = torch.nn.Linear(input_size, hidden_size, bias=False)
        self.layer2 = torch.nn.Linear(hidden_size, hidden_size, bias=False)
        self.layer3 = torch.nn.Linear(hidden_size, 2, bias=False)

    def forward(self, features):
        hidden = torch.relu(self.layer1(features))
        hidden = torch.relu(self.layer2(hidden))
        return self.layer3(hidden)

    def weights(self):
        """Return (w1 [2D, H], w2 [H, H], w3 [H, 2]) as used by VecKMFlowModel."""
        return tuple(layer.weight.detach().T.contiguous().clone()
                     for layer in (self.layer1, self.layer2, self.layer3))


class EquivariantFlowMLP(FlowMLP):
    """
    FlowMLP whose weights are averaged over a symmetry group: exactly equivariant.

    With frequencies closed under the group (symmetric_frequencies), transforming the events by
    G permutes the input features (feature_permutations); the hidden layers carry the regular
    representation (H / |G| channels x |G| group elements, G acting by (c, h) -> (c, G h), unit
    (c, h) stored at h * H / |G| + c); the output flow turns by G. Each layer's weight is W_sym
    = mean_g rho_out(g)^-1 W rho_in(g), which commutes with the group, and ReLU commutes with
    permutations, so f(features of G d) = G f(features of d). weights() returns the averaged
    weights: an ordinary MLP of the same shape.
    """

    def __init__(self, input_size, hidden_size, group, input_permutations):
        super().__init__(input_size, hidden_size)
        size = len(group)
        if hidden_size % size:
            raise ValueError(f'hidden_size = {hidden_size} is not a multiple of the group '
                             f'size {size}')
        matrices = [np.asarray(g, np.int64) for g in group]
        index = {m.tobytes(): i for i, m in enumerate(matrices)}
        inverse_of = [index[np.round(np.linalg.inv(m)).astype(np.int64).tobytes()]
                      for m in matrices]
        half = input_size // 2
        # (rho y)[k] = y[sigma[k]] for every representation below; rho(g)^-1 = rho(g^-1).
        sigma_in = [np.concatenate([p, p + half]) for p in input_permutations]
        channels = hidden_size // size
        sigma_hidden = []
        for g in range(size):
            moved = [index[(matrices[inverse_of[g]] @ matrices[h]).tobytes()]
                     for h in range(size)]
            sigma_hidden.append((np.asarray(moved)[:, None] * channels
                                 + np.arange(channels)[None, :]).reshape(-1))

        def column_index(sigma):
            # (W rho(g))[:, j] = W[:, sigma^-1[j]].
            return torch.from_numpy(np.argsort(np.stack(sigma)))

        self.register_buffer('in_columns', column_index(sigma_in), persistent=False)
        self.register_buffer('hidden_columns', column_index(sigma_hidden), persistent=False)
        self.register_buffer('hidden_rows', torch.from_numpy(
            np.stack([sigma_hidden[inverse_of[g]] for g in range(size)])), persistent=False)
        self.register_buffer('output_turn', torch.from_numpy(
            np.stack([m.T for m in matrices]).astype(np.float32)), persistent=False)
        with torch.no_grad():
            # Averaging |G| permuted copies shrinks random weights by about sqrt(|G|).
            for layer in (self.layer1, self.layer2, self.layer3):
                layer.weight.mul_(math.sqrt(size))

    def averaged_weights(self):
        """Return the group-averaged (W1, W2, W3) in torch.nn.Linear layout (out, in)."""
        w1 = self.layer1.weight
        w2 = self.layer2.weight
        w3 = self.layer3.weight
        size = len(self.in_columns)
        w1_sym = sum(w1[self.hidden_rows[g]][:, self.in_columns[g]] for g in range(size))
        w2_sym = sum(w2[self.hidden_rows[g]][:, self.hidden_columns[g]] for g in range(size))
        w3_sym = sum(self.output_turn[g] @ w3[:, self.hidden_columns[g]] for g in range(size))
        return w1_sym / size, w2_sym / size, w3_sym / size

    def forward(self, features):
        w1, w2, w3 = self.averaged_weights()
        hidden = torch.relu(features @ w1.T)
        hidden = torch.relu(hidden @ w2.T)
        return hidden @ w3.T

    def weights(self):
        """Return the averaged (w1 [2D, H], w2 [H, H], w3 [H, 2]) for VecKMFlowModel."""
        with torch.no_grad():
            return tuple(w.T.contiguous().clone() for w in self.averaged_weights())
