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
The ROS-free streaming pipeline: stream front end, packet queue, threads and compute pool.

No rclpy here: the pipeline publishes through a callback that the tests collect, with the
shipped default model and the compiled extension.
"""

import dataclasses
import itertools
import sys
import threading
import time

import numpy as np
import pytest
from scenes import background_noise, merged, moving_edges

from veckm_flow_ros.eventio.packets import encode_packets
from veckm_flow_ros.stream.frontend import (Events, InputPacket, Reset, Resize,
                                            RESTART_TOLERANCE_NS, StreamFrontEnd)
from veckm_flow_ros.stream.packet_queue import PacketQueue
from veckm_flow_ros.stream.parameters import default_config
from veckm_flow_ros.stream.pipeline import (check_config, compute_threads, ConfigurationError,
                                            FlowPipeline)


class Published:
    """Collects what the pipeline publishes: (points bytes, stamp_ns, frame_id) per block."""

    def __init__(self):
        self.blocks = []
        self.points = []  # the structured points of each block
        self.logs = []

    def publish(self, points, stamp_ns, frame_id):
        self.blocks.append((points.tobytes(), int(stamp_ns), frame_id))
        self.points.append(points.copy())

    def log(self, level, message):
        self.logs.append((level, message))


def make_pipeline(model, published, **parameters):
    return FlowPipeline(model, default_config(**parameters), publish=published.publish,
                        log=published.log)


def evt3_packets(duration_s=0.12, stamp_offset_ns=3_000_000_000, frame_id='camera',
                 jitter_seed=None, noise_hz_per_px=0.0):
    """
    Return evt3 packets of moving edges, 1 ms each, stamps = sensor time + offset.

    noise_hz_per_px: add background activity at this rate (flows left out for low validity).
    """
    events, _, _ = moving_edges(duration_s=duration_s)
    if noise_hz_per_px:
        events, _ = merged(events, background_noise(duration_s, rate_hz_per_px=noise_hz_per_px))
    packets = encode_packets(events, 'evt3', packet_duration_ns=1_000_000)
    stamps = [p.first_t_ns + stamp_offset_ns for p in packets]
    if jitter_seed is not None:
        rng = np.random.default_rng(jitter_seed)
        stamps = np.maximum.accumulate([s + int(rng.integers(0, 400_000)) for s in stamps])
    return [InputPacket('evt3', bytes(p.data), 0, 640, 480, seq, int(stamp_ns),
                        frame_id if isinstance(frame_id, str) else frame_id(seq),
                        len(p.data) // 2)
            for seq, (p, stamp_ns) in enumerate(zip(packets, stamps))]


def test_packet_queue_drops_oldest_whole_packets():
    queue = PacketQueue(max_events=100, max_packets=3)

    def packet(events, seq):
        return InputPacket('mono', b'', 0, 1, 1, seq, 0, '', events)
    assert queue.put(packet(60, 0)) == 0
    assert queue.put(packet(30, 1)) == 0
    assert queue.put(packet(30, 2)) == 1      # 60 + 30 + 30 > 100: seq 0 goes
    assert queue.queued_events == 60
    assert queue.put(packet(10, 3)) == 0
    assert queue.put(packet(10, 4)) == 1      # packet-count cap: seq 1 goes
    assert queue.put(packet(500, 5)) == 1     # alone above capacity: itself dropped
    assert [p.seq for p in queue.take(0.0, max_events=35)] == [2]  # whole packets only
    assert [p.seq for p in queue.take(0.0, max_events=5)] == [3]   # but at least one
    assert [p.seq for p in queue.take(0.0)] == [4]
    assert (queue.dropped_packets, queue.dropped_events) == (3, 590)
    assert queue.queued_events == 0 and queue.take(0.0) == []


def test_packet_queue_drops_packets_that_waited_too_long():
    queue = PacketQueue(max_events=1000)
    for seq, received_s in enumerate((10.0, 10.1, 10.3, 10.45)):
        queue.put(InputPacket('mono', b'', 0, 1, 1, seq, 0, '', 5, received_s=received_s))
    assert queue.drop_older_than(0.2, now_s=10.5) == 2   # waited 0.5 s and 0.4 s
    assert queue.drop_older_than(0.2, now_s=10.5) == 0
    assert (queue.dropped_packets, queue.dropped_events, queue.queued_events) == (2, 10, 10)
    assert [p.seq for p in queue.take(0.0)] == [2, 3]


def test_front_end_restarts_resyncs_and_announces_the_size():
    packets = evt3_packets(duration_s=0.03)
    front_end = StreamFrontEnd()
    kinds = []
    for packet in packets[:10]:
        kinds += [type(step).__name__ for step in front_end.feed(packet)]
    assert kinds == ['Resize'] + ['Events'] * 10
    # A seq gap resyncs the evt3 decoder instead of restarting the stream.
    steps = front_end.feed(packets[15])
    assert [type(step) for step in steps] == [Events] and front_end.resets == 0
    # Header stamp going back (bag loop): a Reset before the packet's events.
    steps = front_end.feed(packets[0])
    assert [type(step) for step in steps] == [Reset, Events] and front_end.resets == 1
    assert 'header stamp or seq went back' in steps[0].reason
    # Sensor time going back by more than the tolerance while stamps and seq go on (a
    # driver that restarted its camera): once the next packet confirms the new clock (a lone
    # packet back would be a corrupt time), a Reset and both packets' events.
    events, _, _ = moving_edges(duration_s=0.3)
    mono = encode_packets(events, 'mono', packet_duration_ns=10_000_000)
    mono_end = StreamFrontEnd()
    for seq, packet in enumerate(mono[:25]):
        mono_end.feed(InputPacket('mono', packet.data, packet.time_base, 640, 480, seq,
                                  seq * 10_000_000, 'camera'))
    assert mono[24].first_t_ns - mono[0].first_t_ns > RESTART_TOLERANCE_NS
    assert mono_end.feed(InputPacket('mono', mono[0].data, mono[0].time_base, 640, 480, 25,
                                     250_000_000, 'camera')) == []
    steps = mono_end.feed(InputPacket('mono', mono[1].data, mono[1].time_base, 640, 480, 26,
                                      260_000_000, 'camera'))
    assert [type(step) for step in steps] == [Reset, Events, Events] and mono_end.resets == 1
    assert 'sensor time went back' in steps[0].reason
    # A new sensor size is announced.
    resized = InputPacket('mono', mono[2].data, mono[2].time_base, 1280, 720, 27, 270_000_000,
                          'camera')
    assert [type(step) for step in mono_end.feed(resized)] == [Resize, Events]
    assert mono_end.sensor_size == (1280, 720)
    # Undecodable bytes are counted, never raised.
    assert mono_end.feed(InputPacket('nonsense', b'\x00' * 8, 0, 640, 480, 28, 280_000_000,
                                     'camera')) == []
    assert mono_end.bad_packets == 1


def test_front_end_marks_carry_the_newest_time_and_the_offset():
    packets = evt3_packets(duration_s=0.02, stamp_offset_ns=5_000_000_000)
    front_end = StreamFrontEnd()
    newest = []
    for packet in packets:
        for step in front_end.feed(packet):
            if isinstance(step, Events):
                newest.append(step.mark.newest_ns)
                assert step.mark.newest_ns >= int(step.events.t_ns.max())
                assert step.mark.offset_ns == front_end.timesync.to_ros_ns(0)
                # stamps = sensor time + 5 s: the offset is 5 s within the packet spread
                assert abs(step.mark.offset_ns - 5_000_000_000) < 2_000_000
    assert newest == sorted(newest)


def test_check_config_names_the_offending_value(model):
    with pytest.raises(ConfigurationError, match='device is .gpu.'):
        check_config(model, default_config(device='gpu'))
    with pytest.raises(ConfigurationError, match='block_ms is 500 ms'):
        check_config(model, default_config(block_ms=500.0))
    with pytest.raises(ConfigurationError, match=r'parameter long_context_below_px_s must be '
                                                 r'a speed in px/s .* got -5.0'):
        check_config(model, default_config(long_context_below_px_s=-5.0))
    # A model whose doubled tau is above the checkpoint limit (0.5 s) works with the default.
    check_config(dataclasses.replace(model, tau_s=0.3), default_config())
    with pytest.raises(KeyError, match='unknown parameter'):
        default_config(no_such_parameter=1)


def test_a_batch_gives_the_same_flows_and_stamps_as_packet_by_packet(model):
    """The decode thread pushes a batch of packets at once: same output as one at a time."""
    packets = evt3_packets(jitter_seed=4, frame_id=lambda seq: f'camera_{seq // 40}')
    outputs = []
    for batches in ([packets], [[packet] for packet in packets]):
        published = Published()
        pipeline = make_pipeline(model, published, target_stride=2, block_ms=10.0,
                                 compute_threads=1)
        for batch in batches:
            pipeline.process(batch)
        outputs.append(published.blocks)
    batched, one_by_one = outputs
    assert len(batched) >= 8
    assert {frame for _, _, frame in batched} == {'camera_0', 'camera_1', 'camera_2'}
    assert batched == one_by_one


def test_blocks_computed_by_the_pool_equal_one_at_a_time(model):
    """compute_threads = 3: blocks computed at once in pool threads, same output, in order."""
    # With background activity: each pool thread's validity table gives the same validity.
    packets = evt3_packets(duration_s=0.15, noise_hz_per_px=0.5)
    outputs = []
    for threads in (1, 3):
        published = Published()
        # Without the long context: a saturated pool would skip it (the next test).
        pipeline = make_pipeline(model, published, block_ms=5.0, compute_threads=threads,
                                 long_context_below_px_s=0.0)
        pipeline.inline_when_idle = False  # every block through the pool when it has one
        ran_in = []
        steps = pipeline._decode_batch(packets)
        assert isinstance(steps[0], Resize)
        pipeline.estimator_for(640, 480)
        push_jobs = pipeline.estimator.push_jobs

        def recording(job):
            def run():
                ran_in.append(threading.current_thread().name)
                return job()
            return run
        pipeline.estimator.push_jobs = lambda events: map(recording, push_jobs(events))
        pipeline._estimate(steps[1:])
        pipeline._publish_computed(wait_s=None, everything=True)
        pipeline.stop()
        if threads > 1:  # several pool threads computed blocks
            assert all(name.startswith('veckm_flow_compute') for name in ran_in)
            assert len(set(ran_in)) >= 2
        outputs.append(published.blocks)
        assert pipeline.stats.totals['low_validity_flows'] > 1000
    one_at_a_time, pooled = outputs
    assert len(one_at_a_time) >= 25
    assert pooled == one_at_a_time


@pytest.mark.parametrize('threads', [1, 2])
def test_blocks_skip_the_long_context_while_the_pipeline_is_behind(model, threads):
    """
    Blocks prepared while the pipeline is behind skip the long context's second look.

    Behind: input waiting, every compute thread busy. Their flows are the plain ones, the
    others have it, and the skipped blocks are counted.
    """
    packets = evt3_packets(duration_s=0.15)
    runs = {}
    # 1e6 px/s: every flow gets the second look (the edges here are faster than 150 px/s).
    for name, long_context in (('plain', 0.0), ('long', 1e6), ('alternating', 1e6)):
        published = Published()
        pipeline = make_pipeline(model, published, block_ms=8.0, compute_threads=threads,
                                 long_context_below_px_s=long_context)
        if name == 'alternating':  # the load signal, scripted: behind for every other block
            calls = itertools.count()
            pipeline._behind = lambda: next(calls) % 2 == 1
        steps = pipeline._decode_batch(packets)
        pipeline.estimator_for(640, 480)
        pipeline._estimate(steps[1:])
        pipeline._publish_computed(wait_s=None, everything=True)
        pipeline.stop()
        runs[name] = ([points.tobytes() for points in published.points], pipeline.stats.totals)
    plain, long, alternating = (runs[name][0] for name in ('plain', 'long', 'alternating'))
    assert len(plain) == len(long) == len(alternating) >= 15
    # Every block is either the plain or the long one; blocks without slow flows are both.
    assert all(block in (plain_block, long_block)
               for block, plain_block, long_block in zip(alternating, plain, long))
    skipped = sum(block == plain_block != long_block
                  for block, plain_block, long_block in zip(alternating, plain, long))
    kept = sum(block == long_block != plain_block
               for block, plain_block, long_block in zip(alternating, plain, long))
    totals = runs['alternating'][1]
    assert totals['long_context_skipped_blocks'] >= skipped >= 5 and kept >= 5
    assert 0 < totals['long_context_flows'] < runs['long'][1]['long_context_flows']
    assert runs['long'][1]['long_context_skipped_blocks'] == 0
    assert runs['plain'][1]['long_context_flows'] == 0


def test_long_context_when_behind_keeps_the_second_look(model):
    """long_context_when_behind: blocks prepared while behind take the second look too."""
    packets = evt3_packets(duration_s=0.1)
    outputs = []
    for behind in (False, True):
        published = Published()
        pipeline = make_pipeline(model, published, block_ms=8.0, compute_threads=1,
                                 long_context_below_px_s=1e6, long_context_when_behind=True)
        pipeline._behind = lambda: behind
        steps = pipeline._decode_batch(packets)
        pipeline.estimator_for(640, 480)
        pipeline._estimate(steps[1:])
        pipeline.stop()
        assert pipeline.stats.totals['long_context_skipped_blocks'] == 0
        assert pipeline.stats.totals['long_context_flows'] > 0
        outputs.append([points.tobytes() for points in published.points])
    assert outputs[0] == outputs[1] and len(outputs[0]) >= 8


def _run_threads(pipeline, packets, timeout_s=30.0):
    pipeline.start()
    try:
        for packet in packets:
            pipeline.put(packet)
        deadline = time.monotonic() + timeout_s
        totals = pipeline.stats.totals
        # Packets dropped by age (max_queue_delay_ms) are never handled. A packet counts as
        # handled once its blocks are computed or handed to the compute pool: wait for those
        # in flight too (stop() forgets them; a loaded machine missed the last block so).
        while ((totals['handled_packets'] + totals['dropped_packets'] < len(packets)
                or pipeline._in_flight) and time.monotonic() < deadline):
            time.sleep(0.01)
    finally:
        pipeline.stop()


def test_threads_give_the_flows_of_the_synchronous_path(model):
    packets = evt3_packets(duration_s=0.1)
    published = Published()
    # All packets arrive at once, so the threads are behind: without long_context_when_behind
    # their blocks would skip the second look at slow flows.
    _run_threads(make_pipeline(model, published, block_ms=5.0, max_queue_delay_ms=0.0,
                               long_context_when_behind=True), packets)
    reference = Published()
    make_pipeline(model, reference, block_ms=5.0).process(packets)
    assert len(reference.blocks) >= 15
    assert published.blocks == reference.blocks


def test_compute_threads_are_warmed_up_at_start(model):
    """Before input arrives, the estimate thread and each pool thread compute a made-up block."""
    published = Published()
    pipeline = make_pipeline(model, published, compute_threads=3)
    pipeline.start()
    try:
        assert pipeline.warmed_up.wait(30.0)
        names = sorted(name for name, _ in pipeline.warmed_up_threads)
        assert names[-1] == 'veckm_flow_estimate'
        assert len(names) == 4 and len(set(names)) == 4  # no pool thread took two
        assert all(name.startswith('veckm_flow_compute') for name in names[:-1])
        assert pipeline.estimator is None and not published.blocks  # nothing published
        assert any('warmed up 4 compute thread(s)' in message for _, message in published.logs)
    finally:
        pipeline.stop()


def test_blocks_run_with_their_threads_torch_thread_count(model, monkeypatch):
    """
    Blocks computed by the estimate thread use its count, the pool's their own.

    torch.set_num_threads in a pool thread also sets a process-wide default that a thread
    picks up at its first parallel loop in a library: the estimate thread must not.
    """
    import torch

    from veckm_flow_ros.core.estimator import NormalFlowEstimator
    published = Published()
    pipeline = make_pipeline(model, published, compute_threads=2, torch_threads=0)
    seen = []
    compute = NormalFlowEstimator._encode_and_predict

    def recording(self, *args):
        seen.append((threading.current_thread().name, torch.get_num_threads()))
        return compute(self, *args)
    monkeypatch.setattr(NormalFlowEstimator, '_encode_and_predict', recording)
    _run_threads(pipeline, evt3_packets(duration_s=0.2))
    counts = dict(pipeline.warmed_up_threads)
    inline_threads = pipeline._inline_threads
    assert counts['veckm_flow_estimate'] == inline_threads
    _, pool_threads = compute_threads(pipeline.config)  # 1 on 2 cores
    pool_counts = [count for name, count in counts.items() if name != 'veckm_flow_estimate']
    assert pool_counts == [pool_threads, pool_threads]
    assert seen
    for name, count in seen:
        expected = inline_threads if name == 'veckm_flow_estimate' else pool_threads
        assert count == expected, seen


def test_the_pipeline_imports_no_ros():
    """A fresh interpreter importing the pipeline, replay and info loads no ROS module."""
    import subprocess
    code = ('import sys; import veckm_flow_ros.stream.pipeline, veckm_flow_ros.offline.replay, '
            'veckm_flow_ros.offline.bag_summary; '
            "ros = ('rclpy', 'rcl_interfaces', 'sensor_msgs', 'diagnostic_msgs', "
            "'builtin_interfaces'); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ros))")
    result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == '[]'


# ------------------------------------------------------------------------------------------
# Each node parameter changes what the pipeline does (test_node checks that the node hands
# every parameter to the pipeline). The moving edges have known flow (scenes.EDGES).


def _run(model, packets=None, **parameters):
    """Process packets synchronously (one compute thread); return (pipeline, Published)."""
    published = Published()
    parameters.setdefault('compute_threads', 1)
    pipeline = make_pipeline(model, published, **parameters)
    pipeline.process(evt3_packets() if packets is None else packets)
    return pipeline, published


def _all_points(published):
    return np.concatenate(published.points)


def _positive_fraction(points):
    """%Pos / 100 of flows against the moving edges' ground truth (by image quadrant)."""
    from scenes import EDGES
    index = (points['x'] >= 320).astype(int) + 2 * (points['y'] >= 240).astype(int)
    truth = np.array([[s * np.cos(a), s * np.sin(a)] for _, _, a, s in EDGES])[index]
    return float(np.mean(points['u'] * truth[:, 0] + points['v'] * truth[:, 1] > 0))


@pytest.fixture(scope='module')
def default_run(model):
    """Return the default parameters' output, for the parameters to differ from."""
    return _run(model)


def _ros_times_ns(published):
    return np.concatenate([stamp + np.round(points['t'].astype(np.float64) * 1e9)
                           for (_, stamp, _), points in zip(published.blocks, published.points)])


def test_causal_uses_past_context_and_publishes_sooner(model, default_run):
    centred_pipeline, centred = default_run
    causal_pipeline, causal = _run(model, causal=True)
    tau_ms = model.tau_s * 1e3
    assert centred_pipeline.block_ms == pytest.approx(2 * tau_ms)
    assert causal_pipeline.block_ms == pytest.approx(tau_ms)
    # Without future context a flow is ready as soon as its block is: the same input gives
    # flows for events that the centred estimator still holds back (future context).
    assert _ros_times_ns(causal).max() > _ros_times_ns(centred).max() + 0.5 * tau_ms * 1e6
    assert causal.blocks != centred.blocks
    assert _positive_fraction(_all_points(causal)) > 0.85  # still the right direction


def test_max_flows_per_block_caps_every_block(model, default_run):
    _, published = default_run
    assert max(len(points) for points in published.points) > 300
    _, capped = _run(model, max_flows_per_block=300)
    sizes = [len(points) for points in capped.points]
    assert max(sizes) == 300 and len(sizes) == len(published.points)


def test_max_buffered_events_bounds_the_estimators_window(model):
    """Packets one by one (as streamed): a window smaller than a block's context cuts it."""
    outputs = []
    for bound in (4_000_000, 1000):
        published = Published()
        pipeline = make_pipeline(model, published, compute_threads=1,
                                 max_buffered_events=bound)
        for packet in evt3_packets():
            pipeline.process([packet])
            assert len(pipeline.estimator._events) <= bound
        outputs.append((pipeline.estimator_drops(), published))
    (unbounded_drops, unbounded), (bounded_drops, bounded) = outputs
    assert unbounded_drops == 0 and bounded_drops > 0
    assert bounded.blocks != unbounded.blocks


def test_rotation_mean_flow_changes_the_flows_not_the_points(model, default_run):
    _, plain = default_run
    _, mean = _run(model, rotation_mean_flow=True)
    plain_points, mean_points = _all_points(plain), _all_points(mean)
    for name in ('x', 'y', 't'):
        np.testing.assert_array_equal(mean_points[name], plain_points[name])
    assert np.mean(mean_points['u'] != plain_points['u']) > 0.5
    assert _positive_fraction(mean_points) > 0.9
    assert mean_points.dtype.names == plain_points.dtype.names  # no confidence field


def test_publish_confidence_adds_the_field(model, default_run):
    _, plain = default_run
    _, with_confidence = _run(model, publish_confidence=True)
    points = _all_points(with_confidence)
    assert 'confidence' not in plain.points[0].dtype.names
    assert points.dtype.names == ('x', 'y', 't', 'u', 'v', 'validity', 'confidence')
    assert np.all((points['confidence'] >= 0) & (points['confidence'] <= 1))
    np.testing.assert_array_equal(points['validity'], _all_points(plain)['validity'])
    np.testing.assert_array_equal(points['u'], _all_points(plain)['u'])


def test_long_context_below_px_s_estimates_slow_flows_again_and_counts_them(model,
                                                                            default_run):
    default_pipeline, default = default_run
    assert default_pipeline.estimator.long_context_below_px_s == 150.0  # the node's default
    off_pipeline, off = _run(model, long_context_below_px_s=0.0, block_ms=5.0)
    every_pipeline, every = _run(model, long_context_below_px_s=1.0e6, block_ms=5.0)
    assert off_pipeline.stats.totals['long_context_flows'] == 0
    # Above every speed: each published flow was estimated again, and counted.
    totals = every_pipeline.stats.totals
    assert totals['long_context_flows'] == totals['flows'] == len(_all_points(every)) > 0
    # The long context is all past: blocks are ready as soon as without it (no latency).
    off_points, every_points = _all_points(off), _all_points(every)
    assert [stamp for _, stamp, _ in every.blocks] == [stamp for _, stamp, _ in off.blocks]
    shared = len(every_points)
    assert shared == len(off_points)
    for name in ('x', 'y', 't'):
        np.testing.assert_array_equal(every_points[name], off_points[name][:shared])
    assert np.mean(every_points['u'] != off_points['u'][:shared]) > 0.5
    assert _positive_fraction(every_points) > 0.9
    assert 0 < default_pipeline.stats.totals['long_context_flows'] < len(_all_points(default))


def test_target_stride_computes_every_kth_event(model, default_run):
    pipeline, full = default_run
    _, strided = _run(model, target_stride=4)
    assert len(_all_points(strided)) == pytest.approx(len(_all_points(full)) / 4, rel=0.05)
    assert pipeline.stats.totals['events'] > 0


def test_block_ms_sets_the_published_block_length(model):
    for block_ms in (2.5, 10.0):
        pipeline, published = _run(model, block_ms=block_ms)
        assert pipeline.estimator.block_ns == round(block_ms * 1e6)
        spans_ms = [-1e3 * points['t'].min() for points in published.points]
        assert max(spans_ms) <= block_ms
        # 0.12 s of input minus the tail waiting for its future context (tau; the default
        # long context adds none, it is all past).
        expected = (120 - 1e3 * model.tau_s) / block_ms
        assert expected - 3 <= len(published.blocks) <= expected + 2, block_ms


def test_model_choice_reaches_the_estimator(default_run):
    from veckm_flow_ros.core.model import load_model
    other = load_model('veckm_r8_tau16ms')
    pipeline, published = _run(other)
    assert pipeline.block_ms == pytest.approx(32.0)  # its own 2 tau
    assert pipeline.estimator.model is other
    assert published.blocks != default_run[1].blocks
    assert _positive_fraction(_all_points(published)) > 0.9


def test_pixel_radius_and_tau_ms_must_match_the_model(model):
    assert (model.pixel_radius, model.tau_s) == (10, 0.012)
    for good in ({'pixel_radius': 10}, {'tau_ms': 12.0}, {'pixel_radius': 0, 'tau_ms': 0.0}):
        check_config(model, default_config(**good))
    with pytest.raises(ConfigurationError, match='pixel_radius is 8 px.*r = 10 px'):
        check_config(model, default_config(pixel_radius=8))
    with pytest.raises(ConfigurationError, match='tau_ms is 16 ms.*tau = 12 ms'):
        check_config(model, default_config(tau_ms=16.0))


def test_device_cpu_or_a_clear_error_for_cuda(model):
    import torch
    pipeline, _ = _run(model, device='cpu', packets=evt3_packets(duration_s=0.03))
    assert str(pipeline.estimator.device) == 'cpu'
    if torch.cuda.is_available():
        cpu = _all_points(_run(model)[1])
        cuda = _all_points(_run(model, device='cuda')[1])
        np.testing.assert_array_equal(cuda['x'], cpu['x'])
        np.testing.assert_allclose(cuda['u'], cpu['u'], atol=0.05 * np.abs(cpu['u']).max())
    else:
        with pytest.raises(ConfigurationError, match='device is cuda but torch sees no CUDA'):
            check_config(model, default_config(device='cuda'))


def test_compute_and_torch_threads(model):
    assert compute_threads(default_config(compute_threads=3, torch_threads=1)) == (3, 1)
    assert compute_threads(default_config(compute_threads=2, device='cuda'))[0] == 1
    published = Published()
    pipeline = make_pipeline(model, published, compute_threads=2, torch_threads=1)
    assert pipeline.compute_threads == 2 and pipeline._inline_threads == 1
    pipeline.start()
    try:
        assert pipeline.warmed_up.wait(30.0)
        assert sorted(count for _, count in pipeline.warmed_up_threads) == [1, 1, 1]
        assert len(pipeline.warmed_up_threads) == 3
    finally:
        pipeline.stop()
    single = make_pipeline(model, published, compute_threads=1)
    assert single.compute_threads == 1 and single._compute_pool is None


def test_max_queued_events_bounds_the_queue(model):
    packets = evt3_packets(duration_s=0.05)  # ~200 estimated events per 1 ms packet
    for capacity, drops in ((1000, True), (10_000_000, False)):
        published = Published()
        pipeline = make_pipeline(model, published, max_queued_events=capacity)
        for packet in packets:  # the threads are not started: the queue only fills
            pipeline.put(packet)
        assert pipeline.queue.queued_events <= capacity
        assert (pipeline.stats.totals['dropped_packets'] > 0) == drops, capacity


def test_max_queue_delay_ms_drops_packets_that_waited(model):
    import dataclasses
    packets = evt3_packets(duration_s=0.03)
    for delay_ms, dropped in ((200.0, len(packets)), (0.0, 0)):
        published = Published()
        pipeline = make_pipeline(model, published, max_queue_delay_ms=delay_ms)
        old_s = time.monotonic() - 1.0  # received 1 s ago: older than 200 ms
        for packet in packets:
            pipeline.put(dataclasses.replace(packet, received_s=old_s))
        totals = pipeline.stats.totals
        pipeline.start()
        try:
            deadline = time.monotonic() + 30
            while (totals['handled_packets'] + totals['dropped_packets'] < len(packets)
                   and time.monotonic() < deadline):
                time.sleep(0.01)
        finally:
            pipeline.stop()
        assert totals['dropped_packets'] == dropped, delay_ms
        assert bool(published.blocks) == (dropped == 0)
