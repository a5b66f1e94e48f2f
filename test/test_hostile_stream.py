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
A camera, a driver or a bag that lies: the stream front end and the pipeline, without ROS.

Headers claiming huge sensors, corrupt and jumping sensor clocks, time bases near 2^63, seq
leaps and packets that fail in unforeseen ways, each among valid packets: memory stays
bounded by the parameters, stamps stay near the input header stamps, the valid packets
around a bad one are kept, and every problem is counted.
"""

import logging
import weakref

import numpy as np
from scenes import moving_edges
import test_pipeline

from veckm_flow_ros.eventio.packets import encode_packets
from veckm_flow_ros.stream.frontend import Events, InputPacket, Reset, Resize, StreamFrontEnd
from veckm_flow_ros.stream.parameters import default_config
from veckm_flow_ros.stream.pipeline import FlowPipeline

STAMP_OFFSET_NS = 1_700_000_000_000_000_000  # header stamps: ROS time of 2023
HOURS_3_NS = 3 * 3600 * 1_000_000_000
MAX_JUMP_NS = 500_000_000  # time_sync_max_jump_ms by default


class Published(test_pipeline.Published):
    """Collects what the pipeline publishes and logs; no NaN or Inf flow passes."""

    def publish(self, points, stamp_ns, frame_id):
        assert np.isfinite(points['u']).all() and np.isfinite(points['v']).all()
        super().publish(points, stamp_ns, frame_id)

    def messages(self, text):
        return [message for _, message in self.logs if text in message]


def make_pipeline(model, published, **parameters):
    parameters.setdefault('block_ms', 5.0)
    parameters.setdefault('target_stride', 4)
    parameters.setdefault('compute_threads', 1)
    return FlowPipeline(model, default_config(**parameters), publish=published.publish,
                        log=published.log)


def mono_packets(duration_s=0.12, t0_ns=1_000_000_000, width=640, height=480, seq0=0,
                 stamp_offset_ns=STAMP_OFFSET_NS):
    """Mono packets of moving edges, 1 ms each; header stamp = sensor time + offset."""
    events, _, _ = moving_edges(duration_s=duration_s, t0_ns=t0_ns)
    packets = encode_packets(events, 'mono', packet_duration_ns=1_000_000)
    return [InputPacket('mono', bytes(p.data), p.time_base, width, height, seq0 + k,
                        p.first_t_ns + stamp_offset_ns, 'camera', len(p.data) // 8)
            for k, p in enumerate(packets)]


def evt3_packets(duration_s=0.12, stamp_offset_ns=STAMP_OFFSET_NS):
    events, _, _ = moving_edges(duration_s=duration_s)
    packets = encode_packets(events, 'evt3', packet_duration_ns=1_000_000)
    return [InputPacket('evt3', bytes(p.data), 0, 640, 480, k, p.first_t_ns + stamp_offset_ns,
                        'camera', len(p.data) // 2)
            for k, p in enumerate(packets)]


def renumber(packets):
    """Set seq 0, 1, 2, ... on the packets (as one driver would number them)."""
    for seq, packet in enumerate(packets):
        packet.seq = seq
    return packets


def marks_of(front_end, packets):
    """Feed the packets; return [(packet, step)] for every step."""
    return [(packet, step) for packet in packets for step in front_end.feed(packet)]


def assert_stamps_near_headers(published, packets, bound_ns):
    headers = [packet.stamp_ns for packet in packets]
    stamps = [stamp for _, stamp, _ in published.blocks]
    assert stamps, 'no flow published'
    low, high = min(headers) - bound_ns, max(headers) + 2 * bound_ns
    outside = [stamp for stamp in stamps if not low <= stamp <= high]
    assert not outside, (f'{len(outside)} of {len(stamps)} stamps outside the input header '
                         f'stamps +- {bound_ns} ns, worst {max(outside, key=lambda s: abs(s))}')


# -- item 1: memory bounded by configuration --------------------------------------------------


def test_a_header_claiming_a_huge_sensor_is_dropped_before_decoding():
    front_end = StreamFrontEnd()
    packets = mono_packets(duration_s=0.02)
    logs = []
    front_end.log = lambda level, message: logs.append(message)
    huge = [InputPacket('mono', p.data, p.time_base, 65535, 65535, 100 + k, p.stamp_ns + 10**8,
                        'camera') for k, p in enumerate(packets[:3])]
    steps = [step for packet in packets + huge for step in front_end.feed(packet)]
    assert [step for step in steps if isinstance(step, Resize)] == [Resize(640, 480)]
    assert front_end.sensor_size == (640, 480)
    assert (front_end.oversized_packets, front_end.bad_packets) == (3, 3)
    assert any('65535x65535' in message and '2048x2048' in message for message in logs)


def test_the_pipeline_never_builds_an_estimator_beyond_the_bound(model):
    published = Published()
    pipeline = make_pipeline(model, published)
    built = []
    new_estimator = pipeline._new_estimator
    pipeline._new_estimator = lambda w, h: (built.append((w, h)), new_estimator(w, h))[1]
    valid = mono_packets(duration_s=0.12)
    claims = [InputPacket('mono', p.data, p.time_base, 4096, 3000, 0, p.stamp_ns, 'camera')
              for p in valid[40:43]]
    pipeline.process(renumber(valid[:40] + claims + valid[40:]))
    assert built == [(640, 480)] and pipeline.sensor_size == (640, 480)
    assert pipeline.stats.totals['bad_packets'] == 3
    assert pipeline.front_end.oversized_packets == 3
    assert published.messages('4096x3000 px exceeds')
    assert len(published.blocks) > 10  # the valid packets after them still give flows


def test_a_size_change_releases_the_old_estimator_and_is_counted_throttled(model):
    published = Published()
    pipeline = make_pipeline(model, published)
    packets = mono_packets(duration_s=0.06)
    sizes = [(640, 480), (1280, 720)]
    for k, packet in enumerate(packets):  # the size flips every packet
        packet.width, packet.height = sizes[k % 2]
    pipeline.process(packets[:1])
    first = weakref.ref(pipeline.estimator)
    pipeline.process(packets[1:])
    assert first() is None  # released once the size changed
    changes = len(packets) - 1
    assert pipeline.stats.totals['estimator_resets'] == changes
    assert len(published.messages('sensor size changed')) == 1  # throttled: one per 5 s


# -- item 2: timestamps survive a corrupt clock ------------------------------------------------


def test_a_mono_clock_jumping_3_hours_resynchronises_at_once():
    packets = mono_packets(duration_s=0.1)
    for packet in packets[50:]:  # sensor time +3 h, header stamps continuous
        packet.time_base += HOURS_3_NS
    front_end = StreamFrontEnd()
    steps = marks_of(front_end, packets)
    resets = [step for _, step in steps if isinstance(step, Reset)]
    assert len(resets) == 1 and 'time sync jump' in resets[0].reason
    assert front_end.time_sync_jumps == 1 and front_end.resets == 1
    for packet, step in steps:
        if isinstance(step, Events):
            ros_ns = step.mark.newest_ns + step.mark.offset_ns
            assert abs(ros_ns - packet.stamp_ns) < 2_000_000  # within the packet's spread
    # No event is lost: the first packet on the new clock waited for the second.
    assert sum(len(step.events) for _, step in steps if isinstance(step, Events)) == \
        front_end.events == front_end.decoder.events


def test_a_lone_corrupt_time_is_dropped_and_never_blended():
    packets = mono_packets(duration_s=0.08)
    corrupt = InputPacket(**vars(packets[30]))
    corrupt.time_base += HOURS_3_NS
    reference = StreamFrontEnd()
    expected = [step.mark for _, step in marks_of(reference, packets[:30] + packets[31:])
                if isinstance(step, Events)]
    front_end = StreamFrontEnd()
    steps = marks_of(front_end, packets[:30] + [corrupt] + packets[31:])
    assert [step.mark for _, step in steps if isinstance(step, Events)] == expected
    assert (front_end.time_outliers, front_end.bad_packets, front_end.resets) == (1, 1, 0)


def test_a_flipped_evt3_time_high_bit_keeps_the_stamps(model):
    packets = evt3_packets(duration_s=0.2)
    words = np.frombuffer(packets[60].data, '<u2').copy()
    time_high = np.flatnonzero(words >> 12 == 8)
    assert len(time_high)
    words[time_high[0]] ^= 1 << 10  # +4.2 s, then the next TIME_HIGH reads as a rollover
    packets[60].data = words.tobytes()
    published = Published()
    pipeline = make_pipeline(model, published)
    pipeline.process(packets)
    assert_stamps_near_headers(published, packets, MAX_JUMP_NS)
    assert pipeline.stats.totals['time_sync_jumps'] >= 1
    assert len(published.blocks) > 20


def test_a_random_1_mb_evt3_packet_keeps_the_stamps(model):
    packets = evt3_packets(duration_s=0.2)
    rng = np.random.default_rng(7)
    garbage = InputPacket('evt3', rng.integers(0, 256, 1 << 20, dtype=np.uint8).tobytes(), 0,
                          640, 480, 0, packets[80].stamp_ns, 'camera')
    stream = renumber(packets[:80] + [garbage] + packets[80:])
    published = Published()
    pipeline = make_pipeline(model, published)
    pipeline.process(stream)
    assert_stamps_near_headers(published, stream, MAX_JUMP_NS)
    stamps = [stamp for _, stamp, _ in published.blocks]
    assert max(stamps) > packets[150].stamp_ns  # the stream goes on after the garbage


def test_a_mono_clock_jump_keeps_the_published_stamps(model):
    packets = mono_packets(duration_s=0.2)
    for packet in packets[100:]:
        packet.time_base += HOURS_3_NS
    published = Published()
    pipeline = make_pipeline(model, published)
    pipeline.process(packets)
    assert_stamps_near_headers(published, packets, MAX_JUMP_NS)
    assert pipeline.stats.totals['time_sync_jumps'] == 1
    assert max(stamp for _, stamp, _ in published.blocks) > packets[150].stamp_ns


def test_clean_input_never_jumps():
    """Header jitter well below the bound is blended as before (no jump, no drop)."""
    packets = mono_packets(duration_s=0.2)
    rng = np.random.default_rng(3)
    jittered = np.maximum.accumulate([p.stamp_ns + int(rng.integers(0, 20_000_000))
                                      for p in packets])  # 20 ms of delivery jitter
    for packet, stamp_ns in zip(packets, jittered):
        packet.stamp_ns = int(stamp_ns)
    front_end = StreamFrontEnd()
    marks_of(front_end, packets)
    assert (front_end.time_sync_jumps, front_end.time_outliers, front_end.resets) == (0, 0, 0)


# -- item 3: one bad packet never costs the batch ---------------------------------------------


def test_time_bases_near_2_63_cost_only_themselves(model):
    valid = mono_packets(duration_s=0.2)
    batch = []
    for k, packet in enumerate(valid):
        batch.append(packet)
        if k % 20 == 10:  # 10 hostile packets among 200 valid ones
            batch.append(InputPacket('mono', packet.data, (1 << 63) - 1000 - k, 640, 480, 0,
                                     packet.stamp_ns, 'camera'))
    published, reference = Published(), Published()
    pipeline = make_pipeline(model, published)
    pipeline.process(renumber(batch))
    make_pipeline(model, reference).process(renumber([InputPacket(**vars(p)) for p in valid]))
    assert pipeline.stats.totals['bad_packets'] == len(batch) - len(valid)
    assert pipeline.stats.totals['estimator_resets'] == 0
    assert len(reference.blocks) > 10
    assert [b[:2] for b in published.blocks] == [b[:2] for b in reference.blocks]


def test_a_packet_failing_unforeseen_costs_only_itself(model):
    valid = mono_packets(duration_s=0.1)
    broken = InputPacket('mono', valid[50].data, valid[50].time_base, None, 480, 0,
                         valid[50].stamp_ns, 'camera')  # width None: a TypeError inside
    published = Published()
    pipeline = make_pipeline(model, published)
    pipeline.process(renumber(valid[:50] + [broken] + valid[50:]))
    assert pipeline.stats.totals['bad_packets'] == 1
    assert pipeline.front_end.events == sum(p.estimated_events for p in valid)
    assert published.messages('TypeError')


# -- item 8: diagnostics that do not mislead --------------------------------------------------


def test_a_seq_leap_to_2_63_is_a_restart_not_2e18_lost_packets(model):
    pipeline = make_pipeline(model, Published())
    for seq in (0, 1, 2, 1 << 63, 3, 4, 6):
        pipeline.put(InputPacket('mono', b'', 0, 640, 480, seq, 0, 'camera'))
    totals = pipeline.stats.totals
    assert (totals['missed_packets'], totals['seq_gaps']) == (1, 1)
    assert pipeline.seq_gaps.restarts == 2


def test_estimator_resets_are_counted_and_not_printed(model, caplog):
    """Sensor time stepping back 1..100 ms restarts the estimator only: count it, throttled."""
    packets = mono_packets(duration_s=0.2)
    for packet in packets[100:]:
        packet.time_base -= 30_000_000  # 30 ms back, header stamps continuous
    published = Published()
    pipeline = make_pipeline(model, published)
    with caplog.at_level(logging.WARNING):
        pipeline.process(packets[:100])
        for packet in packets[100:]:
            pipeline.process([packet])
    assert pipeline.stats.totals['estimator_resets'] == pipeline.estimator.time_resets == 1
    assert len(published.messages('estimator reset')) == 1
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_buffer_full_warning_is_throttled_and_the_drops_counted(model, caplog):
    """An estimator over max_buffered_events on every push warns once per period, counts all."""
    from veckm_flow_ros.core.estimator import NormalFlowEstimator
    events, _, _ = moving_edges(duration_s=0.1)
    estimator = NormalFlowEstimator(model, 640, 480, max_buffered_events=1000)
    with caplog.at_level(logging.WARNING, logger='veckm_flow_ros.core.estimator'):
        for start in range(0, len(events), 2000):
            estimator.push(events[start:start + 2000])
    warnings = [r for r in caplog.records if 'max_buffered_events' in r.getMessage()]
    assert len(warnings) == 1
    assert estimator.events_dropped['buffer_full'] > 5 * 1000
