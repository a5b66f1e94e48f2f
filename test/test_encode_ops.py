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

"""The compiled encode / flow_mlp ops against the pure-torch references (CPU; CUDA if built)."""

import math

import pytest
import torch

from veckm_flow_ros import ops
from veckm_flow_ros.core import reference
from veckm_flow_ros.core.symmetry import symmetric_frequencies


def _devices():
    devices = ['cpu']
    if torch.cuda.is_available():
        devices.append('cuda')
    return devices


DEVICES = pytest.mark.parametrize('device', _devices())
# The fast encoding and the paper's Algorithm 1 as written (the benchmark's baseline): the same
# contract, so the same tests.


def _on_path(path):
    """ops.encode forced onto one of its two paths (same name, for opcheck)."""
    def encode(*args):
        with ops.forced_encode_path(path):
            return ops.encode(*args)
    encode.path = path
    return encode


ENCODE_OPS = pytest.mark.parametrize('encode', [_on_path('dense'), _on_path('sparse'),
                                                ops.encode_naive],
                                     ids=['encode', 'encode_sparse', 'encode_naive'])


def _frequencies(d, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return tuple(5.0 * torch.randn(d, generator=generator) for _ in range(3))


def _random_events(n, width, height, seed, margin=0, span_ns=24_000_000,
                   t0_ns=1_700_000_000_000_000_000):
    generator = torch.Generator().manual_seed(seed)
    t_ns = torch.randint(0, span_ns, (n,), generator=generator).sort().values + t0_ns
    x = torch.randint(-margin, width + margin, (n,), generator=generator, dtype=torch.int32)
    y = torch.randint(-margin, height + margin, (n,), generator=generator, dtype=torch.int32)
    return t_ns, x, y


def _relative_error(features, expected):
    """Per-target relative L2 error (targets with zero reference features use absolute)."""
    difference = (features.double().cpu() - expected).norm(dim=1)
    return (difference / expected.norm(dim=1).clamp(min=1.0)).max().item()


def _encode_both(device, t_ns, x, y, targets, width, height, radius, d=64, tau_s=0.012,
                 encode=ops.encode):
    freq_t, freq_x, freq_y = _frequencies(d)
    expected, expected_count = reference.encode_closed_form(
        t_ns, x, y, targets, width, height, freq_t, freq_x, freq_y, tau_s, radius)
    features, count = encode(
        t_ns.to(device), x.to(device), y.to(device), targets.to(device), width, height,
        freq_t.to(device), freq_x.to(device), freq_y.to(device), tau_s, radius)
    assert features.shape == (len(targets), 2 * d) and features.dtype == torch.float32
    assert count.shape == (len(targets),) and count.dtype == torch.int32
    assert features.device.type == device
    return features.cpu(), count.cpu(), expected, expected_count


@ENCODE_OPS
@DEVICES
@pytest.mark.parametrize('width, height, radius, n', [
    (40, 30, 8, 1000), (25, 70, 10, 1000), (64, 48, 8, 400), (9, 5, 10, 300), (33, 33, 3, 800)])
def test_encode_matches_closed_form(encode, device, width, height, radius, n):
    t_ns, x, y = _random_events(n, width, height, seed=width + radius, margin=2)
    targets = torch.arange(0, n, 3)
    features, count, expected, expected_count = _encode_both(
        device, t_ns, x, y, targets, width, height, radius, encode=encode)
    assert torch.equal(count.long(), expected_count)
    assert _relative_error(features, expected) <= 1e-4
    assert torch.isfinite(features).all()


@ENCODE_OPS
@DEVICES
def test_duplicate_pixels_and_borders(encode, device):
    # Many events on few pixels, including the four corners and the image edges.
    width, height, radius = 20, 12, 8
    generator = torch.Generator().manual_seed(3)
    pixels = torch.tensor([[0, 0], [19, 0], [0, 11], [19, 11], [10, 0], [0, 6], [19, 5], [7, 7]])
    choice = torch.randint(0, len(pixels), (300,), generator=generator)
    x, y = pixels[choice, 0].int(), pixels[choice, 1].int()
    t_ns = torch.randint(0, 30_000_000, (300,), generator=generator)
    targets = torch.arange(300)
    features, count, expected, expected_count = _encode_both(
        device, t_ns, x, y, targets, width, height, radius, encode=encode)
    assert torch.equal(count.long(), expected_count)
    assert _relative_error(features, expected) <= 1e-4


@ENCODE_OPS
@DEVICES
def test_single_event_is_sqrt_d(encode, device):
    t_ns = torch.tensor([123_456_789], dtype=torch.int64)
    x = torch.tensor([5], dtype=torch.int32)
    y = torch.tensor([7], dtype=torch.int32)
    features, count, _, _ = _encode_both(device, t_ns, x, y, torch.tensor([0]), 10, 10, 8,
                                         encode=encode)
    assert count.tolist() == [1]
    # exp(i 0) * sqrt(D) / 1 for every channel.
    assert torch.allclose(features[0, :64], torch.full((64,), math.sqrt(64.0)), atol=1e-5)
    assert torch.allclose(features[0, 64:], torch.zeros(64), atol=1e-5)


@ENCODE_OPS
@DEVICES
def test_empty_inputs(encode, device):
    freq_t, freq_x, freq_y = (f.to(device) for f in _frequencies(64))
    empty_i64 = torch.empty(0, dtype=torch.int64, device=device)
    empty_i32 = torch.empty(0, dtype=torch.int32, device=device)
    features, count = encode(empty_i64, empty_i32, empty_i32, empty_i64, 64, 48,
                             freq_t, freq_x, freq_y, 0.012, 8)
    assert features.shape == (0, 128) and count.shape == (0,)
    t_ns, x, y = _random_events(50, 64, 48, seed=1)
    features, count = encode(t_ns.to(device), x.to(device), y.to(device), empty_i64, 64, 48,
                             freq_t, freq_x, freq_y, 0.012, 8)
    assert features.shape == (0, 128)
    flow = ops.flow_mlp(torch.empty(0, 128, device=device), torch.ones(128, 16, device=device),
                        torch.ones(16, 16, device=device), torch.ones(16, 2, device=device))
    assert flow.shape == (0, 2)


@ENCODE_OPS
@DEVICES
def test_target_outside_image_is_invalid_not_nan(encode, device):
    t_ns = torch.tensor([0, 1000, 2000, 3000], dtype=torch.int64)
    x = torch.tensor([3, 4, 12, -1], dtype=torch.int32)
    y = torch.tensor([3, 3, 3, 2], dtype=torch.int32)
    features, count, expected, expected_count = _encode_both(
        device, t_ns, x, y, torch.arange(4), 10, 10, 8, encode=encode)
    assert count.tolist() == [2, 2, 0, 0]
    assert torch.equal(count.long(), expected_count)
    assert torch.isfinite(features).all()
    assert (features[2:] == 0).all()


@ENCODE_OPS
@DEVICES
@pytest.mark.parametrize('case', ['targets_outside', 'all_events_outside'])
def test_nothing_inside_to_pool(encode, device, case):
    # Only out-of-image targets (events inside exist), or no event inside the image at all:
    # the kernels' early exits must still return zero features and count 0 for every target.
    t_ns = torch.arange(6, dtype=torch.int64) * 1000
    if case == 'targets_outside':
        x = torch.tensor([1, 2, 3, 20, -4, 30], dtype=torch.int32)
        targets = torch.tensor([3, 4, 5, 5])
    else:
        x = torch.tensor([20, 21, -1, -2, 40, 50], dtype=torch.int32)
        targets = torch.arange(6)
    y = torch.full((6,), 2, dtype=torch.int32)
    features, count, expected, expected_count = _encode_both(
        device, t_ns, x, y, targets, 10, 10, 3, encode=encode)
    assert torch.equal(count.long(), expected_count) and (count == 0).all()
    assert (features == 0).all()


@ENCODE_OPS
@DEVICES
def test_absolute_timestamps_keep_precision(encode, device):
    # ROS stamps (~1.7e9 s) would lose ~100 s of resolution in float32; the op takes int64 ns.
    t_ns, x, y = _random_events(500, 30, 20, seed=5, t0_ns=0)
    targets = torch.arange(0, 500, 5)
    near, _, _, _ = _encode_both(device, t_ns, x, y, targets, 30, 20, 8, encode=encode)
    far, _, expected, _ = _encode_both(device, t_ns + 1_700_000_000_123_456_789, x, y, targets,
                                       30, 20, 8, encode=encode)
    assert _relative_error(far, expected) <= 1e-4
    assert torch.allclose(near, far, atol=1e-4)


@DEVICES
@pytest.mark.parametrize('span_ns', [2_000_000_000, 60_000_000_000])
def test_long_time_spans(device, span_ns):
    # The CPU kernel tabulates time phasors over the call's span: 2 s is a long table, 60 s
    # exceeds its size limit and takes the direct sine/cosine path. Both must stay exact.
    t_ns, x, y = _random_events(400, 20, 16, seed=9, span_ns=span_ns)
    targets = torch.arange(0, 400, 3)
    features, count, expected, expected_count = _encode_both(device, t_ns, x, y, targets, 20,
                                                             16, 8)
    assert torch.equal(count.long(), expected_count)
    assert _relative_error(features, expected) <= 1e-4


def _repeating_frequencies(case):
    """Time frequencies that repeat with a period, as the symmetric models' do."""
    if case in ('c4', 'd4'):
        return symmetric_frequencies(64, seed=3, group_name=case)
    freq_t, freq_x, freq_y = _frequencies(64, seed=4)
    freq_t = freq_t[:16].repeat(4)
    if case == 'almost':  # one entry breaks the period: every channel computed on its own
        freq_t[63] += 0.5
    return freq_t, freq_x, freq_y


@pytest.mark.parametrize('case', ['c4', 'd4', 'period16', 'almost'])
@pytest.mark.parametrize('span_ns', [24_000_000, 60_000_000_000])
def test_repeating_time_frequencies(case, span_ns):
    # The CPU kernel computes time phasors once per distinct time frequency when T repeats
    # with a period (16 of 64 for a C4 model); tabulated (24 ms) and direct (60 s) paths.
    width, height, radius, n = 48, 36, 8, 1200
    t_ns, x, y = _random_events(n, width, height, seed=12, margin=2, span_ns=span_ns)
    targets = torch.arange(0, n, 3)
    freq_t, freq_x, freq_y = _repeating_frequencies(case)
    expected, expected_count = reference.encode_closed_form(
        t_ns, x, y, targets, width, height, freq_t, freq_x, freq_y, 0.012, radius)
    features, count = ops.encode(t_ns, x, y, targets, width, height, freq_t, freq_x, freq_y,
                                 0.012, radius)
    assert torch.equal(count.long(), expected_count)
    assert _relative_error(features, expected) <= 1e-4


@DEVICES
def test_uint16_coordinates_accepted(device):
    t_ns, x, y = _random_events(300, 40, 30, seed=8)
    targets = torch.arange(0, 300, 2)
    freq_t, freq_x, freq_y = (f.to(device) for f in _frequencies(64))
    as_int32 = ops.encode(t_ns.to(device), x.to(device), y.to(device), targets.to(device), 40,
                          30, freq_t, freq_x, freq_y, 0.016, 10)
    as_uint16 = ops.encode(t_ns.to(device), x.to(torch.uint16).to(device),
                           y.to(torch.uint16).to(device), targets.to(device), 40, 30, freq_t,
                           freq_x, freq_y, 0.016, 10)
    assert torch.equal(as_int32[0], as_uint16[0]) and torch.equal(as_int32[1], as_uint16[1])


@DEVICES
def test_algorithm1_baseline_matches_closed_form(device):
    t_ns, x, y = _random_events(800, 40, 30, seed=11, margin=1)
    targets = torch.arange(0, 800, 4)
    freq_t, freq_x, freq_y = _frequencies(64)
    expected, expected_count = reference.encode_closed_form(
        t_ns, x, y, targets, 40, 30, freq_t, freq_x, freq_y, 0.012, 8)
    features, count = reference.encode_algorithm1(
        t_ns.to(device), x.to(device), y.to(device), targets.to(device), 40, 30,
        freq_t.to(device), freq_x.to(device), freq_y.to(device), 0.012, 8)
    assert torch.equal(count.cpu(), expected_count)
    assert _relative_error(features.cpu(), expected) <= 1e-4


@DEVICES
@pytest.mark.parametrize('rows, hidden', [(3001, 128), (5, 128), (29, 32), (100, 24)])
def test_flow_mlp_matches_reference(device, rows, hidden):
    # Row counts off the CPU kernel's 6-row blocks and 24-row tiles; hidden 24 is not a
    # multiple of 16 and takes the BLAS path.
    generator = torch.Generator().manual_seed(2)
    features = torch.randn(rows, 128, generator=generator) * 3
    w1 = torch.randn(128, hidden, generator=generator) / 11
    w2 = torch.randn(hidden, hidden, generator=generator) / math.sqrt(hidden)
    w3 = torch.randn(hidden, 2, generator=generator) / math.sqrt(hidden)
    flow = ops.flow_mlp(features.to(device), w1.to(device), w2.to(device), w3.to(device), 60.0)
    expected = reference.flow_mlp_reference(features, w1, w2, w3, 60.0)
    error = (flow.cpu().double() - expected).norm(dim=1) / expected.norm(dim=1).clamp(min=1e-3)
    assert error.max().item() <= 1e-4


@DEVICES
def test_argument_checks_name_the_argument(device):
    t_ns, x, y = (a.to(device) for a in _random_events(10, 8, 8, seed=0))
    freq_t, freq_x, freq_y = (f.to(device) for f in _frequencies(64))
    targets = torch.arange(10, device=device)
    with pytest.raises(RuntimeError, match='x must have dtype'):
        ops.encode(t_ns, x.float(), y, targets, 8, 8, freq_t, freq_x, freq_y, 0.012, 8)
    with pytest.raises(RuntimeError, match='t_ns must have dtype'):
        ops.encode(t_ns.double(), x, y, targets, 8, 8, freq_t, freq_x, freq_y, 0.012, 8)
    if device == 'cpu':
        with pytest.raises(RuntimeError, match='target_index'):
            ops.encode(t_ns, x, y, torch.tensor([10], device=device), 8, 8, freq_t, freq_x,
                       freq_y, 0.012, 8)
    else:  # flagged without a host sync: count -1 (test_device_sync.py)
        _, count = ops.encode(t_ns, x, y, torch.tensor([10], device=device), 8, 8, freq_t,
                              freq_x, freq_y, 0.012, 8)
        assert count.tolist() == [-1]
    with pytest.raises(RuntimeError, match='pixel_radius'):
        ops.encode(t_ns, x, y, targets, 8, 8, freq_t, freq_x, freq_y, 0.012, 0)
    with pytest.raises(RuntimeError, match='same length D'):
        ops.encode(t_ns, x, y, targets, 8, 8, freq_t, freq_x[:5], freq_y, 0.012, 8)
    with pytest.raises(RuntimeError, match='tau_s'):
        ops.encode(t_ns, x, y, targets, 8, 8, freq_t, freq_x, freq_y, -1.0, 8)
    with pytest.raises(RuntimeError, match='w2 must be'):
        ops.flow_mlp(*(torch.zeros(shape, device=device)
                       for shape in ((3, 128), (128, 16), (15, 16), (16, 2))))


@ENCODE_OPS
@DEVICES
def test_encode_naive_equals_encode_on_a_dense_scene(encode, device):
    # Algorithm 1 as written against the box-sum kernels: the same counts and features, on a
    # dense 64 x 48 scene with out-of-image events (the baseline's speed-up is a fair ratio).
    t_ns, x, y = _random_events(6000, 64, 48, seed=21, margin=3)
    targets = torch.arange(0, 6000, 2)
    freqs = [f.to(device) for f in _frequencies(64, seed=5)]
    inputs = [a.to(device) for a in (t_ns, x, y, targets)]
    fast, fast_count = ops.encode(*inputs, 64, 48, *freqs, 0.012, 10)
    features, count = encode(*inputs, 64, 48, *freqs, 0.012, 10)
    assert torch.equal(count, fast_count)
    assert _relative_error(features.cpu(), fast.double().cpu()) <= 1e-5


def test_every_op_has_a_wrapper():
    registered = {name.split('::')[1] for name in torch._C._dispatch_get_all_op_names()
                  if name.startswith('veckm_flow::')}
    assert registered == {'encode', 'encode_naive', 'flow_mlp', 'flow_mlp_c4', 'decode_evt3',
                          'decode_libcaer_cmp', 'decode_libcaer', 'decode_mono',
                          'decode_trigger'}
    for name in registered:
        assert callable(getattr(ops, name)) and getattr(ops, name).__doc__


# The sparse path is the same op (same schema and fake): opcheck once, on the dense path.
@pytest.mark.parametrize('encode', [_on_path('dense'), ops.encode_naive],
                         ids=['encode', 'encode_naive'])
@DEVICES
def test_opcheck_encode(encode, device):
    t_ns, x, y = _random_events(200, 16, 12, seed=4, margin=1)
    freq_t, freq_x, freq_y = _frequencies(8)
    targets = torch.arange(0, 200, 7)
    op = getattr(torch.ops.veckm_flow, encode.__name__).default
    with ops.forced_encode_path(getattr(encode, 'path', 'auto')):
        torch.library.opcheck(op, tuple(a.to(device) if isinstance(a, torch.Tensor) else a
                                        for a in (t_ns, x, y, targets, 16, 12, freq_t, freq_x,
                                                  freq_y, 0.012, 3)))


@DEVICES
def test_opcheck_flow_mlp(device):
    generator = torch.Generator().manual_seed(6)
    args = [torch.randn(shape, generator=generator).to(device)
            for shape in ((20, 16), (16, 8), (8, 8), (8, 2))]
    torch.library.opcheck(torch.ops.veckm_flow.flow_mlp.default, (*args, 2.0))


@pytest.mark.skipif(not ops.has_flow_mlp_c4(), reason='flow_mlp_c4 needs x86-64 AVX2 + FMA')
def test_opcheck_flow_mlp_c4():
    # CPU only (no CUDA kernel): blocks for C_in = C_out = 16 in 2 input groups.
    generator = torch.Generator().manual_seed(7)
    blocks = [torch.randn(n, n, generator=generator) for n in (16, 16, 32, 16, 16, 32)]
    torch.library.opcheck(torch.ops.veckm_flow.flow_mlp_c4.default,
                          (torch.randn(30, 64, generator=generator), blocks,
                           torch.randn(64, 2, generator=generator), 2, 3.0))


def test_cpu_threads_split_skewed_scenes_alike():
    # Dense rows next to sparse ones (a real scene's shape): the CPU kernel cuts slots and
    # target rows into parts of equal estimated cost, one per thread; any split must give
    # the closed form's features.
    width, height, radius, n = 320, 90, 8, 40000
    t_ns, x, y = _random_events(n, width, height, seed=11)
    dense = torch.arange(n) % 10 != 0
    y = torch.where(dense, y % 6 + 40, y)
    targets = torch.arange(0, n, 7)
    freq_t, freq_x, freq_y = _frequencies(64)
    previous = torch.get_num_threads()
    results = []
    try:
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            results.append(ops.encode(t_ns, x, y, targets, width, height, freq_t, freq_x,
                                      freq_y, 0.012, radius))
    finally:
        torch.set_num_threads(previous)
    checked = torch.arange(0, len(targets), 23)
    expected, expected_count = reference.encode_closed_form(
        t_ns, x, y, targets[checked], width, height, freq_t, freq_x, freq_y, 0.012, radius)
    for features, count in results:
        assert torch.equal(count[checked].long(), expected_count)
        assert _relative_error(features[checked], expected) <= 1e-4
        assert _relative_error(features, results[0][0].double()) <= 1e-5


def test_rows_far_below_a_heavy_region_carry_no_rounding_from_it():
    """
    Rows far below a band of heavy pixels are as exact as without the band.

    The CPU kernel's column sums are float32 and re-anchored; without that, the rounding of
    the band's large sums would ride down the image in every column (measured: 3.4e-5).
    """
    width, height, radius = 160, 240, 8
    generator = torch.Generator().manual_seed(7)
    # A band of 40 rows with 60 events per pixel, then one event per column every 8 rows.
    band_y, band_x = torch.meshgrid(torch.arange(40), torch.arange(width), indexing='ij')
    heavy_x = band_x.reshape(-1).repeat(60).to(torch.int32)
    heavy_y = band_y.reshape(-1).repeat(60).to(torch.int32)
    sparse_y, sparse_x = torch.meshgrid(torch.arange(40, height, 8), torch.arange(width),
                                        indexing='ij')
    sparse_x = sparse_x.reshape(-1).to(torch.int32)
    sparse_y = (sparse_y.reshape(-1) + torch.randint(0, 8, (sparse_x.numel(),),
                                                     generator=generator)).to(torch.int32)
    heavy_t, sparse_t = (torch.randint(0, 24_000_000, (len(x),), generator=generator) + 10**18
                         for x in (heavy_x, sparse_x))
    freq_t, freq_x, freq_y = _frequencies(64, seed=3)

    def encode(t_ns, x, y, targets):
        return ops.encode(t_ns, x, y, targets, width, height, freq_t, freq_x, freq_y, 0.012,
                          radius)[0]

    # Targets in every row (so the window slides from the band down); compared below row 120.
    with_band = encode(torch.cat([heavy_t, sparse_t]), torch.cat([heavy_x, sparse_x]),
                       torch.cat([heavy_y, sparse_y]),
                       torch.cat([torch.arange(0, heavy_x.numel(), 97),
                                  heavy_x.numel() + torch.arange(sparse_x.numel())]))
    alone = encode(sparse_t, sparse_x, sparse_y, torch.arange(sparse_x.numel()))
    far = sparse_y >= 120
    compared = with_band[-sparse_x.numel():][far].double()
    assert _relative_error(compared, alone[far].double()) <= 2e-6


def test_cpu_features_do_not_depend_on_the_thread_count():
    """Bands of rows per thread start at the anchor of their first row: bitwise the same."""
    t_ns, x, y = _random_events(60_000, 200, 300, seed=11)
    targets = torch.arange(0, 60_000, 5)
    freq_t, freq_x, freq_y = _frequencies(64, seed=4)
    threads = torch.get_num_threads()
    results = []
    try:
        for count in (1, 2, 3, 5):
            torch.set_num_threads(count)
            results.append(ops.encode(t_ns, x, y, targets, 200, 300, freq_t, freq_x, freq_y,
                                      0.012, 8)[0])
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(results[0], other) for other in results[1:])


# ---- the two paths of encode on the same inputs ------------------------------------------------

def _sparse_and_dense(device, t_ns, x, y, targets, width, height, radius, seed=0):
    freqs = [f.to(device) for f in _frequencies(64, seed=seed)]
    inputs = [a.to(device) for a in (t_ns, x, y, targets)]
    results = {}
    for path in ('dense', 'sparse'):
        with ops.forced_encode_path(path):
            results[path] = ops.encode(*inputs, width, height, *freqs, 0.012, radius)
    (dense, dense_count), (sparse, sparse_count) = results['dense'], results['sparse']
    return dense.cpu(), dense_count.cpu(), sparse.cpu(), sparse_count.cpu()


def _pixels_at(pixels, n, seed):
    generator = torch.Generator().manual_seed(seed)
    choice = torch.randint(0, len(pixels), (n,), generator=generator)
    t_ns = torch.randint(0, 24_000_000, (n,), generator=generator).sort().values
    return t_ns, pixels[choice, 0].int(), pixels[choice, 1].int()


def _sparse_case(case):
    """(t_ns, x, y, targets, width, height, radius) of an edge case of the sparse path."""
    if case == 'random_with_outside':
        t_ns, x, y = _random_events(3000, 80, 60, seed=31, margin=4)
        return t_ns, x, y, torch.arange(0, 3000, 37), 80, 60, 10
    if case == 'all_targets':
        t_ns, x, y = _random_events(2000, 50, 40, seed=32)
        return t_ns, x, y, torch.arange(2000), 50, 40, 8
    if case == 'one_target':
        t_ns, x, y = _random_events(2000, 50, 40, seed=33)
        return t_ns, x, y, torch.tensor([1234]), 50, 40, 8
    if case == 'single_event':
        return (torch.tensor([5_000]), torch.tensor([0], dtype=torch.int32),
                torch.tensor([39], dtype=torch.int32), torch.tensor([0]), 50, 40, 8)
    if case == 'duplicate_pixels_and_corners':
        pixels = torch.tensor([[0, 0], [49, 0], [0, 39], [49, 39], [25, 0], [0, 20], [7, 7]])
        t_ns, x, y = _pixels_at(pixels, 500, seed=34)
        return t_ns, x, y, torch.tensor([0, 3, 3, 250, 499, 17]), 50, 40, 8
    if case == 'window_larger_than_image':
        t_ns, x, y = _random_events(300, 9, 5, seed=35)
        return t_ns, x, y, torch.arange(0, 300, 5), 9, 5, 10
    if case == 'targets_outside_only':
        t_ns, x, y = _random_events(400, 30, 20, seed=36, margin=3)
        outside = torch.nonzero((x < 0) | (x >= 30) | (y < 0) | (y >= 20)).flatten()
        return t_ns, x, y, outside[:5], 30, 20, 4
    assert case == 'no_targets'
    t_ns, x, y = _random_events(400, 30, 20, seed=37)
    return t_ns, x, y, torch.empty(0, dtype=torch.int64), 30, 20, 4


SPARSE_CASES = ['random_with_outside', 'all_targets', 'one_target', 'single_event',
                'duplicate_pixels_and_corners', 'window_larger_than_image',
                'targets_outside_only', 'no_targets']


@DEVICES
@pytest.mark.parametrize('case', SPARSE_CASES)
def test_sparse_path_equals_dense_path(device, case):
    # The two paths sum the same Q (float32) in float64 in different orders (and, on the CPU,
    # the dense path's phasors come from tables and its column sums are float32): equal counts,
    # features within float32 rounding of the largest feature.
    t_ns, x, y, targets, width, height, radius = _sparse_case(case)
    dense, dense_count, sparse, sparse_count = _sparse_and_dense(
        device, t_ns, x, y, targets, width, height, radius)
    assert torch.equal(dense_count, sparse_count)
    assert sparse.shape == dense.shape == (len(targets), 128)
    assert torch.isfinite(sparse).all()
    if len(targets):
        assert _relative_error(sparse, dense.double()) <= (4e-6 if device == 'cpu' else 1e-6)
    invalid = sparse_count == 0
    assert not sparse[invalid].any()  # targets outside the image: zero features


@DEVICES
def test_sparse_path_on_a_large_sparse_frame(device):
    # A 640 x 480 frame with 1 % targets: the case the sparse path exists for.
    t_ns, x, y = _random_events(40_000, 640, 480, seed=38)
    targets = torch.arange(0, 40_000, 100)
    dense, dense_count, sparse, sparse_count = _sparse_and_dense(
        device, t_ns, x, y, targets, 640, 480, 10)
    assert torch.equal(dense_count, sparse_count)
    assert _relative_error(sparse, dense.double()) <= (4e-6 if device == 'cpu' else 1e-6)


def test_encode_path_variable_is_checked(monkeypatch):
    t_ns, x, y = _random_events(50, 16, 12, seed=39)
    freqs = _frequencies(8)
    monkeypatch.setenv(ops.ENCODE_PATH_VARIABLE, 'fastest')
    with pytest.raises(RuntimeError, match="must be dense, sparse or auto, got 'fastest'"):
        ops.encode(t_ns, x, y, torch.tensor([0]), 16, 12, *freqs, 0.012, 3)
    with pytest.raises(ValueError, match="got 'fastest'"):
        with ops.forced_encode_path('fastest'):
            pass
