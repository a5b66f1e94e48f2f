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
Pure-torch references of the VecKM encoding: the test oracle and the benchmark baseline.

- `encode_closed_form`: the closed form of the encoding (docs/algorithm.md) written literally,
  in float64, pair by pair (target n, context event j). Slow (O(M N)); only for small inputs.
- `encode_algorithm1`: the paper's Algorithm 1 vectorised in torch: scatter PixelEmbed /
  PixelCount over the image, then for every target loop over the (2r+1)^2 window reading
  PixelEmbed. float32/complex64 like the reference implementation; the baseline of `bench`.
- `flow_mlp_reference`: the MLP in float64.

Conventions shared with the compiled ops (veckm_flow_ros.ops): events are (t_ns int64,
x int, y int); events outside the image are not context; a target whose own pixel is outside
the image is not encoded (count 0, features 0, i.e. invalid). Features are float [M, 2D] =
concat(Re f, Im f).
"""

import math

import torch


def _inside(x, y, width, height):
    return (x >= 0) & (x < width) & (y >= 0) & (y < height)


def encode_closed_form(t_ns, x, y, target_index, width, height, freq_t, freq_x, freq_y,
                       tau_s, pixel_radius, chunk=256):
    """
    Literal closed form, float64: f_n = sqrt(D)/C_n sum_j exp(i phase_nj).

    t_ns int64 [N] (ns); x, y integer [N] (pixels); target_index int64 [M] (indices into the
    events); freq_* float [D]; tau_s seconds; pixel_radius int. Returns (features float64
    [M, 2D], count int64 [M]); invalid targets (count 0) get zero features.
    """
    t_ns = torch.as_tensor(t_ns, dtype=torch.int64).cpu()
    x = torch.as_tensor(x).to(torch.int64).cpu()
    y = torch.as_tensor(y).to(torch.int64).cpu()
    target_index = torch.as_tensor(target_index, dtype=torch.int64).cpu()
    freq_t, freq_x, freq_y = (torch.as_tensor(f).to(torch.float64).cpu()
                              for f in (freq_t, freq_x, freq_y))
    d = freq_t.numel()
    r = int(pixel_radius)
    m = target_index.numel()
    features = torch.zeros(m, d, dtype=torch.complex128)
    count = torch.zeros(m, dtype=torch.int64)
    context = _inside(x, y, width, height)
    for start in range(0, m, chunk):
        targets = target_index[start:start + chunk]
        dx = x[None, :] - x[targets][:, None]
        dy = y[None, :] - y[targets][:, None]
        in_window = (dx.abs() <= r) & (dy.abs() <= r) & context[None, :]
        in_window &= _inside(x[targets], y[targets], width, height)[:, None]
        rows, cols = torch.nonzero(in_window, as_tuple=True)
        dt_s = (t_ns[cols] - t_ns[targets][rows]).to(torch.float64) * 1e-9
        phase = (dt_s[:, None] / tau_s * freq_t[None, :]
                 + dx[rows, cols].to(torch.float64)[:, None] / r * freq_x[None, :]
                 + dy[rows, cols].to(torch.float64)[:, None] / r * freq_y[None, :])
        block = torch.zeros(targets.numel(), d, dtype=torch.complex128)
        block.index_add_(0, rows, torch.polar(torch.ones_like(phase), phase))
        chunk_count = in_window.sum(dim=1)
        scale = math.sqrt(d) / chunk_count.clamp(min=1).to(torch.float64)
        features[start:start + chunk] = block * scale[:, None]
        count[start:start + chunk] = chunk_count
    return torch.cat([features.real, features.imag], dim=1), count


def encode_algorithm1(t_ns, x, y, target_index, width, height, freq_t, freq_x, freq_y,
                      tau_s, pixel_radius):
    """
    Algorithm 1 of the paper, vectorised in torch (float32 / complex64).

    PixelEmbed[y, x, k] = sum over events at (x, y) of exp(i t_j / tau T[k]) and PixelCount
    are scattered into a zero-padded image; each target then sums its (2r+1)^2 window with the
    spatial phases exp(i (dx X + dy Y) / r). Same arguments and returns as encode_closed_form
    (features float32 [M, 2D], count int64 [M]). Time is made relative to the first event in
    int64 before the float conversion.
    """
    device = freq_t.device if isinstance(freq_t, torch.Tensor) else torch.device('cpu')
    t_ns = torch.as_tensor(t_ns, dtype=torch.int64, device=device)
    x = torch.as_tensor(x, device=device).to(torch.int64)
    y = torch.as_tensor(y, device=device).to(torch.int64)
    target_index = torch.as_tensor(target_index, dtype=torch.int64, device=device)
    freq_t, freq_x, freq_y = (torch.as_tensor(f, device=device).to(torch.float32)
                              for f in (freq_t, freq_x, freq_y))
    d = freq_t.numel()
    r = int(pixel_radius)
    m = target_index.numel()
    if m == 0 or t_ns.numel() == 0:
        return (torch.zeros(m, 2 * d, device=device),
                torch.zeros(m, dtype=torch.int64, device=device))
    t_rel = ((t_ns - t_ns[0]).to(torch.float64) * (1e-9 / tau_s)).to(torch.float32)
    padded_width = width + 2 * r
    padded_height = height + 2 * r
    context = _inside(x, y, width, height)
    pixel = (y[context] + r) * padded_width + (x[context] + r)
    time_phase = t_rel[context][:, None] * freq_t[None, :]
    pixel_embed = torch.zeros(padded_height * padded_width, d, dtype=torch.complex64,
                              device=device)
    pixel_embed.index_add_(0, pixel, torch.polar(torch.ones_like(time_phase), time_phase))
    pixel_count = torch.zeros(padded_height * padded_width, dtype=torch.int64, device=device)
    pixel_count.index_add_(0, pixel, torch.ones_like(pixel))

    xt, yt = x[target_index], y[target_index]
    target_inside = _inside(xt, yt, width, height)
    # Out-of-image targets read a padded corner that is always empty (count 0 -> invalid).
    target_pixel = torch.where(target_inside, (yt + r) * padded_width + (xt + r), 0)
    pooled = torch.zeros(m, d, dtype=torch.complex64, device=device)
    count = torch.zeros(m, dtype=torch.int64, device=device)
    for dy in range(-r, r + 1):
        for dx in range(-r, r + 1):
            window_phase = (dx * freq_x + dy * freq_y) / r
            neighbour = target_pixel + (dy * padded_width + dx)
            neighbour = torch.where(target_inside, neighbour, 0)
            pooled += pixel_embed[neighbour] * torch.polar(torch.ones_like(window_phase),
                                                           window_phase)
            count += pixel_count[neighbour]
    target_phase = -t_rel[target_index][:, None] * freq_t[None, :]
    scale = math.sqrt(d) / count.clamp(min=1).to(torch.float32)
    features = pooled * torch.polar(torch.ones_like(target_phase), target_phase) * scale[:, None]
    features = torch.where((count > 0)[:, None], features, 0)
    return torch.cat([features.real, features.imag], dim=1), count


def flow_mlp_reference(features, w1, w2, w3, flow_scale=1.0):
    """Return relu(relu(X @ w1) @ w2) @ w3 * flow_scale in float64; X float [M, 2D]."""
    features, w1, w2, w3 = (torch.as_tensor(a).to(torch.float64) for a in (features, w1, w2, w3))
    hidden = torch.relu(features @ w1)
    hidden = torch.relu(hidden @ w2)
    return hidden @ w3 * flow_scale
