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
CUDA against CPU: the estimator and the rotation ensemble give the same flows on both devices.

The op-level CUDA tests are the device-parametrised tests of test_encode_ops.py; these check
the paths above the ops (streaming blocks, model on the device, confidence) on a real scene,
and the CUDA kernel's chunking of the column sums on a very wide sensor. All skip without a
GPU (CI has none; they run on the GPU machine, see scripts/device_check.sh).
"""

import pathlib

import numpy as np
import pytest
import torch

from veckm_flow_ros import ops
from veckm_flow_ros.core import reference
from veckm_flow_ros.core.estimator import NormalFlowEstimator
from veckm_flow_ros.eventio.events import EventArray

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason='no CUDA device')

DEMO_NPZ = pathlib.Path(__file__).resolve().parents[1] / 'veckm_flow_ros' / 'data' / \
    'demo_scene.npz'


def _demo_packets(packet_ns=1_000_000):
    data = np.load(DEMO_NPZ)
    t_ns = data['t'].astype(np.int64)  # the simulator's npz stores int64 ns
    events = EventArray(t_ns, data['x'], data['y'], data['p'])
    edges = np.searchsorted(t_ns, np.arange(t_ns[0], t_ns[-1] + packet_ns, packet_ns))
    packets = [events[a:b] for a, b in zip(edges[:-1], edges[1:]) if b > a]
    return packets, int(data['width']), int(data['height'])


def _stream(model, device, packets, width, height, **options):
    estimator = NormalFlowEstimator(model, width, height, device=device, **options)
    blocks = [b for packet in packets for b in estimator.push(packet)] + estimator.flush()
    index = np.concatenate([b.event_index for b in blocks])
    flow = np.concatenate([np.stack([b.u_px_s, b.v_px_s], 1) for b in blocks])
    confidence = None
    if options.get('confidence'):
        confidence = np.concatenate([b.confidence for b in blocks])
    return index, flow, confidence


def _relative(a, b):
    scale = max(float(np.abs(b).max()), 1.0)
    return float(np.abs(a - b).max()) / scale


@pytest.mark.parametrize('causal', [False, True])
def test_estimator_cuda_equals_cpu_on_demo_scene(model, causal):
    packets, width, height = _demo_packets()
    index_cpu, flow_cpu, _ = _stream(model, 'cpu', packets, width, height, causal=causal)
    index_gpu, flow_gpu, _ = _stream(model, 'cuda', packets, width, height, causal=causal)
    assert len(index_cpu) == sum(len(p) for p in packets)
    np.testing.assert_array_equal(index_gpu, index_cpu)
    assert np.isfinite(flow_gpu).all()
    assert _relative(flow_gpu, flow_cpu) <= 1e-4


@pytest.mark.parametrize('options', [{'target_stride': 3}, {'block_s': 0.040},
                                     {'max_flows_per_block': 500, 'causal': True}])
def test_estimator_cuda_equals_cpu_on_other_paths(model, options):
    # Strided and capped targets (gathers), blocks longer than the context window (the
    # index_select path) and out-of-order packets (merged into the device mirror).
    packets, width, height = _demo_packets()
    packets = packets[:150]
    rng = np.random.default_rng(0)
    merged = EventArray.concatenate(packets)
    order = np.argsort(merged.t_ns + rng.integers(0, 300_000, len(merged)), kind='stable')
    shuffled = [merged[order[k:k + 900]] for k in range(0, len(order), 900)]
    index_cpu, flow_cpu, _ = _stream(model, 'cpu', shuffled, width, height, **options)
    index_gpu, flow_gpu, _ = _stream(model, 'cuda', shuffled, width, height, **options)
    assert len(index_cpu) > 1000
    np.testing.assert_array_equal(index_gpu, index_cpu)
    assert _relative(flow_gpu, flow_cpu) <= 1e-4


@pytest.mark.parametrize('options', [{}, {'causal': True}, {'target_stride': 3}])
def test_long_context_cuda_equals_cpu(model, options):
    """
    The second look at slow flows (long_context_below_px_s) gives the CPU's flows on CUDA.

    Which flows are looked at again depends on the plain flow's speed, which differs between
    the devices by float rounding: flows within 1 % of the threshold are left out of the
    comparison, all others must agree as the plain flows do.
    """
    packets, width, height = _demo_packets()
    packets = packets[:120]
    threshold = 150.0
    _, plain, _ = _stream(model, 'cpu', packets, width, height, **options)
    estimators = {device: NormalFlowEstimator(model, width, height, device=device,
                                              long_context_below_px_s=threshold, **options)
                  for device in ('cpu', 'cuda')}
    flows = {}
    for device, estimator in estimators.items():
        blocks = [b for packet in packets for b in estimator.push(packet)] + estimator.flush()
        flows[device] = (np.concatenate([b.event_index for b in blocks]),
                         np.concatenate([np.stack([b.u_px_s, b.v_px_s], 1) for b in blocks]))
    np.testing.assert_array_equal(flows['cuda'][0], flows['cpu'][0])
    speed = np.hypot(plain[:, 0], plain[:, 1])
    clear = np.abs(speed - threshold) > 0.01 * threshold
    cpu, gpu = flows['cpu'][1], flows['cuda'][1]
    assert np.isfinite(gpu).all() and clear.mean() > 0.95
    assert _relative(gpu[clear], cpu[clear]) <= 1e-4
    looked = estimators['cpu'].long_context_flows
    assert looked > 1000
    assert abs(estimators['cuda'].long_context_flows - looked) <= np.count_nonzero(~clear)
    changed = np.any(cpu != plain, axis=1)  # the second look replaced these flows
    assert changed.sum() > 1000


def test_confidence_cuda_equals_cpu(model):
    packets, width, height = _demo_packets()
    packets = packets[:40]
    _, flow_cpu, conf_cpu = _stream(model, 'cpu', packets, width, height, confidence=True)
    _, flow_gpu, conf_gpu = _stream(model, 'cuda', packets, width, height, confidence=True)
    assert _relative(flow_gpu, flow_cpu) <= 1e-4
    assert np.abs(conf_gpu - conf_cpu).max() <= 1e-3


def test_cuda_column_sum_chunks_on_a_wide_sensor():
    """A 65536-px-wide sensor: one float64 column-sum row is 64 MB, so the kernel chunks rows."""
    width, height, radius, d = 65536, 48, 8, 64
    generator = torch.Generator().manual_seed(3)
    n = 6000
    t_ns = torch.randint(0, 20_000_000, (n,), generator=generator).sort().values
    x = torch.randint(0, 200, (n,), generator=generator, dtype=torch.int32) * 300
    x = (x + torch.randint(0, 12, (n,), generator=generator, dtype=torch.int32)).clamp(
        max=width - 1)
    y = torch.randint(0, height, (n,), generator=generator, dtype=torch.int32)
    targets = torch.arange(0, n, 7)
    freqs = [5.0 * torch.randn(d, generator=generator) for _ in range(3)]
    expected, expected_count = reference.encode_closed_form(
        t_ns, x, y, targets, width, height, *freqs, 0.012, radius)
    features, count = ops.encode(t_ns.cuda(), x.cuda(), y.cuda(), targets.cuda(), width, height,
                                 *[f.cuda() for f in freqs], 0.012, radius)
    assert torch.equal(count.cpu().long(), expected_count)
    error = (features.double().cpu() - expected).norm(dim=1) / expected.norm(dim=1)
    assert error.max().item() <= 1e-4


def test_inputs_on_mixed_devices_are_refused_by_name():
    t_ns = torch.arange(5, dtype=torch.int64)
    x = torch.zeros(5, dtype=torch.int32)
    freqs = [torch.ones(8) for _ in range(3)]
    with pytest.raises(RuntimeError, match='freq_t is on cpu .* must share a device'):
        ops.encode(t_ns.cuda(), x.cuda(), x.cuda(), t_ns.cuda(), 8, 8, *freqs, 0.012, 3)
    with pytest.raises(RuntimeError, match='w1 is on cpu'):
        ops.flow_mlp(torch.zeros(3, 128, device='cuda'), torch.zeros(128, 16),
                     torch.zeros(16, 16, device='cuda'), torch.zeros(16, 2, device='cuda'))
