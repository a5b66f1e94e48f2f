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
Tests of the EventPacket decoders (veckm_flow_ros.eventio.decode), with packets.py round trips.

Both backends run every test: the C++ kernels and the numpy reference. The real recordings of
../shared/data/recordings must reproduce the checksums their upstream test suites assert, and
the two backends must agree on arbitrary bytes (the packets are untrusted).
"""

from array import array

import numpy as np
import pytest

from veckm_flow_ros.eventio.decode import (DecodeError, ENCODINGS, extension_available,
                                           PacketDecoder)
from veckm_flow_ros.eventio.events import EventArray, TriggerArray
from veckm_flow_ros.eventio.packets import encode_packets, sort_for_vectors

BACKENDS = ('cpp', 'numpy')
US = 1000  # ns per microsecond


@pytest.fixture(params=BACKENDS)
def backend(request):
    if request.param == 'cpp' and not extension_available():
        pytest.skip('the compiled extension veckm_flow_ros._C is not built')
    return request.param


def words16(*words):
    return np.array(words, '<u2').tobytes()


def evt3(code, payload):
    return (code << 12) | payload


def assert_same_events(a: EventArray, b: EventArray):
    for name in ('t_ns', 'x', 'y', 'p'):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def assert_same_triggers(a: TriggerArray, b: TriggerArray):
    for name in ('t_ns', 'channel', 'edge'):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


# -- real recordings --------------------------------------------------------------------------

@pytest.fixture(scope='module')
def recordings(recordings_dir):
    """Bag name -> list of messages (rosbags objects), read once."""
    from veckm_flow_ros.eventio.bag import read_event_messages
    return {name: [item.msg for item in read_event_messages(recordings_dir / name)]
            for name in ('py_test_events_1', 'py_test_events_2',
                         'codecs_test_data_libcaer_rollover', 'codecs_test_data_mono_cd')}


def decode_all(messages, backend):
    decoder = PacketDecoder(backend)
    results = [decoder.decode_message(msg) for msg in messages]
    for result in results:
        assert result.problems == []
    return (EventArray.concatenate([r.events for r in results]),
            TriggerArray(*(np.concatenate([getattr(r.triggers, name) for r in results])
                           for name in ('t_ns', 'channel', 'edge'))),
            results)


def test_evt3_recording_checksums(recordings, backend):
    events, triggers, _ = decode_all(recordings['py_test_events_1'], backend)
    assert (np.count_nonzero(events.p == 0), np.count_nonzero(events.p == 1)) == (218291, 125183)
    # event_camera_py sums microseconds of CD and trigger events; it calls edge 0 "rise".
    assert int((events.t_ns // US).sum()) + int((triggers.t_ns // US).sum()) == 2885601049874
    assert (np.count_nonzero(triggers.edge == 0), np.count_nonzero(triggers.edge == 1)) == (
        2078, 2079)
    assert events.t_ns[0] == 7139845 * US


def test_libcaer_cmp_recording_checksums(recordings, backend):
    events, triggers, _ = decode_all(recordings['py_test_events_2'], backend)
    assert (np.count_nonzero(events.p == 0), np.count_nonzero(events.p == 1)) == (360223, 211043)
    assert int(((events.t_ns - events.t_ns[0]) // US).sum()) == 335555680277
    assert events.t_ns[0] // US == 1744227144732712
    assert len(triggers) == 0


def test_libcaer_recording_checksums(recordings, backend):
    events, _, results = decode_all(recordings['codecs_test_data_libcaer_rollover'], backend)
    assert int(events.t_ns.astype(np.uint64).sum(dtype=np.uint64)) == 15762826572202229126
    assert int(events.x.sum(dtype=np.int64)) == 111651612
    assert int(events.y.sum(dtype=np.int64)) == 82801007
    assert int(events.p.sum(dtype=np.int64)) == 181908
    first = results[0].events
    assert (first.t_ns[0], first.t_ns[-1]) == (1702309120762236018, 1702309120772213018)
    assert (np.count_nonzero(first.p == 0), np.count_nonzero(first.p == 1)) == (741, 872)


def test_mono_recording_checksums(recordings, backend):
    events, _, _ = decode_all(recordings['codecs_test_data_mono_cd'], backend)
    assert int(events.t_ns.sum()) == 4950000
    assert (int(events.x.sum(dtype=np.int64)), int(events.y.sum(dtype=np.int64)),
            int(events.p.sum(dtype=np.int64))) == (34450, 26450, 50)


def test_evt3_recording_decodes_the_same_in_other_packet_cuts(recordings):
    """The evt3 stream re-cut at arbitrary word boundaries decodes to the same events."""
    messages = recordings['py_test_events_1']
    reference, reference_triggers, _ = decode_all(messages, 'numpy')
    stream = np.concatenate([msg.events for msg in messages])
    cuts = np.sort(np.random.default_rng(0).integers(0, len(stream) // 2, 300)) * 2
    decoder = PacketDecoder()
    results = [decoder.decode('evt3', chunk, 0, 640, 480) for chunk in np.split(stream, cuts)]
    assert_same_events(EventArray.concatenate([r.events for r in results]), reference)
    assert sum(len(r.triggers) for r in results) == len(reference_triggers)


def test_backends_agree_on_recordings(recordings):
    if not extension_available():
        pytest.skip('the compiled extension veckm_flow_ros._C is not built')
    for name, messages in recordings.items():
        cpp_events, cpp_triggers, _ = decode_all(messages, 'cpp')
        numpy_events, numpy_triggers, _ = decode_all(messages, 'numpy')
        assert_same_events(cpp_events, numpy_events)
        assert_same_triggers(cpp_triggers, numpy_triggers)


# -- untrusted bytes: both backends agree, nothing raises ---------------------------------------

def needs_cpp():
    if not extension_available():
        pytest.skip('the compiled extension veckm_flow_ros._C is not built')


@pytest.mark.parametrize('encoding', ENCODINGS)
def test_backends_agree_on_arbitrary_bytes(encoding):
    """Random packets (any length, any bytes) and sensor sizes; several packets per stream."""
    needs_cpp()
    rng = np.random.default_rng(ENCODINGS.index(encoding))
    for _ in range(40):
        width, height = (int(v) for v in rng.choice([0, 1, 346, 640, 2048, 1 << 20], 2))
        time_base = int(rng.integers(0, 1 << 63))
        cpp, reference = PacketDecoder('cpp'), PacketDecoder('numpy')
        for _ in range(3):
            packet = rng.integers(0, 256, int(rng.integers(0, 4000)), dtype=np.uint8).tobytes()
            a = cpp.decode(encoding, packet, time_base, width, height)
            b = reference.decode(encoding, packet, time_base, width, height)
            assert_same_events(a.events, b.events)
            assert_same_triggers(a.triggers, b.triggers)
            assert a.problems == b.problems
            assert np.all(a.events.x < max(width, 1)) and np.all(a.events.y < max(height, 1))
        assert cpp.counters() == reference.counters()


@pytest.mark.parametrize('encoding', ['evt3', 'libcaer_cmp'])
def test_backends_agree_on_plausible_word_streams(encoding):
    """
    Long streams of defined word types, decoded whole (numpy) and cut in packets (C++).

    Random bytes rarely chain the stateful words (time, row, vector base, vectors); these
    streams do, so every state update of the two implementations is compared.
    """
    needs_cpp()
    rng = np.random.default_rng(7)
    codes = [0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 14] if encoding == 'evt3' else [0, 1, 2, 3, 4, 5]
    for _ in range(30):
        words = ((rng.choice(codes, 3000) << 12) | rng.integers(0, 0x1000, 3000)).astype('<u2')
        stream = words.tobytes()
        whole = PacketDecoder('numpy').decode(encoding, stream, 10**15, 1500, 1500)
        cuts = np.sort(rng.integers(0, len(words), 5)) * 2
        split = PacketDecoder('cpp')
        parts = [split.decode(encoding, part, 10**15, 1500, 1500)
                 for part in np.split(np.frombuffer(stream, np.uint8), cuts)]
        if encoding == 'evt3':
            assert_same_events(EventArray.concatenate([p.events for p in parts]), whole.events)
            assert sum(len(p.triggers) for p in parts) == len(whole.triggers)
        else:  # libcaer_cmp restarts its time in every packet: compare addresses only
            merged = EventArray.concatenate([p.events for p in parts])
            for name in ('x', 'y', 'p'):
                np.testing.assert_array_equal(getattr(merged, name), getattr(whole.events, name))


# -- format details -------------------------------------------------------------------------------

TH, TL, ADDR_Y, ADDR_X, BASE_X, VECT_12, VECT_8, TRIGGER = 8, 6, 0, 2, 3, 4, 5, 10


def test_evt3_waits_for_time_and_decodes_vectors(backend):
    payload = words16(
        evt3(ADDR_Y, 7), evt3(ADDR_X, 1),            # before any time: ignored
        evt3(TH, 1), evt3(ADDR_X, 2),                # TIME_HIGH alone: still ignored
        evt3(TL, 5),                                 # time = 1 << 12 | 5 us
        evt3(ADDR_X, (1 << 11) | 3),                 # y was set before the time: still 0
        evt3(ADDR_Y, 9), evt3(ADDR_X, 4),
        evt3(BASE_X, (1 << 11) | 100), evt3(VECT_12, 0b100000000101), evt3(VECT_8, 0b11),
        evt3(9, 0x123), evt3(14, 0), evt3(7, 1), evt3(15, 2),  # padding / others: ignored
        evt3(TRIGGER, (3 << 8) | 1))
    result = PacketDecoder(backend).decode('evt3', payload, 0, 640, 480)
    t_ns = ((1 << 12) | 5) * US
    assert result.events.x.tolist() == [3, 4, 100, 102, 111, 112, 113]
    assert result.events.y.tolist() == [0, 9, 9, 9, 9, 9, 9]
    assert result.events.p.tolist() == [1, 0, 1, 1, 1, 1, 1]
    assert np.all(result.events.t_ns == t_ns)
    assert (result.triggers.t_ns.tolist(), result.triggers.channel.tolist(),
            result.triggers.edge.tolist()) == ([t_ns], [3], [1])
    assert result.problems == []


def test_evt3_time_high_wrap_and_jitter(backend):
    decoder = PacketDecoder(backend)
    first = decoder.decode('evt3', words16(evt3(TH, 0xFFF), evt3(TL, 0), evt3(ADDR_X, 1)),
                           0, 640, 480)
    # 0xFFF -> 0x000 is a wrap of the 24-bit microsecond clock (2^24 us later).
    second = decoder.decode('evt3', words16(evt3(TH, 0), evt3(ADDR_X, 2)), 0, 640, 480)
    assert first.events.t_ns.tolist() == [0xFFF000 * US]
    assert second.events.t_ns.tolist() == [(1 << 24) * US]
    # A step back by <= 10 time_high units is jitter, not a wrap (reported as going back).
    third = decoder.decode('evt3', words16(evt3(TH, 20), evt3(TH, 12), evt3(ADDR_X, 3)),
                           0, 640, 480)
    assert third.events.t_ns.tolist() == [((1 << 24) + (12 << 12)) * US]
    assert decoder.problem_counts == {}
    assert decoder.decode('evt3', words16(evt3(TH, 1), evt3(ADDR_X, 3)), 0, 640, 480).events \
        .t_ns.tolist() == [((2 << 24) + (1 << 12)) * US]


@pytest.mark.parametrize('step_back, wraps', [(10, False), (11, True)])
def test_evt3_wrap_threshold_is_a_step_back_of_more_than_10(backend, step_back, wraps):
    """The reference counts a wrap only when time_high falls by more than 10 units."""
    payload = words16(evt3(TH, 100), evt3(TL, 0), evt3(TH, 100 - step_back), evt3(ADDR_X, 1))
    result = PacketDecoder(backend).decode('evt3', payload, 0, 640, 480)
    assert result.events.t_ns.tolist() == [((int(wraps) << 24) | (100 - step_back) << 12) * US]


def test_evt3_problems_are_reported_not_raised(backend):
    decoder = PacketDecoder(backend)
    payload = words16(evt3(TH, 0), evt3(TL, 1), evt3(ADDR_Y, 479), evt3(ADDR_X, 639),
                      evt3(ADDR_Y, 480), evt3(ADDR_X, 5), evt3(1, 0), evt3(13, 0),
                      evt3(ADDR_Y, 2), evt3(ADDR_X, 640)) + b'\x07'
    result = decoder.decode('evt3', payload, 0, 640, 480)
    assert (result.events.x.tolist(), result.events.y.tolist()) == ([639], [479])
    assert decoder.problem_counts == {'truncated': 1, 'invalid_code': 2, 'out_of_bounds': 2}
    assert len(result.problems) == 3


def test_libcaer_cmp_time_restarts_per_message_and_x_carries_over(backend):
    decoder = PacketDecoder(backend)
    cmp_th, cmp_tl, cmp_x, cmp_y, cmp_base_y, cmp_vect8 = range(6)
    first = decoder.decode('libcaer_cmp', words16(
        evt3(cmp_th, 2), evt3(cmp_tl, 3), evt3(cmp_x, 10), evt3(cmp_y, (1 << 11) | 20),
        evt3(cmp_base_y, 30), evt3(cmp_vect8, 0b10000001), evt3(cmp_vect8, 0b1)),
        5_000_000, 346, 260)
    assert first.events.t_ns.tolist() == [5_000_000 + ((2 << 12) | 3) * US] * 4
    assert first.events.x.tolist() == [10] * 4
    assert first.events.y.tolist() == [20, 30, 37, 38]
    assert first.events.p.tolist() == [1, 0, 0, 0]
    second = decoder.decode('libcaer_cmp', words16(evt3(cmp_y, 21)), 7_000_000, 346, 260)
    assert (second.events.t_ns.tolist(), second.events.x.tolist()) == ([7_000_000], [10])


def libcaer_records(*records):
    return np.array(list(records), [('data', '<u4'), ('ts', '<i4')]).tobytes()


def test_libcaer_wrap_and_negative_timestamps(backend):
    def data(x, y, p):
        return (x << 17) | (y << 2) | (p << 1) | 1

    payload = libcaer_records((data(1, 2, 1), 2**31 - 5), (data(3, 4, 0), -1),
                              (data(5, 6, 1), 7), (data(700, 6, 1), 8))
    decoder = PacketDecoder(backend)
    result = decoder.decode('libcaer', payload, 10**18, 640, 480)
    assert result.events.t_ns.tolist() == [10**18 + (2**31 - 5) * US, 10**18 + (2**31 + 7) * US]
    assert (result.events.x.tolist(), result.events.y.tolist(), result.events.p.tolist()) == (
        [1, 5], [2, 6], [1, 1])
    assert decoder.problem_counts == {'invalid_timestamp': 1, 'out_of_bounds': 1}


def test_mono_and_trigger_fields(backend):
    words = np.array([(1 << 63) | (479 << 48) | (639 << 32) | 123, (5 << 48) | (7 << 32) | 0],
                     '<u8')
    decoder = PacketDecoder(backend)
    result = decoder.decode('mono', words.tobytes(), 1000, 640, 480)
    assert result.events.t_ns.tolist() == [1123, 1000]
    assert (result.events.x.tolist(), result.events.y.tolist(), result.events.p.tolist()) == (
        [639, 7], [479, 5], [1, 0])
    triggers = decoder.decode('trigger', words.tobytes(), 1000, 640, 480).triggers
    assert (triggers.t_ns.tolist(), triggers.channel.tolist(), triggers.edge.tolist()) == (
        [1123, 1000], [479 & 0xFF, 5], [1, 0])


def test_buffer_types_are_equivalent(backend):
    events = EventArray(np.arange(5) * US, np.arange(5), np.arange(5), np.arange(5) % 2)
    payload = encode_packets(events, 'evt3', packet_duration_ns=10**9)[0].data
    expected = PacketDecoder(backend).decode('evt3', payload, 0, 640, 480).events
    for buffer in (bytearray(payload), memoryview(payload), array('B', payload),
                   np.frombuffer(payload, np.uint8)):
        assert_same_events(PacketDecoder(backend).decode('evt3', buffer, 0, 640, 480).events,
                           expected)
    assert_same_events(expected, events)


def test_empty_packets(backend):
    decoder = PacketDecoder(backend)
    for encoding in ENCODINGS:
        result = decoder.decode(encoding, b'', 0, 640, 480)
        assert len(result.events) == 0 and len(result.triggers) == 0 and result.problems == []


def test_undecodable_messages_raise_decode_error(backend):
    decoder = PacketDecoder(backend)
    with pytest.raises(DecodeError, match='no_such'):
        decoder.decode('no_such', b'\x00\x00', 0, 640, 480)
    with pytest.raises(DecodeError, match='time_base'):
        decoder.decode('mono', b'', 1 << 63, 640, 480)
    with pytest.raises(DecodeError, match='uint8'):
        decoder.decode('mono', np.zeros(8, np.float32), 0, 640, 480)
    assert decoder.problem_counts['unknown_encoding'] == 1


# -- round trips through packets.py ---------------------------------------------------------------

def random_events(rng, n, span_ns, width=640, height=480):
    t_ns = np.sort(rng.integers(0, span_ns, n)) // US * US
    return EventArray(t_ns, rng.integers(0, width, n), rng.integers(0, height, n),
                      rng.integers(0, 2, n))


def decode_packets(packets, backend, width=640, height=480):
    decoder = PacketDecoder(backend)
    results = [decoder.decode(p.encoding, p.data, p.time_base, width, height) for p in packets]
    assert decoder.problem_counts == {}
    return (EventArray.concatenate([r.events for r in results]),
            TriggerArray(*(np.concatenate([getattr(r.triggers, name) for r in results])
                           for name in ('t_ns', 'channel', 'edge'))))


def test_evt3_round_trip_with_vectors_and_clock_wraps(backend):
    rng = np.random.default_rng(3)
    # Dense rows at few timestamps give vector words; a 100 s gap crosses several 2^24 us wraps.
    events = random_events(rng, 20000, 40 * 10**9)
    events.t_ns[:] = events.t_ns // 10**9 * 10**9
    events.x[:] = events.x // 20
    events.y[:] = events.y // 60
    events.t_ns[10000:] += 100 * 10**9
    events = sort_for_vectors(events)
    triggers = TriggerArray(np.sort(rng.integers(0, 40 * 10**9, 20)) // US * US,
                            rng.integers(0, 16, 20), rng.integers(0, 2, 20))
    packets = encode_packets(events, 'evt3', triggers=triggers, packet_duration_ns=10**9)
    codes = np.frombuffer(b''.join(p.data for p in packets), '<u2') >> 12
    assert np.count_nonzero(codes == VECT_12) > 100  # the vector words are exercised
    decoded, decoded_triggers = decode_packets(packets, backend)
    assert_same_events(decoded, events)
    assert_same_triggers(decoded_triggers, triggers)


@pytest.mark.parametrize('encoding', ['libcaer_cmp', 'libcaer', 'mono'])
def test_round_trip(backend, encoding):
    rng = np.random.default_rng(4)
    events = random_events(rng, 5000, 3 * 10**9, 346, 260)
    events.t_ns[:] += 1_700_000_000 * 10**9
    if encoding == 'mono':
        events.t_ns[:] += rng.integers(0, US, len(events))  # mono keeps nanoseconds
        events.t_ns.sort()
    events = sort_for_vectors(events)
    decoded, _ = decode_packets(encode_packets(events, encoding, packet_duration_ns=10**8),
                                backend, 346, 260)
    assert_same_events(decoded, events)


def test_evt3_resync_after_lost_messages(backend):
    # 1 ms packets of a 40 ms stream (TIME_HIGH only every 4.096 ms); packets 10-14 are lost.
    # Without a resync the first events after the gap get the time of the last decoded
    # packet (up to 5 ms early); after resync() they are dropped until the next TIME_HIGH and
    # TIME_LOW, and every decoded event keeps its true time.
    rng = np.random.default_rng(8)
    n = 8000
    events = EventArray(np.sort(rng.integers(0, 40_000, n)) * US + 5_000_000_000,
                        rng.integers(0, 640, n), rng.integers(0, 480, n), rng.integers(0, 2, n))
    events = sort_for_vectors(events)
    packets = encode_packets(events, 'evt3', packet_duration_ns=1_000_000)
    kept = [p for k, p in enumerate(packets) if not 10 <= k < 15]
    truth = {}
    for t, x, y in zip(events.t_ns.tolist(), events.x.tolist(), events.y.tolist()):
        truth.setdefault((x, y), set()).add(t)

    def decode(resync):
        decoder = PacketDecoder(backend)
        out = []
        for k, packet in enumerate(kept):
            if resync and k == 10:
                decoder.resync()
            out.append(decoder.decode('evt3', packet.data, 0, 640, 480).events)
        return EventArray.concatenate(out)

    def wrong_times(decoded):
        return sum(t not in truth.get((x, y), ()) for t, x, y in
                   zip(decoded.t_ns.tolist(), decoded.x.tolist(), decoded.y.tolist()))

    stale, synced = decode(False), decode(True)
    assert wrong_times(stale) > 0
    assert wrong_times(synced) == 0
    assert np.all(np.diff(synced.t_ns) >= 0)
    assert len(synced) > 0.7 * n


# -- the compiled ops themselves ----------------------------------------------------------------

@pytest.mark.parametrize('encoding', ENCODINGS)
def test_opcheck_decode_ops(encoding):
    """torch.library.opcheck (schema incl. the in-place state, fake shapes) of each decoder."""
    needs_cpp()
    import torch
    from veckm_flow_ros import ops
    rng = np.random.default_rng(3)
    n = 300
    events = sort_for_vectors(EventArray(np.sort(rng.integers(0, 10**9, n)),
                                         rng.integers(0, 640, n), rng.integers(0, 480, n),
                                         rng.integers(0, 2, n)))
    if encoding == 'trigger':
        data = rng.integers(0, 256, 8 * 40, dtype=np.uint8).tobytes()
    else:
        data = encode_packets(events, encoding, packet_duration_ns=None,
                              events_per_packet=n)[0].data
    buffer = torch.from_numpy(np.frombuffer(data, np.uint8).copy())
    args = {'evt3': (buffer, torch.zeros(6, dtype=torch.int64), 640, 480),
            'libcaer_cmp': (buffer, torch.zeros(3, dtype=torch.int64), 10**9, 640, 480),
            'libcaer': (buffer, 10**9, 640, 480),
            'mono': (buffer, 10**9, 640, 480),
            'trigger': (buffer, 10**9)}[encoding]
    op = getattr(torch.ops.veckm_flow, f'decode_{encoding}').default
    torch.library.opcheck(op, args)
    # The wrapper is the op.
    wrapped = getattr(ops, f'decode_{encoding}')(*(
        a.clone() if isinstance(a, torch.Tensor) else a for a in args))
    direct = op(*(a.clone() if isinstance(a, torch.Tensor) else a for a in args))
    assert all(torch.equal(a, b) for a, b in zip(wrapped, direct))
