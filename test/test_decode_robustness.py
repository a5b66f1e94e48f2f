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
Robustness of the EventPacket decoders: random round trips, packet splits, bad input, fuzzing.

Complements test_decode.py (checksums of the real recordings, format details). Every bad
input must give a specific problem message and leave the state so that the next good packet
decodes exactly as without the bad one. Both backends run the same tests; the C++ ones skip
when the extension is not built.
"""

import functools

from hypothesis import given, HealthCheck, settings, strategies as st
import numpy as np
import pytest

from veckm_flow_ros.eventio.decode import (DecodeError, ENCODINGS, extension_available,
                                           PacketDecoder)
from veckm_flow_ros.eventio.events import EventArray, TriggerArray
from veckm_flow_ros.eventio.packets import encode_packets, evt3_words, sort_for_vectors

WIDTH, HEIGHT = 640, 480
BACKENDS = [
    'numpy',
    pytest.param('cpp', marks=pytest.mark.skipif(
        not extension_available(), reason='veckm_flow_ros._C is not built')),
]
needs_cpp = pytest.mark.skipif(not extension_available(), reason='veckm_flow_ros._C not built')


# -- helpers ---------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _recording(path):
    """Return (encoding, events bytes, time_base, width, height) of every message of a bag."""
    from veckm_flow_ros.eventio.bag import EventBag
    with EventBag(path) as bag:
        return tuple((m.msg.encoding, m.msg.events.tobytes(), int(m.msg.time_base),
                      int(m.msg.width), int(m.msg.height)) for m in bag.messages())


def _decode_all(messages, backend):
    decoder = PacketDecoder(backend)
    results = [decoder.decode(*message) for message in messages]
    events = EventArray.concatenate([r.events for r in results])
    triggers = [r.triggers for r in results]
    trigger_t_ns = np.concatenate([t.t_ns for t in triggers]) if triggers else np.zeros(0)
    trigger_edge = np.concatenate([t.edge for t in triggers]) if triggers else np.zeros(0)
    return decoder, results, events, trigger_t_ns, trigger_edge


def _assert_same_events(actual: EventArray, expected: EventArray):
    assert len(actual) == len(expected)
    for name in ('t_ns', 'x', 'y', 'p'):
        np.testing.assert_array_equal(getattr(actual, name), getattr(expected, name),
                                      err_msg=f'column {name} differs')


def _assert_same_triggers(actual: TriggerArray, expected: TriggerArray):
    for name in ('t_ns', 'channel', 'edge'):
        np.testing.assert_array_equal(getattr(actual, name), getattr(expected, name),
                                      err_msg=f'trigger column {name} differs')


# -- real recordings -------------------------------------------------------------------------

def test_decode_message_and_counters(recordings_dir):
    from veckm_flow_ros.eventio.bag import EventBag
    decoder = PacketDecoder()
    with EventBag(recordings_dir / 'py_test_events_1') as bag:
        for item in bag.messages():
            decoder.decode_message(item.msg)
    assert decoder.messages == 517
    assert decoder.events == 218291 + 125183
    assert decoder.triggers == 4157
    assert decoder.sensor_size == (640, 480)
    assert decoder.counters()['messages'] == 517


# -- synthetic streams: encode -> decode round trips ----------------------------------------

@st.composite
def event_streams(draw, max_runs=25):
    """Sorted events with runs along rows (evt3 vectors) and columns (libcaer_cmp vectors)."""
    start_us = draw(st.integers(0, (1 << 24) - 1))
    runs = draw(st.lists(st.tuples(
        st.one_of(st.just(0), st.integers(0, 50), st.integers(0, 9_000_000)),  # dt us
        st.integers(0, HEIGHT - 1), st.integers(0, 1), st.integers(0, WIDTH - 1),
        st.lists(st.integers(1, 14), max_size=20), st.booleans()), max_size=max_runs))
    t, x, y, p = [], [], [], []
    now_us = start_us
    for run, (dt_us, row, polarity, column, steps, along_x) in enumerate(runs):
        # The first event stays below 2^24 us: evt3 carries time modulo 2^24 us, so a stream
        # can only be decoded to absolute times from there (packets.py's documented limit).
        now_us += dt_us if run else 0
        offsets = np.concatenate(([0], np.cumsum(steps, dtype=np.int64)))
        for offset in offsets:
            ex, ey = (column + offset, row) if along_x else (column, row + offset)
            if ex < WIDTH and ey < HEIGHT:
                t.append(now_us * 1000)
                x.append(ex)
                y.append(ey)
                p.append(polarity)
    return EventArray(np.array(t, np.int64), np.array(x), np.array(y), np.array(p))


@st.composite
def trigger_streams(draw, t_max_ns):
    n = draw(st.integers(0, 8))
    t_ns = np.sort(np.array(draw(st.lists(st.integers(0, max(t_max_ns // 1000, 0)),
                                          min_size=n, max_size=n)), np.int64)) * 1000
    return TriggerArray(t_ns, np.array(draw(st.lists(st.integers(0, 15), min_size=n,
                                                     max_size=n)), np.uint8),
                        np.array(draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)),
                                 np.uint8))


packet_splits = st.one_of(
    st.builds(lambda ms: {'packet_duration_ns': ms * 100_000}, st.integers(1, 200)),
    st.builds(lambda n: {'events_per_packet': n, 'packet_duration_ns': None},
              st.integers(1, 50)))


@pytest.mark.parametrize('backend', BACKENDS)
@pytest.mark.parametrize('encoding', ['evt3', 'libcaer_cmp', 'libcaer', 'mono'])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip(backend, encoding, data):
    events = data.draw(event_streams())
    if data.draw(st.booleans()):
        events = sort_for_vectors(events)
    split = data.draw(packet_splits)
    triggers = None
    epoch_ns = None
    if encoding == 'evt3':
        triggers = data.draw(trigger_streams(int(events.t_ns[-1]) if len(events) else 10**9))
    if encoding == 'libcaer' and len(events):
        # Wall-clock times, with the 2^31 us wrap of libcaer's counter inside the stream.
        events = EventArray(events.t_ns + 1_700_000_000 * 10**9, events.x, events.y, events.p)
        epoch_ns = int(events.t_ns[0]) - ((1 << 31) - data.draw(st.integers(0, 20_000_000))
                                          ) * 1000
    packets = encode_packets(events, encoding, triggers=triggers, libcaer_epoch_ns=epoch_ns,
                             **split)
    assert sum(packet.num_events for packet in packets) == len(events)
    decoder = PacketDecoder(backend)
    results = [decoder.decode(encoding, packet.data, packet.time_base, WIDTH, HEIGHT)
               for packet in packets]
    _assert_same_events(EventArray.concatenate([r.events for r in results]), events)
    if triggers is not None:
        decoded = [r.triggers for r in results]
        _assert_same_triggers(TriggerArray(
            np.concatenate([d.t_ns for d in decoded] or [np.zeros(0)]),
            np.concatenate([d.channel for d in decoded] or [np.zeros(0)]),
            np.concatenate([d.edge for d in decoded] or [np.zeros(0)])), triggers)
    assert not decoder.problem_counts, decoder.problem_counts


def test_evt3_encoder_uses_vectors_and_rollover():
    # Dense rows at the same time -> VECT_12 and VECT_8 words; a 20 s span -> rollover.
    t_ns = np.repeat(np.array([1_000_000, 16_000_000_000, 21_000_000_000], np.int64), 20)
    x = np.tile(np.arange(100, 120), 3)
    events = EventArray(t_ns, x, np.full(60, 7), np.ones(60))
    words, _, _, _ = evt3_words(events)
    types = set((words >> 12).tolist())
    assert {3, 4, 5, 6, 8}.issubset(types)  # VECT_BASE_X, VECT_12, VECT_8, TIME_LOW/HIGH
    high = words[(words >> 12) == 8] & 0xFFF
    assert np.any(np.diff(high.astype(np.int64)) < -10)  # the 24-bit counter wrapped
    result = PacketDecoder('numpy').decode('evt3', words.tobytes(), 0, WIDTH, HEIGHT)
    _assert_same_events(result.events, events)


@pytest.mark.parametrize('backend', BACKENDS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=event_streams(), data=st.data())
def test_evt3_split_at_any_word_equals_one_buffer(backend, events, data):
    words, _, _, _ = evt3_words(sort_for_vectors(events))
    whole = PacketDecoder(backend).decode('evt3', words.tobytes(), 0, WIDTH, HEIGHT)
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(words)), max_size=12))))
    bounds = [0] + cuts + [len(words)]
    decoder = PacketDecoder(backend)
    parts = [decoder.decode('evt3', words[a:b].tobytes(), 0, WIDTH, HEIGHT)
             for a, b in zip(bounds[:-1], bounds[1:])]
    _assert_same_events(EventArray.concatenate([p.events for p in parts]), whole.events)
    assert not decoder.problem_counts


# -- bad input: reported, counted, and the next good packet decodes correctly -----------------

def _good_evt3_packets():
    rng = np.random.default_rng(1)
    n = 600
    t_ns = np.sort(rng.integers(0, 30_000, n)) * 1000
    events = sort_for_vectors(EventArray(t_ns, rng.integers(0, WIDTH, n),
                                         rng.integers(0, HEIGHT, n), rng.integers(0, 2, n)))
    return events, encode_packets(events, 'evt3', packet_duration_ns=10_000_000)


def _reference(encoding, packets, backend):
    decoder = PacketDecoder(backend)
    return [decoder.decode(encoding, p.data, p.time_base, WIDTH, HEIGHT) for p in packets]


def _bad_then_good(backend, encoding, packets, bad_data, bad_index=1, time_base=None,
                   width=WIDTH, height=HEIGHT):
    """Decode packets with packet bad_index replaced by bad_data; return (results, decoder)."""
    decoder = PacketDecoder(backend)
    results = []
    for index, packet in enumerate(packets):
        data = bad_data if index == bad_index else packet.data
        base = time_base if index == bad_index and time_base is not None else packet.time_base
        size = (width, height) if index == bad_index else (WIDTH, HEIGHT)
        results.append(decoder.decode(encoding, data, base, *size))
    return results, decoder


@pytest.mark.parametrize('backend', BACKENDS)
def test_evt3_odd_byte_count(backend):
    _, packets = _good_evt3_packets()
    reference = _reference('evt3', packets, backend)
    results, decoder = _bad_then_good(backend, 'evt3', packets, packets[1].data + b'\x42')
    assert results[1].problems == [
        f'evt3: {len(packets[1].data) + 1} bytes is not a whole number of 2-byte words: the '
        'last 1 byte(s) were ignored']
    assert decoder.problem_counts == {'truncated': 1}
    for result, expected in zip(results, reference):
        _assert_same_events(result.events, expected.events)


@pytest.mark.parametrize('backend', BACKENDS)
@pytest.mark.parametrize('encoding', ['mono', 'libcaer', 'trigger'])
def test_truncated_8_byte_word(backend, encoding):
    events = EventArray(np.arange(10) * 1000, np.arange(10), np.arange(10), np.ones(10))
    source = 'mono' if encoding == 'trigger' else encoding
    packets = encode_packets(events, source, events_per_packet=5)
    decoder = PacketDecoder(backend)
    bad = decoder.decode(encoding, packets[0].data[:-3], packets[0].time_base, WIDTH, HEIGHT)
    assert bad.problems[0] == (f'{encoding}: 37 bytes is not a whole number of 8-byte words: '
                               'the last 5 byte(s) were ignored')
    decoded = bad.triggers if encoding == 'trigger' else bad.events
    assert len(decoded) == 4
    good = decoder.decode(encoding, packets[1].data, packets[1].time_base, WIDTH, HEIGHT)
    if encoding != 'trigger':
        _assert_same_events(good.events, events[5:])
    assert decoder.problem_counts['truncated'] == 5


@pytest.mark.parametrize('backend', BACKENDS)
def test_evt3_invalid_codes_are_ignored(backend):
    events, packets = _good_evt3_packets()
    reference = _reference('evt3', packets, backend)
    words = np.frombuffer(packets[1].data, '<u2')
    invalid = np.array([0x1ABC, 0xB123, 0xCFFF, 0xD000], np.uint16)
    mixed = np.insert(words, [0, 3, len(words) // 2, len(words)], invalid)
    results, decoder = _bad_then_good(backend, 'evt3', packets, mixed.tobytes())
    assert results[1].problems == [
        'evt3: 4 word(s) with invalid type codes (1, 11, 12, 13) were ignored']
    assert decoder.problem_counts == {'invalid_code': 4}
    for result, expected in zip(results, reference):
        _assert_same_events(result.events, expected.events)


@pytest.mark.parametrize('backend', BACKENDS)
def test_libcaer_cmp_undefined_codes(backend):
    events = EventArray(np.arange(6) * 1000, np.arange(6), np.arange(6), np.ones(6))
    packet = encode_packets(events, 'libcaer_cmp', packet_duration_ns=10**9)[0]
    words = np.frombuffer(packet.data, '<u2')
    mixed = np.insert(words, 1, np.array([0x6000, 0xF00F], np.uint16))
    result = PacketDecoder(backend).decode('libcaer_cmp', mixed.tobytes(), packet.time_base,
                                           WIDTH, HEIGHT)
    assert result.problems == [
        'libcaer_cmp: 2 word(s) with undefined type codes (6..15) were ignored']
    _assert_same_events(result.events, events)


@pytest.mark.parametrize('backend', BACKENDS)
@pytest.mark.parametrize('encoding', ['evt3', 'libcaer_cmp', 'libcaer', 'mono'])
def test_coordinates_beyond_sensor_are_dropped(backend, encoding):
    events, _ = _good_evt3_packets()
    packets = encode_packets(events, encoding, packet_duration_ns=10_000_000)
    reference = _reference(encoding, packets, backend)
    results, decoder = _bad_then_good(backend, encoding, packets, packets[1].data,
                                      width=320, height=200)
    expected = reference[1].events
    inside = (expected.x < 320) & (expected.y < 200)
    dropped = int(np.count_nonzero(~inside))
    assert dropped > 0
    _assert_same_events(results[1].events, expected[inside])
    assert results[1].problems == [
        f'{encoding}: {dropped} event(s) outside the 320x200 sensor (x >= width or '
        'y >= height) were dropped']
    assert decoder.problem_counts == {'out_of_bounds': dropped}
    for result, good in zip(results[2:], reference[2:]):
        _assert_same_events(result.events, good.events)


@pytest.mark.parametrize('backend', BACKENDS)
def test_unknown_encoding(backend):
    _, packets = _good_evt3_packets()
    decoder = PacketDecoder(backend)
    decoder.decode('evt3', packets[0].data, 0, WIDTH, HEIGHT)
    with pytest.raises(DecodeError, match="unknown event encoding 'evt4'.*evt3, libcaer"):
        decoder.decode('evt4', packets[1].data, 0, WIDTH, HEIGHT)
    assert decoder.problem_counts == {'unknown_encoding': 1}
    reference = _reference('evt3', packets, backend)
    _assert_same_events(decoder.decode('evt3', packets[1].data, 0, WIDTH, HEIGHT).events,
                        reference[1].events)
    assert set(ENCODINGS) == {'evt3', 'mono', 'trigger', 'libcaer', 'libcaer_cmp'}


@pytest.mark.parametrize('backend', BACKENDS)
def test_time_going_backwards(backend):
    events = EventArray(np.arange(8) * 1_000_000, np.arange(8), np.arange(8), np.ones(8))
    packets = encode_packets(events, 'mono', events_per_packet=4)
    decoder = PacketDecoder(backend)
    decoder.decode('mono', packets[1].data, packets[1].time_base, WIDTH, HEIGHT)
    late = decoder.decode('mono', packets[0].data, packets[0].time_base, WIDTH, HEIGHT)
    assert late.problems == ['mono: sensor time went backwards 1 time(s) (largest step back '
                             '7000000 ns)']
    assert decoder.problem_counts == {'time_backwards': 1}
    # evt3: a TIME_HIGH step back by <= 10 is not a rollover: time goes back (reported).
    words = np.array([0x8000 | 20, 0x6000, 0x2001, 0x8000 | 15, 0x6000, 0x2002], np.uint16)
    result = PacketDecoder(backend).decode('evt3', words.tobytes(), 0, WIDTH, HEIGHT)
    assert result.events.t_ns.tolist() == [(20 << 12) * 1000, (15 << 12) * 1000]
    assert result.problems == [
        f'evt3: sensor time went backwards 1 time(s) (largest step back {5 * 4096000} ns)']


def test_backend_choice():
    assert PacketDecoder('numpy').backend == 'numpy'
    assert PacketDecoder().backend == ('cpp' if extension_available() else 'numpy')
    with pytest.raises(ValueError, match='backend'):
        PacketDecoder('gpu')


# -- fuzzing: mutated real packets never raise and both backends agree ------------------------

def _fuzz_sources(recordings_dir_or_none):
    """Return (encoding, data, time_base) packets to mutate: real ones, or our encoder's."""
    sources = []
    if recordings_dir_or_none is not None:
        for name in ('py_test_events_1', 'py_test_events_2',
                     'codecs_test_data_libcaer_rollover', 'codecs_test_data_mono_cd'):
            path = recordings_dir_or_none / name
            if path.is_dir():
                sources += [m[:3] for m in _recording(str(path))]
    if not sources:
        events, _ = _good_evt3_packets()
        for encoding in ('evt3', 'libcaer_cmp', 'libcaer', 'mono'):
            sources += [(encoding, p.data, p.time_base) for p in encode_packets(
                events, encoding, packet_duration_ns=2_000_000)]
    return sources


def _mutate(rng, data: bytes) -> bytes:
    buffer = bytearray(data[:int(rng.integers(2, 400))] if len(data) > 2 else data)
    for _ in range(int(rng.integers(1, 6))):
        kind = int(rng.integers(0, 6))
        if not buffer:
            buffer = bytearray(rng.integers(0, 256, 8, dtype=np.uint8).tobytes())
        position = int(rng.integers(0, len(buffer)))
        if kind == 0:    # flip a bit
            buffer[position] ^= 1 << int(rng.integers(0, 8))
        elif kind == 1:  # random byte
            buffer[position] = int(rng.integers(0, 256))
        elif kind == 2:  # truncate
            del buffer[position:]
        elif kind == 3:  # insert random bytes
            buffer[position:position] = rng.integers(0, 256, int(rng.integers(1, 9)),
                                                     dtype=np.uint8).tobytes()
        elif kind == 4:  # a word of an arbitrary type code (all-ones masks, max addresses)
            buffer[position:position] = bytes([0xFF, int(rng.integers(0, 16)) << 4 | 0xF])
        else:            # duplicate a chunk
            buffer += buffer[position:position + 32]
    return bytes(buffer)


def _same(a, b) -> bool:
    return (a.problems == b.problems
            and all(np.array_equal(getattr(a.events, name), getattr(b.events, name))
                    for name in ('t_ns', 'x', 'y', 'p'))
            and all(np.array_equal(getattr(a.triggers, name), getattr(b.triggers, name))
                    for name in ('t_ns', 'channel', 'edge')))


@needs_cpp
def test_fuzz_mutated_packets(request):
    try:
        recordings = request.getfixturevalue('recordings_dir')
    except pytest.skip.Exception:
        recordings = None
    sources = _fuzz_sources(recordings)
    rng = np.random.default_rng(12345)
    decoders = {'numpy': PacketDecoder('numpy'), 'cpp': PacketDecoder('cpp')}
    for _ in range(10_000):
        encoding, data, time_base = sources[int(rng.integers(0, len(sources)))]
        if rng.random() < 0.1:  # wrong label: bytes of one encoding decoded as another
            encoding = ENCODINGS[int(rng.integers(0, len(ENCODINGS)))]
        if rng.random() < 0.1:
            time_base = int(rng.integers(0, 1 << 62))
        width, height = ((WIDTH, HEIGHT) if rng.random() < 0.8 else
                         (int(rng.integers(0, 70000)), int(rng.integers(0, 70000))))
        mutated = _mutate(rng, data)
        results = {name: decoder.decode(encoding, mutated, time_base, width, height)
                   for name, decoder in decoders.items()}
        cpp, reference = results['cpp'], results['numpy']
        if not _same(cpp, reference):  # cheap check first; details only on a mismatch
            _assert_same_events(cpp.events, reference.events)
            _assert_same_triggers(cpp.triggers, reference.triggers)
            assert cpp.problems == reference.problems
        events = cpp.events
        if len(events):
            assert int(events.x.max()) < width and int(events.y.max()) < height
    assert decoders['cpp'].messages == decoders['numpy'].messages == 10_000
    assert decoders['cpp'].problem_counts == decoders['numpy'].problem_counts
