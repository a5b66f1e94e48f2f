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
Typed wrappers of the compiled ops torch.ops.veckm_flow.* (the only way the package calls them).

The kernels live in csrc/ (one file per op for its schema and argument checks, CPU kernels in
csrc/cpu/, CUDA kernels in csrc/cuda/); importing this module loads veckm_flow_ros._C, which
registers them. Every op has a fake (meta) implementation here, so the ops work under
torch.compile and pass torch.library.opcheck. The encoding and the event formats are described
in docs/algorithm.md.

Ops: encode (the fast VecKM encoding), encode_naive (the paper's Algorithm 1 as written: the
baseline of the benchmark), flow_mlp, flow_mlp_c4 and the EventPacket decoders decode_evt3,
decode_libcaer_cmp, decode_libcaer, decode_mono and decode_trigger (CPU only).
"""

import contextlib
import os
from typing import Iterator, Sequence, Tuple

import torch

import veckm_flow_ros._C  # noqa: F401  (registers torch.ops.veckm_flow.*)

_ENCODE_ARGS_DOC = """
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
        All tensors on one device (CPU or CUDA).

    Outputs:
        features: float32 [M, 2D], concat(Re f, Im f).
        count: int32 [M], C_n; 0 for a target outside the image (its features are 0: invalid).
"""


def encode(t_ns: torch.Tensor, x: torch.Tensor, y: torch.Tensor, target_index: torch.Tensor,
           width: int, height: int, freq_t: torch.Tensor, freq_x: torch.Tensor,
           freq_y: torch.Tensor, tau_s: float, pixel_radius: int
           ) -> Tuple[torch.Tensor, torch.Tensor]:
    """
    Encode target events with the VecKM local event encoding (docs/algorithm.md).

    f_n[k] = sqrt(D)/C_n sum_j exp(i[(t_j - t_n)/tau T[k] + (x_j - x_n)/r X[k]
    + (y_j - y_n)/r Y[k]]), over the events j whose pixel lies in the (2r+1)^2 window of the
    target's pixel (the target included); C_n is their number. Two paths, the same results
    (to float32 rounding): box sums over image rows, whose cost does not depend on r, or, when
    the targets' windows cover little of the image, a sum over each target's window (the
    kernel picks by a cost model; forced_encode_path overrides it). A target_index outside
    [0, N) raises on the CPU; on CUDA, which does not wait for the device to check it, that
    target gets count -1 and zero features.
    """
    return torch.ops.veckm_flow.encode.default(
        t_ns, x, y, target_index, int(width), int(height), freq_t, freq_x, freq_y,
        float(tau_s), int(pixel_radius))


# The environment variable that forces encode's path: dense, sparse or auto (the cost model).
ENCODE_PATH_VARIABLE = 'VECKM_FLOW_ENCODE_PATH'
ENCODE_PATHS = ('auto', 'dense', 'sparse')


@contextlib.contextmanager
def forced_encode_path(path: str) -> Iterator[None]:
    """
    Within the block, make every encode call of this process take `path`.

    path: 'dense' (box sums over image rows), 'sparse' (per-target window sums) or 'auto'
    (the kernel's cost model). For benchmarks and tests that compare the two paths on the
    same inputs; it sets ENCODE_PATH_VARIABLE, so it is process-wide, not per thread.
    """
    if path not in ENCODE_PATHS:
        raise ValueError(f'encode path must be one of {ENCODE_PATHS}, got {path!r}')
    previous = os.environ.get(ENCODE_PATH_VARIABLE)
    os.environ[ENCODE_PATH_VARIABLE] = path
    try:
        yield
    finally:
        if previous is None:
            del os.environ[ENCODE_PATH_VARIABLE]
        else:
            os.environ[ENCODE_PATH_VARIABLE] = previous


def encode_naive(t_ns: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                 target_index: torch.Tensor, width: int, height: int, freq_t: torch.Tensor,
                 freq_x: torch.Tensor, freq_y: torch.Tensor, tau_s: float, pixel_radius: int
                 ) -> Tuple[torch.Tensor, torch.Tensor]:
    """
    Encode target events by the paper's Algorithm 1 as written (the baseline of `encode`).

    The same encoding, arguments and results as encode, computed literally: per-pixel
    embeddings scattered over the whole image, then for every target its (2r+1)^2 window read
    pixel by pixel for each of the D channels (cost grows with r^2). float32 sums; on CUDA the
    scatter uses atomic adds, so the last bits may vary from run to run.
    """
    return torch.ops.veckm_flow.encode_naive.default(
        t_ns, x, y, target_index, int(width), int(height), freq_t, freq_x, freq_y,
        float(tau_s), int(pixel_radius))


encode.__doc__ += _ENCODE_ARGS_DOC
encode_naive.__doc__ += _ENCODE_ARGS_DOC


def flow_mlp(features: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, w3: torch.Tensor,
             flow_scale: float = 1.0) -> torch.Tensor:
    """
    Run the flow MLP: relu(relu(features @ w1) @ w2) @ w3 * flow_scale.

    features float32 [M, 2D]; w1 [2D, H], w2 [H, H], w3 [H, 2] float32, all on one device.
    Returns float32 [M, 2] (u, v); in px/s when flow_scale is the model's flow_scale_px_s.
    """
    return torch.ops.veckm_flow.flow_mlp.default(features, w1, w2, w3, float(flow_scale))


def flow_mlp_c4(features: torch.Tensor, blocks: Sequence[torch.Tensor], w3: torch.Tensor,
                input_groups: int, flow_scale: float = 1.0) -> torch.Tensor:
    """
    Run a C4-equivariant flow MLP in its Fourier form (CPU only).

    blocks (6 float32 matrices), input_groups: from symmetry.c4_fourier_blocks(model);
    features float32 [M, 4 C_in], w3 float32 [4 C_out, 2]; returns float32 [M, 2] as for
    flow_mlp (the same flows as the dense weights, up to float32 rounding).
    """
    return torch.ops.veckm_flow.flow_mlp_c4.default(features, list(blocks), w3,
                                                    int(input_groups), float(flow_scale))


def has_flow_mlp_c4() -> bool:
    """Whether the extension runs flow_mlp_c4 (every CPU build: AVX2 or portable kernels)."""
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

# -- EventPacket decoders (CPU) ------------------------------------------------------------------
#
# buffer: the message's bytes, contiguous uint8 [B] on the CPU (read only). Events come back as
# columns t_ns int64 (ns), x uint16, y uint16, p uint8 [N]; events with x >= width or
# y >= height are dropped. stats: int64 [4] = (events dropped outside width x height, invalid
# words, trailing bytes that do not form a whole word, invalid timestamps). state: int64, zeros
# at the start of a stream, updated in place (its layout is private to the kernel). The
# formats: docs/algorithm.md.


def decode_evt3(buffer: torch.Tensor, state: torch.Tensor, width: int, height: int
                ) -> Tuple[torch.Tensor, ...]:
    """
    Decode Prophesee EVT 3.0 16-bit words; state int64 [6], updated in place.

    Returns (t_ns, x, y, p, trigger_t_ns int64, trigger_channel uint8, trigger_edge uint8,
    stats): the CD events and the external trigger edges.
    """
    return torch.ops.veckm_flow.decode_evt3.default(buffer, state, int(width), int(height))


def decode_libcaer_cmp(buffer: torch.Tensor, state: torch.Tensor, time_base_ns: int,
                       width: int, height: int) -> Tuple[torch.Tensor, ...]:
    """
    Decode libcaer compressed 16-bit words; state int64 [3], updated in place.

    The time restarts at time_base_ns (ns) in every message. Returns (t_ns, x, y, p, stats).
    """
    return torch.ops.veckm_flow.decode_libcaer_cmp.default(buffer, state, int(time_base_ns),
                                                           int(width), int(height))


def decode_libcaer(buffer: torch.Tensor, time_base_ns: int, width: int, height: int
                   ) -> Tuple[torch.Tensor, ...]:
    """Decode libcaer polarity events (8 bytes each); returns (t_ns, x, y, p, stats)."""
    return torch.ops.veckm_flow.decode_libcaer.default(buffer, int(time_base_ns), int(width),
                                                       int(height))


def decode_mono(buffer: torch.Tensor, time_base_ns: int, width: int, height: int
                ) -> Tuple[torch.Tensor, ...]:
    """Decode 'mono' 64-bit words (dt ns from time_base_ns); returns (t_ns, x, y, p, stats)."""
    return torch.ops.veckm_flow.decode_mono.default(buffer, int(time_base_ns), int(width),
                                                    int(height))


def decode_trigger(buffer: torch.Tensor, time_base_ns: int) -> Tuple[torch.Tensor, ...]:
    """Decode 'trigger' 64-bit words; returns (t_ns, channel uint8, edge uint8, stats)."""
    return torch.ops.veckm_flow.decode_trigger.default(buffer, int(time_base_ns))


# -- fake implementations (shapes and dtypes only) -----------------------------------------------

def _encode_fake(t_ns, x, y, target_index, width, height, freq_t, freq_x, freq_y, tau_s,
                 pixel_radius):
    torch._check(t_ns.dim() == 1 and x.shape == t_ns.shape and y.shape == t_ns.shape)
    torch._check(freq_t.dim() == 1)
    m = target_index.shape[0]
    d = freq_t.shape[0]
    return (t_ns.new_empty((m, 2 * d), dtype=torch.float32),
            t_ns.new_empty((m,), dtype=torch.int32))


torch.library.register_fake('veckm_flow::encode')(_encode_fake)
torch.library.register_fake('veckm_flow::encode_naive')(_encode_fake)


@torch.library.register_fake('veckm_flow::flow_mlp')
def _flow_mlp_fake(features, w1, w2, w3, flow_scale):
    torch._check(features.dim() == 2 and features.shape[1] == w1.shape[0])
    return features.new_empty((features.shape[0], 2))


@torch.library.register_fake('veckm_flow::flow_mlp_c4')
def _flow_mlp_c4_fake(features, blocks, w3, input_groups, flow_scale):
    torch._check(features.dim() == 2 and features.shape[1] == 4 * blocks[0].shape[0])
    return features.new_empty((features.shape[0], 2))


def _event_columns_fake(buffer):
    """Return t_ns, x, y, p of a data-dependent number of events."""
    n = torch.library.get_ctx().new_dynamic_size(min=0)
    return (buffer.new_empty((n,), dtype=torch.int64), buffer.new_empty((n,), dtype=torch.uint16),
            buffer.new_empty((n,), dtype=torch.uint16), buffer.new_empty((n,), dtype=torch.uint8))


def _trigger_columns_fake(buffer):
    """Return t_ns, channel, edge of a data-dependent number of trigger edges."""
    n = torch.library.get_ctx().new_dynamic_size(min=0)
    return (buffer.new_empty((n,), dtype=torch.int64), buffer.new_empty((n,), dtype=torch.uint8),
            buffer.new_empty((n,), dtype=torch.uint8))


def _stats_fake(buffer):
    return buffer.new_empty((4,), dtype=torch.int64)


@torch.library.register_fake('veckm_flow::decode_evt3')
def _decode_evt3_fake(buffer, state, width, height):
    return (*_event_columns_fake(buffer), *_trigger_columns_fake(buffer), _stats_fake(buffer))


@torch.library.register_fake('veckm_flow::decode_libcaer_cmp')
def _decode_libcaer_cmp_fake(buffer, state, time_base_ns, width, height):
    return (*_event_columns_fake(buffer), _stats_fake(buffer))


@torch.library.register_fake('veckm_flow::decode_libcaer')
def _decode_libcaer_fake(buffer, time_base_ns, width, height):
    return (*_event_columns_fake(buffer), _stats_fake(buffer))


@torch.library.register_fake('veckm_flow::decode_mono')
def _decode_mono_fake(buffer, time_base_ns, width, height):
    return (*_event_columns_fake(buffer), _stats_fake(buffer))


@torch.library.register_fake('veckm_flow::decode_trigger')
def _decode_trigger_fake(buffer, time_base_ns):
    return (*_trigger_columns_fake(buffer), _stats_fake(buffer))
