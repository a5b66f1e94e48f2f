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
Property-based fuzzing of the stream front end and the pipeline (hypothesis), fast profile.

Hostile packets -- random encodings, payloads (random bytes or bit-flipped valid ones),
sensor sizes, time bases, header stamps and seq numbers, each field over the range its CDR
type can carry -- are interleaved with valid mono packets of moving edges (frame_id 'valid').
Properties:

- no exception escapes feed() or the pipeline;
- the valid packets are never lost: every event of every valid packet comes out (a hostile
  packet costs only itself);
- every emitted event maps (mark offset) to within 3 time_sync_max_jump_ms of its packet's
  header stamp, and every published stamp lies within the input header stamps -
  time_sync_max_jump_ms .. + 2 time_sync_max_jump_ms;
- no NaN or Inf in any output;
- no estimator (per-pixel memory) beyond max_sensor_width_px x max_sensor_height_px.

scripts/fuzz_stream.py runs the same properties for minutes (the long profile).
"""

import functools
import sys

from hypothesis import given, HealthCheck, settings, strategies as st
import numpy as np
import pytest

from veckm_flow_ros.eventio.decode import ENCODINGS
from veckm_flow_ros.stream.frontend import Events, InputPacket, StreamFrontEnd
from veckm_flow_ros.stream.parameters import default_config
from veckm_flow_ros.stream.pipeline import FlowPipeline

STAMP0_NS = 1_700_000_000_000_000_000
MAX_SENSOR = (2048, 2048)
MAX_JUMP_NS = 500_000_000
UINT32, UINT64 = (1 << 32) - 1, (1 << 64) - 1
FAST = settings(max_examples=100, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))
FAST_PIPELINE = settings(max_examples=20, deadline=None, database=None,
                         suppress_health_check=list(HealthCheck))


@functools.lru_cache(maxsize=None)
def valid_packets(packets: int = 60):
    """Mono packets of moving edges, 1 ms each (payload, time_base, first sensor time)."""
    sys.path.insert(0, __file__.rsplit('/', 1)[0])
    from scenes import moving_edges
    from veckm_flow_ros.eventio.packets import encode_packets
    events, _, _ = moving_edges(duration_s=packets * 1e-3)
    return [(bytes(p.data), p.time_base, p.first_t_ns, p.num_events)
            for p in encode_packets(events, 'mono', packet_duration_ns=1_000_000)][:packets]


def _flip_bits(data: bytes, positions) -> bytes:
    if not data:
        return data
    flipped = bytearray(data)
    for position in positions:
        flipped[(position // 8) % len(flipped)] ^= 1 << (position % 8)
    return bytes(flipped)


@st.composite
def hostile_packet(draw, valid):
    """One packet a lying camera, driver or bag could send (fields within their CDR types)."""
    payload, time_base, first_t_ns, _ = valid[draw(st.integers(0, len(valid) - 1))]
    encoding = draw(st.one_of(st.sampled_from(ENCODINGS), st.text(max_size=12)))
    kind = draw(st.sampled_from(['random', 'flipped', 'valid_bytes']))
    if kind == 'random':
        data = draw(st.binary(max_size=4096))
    elif kind == 'flipped':
        data = _flip_bits(payload, draw(st.lists(st.integers(0, 1 << 20), max_size=8)))
    else:
        data = payload
    size = st.one_of(st.sampled_from([0, 1, 640, 480, 2048, 2049, 65535, UINT32]),
                     st.integers(0, UINT32))
    stamp = st.one_of(st.just(STAMP0_NS + first_t_ns), st.integers(0, (1 << 63) - 1),
                      st.integers(STAMP0_NS - 10**10, STAMP0_NS + 10**10))
    base = st.one_of(st.just(time_base), st.integers(0, UINT64),
                     st.integers((1 << 63) - 10**9, (1 << 63) + 10**9),
                     st.integers(0, 10**10).map(lambda d: time_base + d))
    return InputPacket(encoding, data, draw(base), draw(size), draw(size),
                       draw(st.integers(0, UINT64)), draw(stamp), 'hostile')


@st.composite
def hostile_stream(draw, packets: int = 60, burst: int = 1):
    """
    Draw valid mono packets (in order, seq and stamps going on) with hostile ones between.

    burst: hostile packets at most between two valid ones. Two hostile packets in a row
    that agree on a clock are a clock jump to the front end (as they would be to anyone):
    the valid packets after them may then be lost, so check_front_end(valid_kept=False).
    """
    valid = valid_packets(packets)
    stream = []
    for k, (payload, time_base, first_t_ns, _) in enumerate(valid):
        if k < len(valid) - 2:  # the last two valid: a held valid packet is confirmed
            stream += draw(st.lists(hostile_packet(valid), max_size=burst))
        stream.append(InputPacket('mono', payload, time_base, 640, 480, k,
                                  STAMP0_NS + first_t_ns, 'valid'))
    if draw(st.booleans()):  # a driver numbering all it sends
        for seq, packet in enumerate(stream):
            packet.seq = seq
    return stream


def describe(stream) -> str:
    """One line per packet: the fields that matter, the payload by its size."""
    return '\n'.join(f'{p.frame_id:7} {p.encoding!r:10} {len(p.data):5} B tb={p.time_base} '
                     f'{p.width}x{p.height} seq={p.seq} stamp=S0{p.stamp_ns - STAMP0_NS:+d}'
                     for p in stream)


def check_front_end(stream, valid_kept: bool = True):
    """Feed the stream through a front end; assert the properties (see the module)."""
    front_end = StreamFrontEnd(max_sensor_size=MAX_SENSOR, max_jump_ns=MAX_JUMP_NS)
    valid_events = sum(len(p.data) // 8 for p in stream if p.frame_id == 'valid')
    emitted = 0
    stamps = {packet.stamp_ns for packet in stream}
    for packet in stream:
        for step in front_end.feed(packet):  # never raises
            if not isinstance(step, Events):
                continue
            mark, t_ns = step.mark, step.events.t_ns
            assert len(t_ns)
            # The events of a held packet come out with a later one: mark.stamp_ns is theirs.
            assert mark.stamp_ns in stamps
            low, high = int(t_ns.min()) + mark.offset_ns, int(t_ns.max()) + mark.offset_ns
            assert mark.stamp_ns - 3 * MAX_JUMP_NS <= low <= high <= \
                mark.stamp_ns + 3 * MAX_JUMP_NS, (low, high, mark.stamp_ns)
            if mark.frame_id == 'valid':
                emitted += len(t_ns)
    assert front_end.sensor_size is None or (
        front_end.sensor_size[0] <= MAX_SENSOR[0] and front_end.sensor_size[1] <= MAX_SENSOR[1])
    if valid_kept:
        assert emitted == valid_events, \
            f'valid events lost: {emitted} of {valid_events} in\n{describe(stream)}'
    return front_end


class _Collector:
    """Checks and keeps the stamps of what the pipeline publishes."""

    def __init__(self):
        self.stamps = []

    def publish(self, points, stamp_ns, frame_id):
        for name in points.dtype.names:
            assert np.isfinite(points[name]).all(), f'non-finite {name} published'
        self.stamps.append(int(stamp_ns))


def check_pipeline(model, stream):
    """Run the stream through a pipeline in the calling thread; assert the properties."""
    collector = _Collector()
    pipeline = FlowPipeline(model, default_config(block_ms=5.0, target_stride=8,
                                                  compute_threads=1),
                            publish=collector.publish)
    built = []
    new_estimator = pipeline._new_estimator
    pipeline._new_estimator = lambda w, h: (built.append((w, h)), new_estimator(w, h))[1]
    pipeline.process(stream)  # raises nothing
    assert all(w <= MAX_SENSOR[0] and h <= MAX_SENSOR[1] for w, h in built[1:]), built
    headers = [packet.stamp_ns for packet in stream]
    low, high = min(headers) - MAX_JUMP_NS, max(headers) + 2 * MAX_JUMP_NS
    assert all(low <= stamp <= high for stamp in collector.stamps)
    assert pipeline.stats.totals['failed_blocks'] == 0
    return pipeline


@FAST
@given(hostile_stream())
def test_fuzz_front_end(stream):
    check_front_end(stream)


@FAST
@given(hostile_stream(burst=4))
def test_fuzz_front_end_bursts(stream):
    check_front_end(stream, valid_kept=False)


@pytest.fixture(scope='module')
def fuzz_model(model):
    return model


@FAST_PIPELINE
@given(stream=hostile_stream(packets=40))
def test_fuzz_pipeline(fuzz_model, stream):
    check_pipeline(fuzz_model, stream)
