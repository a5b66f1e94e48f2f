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
Encoding of EventArray / TriggerArray into event_camera_msgs/EventPacket payloads.

The inverse of `veckm_flow_ros.decode` for the formats a simulator or a test writes:

    payload, time_base = encode_mono(events)        # 'mono', 8 bytes per event
    payload = encode_evt3(events)                   # 'evt3', time_base 0
    payload, time_base = encode_trigger(triggers)   # 'trigger'

Events must be sorted by time. Encoding is exact: decoding the payload gives the same events,
with two limits of the formats themselves: evt3 carries microseconds (t_ns is floored to a
multiple of 1000) and its 24-bit clock counts from 0, so an evt3 stream decodes to
t_ns - floor(first t_us / 2^24) * 2^24 * 1000 (times before the first wrap are unchanged).
'mono' carries per-event offsets of 32 bits from time_base: a payload spans at most 4.29 s.
"""

import numpy as np

from veckm_flow_ros.events import EventArray, TriggerArray

_EVT3_ADDR_Y, _EVT3_ADDR_X, _EVT3_TIME_LOW, _EVT3_TIME_HIGH = 0, 2, 6, 8
_EVT3_EXT_TRIGGER = 10
# Largest time_high step written at once (units of 4.096 ms); well below the decoders' wrap
# detection (a step back by more than 10 of 4096 units), so long gaps keep the wrap count.
_EVT3_MAX_TIME_HIGH_STEP = 2048
_MONO_MAX_SPAN_NS = (1 << 32) - 1


def _check_sorted(t_ns, what):
    if len(t_ns) > 1 and np.any(np.diff(t_ns) < 0):
        raise ValueError(f'{what} must be sorted by time to be encoded; sort them first '
                         '(np.argsort(t_ns, kind="stable"))')


def encode_mono(events: EventArray, time_base_ns=None):
    """
    Encode CD events as 'mono' words; returns (payload bytes, time_base_ns).

    time_base_ns defaults to the first event time; every event must lie within
    [time_base_ns, time_base_ns + 2^32 - 1] ns.
    """
    _check_sorted(events.t_ns, 'events')
    return _encode_mono_words(events.t_ns, events.x, events.y, events.p, 0x7FFF, time_base_ns,
                              'events')


def encode_trigger(triggers: TriggerArray, time_base_ns=None):
    """Encode trigger edges as 'trigger' words (mono layout); returns (bytes, time_base_ns)."""
    _check_sorted(triggers.t_ns, 'triggers')
    return _encode_mono_words(triggers.t_ns, np.zeros(len(triggers), np.uint16),
                              triggers.channel, triggers.edge, 0xFF, time_base_ns, 'triggers')


def _encode_mono_words(t_ns, x, y, p, y_mask, time_base_ns, what):
    if time_base_ns is None:
        time_base_ns = int(t_ns[0]) if len(t_ns) else 0
    offset = t_ns - np.int64(time_base_ns)
    if len(offset) and (offset.min() < 0 or offset.max() > _MONO_MAX_SPAN_NS):
        raise ValueError(
            f'{what} span {int(offset.min())}..{int(offset.max())} ns from time_base '
            f'{time_base_ns} ns; mono offsets must be within 0..2^32-1 ns: split the events '
            'into packets shorter than 4.29 s')
    words = (offset.astype(np.uint64)
             | (x.astype(np.uint64) << np.uint64(32))
             | ((y.astype(np.uint64) & np.uint64(y_mask)) << np.uint64(48))
             | ((p.astype(np.uint64) & np.uint64(1)) << np.uint64(63)))
    return words.astype('<u8').tobytes(), int(time_base_ns)


def encode_evt3(events: EventArray, triggers: TriggerArray = None) -> bytes:
    """
    Encode CD events (and optionally trigger edges) as EVT 3.0 words (time_base 0).

    Each event becomes ADDR_X, preceded by TIME_HIGH / TIME_LOW / ADDR_Y words where those
    change. x and y must be < 2048 (11 bits). Decoding from a fresh decoder returns the events
    with t_ns floored to microseconds (see the module docstring for the 2^24 us clock).
    """
    if triggers is None:
        triggers = TriggerArray.empty()
    _check_sorted(events.t_ns, 'events')
    _check_sorted(triggers.t_ns, 'triggers')
    for name, values in (('x', events.x), ('y', events.y)):
        if len(values) and int(values.max()) >= 2048:
            raise ValueError(f'evt3 holds 11-bit coordinates; got {name} = {int(values.max())}')
    # Merge events and triggers in time order (events first at equal times).
    t_us = np.concatenate([events.t_ns, triggers.t_ns]) // 1000
    order = np.argsort(t_us, kind='stable')
    t_us = t_us[order]
    is_trigger = order >= len(events)
    payload_word = np.concatenate([
        (_EVT3_ADDR_X << 12) | (events.p.astype(np.int64) & 1) << 11 | events.x,
        (_EVT3_EXT_TRIGGER << 12) | (triggers.channel.astype(np.int64) & 0xF) << 8
        | (triggers.edge.astype(np.int64) & 1)])[order]
    y = np.concatenate([events.y, np.zeros(len(triggers), np.uint16)]).astype(np.int64)[order]
    if not len(t_us):
        return b''

    high = t_us >> 12  # full time_high, including the wraps of its 12 bits
    previous_high = np.concatenate([[-1], high[:-1]])
    # Gaps longer than _EVT3_MAX_TIME_HIGH_STEP units get intermediate TIME_HIGH words.
    gap = np.where(previous_high < 0, 0, high - previous_high)
    extra_highs = np.maximum((gap - 1) // _EVT3_MAX_TIME_HIGH_STEP, 0)
    new_high = high != previous_high
    new_low = new_high | (t_us != np.concatenate([[-1], t_us[:-1]]))
    # ADDR_Y is repeated after a trigger (harmless) and whenever y changes.
    cd_y = np.where(is_trigger, -1, y)
    last_y = np.maximum.accumulate(np.where(is_trigger, -1, np.arange(len(y))))
    previous_y = np.concatenate([[-1], np.where(last_y >= 0, y[np.maximum(last_y, 0)], -1)[:-1]])
    new_y = ~is_trigger & (cd_y != previous_y)

    # Per item: extra TIME_HIGHs, then up to 4 words: TIME_HIGH, TIME_LOW, ADDR_Y, payload.
    slots = np.full((len(t_us), 4), -1, np.int64)
    slots[new_high, 0] = (_EVT3_TIME_HIGH << 12) | (high[new_high] & 0xFFF)
    slots[new_low, 1] = (_EVT3_TIME_LOW << 12) | (t_us[new_low] & 0xFFF)
    slots[new_y, 2] = (_EVT3_ADDR_Y << 12) | y[new_y]
    slots[:, 3] = payload_word
    words = slots.reshape(-1)
    words = words[words >= 0]
    if np.any(extra_highs):
        words = _insert_intermediate_highs(words, slots, high, previous_high, extra_highs)
    return words.astype('<u2').tobytes()


def _insert_intermediate_highs(words, slots, high, previous_high, extra_highs):
    """Rebuild the word list with TIME_HIGH steps of at most _EVT3_MAX_TIME_HIGH_STEP."""
    pieces = []
    for index in range(len(high)):
        for step in range(1, int(extra_highs[index]) + 1):
            value = previous_high[index] + step * _EVT3_MAX_TIME_HIGH_STEP
            pieces.append([(_EVT3_TIME_HIGH << 12) | (value & 0xFFF)])
        row = slots[index]
        pieces.append(row[row >= 0])
    return np.concatenate(pieces)
