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
The estimator's device form waits for the device once per block: for its finished flows.

On the CPU the device form (sync_free=True) runs with a torch dispatch mode that records
every op which, on a GPU, makes the host wait for the device (item(), int()/bool() of a
tensor, nonzero, boolean-mask indexing, unique, ...); the only wait allowed is the
HostReader's read of each block's flows, which the estimator counts. On a GPU the same stream
runs under torch.cuda.set_sync_debug_mode('error'), which raises at any stream sync or
blocking copy; the finished flows' read is an event wait, which it allows.
"""

import pathlib

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from veckm_flow_ros import ops
from veckm_flow_ros.core.estimator import NormalFlowEstimator
from veckm_flow_ros.eventio.events import EventArray

DEMO_NPZ = pathlib.Path(__file__).resolve().parents[1] / 'veckm_flow_ros' / 'data' / \
    'demo_scene.npz'
aten = torch.ops.aten
# Ops whose result size or value the host must read from the device.
WAITING_OPS = {aten._local_scalar_dense, aten.nonzero, aten.masked_select, aten.is_nonzero,
               aten.equal, aten._unique, aten._unique2, aten.unique_consecutive,
               aten.unique_dim, aten.repeat_interleave, aten.masked_scatter}
# The second look at slow flows (the shipped models' default use) and the paths of strided,
# capped and out-of-window targets.
OPTIONS = [{'long_context_below_px_s': 150.0},
           {'long_context_below_px_s': 150.0, 'target_stride': 3, 'min_validity': 0.2},
           {'max_flows_per_block': 300, 'causal': True},
           {'block_s': 0.040}]


class WaitRecorder(TorchDispatchMode):
    """Records the ops that would make the host wait for a GPU (WAITING_OPS, mask indexing)."""

    def __init__(self):
        super().__init__()
        self.waits = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        packet = func.overloadpacket
        masked = packet in (aten.index, aten.index_put, aten.index_put_) and any(
            isinstance(index, torch.Tensor) and index.dtype == torch.bool
            for index in args[1] if index is not None)
        if packet in WAITING_OPS or masked:
            self.waits.append(str(func))
        return func(*args, **kwargs)


def _demo_packets(count, packet_ns=1_000_000):
    data = np.load(DEMO_NPZ)
    t_ns = data['t'].astype(np.int64)
    events = EventArray(t_ns, data['x'], data['y'], data['p'])
    edges = np.searchsorted(t_ns, np.arange(t_ns[0], t_ns[-1] + packet_ns, packet_ns))
    packets = [events[a:b] for a, b in zip(edges[:-1], edges[1:]) if b > a]
    return packets[:count], int(data['width']), int(data['height'])


def _flows(blocks):
    return (np.concatenate([b.event_index for b in blocks]),
            np.concatenate([np.stack([b.u_px_s, b.v_px_s], 1) for b in blocks]),
            np.concatenate([b.validity for b in blocks]))


@pytest.mark.parametrize('options', OPTIONS)
def test_device_form_waits_only_for_the_finished_flows(model, options):
    packets, width, height = _demo_packets(130 if 'block_s' in options else 70)
    estimator = NormalFlowEstimator(model, width, height, sync_free=True,
                                    **{'block_s': 0.010, **options})
    warm = [block for packet in packets[:40] for block in estimator.push(packet)]
    reads = estimator.host_reads
    recorder = WaitRecorder()
    with recorder:
        blocks = [block for packet in packets[40:] for block in estimator.push(packet)]
    assert len(blocks) >= 2 and warm
    assert recorder.waits == []
    assert estimator.host_reads - reads == len(blocks)  # one read per block


def test_cpu_form_reads_device_values_where_the_device_form_does_not(model):
    """The recorder sees the CPU form's compaction of slow flows (so the test above can fail)."""
    packets, width, height = _demo_packets(60)
    estimator = NormalFlowEstimator(model, width, height, block_s=0.010,
                                    long_context_below_px_s=150.0)
    recorder = WaitRecorder()
    with recorder:
        blocks = [block for packet in packets for block in estimator.push(packet)]
    assert blocks and 'aten.nonzero.default' in recorder.waits


@pytest.mark.parametrize('options', OPTIONS)
def test_device_form_gives_the_cpu_form_flows(model, options):
    """Fixed shapes change nothing: the same flows, validities and counts on the CPU."""
    packets, width, height = _demo_packets(60)
    results = []
    for sync_free in (False, True):
        estimator = NormalFlowEstimator(model, width, height, sync_free=sync_free,
                                        **{'block_s': 0.010, **options})
        blocks = [b for packet in packets for b in estimator.push(packet)] + estimator.flush()
        results.append((_flows(blocks), [b.long_context for b in blocks],
                        estimator.long_context_flows, estimator.low_validity_flows))
    (cpu, cpu_looked, *cpu_counts), (device, device_looked, *device_counts) = results
    np.testing.assert_array_equal(device[0], cpu[0])
    np.testing.assert_array_equal(device[2], cpu[2])
    np.testing.assert_allclose(device[1], cpu[1], rtol=1e-5, atol=1e-3)
    assert device_looked == cpu_looked and device_counts == cpu_counts
    if options.get('long_context_below_px_s'):
        assert cpu_counts[0] > 100


@pytest.mark.skipif(not torch.cuda.is_available(), reason='no CUDA device')
@pytest.mark.parametrize('options', OPTIONS)
def test_cuda_stream_has_no_host_sync_but_the_flows(model, options):
    packets, width, height = _demo_packets(130)
    estimator = NormalFlowEstimator(model, width, height, device='cuda',
                                    **{'block_s': 0.010, **options})
    assert estimator.sync_free
    for packet in packets[:40]:  # first blocks: kernel loading, allocator growth
        estimator.push(packet)
    reads = estimator.host_reads
    torch.cuda.set_sync_debug_mode('error')
    try:
        blocks = [block for packet in packets[40:] for block in estimator.push(packet)]
    finally:
        torch.cuda.set_sync_debug_mode('default')
    assert len(blocks) >= 4
    assert estimator.host_reads - reads == len(blocks)


@pytest.mark.skipif(not torch.cuda.is_available(), reason='no CUDA device')
@pytest.mark.parametrize('path', ['dense', 'sparse'])
def test_cuda_encode_flags_bad_targets_without_a_sync(model, path):
    """A target index outside the events: count -1 and zero features, the others untouched."""
    generator = torch.Generator().manual_seed(4)
    n, width, height = 3000, 64, 48
    t_ns = torch.randint(0, 20_000_000, (n,), generator=generator).sort().values
    x = torch.randint(0, width, (n,), generator=generator, dtype=torch.int32)
    y = torch.randint(0, height, (n,), generator=generator, dtype=torch.int32)
    targets = torch.tensor([5, n, 17, -1, n - 1])
    arguments = (width, height, model.freq_t, model.freq_x, model.freq_y, model.tau_s,
                 model.pixel_radius)
    good = targets[[0, 2, 4]]
    expected, expected_count = ops.encode(t_ns, x, y, good, *arguments)
    cuda = [tensor.cuda() for tensor in (t_ns, x, y, targets)]
    arguments_cuda = arguments[:2] + tuple(f.cuda() for f in arguments[2:5]) + arguments[5:]
    with ops.forced_encode_path(path):
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode('error')
        try:
            features, count = ops.encode(*cuda, *arguments_cuda)
        finally:
            torch.cuda.set_sync_debug_mode('default')
    features, count = features.cpu(), count.cpu()
    first, second, last = expected_count.tolist()
    assert count.tolist() == [first, -1, second, -1, last]
    assert not features[[1, 3]].any()
    scale = expected.abs().max()
    assert (features[[0, 2, 4]] - expected).abs().max() <= 1e-4 * scale
