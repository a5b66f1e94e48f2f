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
Encode an EventArray into EventPacket payloads ('evt3', 'libcaer_cmp', 'libcaer', 'mono').

The inverse of decode.py, for tests, the simulator and the demo: it produces the byte buffers
(and time_base) a camera driver would publish, so that synthetic scenes travel through the same
decoding path as real data.

    packets = encode_packets(events, 'evt3', packet_duration_ns=1_000_000, triggers=triggers)
    for packet in packets:        # EncodedPacket: data (bytes), time_base (ns), num_events, ...
        decoder.decode('evt3', packet.data, packet.time_base, width, height)

Events must be sorted by time (non-decreasing t_ns). Every encoding keeps the event order, so
decoding gives the events back exactly when their times fit the encoding's resolution:
- evt3, libcaer, libcaer_cmp carry microseconds (t_ns is floored to a multiple of 1000);
- evt3 carries sensor time modulo 2^24 us plus rollovers counted by the decoder, so times
  decode exactly when the first event is below 2^24 us (16.777 s); later rollovers are
  encoded (a TIME_HIGH word for every 4.096 ms step, as the sensor sends them);
- libcaer wraps its int32 microsecond counter at 2^31 us (time_base advances per wrap);
- mono carries ns offsets below 2^32 ns from time_base (one packet spans at most 4.29 s).

evt3 uses vector words (VECT_BASE_X + VECT_12 / VECT_8) for runs of events with the same
time, row and polarity and increasing x (gaps of at most 12 px); libcaer_cmp likewise
(VECT_BASE_Y + VECT_8, along a column). `sort_for_vectors()` orders the events of each
timestamp so that such runs form, as a sensor's readout does.
"""

from dataclasses import dataclass
from typing import List, Optional

import numpy as np

from veckm_flow_ros.eventio.events import EventArray, TriggerArray

ENCODABLE = ('evt3', 'libcaer_cmp', 'libcaer', 'mono')
EVT3_MAX_COORDINATE = 2047  # 11-bit addresses
MONO_MAX_DT_NS = (1 << 32) - 1
LIBCAER_WRAP_US = 1 << 31
# Packets of these encodings are cut at least this often (their time offsets are bounded).
_MAX_PACKET_SPAN_NS = {'mono': 4_000_000_000, 'libcaer_cmp': 16_000_000_000}


@dataclass
class EncodedPacket:
    """
    One message's worth of encoded events.

    data: the EventPacket.events bytes; time_base: EventPacket.time_base (ns; 0 for evt3);
    num_events: CD events inside; first_t_ns / last_t_ns: sensor time of the first and last
    CD event or trigger inside (ns), for stamping the message.
    """

    encoding: str
    data: bytes
    time_base: int
    num_events: int
    first_t_ns: int
    last_t_ns: int


def sort_for_vectors(events: EventArray) -> EventArray:
    """Reorder events of equal t_ns by (y, p, x), like a sensor's row readout (stable in t)."""
    order = np.lexsort((events.x, events.p, events.y, events.t_ns))
    return events[order]


def _check_sorted(t_ns: np.ndarray, what: str):
    if len(t_ns) > 1 and np.any(t_ns[1:] < t_ns[:-1]):
        raise ValueError(f'{what} must be sorted by t_ns (non-decreasing) to be encoded')


def _check_coordinates(events: EventArray, max_x: int, max_y: int, encoding: str):
    if len(events) and (int(events.x.max()) > max_x or int(events.y.max()) > max_y):
        raise ValueError(
            f'{encoding} carries x <= {max_x} and y <= {max_y}; got x up to {events.x.max()} '
            f'and y up to {events.y.max()}')


def _segment_ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenation of arange(starts[i], starts[i] + counts[i]) over i (int64)."""
    total = int(counts.sum())
    if total == 0:
        return np.empty(0, np.int64)
    offsets = np.cumsum(counts) - counts
    within = np.arange(total, dtype=np.int64) - np.repeat(offsets, counts)
    return np.repeat(starts.astype(np.int64), counts) + within


def _vector_groups(t, row, p, col, span: int):
    """
    Split events into vector groups: same t, row and p, increasing col with gaps <= span.

    Returns (group_start bool[N], group_id int64[N]).
    """
    n = len(t)
    start = np.ones(n, dtype=bool)
    if n > 1:
        same = ((t[1:] == t[:-1]) & (row[1:] == row[:-1]) & (p[1:] == p[:-1])
                & (col[1:] > col[:-1]) & (col[1:] - col[:-1] <= span))
        start[1:] = ~same
    return start, np.cumsum(start) - 1


def _vector_words(group_id, group_start, col, span: int, full_code: int, short_code: int):
    """
    Vector words of groups with more than one event.

    Returns (words_per_group int64[G], words uint16[W]) where words holds, per group in
    order, VECT words covering [base, base + span * k) (base = col of the group's first event);
    a last word whose mask fits in 8 bits uses `short_code` (VECT_8) when short_code is not
    None. The VECT_BASE word is not included.
    """
    if len(group_id) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.uint16)
    base = col[group_start][group_id]
    offset = (col - base).astype(np.int64)
    num_groups = int(group_id[-1]) + 1 if len(group_id) else 0
    words_per_group = np.zeros(num_groups, np.int64)
    np.maximum.at(words_per_group, group_id, offset // span + 1)
    group_word_start = np.cumsum(words_per_group) - words_per_group
    masks = np.zeros(int(words_per_group.sum()), np.int64)
    np.add.at(masks, group_word_start[group_id] + offset // span,
              np.left_shift(1, offset % span))
    codes = np.full(len(masks), full_code, np.int64)
    if short_code is not None and len(masks):
        last_words = group_word_start + words_per_group - 1
        short = last_words[masks[last_words] < 256]
        codes[short] = short_code
    return words_per_group, ((codes << 12) | masks).astype(np.uint16)


def _assemble(word_counts: np.ndarray, blocks) -> np.ndarray:
    """
    Fill a word array item by item.

    word_counts: int64[N] words per item; blocks: list of (has bool[N] or int64 counts[N],
    values) in the order the words of one item are written; values per word written.
    """
    offsets = np.cumsum(word_counts) - word_counts
    words = np.empty(int(word_counts.sum()), np.uint16)
    cursor = offsets.copy()
    for counts, values in blocks:
        counts = counts.astype(np.int64)
        words[_segment_ranges(cursor, counts)] = values
        cursor += counts
    return words, offsets


def evt3_words(events: EventArray, triggers: Optional[TriggerArray] = None):
    """
    Encode a whole stream as evt3 words.

    Returns (words uint16[W], item_word_offset int64[N + K], item_t_ns int64[N + K],
    item_is_event bool[N + K]): the words and, per event/trigger in stream order, the index
    of its first word (splitting the words there gives valid packets).
    """
    triggers = triggers if triggers is not None else TriggerArray.empty()
    _check_sorted(events.t_ns, 'events')
    _check_sorted(triggers.t_ns, 'triggers')
    _check_coordinates(events, EVT3_MAX_COORDINATE, EVT3_MAX_COORDINATE, 'evt3')
    if len(events) + len(triggers) and min(
            [a.t_ns.min() for a in (events, triggers) if len(a)]) < 0:
        raise ValueError('evt3 cannot encode negative times')
    # Merge events and triggers by time (events first at equal times; both keep their order).
    t_all = np.concatenate((events.t_ns, triggers.t_ns))
    order = np.argsort(t_all, kind='stable')
    n = len(order)
    is_event = order < len(events)
    t_us = t_all[order] // 1000
    time_high = t_us >> 12
    high_words = np.diff(time_high, prepend=time_high[0] - 1) if n else time_high
    new_time = np.ones(n, dtype=bool)
    new_time[1:] = t_us[1:] != t_us[:-1]

    event_pos = np.flatnonzero(is_event)
    x = events.x.astype(np.int64)
    y = events.y.astype(np.int64)
    p = events.p.astype(np.int64) & 1
    event_t = t_us[event_pos]
    new_y = np.ones(len(events), dtype=bool)
    new_y[1:] = y[1:] != y[:-1]
    group_start, group_id = _vector_groups(event_t, y, p, x, 12)
    group_size = np.bincount(group_id, minlength=int(group_id[-1]) + 1 if len(group_id) else 0)
    is_vector = group_size[group_id] > 1
    vector_starts = group_start & is_vector
    vec_words_per_group, vec_words = _vector_words(
        np.cumsum(vector_starts)[is_vector] - 1, vector_starts[is_vector], x[is_vector], 12,
        full_code=4, short_code=5)
    # Payload words per event: ADDR_X for single events, VECT_BASE_X + vectors at a group start.
    payload_count = np.where(is_vector, 0, 1)
    payload_count[vector_starts] = 1 + vec_words_per_group
    count_high = high_words.astype(np.int64)
    count_low = new_time.astype(np.int64)
    count_y = np.zeros(n, np.int64)
    count_y[event_pos] = new_y
    count_payload = np.zeros(n, np.int64)
    count_payload[event_pos] = payload_count
    count_payload[~is_event] = 1
    word_counts = count_high + count_low + count_y + count_payload

    high_values = _segment_ranges(time_high - high_words + 1, high_words) & 0xFFF
    payload_values = np.empty(int(count_payload.sum()), np.uint16)
    # Payload values in item order: build per item then place.
    payload_offsets = np.cumsum(count_payload) - count_payload
    ev_payload_offsets = payload_offsets[event_pos]
    single = ~is_vector
    payload_values[ev_payload_offsets[single]] = (2 << 12) | (p[single] << 11) | x[single]
    starts = np.flatnonzero(vector_starts)
    payload_values[ev_payload_offsets[starts]] = (3 << 12) | (p[starts] << 11) | x[starts]
    vector_word_positions = _segment_ranges(ev_payload_offsets[starts] + 1, vec_words_per_group)
    payload_values[vector_word_positions] = vec_words
    trigger_items = np.flatnonzero(~is_event)
    trigger_index = order[trigger_items] - len(events)
    payload_values[payload_offsets[trigger_items]] = (
        (10 << 12) | ((triggers.channel[trigger_index].astype(np.int64) & 0xF) << 8)
        | (triggers.edge[trigger_index].astype(np.int64) & 1))

    words, offsets = _assemble(word_counts, [
        (count_high, (8 << 12) | high_values),
        (count_low, ((6 << 12) | (t_us & 0xFFF))[new_time]),
        (count_y, (y[new_y]).astype(np.int64)),  # ADDR_Y: type 0
        (count_payload, payload_values),
    ])
    return words, offsets, t_all[order], is_event


def _packet_bounds(item_t_ns: np.ndarray, packet_duration_ns: Optional[int],
                   events_per_packet: Optional[int]) -> np.ndarray:
    """Item indices where packets start (first is 0), by time slots or by item count."""
    n = len(item_t_ns)
    if n == 0:
        return np.zeros(0, np.int64)
    if events_per_packet is not None:
        if events_per_packet < 1:
            raise ValueError(f'events_per_packet must be >= 1, got {events_per_packet}')
        return np.arange(0, n, events_per_packet, dtype=np.int64)
    if packet_duration_ns is None or packet_duration_ns <= 0:
        raise ValueError(f'packet_duration_ns must be > 0, got {packet_duration_ns}')
    slot = (item_t_ns - item_t_ns[0]) // int(packet_duration_ns)
    return np.flatnonzero(np.diff(slot, prepend=-1) != 0)


def encode_packets(events: EventArray, encoding: str, *, triggers: Optional[TriggerArray] = None,
                   packet_duration_ns: Optional[int] = 1_000_000,
                   events_per_packet: Optional[int] = None,
                   libcaer_epoch_ns: Optional[int] = None) -> List[EncodedPacket]:
    """
    Encode time-sorted events into packets of one encoding.

    Packets cover consecutive time slots of packet_duration_ns (empty slots give no packet),
    or hold events_per_packet events each when that is given; mono and libcaer_cmp packets
    are also cut every 4 s and 16 s (their time offsets are bounded). triggers are encoded only by
    evt3 (EXT_TRIGGER words). libcaer_epoch_ns: the time libcaer's 31-bit microsecond counter
    counts from (default: the first event's time), to place its 2^31 us wraps.
    Raises ValueError for unsorted times or coordinates the encoding cannot carry.
    """
    if encoding not in ENCODABLE:
        raise ValueError(f'cannot encode {encoding!r}; encodable: {", ".join(ENCODABLE)}')
    if encoding == 'evt3':
        words, offsets, item_t_ns, is_event = evt3_words(events, triggers)
        bounds = _packet_bounds(item_t_ns, packet_duration_ns, events_per_packet)
        word_bounds = np.append(offsets[bounds], len(words))
        item_bounds = np.append(bounds, len(item_t_ns))
        event_counts = np.add.reduceat(is_event.astype(np.int64), bounds) if len(bounds) else []
        raw = words.astype('<u2').tobytes()
        return [EncodedPacket('evt3', raw[2 * word_bounds[k]:2 * word_bounds[k + 1]], 0,
                              int(event_counts[k]), int(item_t_ns[item_bounds[k]]),
                              int(item_t_ns[item_bounds[k + 1] - 1]))
                for k in range(len(bounds))]
    _check_sorted(events.t_ns, 'events')
    bounds = _packet_bounds(events.t_ns, packet_duration_ns, events_per_packet)
    if encoding in _MAX_PACKET_SPAN_NS:
        # Also cut where a packet would outgrow the encoding's time offsets.
        bounds = np.union1d(bounds, _packet_bounds(events.t_ns, _MAX_PACKET_SPAN_NS[encoding],
                                                   None))
    item_bounds = np.append(bounds, len(events))
    packets = []
    if encoding == 'libcaer':
        _check_coordinates(events, 0x7FFF, 0x7FFF, 'libcaer')
        t_us = events.t_ns // 1000
        epoch_us = (int(t_us[0]) if libcaer_epoch_ns is None else int(libcaer_epoch_ns) // 1000
                    ) if len(events) else 0
        if len(events) and t_us[0] < epoch_us:
            raise ValueError(f'libcaer_epoch_ns {libcaer_epoch_ns} is after the first event')
        for k in range(len(bounds)):
            part = slice(item_bounds[k], item_bounds[k + 1])
            since_epoch = t_us[part] - epoch_us
            packet_wrap = int(since_epoch[0]) >> 31
            packets.append(_packet(encoding, _libcaer_bytes(events[part], since_epoch),
                                   (epoch_us + (packet_wrap << 31)) * 1000, events[part]))
        return packets
    for k in range(len(bounds)):
        part = events[item_bounds[k]:item_bounds[k + 1]]
        if encoding == 'mono':
            data, time_base = _mono_bytes(part)
        else:
            data, time_base = _libcaer_cmp_bytes(part)
        packets.append(_packet(encoding, data, time_base, part))
    return packets


def _packet(encoding, data, time_base, part):
    return EncodedPacket(encoding, data, int(time_base), len(part), int(part.t_ns[0]),
                         int(part.t_ns[-1]))


def _mono_bytes(part: EventArray):
    _check_coordinates(part, 0xFFFF, 0x7FFF, 'mono')
    time_base = int(part.t_ns[0])
    dt = part.t_ns - time_base
    if int(dt[-1]) > MONO_MAX_DT_NS:
        raise ValueError(f'a mono packet spans at most {MONO_MAX_DT_NS} ns; got {dt[-1]} ns: '
                         'use a shorter packet_duration_ns')
    words = (dt.astype(np.uint64) | (part.x.astype(np.uint64) << np.uint64(32))
             | (part.y.astype(np.uint64) << np.uint64(48))
             | ((part.p.astype(np.uint64) & np.uint64(1)) << np.uint64(63)))
    return words.astype('<u8').tobytes(), time_base


def _libcaer_bytes(part: EventArray, since_epoch_us: np.ndarray) -> bytes:
    records = np.empty(len(part), dtype=[('data', '<u4'), ('ts', '<i4')])
    # Bit 0 is libcaer's "valid" mark; decoders ignore it.
    records['data'] = ((part.x.astype(np.uint32) << 17) | (part.y.astype(np.uint32) << 2)
                       | ((part.p.astype(np.uint32) & 1) << 1) | 1)
    records['ts'] = (since_epoch_us % LIBCAER_WRAP_US).astype(np.int32)
    return records.tobytes()


def _libcaer_cmp_bytes(part: EventArray):
    """One self-contained libcaer_cmp packet: time restarts at time_base, x is re-sent."""
    _check_coordinates(part, 0x7FF, 0x7FF, 'libcaer_cmp')
    t_us = part.t_ns // 1000
    time_base_us = int(t_us[0])
    dt_us = t_us - time_base_us
    if int(dt_us[-1]) >= 1 << 24:
        raise ValueError('a libcaer_cmp packet spans less than 2^24 us; use a shorter '
                         'packet_duration_ns')
    n = len(part)
    x = part.x.astype(np.int64)
    y = part.y.astype(np.int64)
    p = part.p.astype(np.int64) & 1
    # Time words whenever the time differs from the previous event's (initially dt 0).
    previous_dt = np.concatenate(([0], dt_us[:-1]))
    previous_high = previous_dt >> 12
    new_high = (dt_us >> 12) != previous_high
    new_low = dt_us != previous_dt
    new_x = np.ones(n, dtype=bool)
    new_x[1:] = x[1:] != x[:-1]
    group_start, group_id = _vector_groups(dt_us, x, p, y, 8)
    group_size = np.bincount(group_id)
    is_vector = group_size[group_id] > 1
    vector_starts = group_start & is_vector
    vec_words_per_group, vec_words = _vector_words(
        np.cumsum(vector_starts)[is_vector] - 1, vector_starts[is_vector], y[is_vector], 8,
        full_code=5, short_code=None)
    count_payload = np.where(is_vector, 0, 1)
    count_payload[vector_starts] = 1 + vec_words_per_group
    payload_values = np.empty(int(count_payload.sum()), np.uint16)
    payload_offsets = np.cumsum(count_payload) - count_payload
    single = ~is_vector
    payload_values[payload_offsets[single]] = (3 << 12) | (p[single] << 11) | y[single]
    starts = np.flatnonzero(vector_starts)
    payload_values[payload_offsets[starts]] = (4 << 12) | (p[starts] << 11) | y[starts]
    payload_values[_segment_ranges(payload_offsets[starts] + 1, vec_words_per_group)] = vec_words
    word_counts = (new_high.astype(np.int64) + new_low + new_x + count_payload)
    words, _ = _assemble(word_counts, [
        (new_high, (0 << 12) | ((dt_us >> 12) & 0xFFF)[new_high]),
        (new_low, (1 << 12) | (dt_us & 0xFFF)[new_low]),
        (new_x, (2 << 12) | x[new_x]),
        (count_payload, payload_values),
    ])
    return words.astype('<u2').tobytes(), time_base_us * 1000
