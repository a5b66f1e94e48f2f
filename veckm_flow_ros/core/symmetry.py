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
Symmetries of the square acting on event neighbourhoods, frequencies and flows.

Transforming the events of a neighbourhood by G (d -> G d, G a rotation by 90 degrees or a
flip) is the same as encoding the original events with the frequencies G^T (X, Y): the pixel
lattice and the square window map onto themselves. The flow turns with the events (u -> G u).
With a frequency set closed under a group (symmetric_frequencies), the transformed features
are a permutation of the original ones (feature_permutations), which makes exactly
equivariant models possible (train.EquivariantFlowMLP) and makes rotated copies free.
"""

import math

import numpy as np
import torch

# The eight symmetries of the square as integer matrices acting on (x, y) image coordinates.
SQUARE_SYMMETRIES = tuple(
    np.array(matrix, dtype=np.int64) for matrix in (
        [[1, 0], [0, 1]], [[0, -1], [1, 0]], [[-1, 0], [0, -1]], [[0, 1], [-1, 0]],
        [[-1, 0], [0, 1]], [[1, 0], [0, -1]], [[0, 1], [1, 0]], [[0, -1], [-1, 0]]))

SYMMETRY_GROUPS = {'c4': SQUARE_SYMMETRIES[:4], 'd4': SQUARE_SYMMETRIES}


def symmetry_group(name: str):
    """Return the matrices of group 'c4' (rotations by 90 degrees) or 'd4' (and flips)."""
    if name not in SYMMETRY_GROUPS:
        raise ValueError(f'unknown equivariance {name!r}; expected one of '
                         f'{sorted(SYMMETRY_GROUPS)} or "none"')
    return SYMMETRY_GROUPS[name]


def symmetric_frequencies(num_features: int, seed: int, group_name: str):
    """
    Return T, X, Y float32 [D]: D / |G| orbits of the group acting on (X, Y), T per orbit.

    Feature k = h * (D / |G|) + o has frequency (T_o, G_h^T (X_o, Y_o)): group-element major,
    so each element's features are contiguous (the layout flow_mlp_c4 reads). The base
    frequencies are stratified like standard_frequencies: T_o at the normal quantiles, the
    radius of (X_o, Y_o) at the Rayleigh quantiles (the radius of a 2-D normal) and its angle
    spread over the group's fundamental sector, each shuffled by the seed; standard deviation
    5 per axis.
    """
    group = symmetry_group(group_name)
    size = len(group)
    if num_features % size:
        raise ValueError(f'num_features = {num_features} is not a multiple of the group size '
                         f'{size} ({group_name})')
    orbits = num_features // size
    probabilities = (torch.arange(orbits, dtype=torch.float64) + 0.5) / orbits
    generator = torch.Generator().manual_seed(int(seed))
    freq_t = 5.0 * math.sqrt(2.0) * torch.erfinv(2 * probabilities - 1)
    freq_t = freq_t[torch.randperm(orbits, generator=generator)]
    radius = 5.0 * torch.sqrt(-2.0 * torch.log1p(-probabilities))
    radius = radius[torch.randperm(orbits, generator=generator)]
    sector = 2.0 * math.pi / size
    angle = sector * probabilities[torch.randperm(orbits, generator=generator)]
    base = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], 0)  # (2, O)
    orbit_xy = torch.stack([torch.as_tensor(g, dtype=torch.float64).T @ base
                            for g in group], 1)  # (2, |G|, O)
    return (freq_t.repeat(size).to(torch.float32),
            orbit_xy[0].reshape(-1).to(torch.float32),
            orbit_xy[1].reshape(-1).to(torch.float32))


def feature_permutations(freq, group):
    """
    Index arrays sigma_g (int64 [D]), one per group element, or None if freq is not closed.

    Encoding the events transformed by G (d -> G d) gives the features f'[k] = f[sigma[k]]:
    frequency sigma[k] is G^T times frequency k, with the same T.
    """
    freq_t, freq_x, freq_y = (np.asarray(f, np.float64) for f in freq)
    scale = max(1.0, float(np.abs(np.stack([freq_t, freq_x, freq_y])).max()))
    permutations = []
    for g in group:
        moved = np.asarray(g, np.float64).T @ np.stack([freq_x, freq_y])
        distance = (np.abs(freq_t[:, None] - freq_t[None, :])
                    + np.abs(moved[0][:, None] - freq_x[None, :])
                    + np.abs(moved[1][:, None] - freq_y[None, :]))
        sigma = distance.argmin(axis=1)
        if distance[np.arange(len(sigma)), sigma].max() > 1e-5 * scale \
                or len(np.unique(sigma)) != len(sigma):
            return None
        permutations.append(sigma)
    return permutations


def transformed_frequencies(freq_x, freq_y, symmetry):
    """
    Frequencies that encode the events transformed by `symmetry` (2x2 integer matrix G).

    The phase (G d) . (X, Y) equals d . (G^T (X, Y)), so encoding the original events with
    G^T (X, Y) gives the features of the transformed events exactly.
    """
    g = torch.as_tensor(symmetry, dtype=torch.float32)
    stacked = torch.stack([freq_x, freq_y], 0)  # (2, D)
    rotated = g.T @ stacked
    return rotated[0].contiguous(), rotated[1].contiguous()


def model_equivariance(model) -> str:
    """
    Return the largest group ('d4', 'c4') the model is exactly equivariant to, or 'none'.

    Checked numerically: the frequencies must be closed under the group and the MLP must turn
    its output with G when the features are permuted like the events' (random test features).
    """
    freq = [f.detach().cpu().double() for f in (model.freq_t, model.freq_x, model.freq_y)]
    w1, w2, w3 = (w.detach().cpu().double() for w in (model.w1, model.w2, model.w3))
    features = torch.randn(64, w1.shape[0], generator=torch.Generator().manual_seed(0),
                           dtype=torch.float64)

    def mlp(x):
        return torch.relu(torch.relu(x @ w1) @ w2) @ w3

    plain = mlp(features)
    scale = float(plain.abs().max()) + 1e-12
    half = w1.shape[0] // 2
    for name in ('d4', 'c4'):
        group = SYMMETRY_GROUPS[name]
        permutations = feature_permutations(freq, group)
        if permutations is None:
            continue
        equivariant = True
        for g, sigma in zip(group, permutations):
            index = torch.from_numpy(np.concatenate([sigma, sigma + half]))
            turned = mlp(features[:, index])
            expected = plain @ torch.from_numpy(g.T.astype(np.float64))
            if float((turned - expected).abs().max()) > 1e-4 * scale:
                equivariant = False
                break
        if equivariant:
            return name
    return 'none'


def _c4_forward_matrix(channels: int, groups: int) -> np.ndarray:
    """
    Matrix F (n x n, n = 4 channels) with z = x F: flow_mlp_c4's forward transform.

    x: `groups` blocks of 4 planes (one per rotation, element-major) of channels / groups
    channels each; z = [z0 | z2 | zc | zs], each `channels` wide (group g's channels at g * w).
    """
    n = 4 * channels
    width = channels // groups
    matrix = np.zeros((n, n))
    for g in range(groups):
        for c in range(width):
            plane = [g * 4 * width + h * width + c for h in range(4)]
            column = [m * channels + g * width + c for m in range(4)]
            for h in range(4):
                matrix[plane[h], column[0]] = 1.0
                matrix[plane[h], column[1]] = (1.0, -1.0, 1.0, -1.0)[h]
            matrix[plane[0], column[2]], matrix[plane[2], column[2]] = 1.0, -1.0
            matrix[plane[1], column[3]], matrix[plane[3], column[3]] = 1.0, -1.0
    return matrix


def c4_fourier_blocks(model):
    """
    Return the arguments of ops.flow_mlp_c4 for a 'c4' model, or None where it does not apply.

    (blocks [m1_0, m1_2, m1_pair, m2_0, m2_2, m2_pair], input_groups): each layer of an
    exactly C4-equivariant MLP, written in the group's Fourier basis, only maps each component
    to itself (6 C^2 instead of 16 C^2 multiply-adds). Needs the element-major layouts that
    symmetric_frequencies and train.EquivariantFlowMLP produce (checked: the blocks must
    reproduce the dense weights, else None).
    """
    if model.equivariance != 'c4':
        return None
    in_size, hidden = model.w1.shape
    if in_size % 32 or hidden % 64:
        return None
    c_in, c_out = in_size // 4, hidden // 4
    forward_in, forward_hidden = _c4_forward_matrix(c_in, 2), _c4_forward_matrix(c_out, 1)
    # The kernel's inverse (p0 = y0 + y2 + yc, p1 = y0 - y2 + ys, p2 = y0 + y2 - yc,
    # p3 = y0 - y2 - ys; the scales are folded into the blocks) is F^T.
    inverse_hidden = forward_hidden.T
    blocks = []
    for weight, forward, c_i in ((model.w1, forward_in, c_in), (model.w2, forward_hidden, c_out)):
        dense = weight.detach().cpu().double().numpy()
        full = np.linalg.solve(forward, dense) @ np.linalg.inv(inverse_hidden)
        parts = (full[:c_i, :c_out], full[c_i:2 * c_i, c_out:2 * c_out],
                 full[2 * c_i:, 2 * c_out:])
        kept = np.zeros_like(full)
        kept[:c_i, :c_out], kept[c_i:2 * c_i, c_out:2 * c_out] = parts[0], parts[1]
        kept[2 * c_i:, 2 * c_out:] = parts[2]
        if np.abs(full - kept).max() > 1e-5 * (np.abs(full).max() + 1e-30):
            return None
        blocks += [torch.from_numpy(np.ascontiguousarray(p)).to(torch.float32) for p in parts]
    return blocks, 2
