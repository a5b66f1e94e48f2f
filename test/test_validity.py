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

"""The validity of a flow: its definition, and the min_validity filter of the estimator."""

import numpy as np
import pytest
import torch

from veckm_flow_ros.core.estimator import automatic_block_s, FlowBlock, NormalFlowEstimator
from veckm_flow_ros.core.validity import (HALF_VALIDITY_RATE_HZ, neighbour_counts,
                                          validity_from_neighbours)
from veckm_flow_ros.stream.parameters import parameter_default

from scenes import background_noise, hot_pixel, merged, moving_edges  # noqa: I100

WIDTH, HEIGHT = 640, 480


def _run(model, events, min_validity, **options):
    estimator = NormalFlowEstimator(model, WIDTH, HEIGHT, min_validity=min_validity,
                                    block_s=automatic_block_s(model.tau_s), **options)
    block = FlowBlock.concatenate(estimator.push(events) + estimator.flush())
    return block, estimator


def _reference_neighbours(events, targets, block_start_ns, block_ns, tau_ns, radius):
    """Window events of each target over its block's +-tau context, minus its own pixel."""
    result = []
    for target in targets:
        start = block_start_ns + (int(events.t_ns[target]) - block_start_ns) // block_ns * block_ns
        centre = start + block_ns // 2
        near = (events.t_ns >= centre - tau_ns) & (events.t_ns <= centre + tau_ns)
        dx = np.abs(events.x[near].astype(int) - int(events.x[target]))
        dy = np.abs(events.y[near].astype(int) - int(events.y[target]))
        result.append(int(np.sum((dx <= radius) & (dy <= radius) & ((dx > 0) | (dy > 0)))))
    return np.array(result)


def test_validity_counts_the_neighbours_in_the_window_but_not_the_own_pixel(model):
    edges, _, _ = moving_edges(duration_s=0.1)
    events, _ = merged(edges, background_noise(duration_s=0.1), hot_pixel(20, 20, 0.1))
    block, _ = _run(model, events, 0.0)
    assert len(block) == len(events)
    rng = np.random.default_rng(0)
    picked = rng.choice(len(events), 300, replace=False)
    position = np.searchsorted(block.event_index, picked)
    tau_ns = int(round(model.tau_s * 1e9))
    neighbours = _reference_neighbours(events, picked, int(events.t_ns[0]), 2 * tau_ns, tau_ns,
                                       model.pixel_radius)
    area_s = ((2 * model.pixel_radius + 1) ** 2 - 1) * 2 * model.tau_s
    rate_hz = neighbours / area_s
    expected = rate_hz / (rate_hz + HALF_VALIDITY_RATE_HZ)
    np.testing.assert_allclose(block.validity[position], expected, rtol=1e-5, atol=1e-6)
    assert block.validity.dtype == np.float32
    assert np.all((block.validity >= 0) & (block.validity < 1))


def test_neighbour_counts_on_a_small_example():
    # Three events at pixel (5, 5), one at (6, 5); the encoder counts 4 in each window.
    x = torch.tensor([5, 5, 6, 5], dtype=torch.int32)
    y = torch.tensor([5, 5, 5, 5], dtype=torch.int32)
    count = torch.tensor([4, 4], dtype=torch.int32)
    found = neighbour_counts(x, y, torch.tensor([0, 2]), count, 10, 10)
    assert found.tolist() == [1, 3]
    validity = validity_from_neighbours(torch.tensor([0, 1_000_000]), 1, 0.5)
    assert validity[0] == 0 and 0.999 < validity[1] < 1


def test_default_filter_drops_isolated_noise_and_a_hot_pixel_and_keeps_moving_edges(model):
    """The node's default: the edges keep their flows, noise and the hot pixel lose theirs."""
    edges, _, _ = moving_edges(duration_s=0.2)
    noise = background_noise(duration_s=0.2, rate_hz_per_px=0.5)
    events, source = merged(edges, noise, hot_pixel(600, 20, 0.2))
    default = parameter_default('min_validity')
    block, estimator = _run(model, events, default)
    kept = np.zeros(len(events), bool)
    kept[block.event_index] = True
    edge_kept, noise_kept, hot_kept = (kept[source == index].mean() for index in range(3))
    assert edge_kept > 0.99
    assert noise_kept < 0.1
    assert hot_kept == 0
    assert np.all(block.validity >= default)
    assert estimator.low_validity_flows == block.low_validity == len(events) - len(block)
    assert estimator.events_dropped['non_finite_flow'] == 0


def test_min_validity_zero_keeps_every_flow_and_filtering_changes_no_flow(model):
    edges, _, _ = moving_edges(duration_s=0.1)
    events, _ = merged(edges, background_noise(duration_s=0.1))
    everything, estimator = _run(model, events, 0.0)
    assert len(everything) == len(events) and estimator.low_validity_flows == 0
    filtered, _ = _run(model, events, 0.5)
    keep = everything.validity >= 0.5
    np.testing.assert_array_equal(filtered.event_index, everything.event_index[keep])
    np.testing.assert_array_equal(filtered.u_px_s, everything.u_px_s[keep])
    np.testing.assert_array_equal(filtered.validity, everything.validity[keep])


def test_validity_is_the_same_with_confidence_and_in_jobs(model):
    edges, _, _ = moving_edges(duration_s=0.1)
    events, _ = merged(edges, background_noise(duration_s=0.1))
    plain, _ = _run(model, events, 0.5)
    with_confidence, _ = _run(model, events, 0.5, confidence=True)
    np.testing.assert_array_equal(with_confidence.event_index, plain.event_index)
    np.testing.assert_array_equal(with_confidence.validity, plain.validity)
    estimator = NormalFlowEstimator(model, WIDTH, HEIGHT, min_validity=0.5,
                                    block_s=automatic_block_s(model.tau_s))
    jobs = [job() for job in estimator.push_jobs(events)]
    jobs += estimator.flush()
    np.testing.assert_array_equal(FlowBlock.concatenate(jobs).validity, plain.validity)


@pytest.mark.parametrize('bad', [-0.1, 1.5, float('nan'), True, '0.5'])
def test_min_validity_outside_0_1_is_refused(model, bad):
    with pytest.raises(ValueError, match=r'min_validity must be a number in \[0, 1\].*got'):
        NormalFlowEstimator(model, WIDTH, HEIGHT, min_validity=bad)
