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

"""NormalFlowEstimator: streaming equals one-shot, targets, bounds, resets, accuracy."""

import math

import numpy as np
import pytest
import torch

from veckm_flow_ros import ops
from veckm_flow_ros.core.estimator import FlowBlock, NormalFlowEstimator
from veckm_flow_ros.core.model import load_model, VecKMFlowModel
from veckm_flow_ros.eventio.events import EventArray

WIDTH, HEIGHT = 48, 36


def tiny_model(d=16, hidden=32, radius=4, tau_s=0.01):
    generator = torch.Generator().manual_seed(0)
    return VecKMFlowModel(
        num_features=d, pixel_radius=radius, tau_s=tau_s,
        freq_t=5 * torch.randn(d, generator=generator),
        freq_x=5 * torch.randn(d, generator=generator),
        freq_y=5 * torch.randn(d, generator=generator),
        w1=torch.randn(2 * d, hidden, generator=generator) / 6,
        w2=torch.randn(hidden, hidden, generator=generator) / 6,
        w3=torch.randn(hidden, 2, generator=generator) / 6,
        flow_scale_px_s=60.0, metadata={'name': 'tiny'})


def op_flows(model, events, context, targets):
    """Flows (px/s) and counts of the ops run directly on events[context] for `targets`."""
    features, count = ops.encode(
        torch.from_numpy(events.t_ns[context]),
        torch.from_numpy(events.x[context].astype(np.int32)),
        torch.from_numpy(events.y[context].astype(np.int32)), torch.from_numpy(targets),
        WIDTH, HEIGHT, model.freq_t, model.freq_x, model.freq_y, model.tau_s, model.pixel_radius)
    return model.predict_flow_px_s(features).numpy(), count


def random_stream(n=20000, duration_ns=80_000_000, seed=0, t0_ns=1_700_000_000_000_000_000):
    rng = np.random.default_rng(seed)
    t_ns = np.sort(rng.integers(0, duration_ns, n)) + t0_ns
    return EventArray(t_ns, rng.integers(0, WIDTH, n), rng.integers(0, HEIGHT, n),
                      rng.integers(0, 2, n))


def run_chunked(estimator, events, seed):
    rng = np.random.default_rng(seed)
    blocks, start = [], 0
    while start < len(events):
        size = int(rng.integers(1, 2500))
        blocks += estimator.push(events[start:start + size])
        start += size
    return FlowBlock.concatenate(blocks + estimator.flush())


@pytest.mark.parametrize('causal', [False, True])
def test_streaming_equals_one_shot(causal):
    events = random_stream()
    one_shot = NormalFlowEstimator(tiny_model(), WIDTH, HEIGHT, causal=causal)
    whole = FlowBlock.concatenate(one_shot.push(events) + one_shot.flush())
    streamed = run_chunked(NormalFlowEstimator(tiny_model(), WIDTH, HEIGHT, causal=causal),
                           events, seed=1)
    assert len(whole) == len(events)  # every event is a target once
    np.testing.assert_array_equal(np.sort(whole.event_index), np.arange(len(events)))
    np.testing.assert_array_equal(whole.event_index, streamed.event_index)
    np.testing.assert_array_equal(whole.u_px_s, streamed.u_px_s)
    np.testing.assert_array_equal(whole.v_px_s, streamed.v_px_s)
    np.testing.assert_array_equal(whole.t_ns, events.t_ns[whole.event_index])
    assert one_shot.flows_out == len(events) and one_shot.events_in == len(events)


@pytest.mark.parametrize('stride', [1, 3])
def test_jobs_run_later_in_threads_equal_push_iter(stride):
    """push_jobs: jobs hold copies of their inputs, so running them late, in threads, is exact."""
    from concurrent.futures import ThreadPoolExecutor
    events = random_stream(n=30000, duration_ns=120_000_000, seed=5)
    direct = NormalFlowEstimator(tiny_model(), WIDTH, HEIGHT, block_s=0.004,
                                 target_stride=stride)
    expected = run_chunked(direct, events, seed=6)
    later = NormalFlowEstimator(tiny_model(), WIDTH, HEIGHT, block_s=0.004,
                                target_stride=stride)
    rng = np.random.default_rng(6)
    futures, start = [], 0
    with ThreadPoolExecutor(3) as pool:
        jobs = []
        while start < len(events):
            size = int(rng.integers(1, 2500))
            jobs += list(later.push_jobs(events[start:start + size]))  # not run yet
            start += size
            if len(jobs) > 6:  # run some only after many later pushes (buffer compacted)
                futures += [pool.submit(job) for job in jobs]
                jobs = []
        futures += [pool.submit(job) for job in jobs]
        blocks = [future.result() for future in futures] + later.flush()
    got = FlowBlock.concatenate(blocks)
    np.testing.assert_array_equal(got.event_index, expected.event_index)
    np.testing.assert_array_equal(got.t_ns, expected.t_ns)
    np.testing.assert_array_equal(got.u_px_s, expected.u_px_s)
    np.testing.assert_array_equal(got.v_px_s, expected.v_px_s)
    assert later.flows_out == direct.flows_out


def test_warm_up_leaves_the_stream_as_it_was():
    """
    warm_up() computes a made-up block of the sensor's size and changes nothing else.

    The stream's results and counts are those of an estimator that was never warmed up,
    also when it is warmed up between pushes.
    """
    events = random_stream(n=12000, duration_ns=60_000_000, seed=3)
    expected = run_chunked(NormalFlowEstimator(tiny_model(), WIDTH, HEIGHT), events, seed=4)
    warmed = NormalFlowEstimator(tiny_model(), WIDTH, HEIGHT)
    assert warmed.warm_up(events=500) > 0.0
    blocks = warmed.push(events[:5000])
    assert warmed.warm_up(events=3000) > 0.0  # mid-stream: buffered events stay
    blocks += warmed.push(events[5000:]) + warmed.flush()
    got = FlowBlock.concatenate(blocks)
    np.testing.assert_array_equal(got.event_index, expected.event_index)
    np.testing.assert_array_equal(got.u_px_s, expected.u_px_s)
    np.testing.assert_array_equal(got.v_px_s, expected.v_px_s)
    assert warmed.events_in == len(events) and warmed.flows_out == len(events)
    with pytest.raises(ValueError, match='events'):
        warmed.warm_up(events=0)


def test_block_flows_equal_the_op_on_the_centred_context():
    model = tiny_model()
    events = random_stream(n=6000, duration_ns=40_000_000)
    estimator = NormalFlowEstimator(model, WIDTH, HEIGHT, block_s=0.005)
    blocks = estimator.push(events)
    block = blocks[1]
    block_start = int(events.t_ns[0]) + 5_000_000
    centre = block_start + 2_500_000
    context = np.flatnonzero((events.t_ns >= centre - 10_000_000)
                             & (events.t_ns <= centre + 10_000_000))
    targets = np.searchsorted(context, block.event_index)
    flow, count = op_flows(model, events, context, targets)
    assert (count > 0).all()
    np.testing.assert_allclose(block.u_px_s, flow[:, 0], rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(block.v_px_s, flow[:, 1], rtol=1e-5, atol=1e-3)
    in_block = (events.t_ns >= block_start) & (events.t_ns < block_start + 5_000_000)
    np.testing.assert_array_equal(block.event_index, np.flatnonzero(in_block))
    # Ready only once the context is complete.
    assert block.t_newest_ns >= centre + 10_000_000


def test_slightly_disordered_input_is_merged_in_time_order():
    # Packets overlapping in time by up to 0.5 ms (two interleaved sources): no reset, the
    # buffer keeps time order, and an event older than an already computed block (it still
    # serves as context) is counted as late instead of silently getting no flow.
    events = random_stream(n=12000, seed=5)
    rng = np.random.default_rng(6)
    order = np.argsort(events.t_ns + rng.integers(0, 500_000, len(events)), kind='stable')
    arrived = events[order]
    assert (np.diff(arrived.t_ns) < 0).sum() > 1000
    estimator = NormalFlowEstimator(tiny_model(), WIDTH, HEIGHT)
    blocks = []
    for start in range(0, len(arrived), 700):
        blocks += estimator.push(arrived[start:start + 700])
    flows = FlowBlock.concatenate(blocks + estimator.flush())
    assert estimator.time_resets == 0
    assert len(flows) + estimator.events_dropped['late'] == len(events)
    assert estimator.events_dropped['late'] < 0.01 * len(events)
    assert len(np.unique(flows.event_index)) == len(flows)
    np.testing.assert_array_equal(flows.t_ns, arrived.t_ns[flows.event_index])
    assert (np.diff(flows.t_ns) >= 0).all()  # blocks are computed in time order
    # Whole packets in time order give exactly the flows of the sorted stream.
    whole = FlowBlock.concatenate(NormalFlowEstimator(tiny_model(), WIDTH, HEIGHT).push(events))
    again = NormalFlowEstimator(tiny_model(), WIDTH, HEIGHT)
    again.push(events[:5000])
    np.testing.assert_array_equal(
        FlowBlock.concatenate(again.push(events[5000:])).u_px_s[-100:], whole.u_px_s[-100:])


def test_slow_flows_are_estimated_again_with_the_long_context():
    """
    Check long_context_below_px_s against the op on the long context.

    A kept flow slower than the threshold is the op's flow on the 4 tau of events that end
    where the block's context ends (tau x 2, flow scale / 2); the others are the plain flows,
    and the block is ready as soon as without it (the extra context is all past).
    """
    import dataclasses
    model = tiny_model()
    events = random_stream(n=8000, duration_ns=60_000_000)
    plain = NormalFlowEstimator(model, WIDTH, HEIGHT, block_s=0.005)
    plain_block = plain.push(events)[2]
    speeds = np.sort(np.hypot(plain_block.u_px_s, plain_block.v_px_s))
    threshold = float(speeds[len(speeds) // 2] + speeds[len(speeds) // 2 + 1]) / 2  # no tie
    estimator = NormalFlowEstimator(model, WIDTH, HEIGHT, block_s=0.005,
                                    long_context_below_px_s=threshold)
    block = estimator.push(events)[2]
    np.testing.assert_array_equal(block.event_index, plain_block.event_index)
    centre = int(events.t_ns[0]) + 10_000_000 + 2_500_000
    assert block.ready_ns == plain_block.ready_ns == centre + 10_000_000
    context = np.flatnonzero((events.t_ns >= centre - 30_000_000)
                             & (events.t_ns <= centre + 10_000_000))
    long_model = dataclasses.replace(model, tau_s=0.02, flow_scale_px_s=30.0)
    long_flow, _ = op_flows(long_model, events, context,
                            np.searchsorted(context, block.event_index))
    slow = np.hypot(plain_block.u_px_s, plain_block.v_px_s) < threshold
    assert 0 < slow.sum() < len(slow)
    np.testing.assert_allclose(block.u_px_s[slow], long_flow[slow, 0], rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(block.v_px_s[slow], long_flow[slow, 1], rtol=1e-5, atol=1e-3)
    np.testing.assert_array_equal(block.u_px_s[~slow], plain_block.u_px_s[~slow])
    np.testing.assert_array_equal(block.validity, plain_block.validity)
    assert not np.array_equal(block.u_px_s[slow], plain_block.u_px_s[slow])


@pytest.mark.parametrize('causal, stride', [(False, 1), (True, 1), (False, 3)])
def test_long_context_streaming_equals_one_shot_and_counts(causal, stride):
    events = random_stream(n=20000, seed=11)
    options = {'causal': causal, 'target_stride': stride, 'long_context_below_px_s': 80.0,
               'min_validity': 0.2}
    one_shot = NormalFlowEstimator(tiny_model(), WIDTH, HEIGHT, **options)
    whole = FlowBlock.concatenate(one_shot.push(events) + one_shot.flush())
    streamed_estimator = NormalFlowEstimator(tiny_model(), WIDTH, HEIGHT, **options)
    streamed = run_chunked(streamed_estimator, events, seed=12)
    np.testing.assert_array_equal(whole.event_index, streamed.event_index)
    np.testing.assert_array_equal(whole.u_px_s, streamed.u_px_s)
    np.testing.assert_array_equal(whole.v_px_s, streamed.v_px_s)
    # Every kept flow slower than the threshold was looked at again, and only those.
    plain = NormalFlowEstimator(tiny_model(), WIDTH, HEIGHT, causal=causal,
                                target_stride=stride, min_validity=0.2)
    plain_flows = FlowBlock.concatenate(plain.push(events) + plain.flush())
    slow = int(np.count_nonzero(np.hypot(plain_flows.u_px_s, plain_flows.v_px_s) < 80.0))
    assert one_shot.long_context_flows == streamed_estimator.long_context_flows == slow > 0
    assert len(whole) == len(plain_flows)


def test_long_context_for_a_model_with_a_long_tau():
    """A model whose doubled tau is above the checkpoint limit (0.5 s) gets the second look."""
    model = tiny_model(tau_s=0.3)
    events = random_stream(n=6000, duration_ns=2_000_000_000, seed=17)
    estimator = NormalFlowEstimator(model, WIDTH, HEIGHT, block_s=0.6,
                                    long_context_below_px_s=1e6)
    assert (estimator._long_model.tau_s, estimator._long_model.flow_scale_px_s) == (0.6, 30.0)
    assert (model.tau_s, model.flow_scale_px_s) == (0.3, 60.0)  # the caller's model unchanged
    flows = FlowBlock.concatenate(estimator.push(events) + estimator.flush())
    assert flows.long_context == len(flows) > 0 and np.isfinite(flows.u_px_s).all()


def test_long_context_inactive_blocks_are_the_plain_ones_and_counted():
    events = random_stream(n=12000, duration_ns=60_000_000, seed=15)
    plain = run_chunked(NormalFlowEstimator(tiny_model(), WIDTH, HEIGHT), events, seed=16)
    estimator = NormalFlowEstimator(tiny_model(), WIDTH, HEIGHT, long_context_below_px_s=1e6)
    first = FlowBlock.concatenate(estimator.push(events[:6000]))
    estimator.long_context_active = False  # blocks prepared from now on skip it
    rest = FlowBlock.concatenate(estimator.push(events[6000:]) + estimator.flush())
    assert first.long_context == len(first) > 0 and first.long_context_skipped == 0
    assert rest.long_context == 0 and rest.long_context_skipped == \
        estimator.long_context_skipped_blocks > 0
    np.testing.assert_array_equal(rest.u_px_s, plain.u_px_s[len(first):])
    assert not np.array_equal(first.u_px_s, plain.u_px_s[:len(first)])


def test_long_context_jobs_in_threads_equal_push_iter():
    from concurrent.futures import ThreadPoolExecutor
    events = random_stream(n=20000, duration_ns=100_000_000, seed=13)
    options = {'block_s': 0.004, 'long_context_below_px_s': 80.0}
    expected = run_chunked(NormalFlowEstimator(tiny_model(), WIDTH, HEIGHT, **options),
                           events, seed=14)
    later = NormalFlowEstimator(tiny_model(), WIDTH, HEIGHT, **options)
    jobs = []
    for start in range(0, len(events), 1500):
        jobs += list(later.push_jobs(events[start:start + 1500]))  # run after all pushes
    with ThreadPoolExecutor(3) as pool:
        blocks = list(pool.map(lambda job: job(), jobs)) + later.flush()
    got = FlowBlock.concatenate(blocks)
    np.testing.assert_array_equal(got.event_index, expected.event_index)
    np.testing.assert_array_equal(got.u_px_s, expected.u_px_s)


def test_block_longer_than_the_context_window():
    # block 30 ms > 2 tau = 20 ms: targets outside the window are their own context, as for
    # the per-event neighbourhoods; every event still gets exactly one flow.
    model = tiny_model()
    events = random_stream(n=6000, duration_ns=90_000_000, seed=7)
    estimator = NormalFlowEstimator(model, WIDTH, HEIGHT, block_s=0.030)
    flows = FlowBlock.concatenate(estimator.push(events) + estimator.flush())
    np.testing.assert_array_equal(flows.event_index, np.arange(len(events)))
    block_start = int(events.t_ns[0])
    centre = block_start + 15_000_000
    in_block = np.flatnonzero(events.t_ns < block_start + 30_000_000)
    window = (events.t_ns >= centre - 10_000_000) & (events.t_ns <= centre + 10_000_000)
    context = np.union1d(np.flatnonzero(window), in_block)
    flow, _ = op_flows(model, events, context, np.searchsorted(context, in_block))
    np.testing.assert_allclose(flows.u_px_s[:len(in_block)], flow[:, 0], rtol=1e-5, atol=1e-3)


def test_target_stride_and_cap():
    events = random_stream(n=12000)
    strided = run_chunked(NormalFlowEstimator(tiny_model(), WIDTH, HEIGHT, target_stride=4),
                          events, seed=2)
    np.testing.assert_array_equal(strided.event_index, np.arange(0, len(events), 4))
    capped = NormalFlowEstimator(tiny_model(), WIDTH, HEIGHT, max_flows_per_block=50)
    blocks = capped.push(events) + capped.flush()
    assert blocks and all(len(block) <= 50 for block in blocks)
    assert sum(len(block) for block in blocks) == capped.flows_out


def test_target_stride_counts_events_dropped_outside_the_image():
    """Every k-th stream index is a target also where outside events leave index gaps."""
    events = random_stream(n=12000)
    outside = np.zeros(len(events), bool)
    outside[np.random.default_rng(5).choice(len(events), 700, replace=False)] = True
    events.x[outside] = WIDTH + 3  # dropped as outside the image, but counted in the stream
    strided = run_chunked(NormalFlowEstimator(tiny_model(), WIDTH, HEIGHT, target_stride=4),
                          events, seed=3)
    expected = np.arange(len(events))
    np.testing.assert_array_equal(strided.event_index, expected[~outside & (expected % 4 == 0)])


def test_buffer_is_bounded_and_drops_are_counted():
    # 30k events within 1 ms: no block is ready before the buffer overflows.
    rng = np.random.default_rng(3)
    n = 30000
    events = EventArray(np.sort(rng.integers(0, 1_000_000, n)), rng.integers(0, WIDTH, n),
                        rng.integers(0, HEIGHT, n), np.zeros(n))
    estimator = NormalFlowEstimator(tiny_model(), WIDTH, HEIGHT, max_buffered_events=5000)
    for start in range(0, n, 1000):
        estimator.push(events[start:start + 1000])
        assert estimator.buffered_events <= 5000
    assert estimator.events_dropped['buffer_full'] == n - 5000
    flows = FlowBlock.concatenate(estimator.flush())
    assert len(flows) == 5000 and flows.event_index.min() == n - 5000


def test_time_going_backwards_resets():
    events = random_stream(n=8000)
    estimator = NormalFlowEstimator(tiny_model(), WIDTH, HEIGHT)
    estimator.push(events)
    blocks = estimator.push(events[:4000])  # bag loop: back to the start
    assert estimator.time_resets == 1
    assert estimator.events_dropped['time_reset'] > 0
    flows = FlowBlock.concatenate(blocks + estimator.flush())
    assert len(flows) == 4000 and flows.event_index.max() == 3999  # indices restart


def test_events_outside_the_sensor_are_dropped():
    events = random_stream(n=3000)
    events.x[::10] = WIDTH + 5
    estimator = NormalFlowEstimator(tiny_model(), WIDTH, HEIGHT)
    flows = FlowBlock.concatenate(estimator.push(events) + estimator.flush())
    assert estimator.events_dropped['outside_image'] == 300
    assert len(flows) == 2700 and not np.isin(flows.event_index, np.arange(0, 3000, 10)).any()
    assert np.isfinite(flows.u_px_s).all() and np.isfinite(flows.v_px_s).all()


@pytest.mark.parametrize('kwargs, message', [
    ({'width': 0}, 'width must be an integer in'),
    ({'block_s': 0.0}, r'block_s must be a duration in seconds in \(0, 1\]'),
    ({'target_stride': 0}, 'target_stride must be an integer in'),
    ({'max_flows_per_block': -1}, 'max_flows_per_block must be'),
    ({'max_buffered_events': 10}, 'max_buffered_events must be'),
    ({'device': 'tpu'}, 'device must be'),
    ({'long_context_below_px_s': -1.0}, r'long_context_below_px_s must be a speed in px/s .* '
                                        r'got -1.0'),
    ({'long_context_below_px_s': float('nan')}, 'long_context_below_px_s must be .* got nan'),
    ({'long_context_below_px_s': True}, 'long_context_below_px_s must be'),
])
def test_parameter_validation(kwargs, message):
    arguments = {'model': tiny_model(), 'width': WIDTH, 'height': HEIGHT}
    arguments.update(kwargs)
    with pytest.raises(ValueError, match=message):
        NormalFlowEstimator(**arguments)


def moving_edge_events(speed_px_s, angle_deg, duration_s, seed=0, centre=(320, 240),
                       radius_px=100, events_per_px2=3.0):
    """
    Events of a straight edge through the centre moving along its normal (angle_deg).

    Events are uniform random points of the disc, each firing when the edge passes it; the
    edge crosses the centre at duration_s / 2.
    """
    rng = np.random.default_rng(seed)
    normal = np.array([math.cos(math.radians(angle_deg)), math.sin(math.radians(angle_deg))])
    count = int(events_per_px2 * 4 * radius_px ** 2)
    points = rng.uniform(-radius_px, radius_px, (count, 2))
    t_s = points @ normal / speed_px_s + duration_s / 2
    keep = (np.hypot(points[:, 0], points[:, 1]) < radius_px) & (t_s >= 0) & (t_s < duration_s)
    order = np.argsort(t_s[keep])
    pixels = np.round(points[keep][order] + np.array(centre)).astype(np.int64)
    return EventArray((t_s[keep][order] * 1e9).astype(np.int64), pixels[:, 0], pixels[:, 1],
                      np.ones(len(order)))


@pytest.mark.slow
@pytest.mark.parametrize('name', ['640x480_24ms_C64_k8', '640x480_32ms_C64_k10'])
def test_published_weights_on_a_moving_edge(published_models_dir, name):
    """
    End to end with the published weights: a straight edge moving along its normal.

    Measured on these ideal edges (8 directions x 3 speeds, all four published models): the
    published MLP is accurate on average (median |flow| within ~25 % of v, mean direction
    error ~10 deg) but single cases reach ~30 deg and 2x in magnitude, so the per-case bounds
    are loose (they still catch swapped axes, a flipped sign or a wrong unit) and the tight
    ones apply to the aggregate over directions.
    """
    cases = edge_case_errors(load_model(published_models_dir / name))
    for speed, angle, ratio, error in cases:
        assert 0.5 <= ratio <= 2.25, (speed, angle, ratio)
        assert abs(error) <= 40, (speed, angle, error)
    assert 0.75 <= np.median([case[2] for case in cases]) <= 1.35, cases
    assert np.mean([abs(case[3]) for case in cases]) <= 15, cases


def edge_case_errors(model, speeds=(300, 600, 1200), angles=(0, 135, 210, 300)):
    """(speed, angle, |flow| / speed, direction error deg) per case, central events only."""
    duration_s = 4 * model.tau_s
    cases = []
    for speed in speeds:
        for angle in angles:
            events = moving_edge_events(speed, angle, duration_s, seed=speed + angle,
                                        radius_px=75)
            estimator = NormalFlowEstimator(model, 640, 480, target_stride=4)
            flows = FlowBlock.concatenate(estimator.push(events) + estimator.flush())
            central = ((np.abs(flows.t_ns - duration_s / 2 * 1e9) < 1.5 * model.tau_s * 1e9)
                       & (np.hypot(flows.x - 320.0, flows.y - 240.0) < 50))
            u, v = flows.u_px_s[central], flows.v_px_s[central]
            assert len(u) > 100
            ratio = float(np.median(np.hypot(u, v))) / speed
            direction = math.degrees(math.atan2(np.median(v), np.median(u)))
            cases.append((speed, angle, ratio, (direction - angle + 180) % 360 - 180))
    return cases


@pytest.mark.slow
def test_shipped_model_on_a_moving_edge(model):
    """
    The shipped default model on the issue's straight-edge check (ideal edges, 12 cases).

    Measured (veckm_r10_tau12ms as shipped, CPU, 2026-11-26): on these 12 cases direction
    error mean 4.2 deg, max 6.5 deg, |flow| / v 1.00-1.27 (median 1.20). Over 8 directions x 3
    speeds: mean 3.1 deg, max 6.6 deg, |flow| / v 0.99-1.29 (median 1.23), 7 of 24 cases
    25-29 % too fast. The magnitude bound below leaves that margin.
    """
    cases = edge_case_errors(model)
    for speed, angle, ratio, error in cases:
        assert abs(error) <= 15, (speed, angle, error)
        assert 0.7 <= ratio <= 1.4, (speed, angle, ratio)
    assert np.mean([abs(case[3]) for case in cases]) <= 8, cases
    assert 0.9 <= np.median([case[2] for case in cases]) <= 1.25, cases


def test_confidence_option_keeps_the_flows_and_adds_a_confidence():
    events = random_stream(n=6000, duration_ns=40_000_000)
    plain = NormalFlowEstimator(tiny_model(), WIDTH, HEIGHT, target_stride=3)
    with_confidence = NormalFlowEstimator(tiny_model(), WIDTH, HEIGHT, target_stride=3,
                                          confidence=True)
    expected = FlowBlock.concatenate(plain.push(events) + plain.flush())
    found = FlowBlock.concatenate(with_confidence.push(events) + with_confidence.flush())
    assert expected.confidence is None
    np.testing.assert_array_equal(found.u_px_s, expected.u_px_s)
    np.testing.assert_array_equal(found.v_px_s, expected.v_px_s)
    assert found.confidence.shape == found.u_px_s.shape
    assert np.all((found.confidence >= 0) & (found.confidence <= 1))
    assert found.confidence.std() > 0


@pytest.mark.slow
def test_rotation_mean_option_on_the_demo_scene(model, project_root):
    """
    Flows of the rotation ensemble's mean beat the plain prediction on the bundled scene.

    The bundled scene has exact ground truth; confidence stays off (None) with rotation_mean.

    Measured, default model, every 4th event (45,857 scored): %Pos 95.2 plain -> 96.8 with
    the ensemble mean, relative PEE 35.0 % -> 29.0 %.
    """
    from veckm_flow_ros.core.metrics import flow_metrics
    data = np.load(project_root / 'veckm_flow_ros' / 'data' / 'demo_scene.npz')
    events = EventArray(data['t'].astype(np.int64), data['x'], data['y'], data['p'])
    width, height = int(data['width']), int(data['height'])
    gt = np.stack([data['gt_u'], data['gt_v']], 1)
    signal = ~data['is_noise']
    results = {}
    for rotation_mean in (False, True):
        estimator = NormalFlowEstimator(model, width, height, target_stride=4,
                                        rotation_mean=rotation_mean)
        flows = FlowBlock.concatenate(estimator.push(events) + estimator.flush())
        assert flows.confidence is None
        index = flows.event_index
        pred = np.stack([flows.u_px_s, flows.v_px_s], 1)
        results[rotation_mean] = flow_metrics(pred, gt[index], signal[index])
    assert results[True]['pos'] > results[False]['pos'], results
    assert results[True]['rel_pee'] < results[False]['rel_pee'], results
    assert results[True]['pos'] >= 0.95, results


# ---- the device path's host-side logic, run on the CPU -------------------------------------

@pytest.mark.parametrize('span_ns', [5_000, 3_000_000_000])
def test_packed_upload_round_trip_is_exact(span_ns):
    """One packed copy per batch: int32 time offsets when the span allows, int64 beyond."""
    from veckm_flow_ros.core.device_staging import EventUploader, MAX_INT32_SPAN_NS
    rng = np.random.default_rng(9)
    t_ns = 1_700_000_000_000_000_000 + rng.integers(0, span_ns, 5000)  # not sorted
    x = rng.integers(0, 65536, 5000).astype(np.int32)  # the full uint16 range
    y = rng.integers(0, 65536, 5000).astype(np.int32)
    uploader = EventUploader(torch.device('cpu'))
    for batch in range(3):  # the staging buffers alternate and are reused
        part = slice(batch * 1000, batch * 1000 + 1000 + batch)
        t_dev, x_dev, y_dev = uploader.upload(t_ns[part], x[part], y[part])
        assert (t_dev.dtype, x_dev.dtype, y_dev.dtype) == (torch.int64, torch.int32,
                                                           torch.int32)
        np.testing.assert_array_equal(t_dev.numpy(), t_ns[part])
        np.testing.assert_array_equal(x_dev.numpy(), x[part])
        np.testing.assert_array_equal(y_dev.numpy(), y[part])
    per_event = uploader.bytes_uploaded / (3000 + 3)
    assert per_event == (8 if span_ns <= MAX_INT32_SPAN_NS else 12)
    assert uploader.uploads == 3


def test_mirrored_buffer_matches_the_host_columns():
    """The device mirror (here on the CPU) follows appends, disorder merges and compaction."""
    from veckm_flow_ros.core.event_buffer import EventBuffer
    buffer = EventBuffer(torch.device('cpu'), mirror=True)
    rng = np.random.default_rng(10)
    t_ns, index = 0, 0
    for round_ in range(60):
        count = int(rng.integers(1, 3000))
        times = t_ns + np.sort(rng.integers(0, 1_000_000, count))
        if round_ % 7 == 3:
            times = times - 500_000  # older than the newest: merged in time order
        buffer.append(times, rng.integers(0, WIDTH, count).astype(np.int32),
                      rng.integers(0, HEIGHT, count).astype(np.int32),
                      np.arange(index, index + count))
        index += count
        t_ns = int(times.max())
        buffer.drop_before(buffer.end - int(rng.integers(100, 6000)))
        mirror = buffer.device_columns(buffer.start, buffer.end)
        host = (buffer.t_ns, buffer.x, buffer.y)
        for column, expected in zip(mirror, host):
            np.testing.assert_array_equal(column.numpy(), expected[buffer.start:buffer.end])


def test_strided_targets_travel_as_a_range():
    """Every stride-th event of a block is a (begin, end, step) range made on the device."""
    from veckm_flow_ros.core.estimator import _constant_step
    assert _constant_step(np.arange(5, 100, 8)) == 8
    assert _constant_step(np.arange(3, 9)) == 1
    assert _constant_step(np.array([4])) == 1
    assert _constant_step(np.array([], np.int64)) == 0
    assert _constant_step(np.array([0, 8, 16, 25])) == 0
    assert _constant_step(np.array([0, 2, 3, 6])) == 0
    estimator = NormalFlowEstimator(tiny_model(), WIDTH, HEIGHT, target_stride=8)
    seen = []
    predict = estimator._encode_and_predict

    def recording(context, targets):
        seen.append(targets)
        return predict(context, targets)
    estimator._encode_and_predict = recording
    blocks = estimator.push(random_stream(n=6000)) + estimator.flush()
    assert blocks and any(isinstance(t, tuple) and t[2] == 8 for t in seen)
    flows = FlowBlock.concatenate(blocks)
    np.testing.assert_array_equal(flows.event_index, np.arange(0, 6000, 8))
