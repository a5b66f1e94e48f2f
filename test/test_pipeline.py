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

import sys
import threading
import time

import numpy as np
import pytest
from scenes import moving_edges

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
        self.logs = []

    def publish(self, points, stamp_ns, frame_id):
        self.blocks.append((points.tobytes(), int(stamp_ns), frame_id))

    def log(self, level, message):
        self.logs.append((level, message))


def make_pipeline(model, published, **parameters):
    return FlowPipeline(model, default_config(**parameters), publish=published.publish,
                        log=published.log)


def evt3_packets(duration_s=0.12, stamp_offset_ns=3_000_000_000, frame_id='camera',
                 jitter_seed=None):
    """Return evt3 packets of moving edges, 1 ms each, stamps = sensor time + offset."""
    events, _, _ = moving_edges(duration_s=duration_s)
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
    packets = evt3_packets(duration_s=0.15)
    outputs = []
    for threads in (1, 3):
        published = Published()
        pipeline = make_pipeline(model, published, block_ms=5.0, compute_threads=threads)
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
    one_at_a_time, pooled = outputs
    assert len(one_at_a_time) >= 25
    assert pooled == one_at_a_time


def _run_threads(pipeline, packets, timeout_s=30.0):
    pipeline.start()
    try:
        for packet in packets:
            pipeline.put(packet)
        deadline = time.monotonic() + timeout_s
        while (pipeline.stats.totals['handled_packets'] < len(packets)
               and time.monotonic() < deadline):
            time.sleep(0.01)
    finally:
        pipeline.stop()


def test_threads_give_the_flows_of_the_synchronous_path(model):
    packets = evt3_packets(duration_s=0.1)
    published = Published()
    _run_threads(make_pipeline(model, published, block_ms=5.0, max_queue_delay_ms=0.0),
                 packets)
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
    assert 'rclpy' not in sys.modules or 'test_node' in ' '.join(sys.modules)
