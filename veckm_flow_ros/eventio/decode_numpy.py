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
Vectorised numpy decoders of EventPacket buffers: the reference for the C++ kernels.

Each function mirrors one op of csrc/decode.cpp (same arguments, same state layout, same
outputs, numpy instead of tensors) but is written independently, as array programs over all
words at once instead of a state machine. `veckm_flow_ros.eventio.decode` uses them when the
compiled extension is missing and the tests compare both on real recordings and on random bytes.

Outputs: t_ns int64[N], x uint16[N], y uint16[N], p uint8[N] and `stats` int64[4] = (events
dropped outside width x height, unknown words, trailing bytes, invalid timestamps).
Time arithmetic is done in uint64 (wrapping) and viewed as int64, like the C++ kernels.
"""

import numpy as np

EVT3_STATE_SIZE = 6
LIBCAER_CMP_STATE_SIZE = 3

_EVT3_ADDR_Y, _EVT3_ADDR_X, _EVT3_VECT_BASE_X, _EVT3_VECT_12, _EVT3_VECT_8 = 0, 2, 3, 4, 5
_EVT3_TIME_LOW, _EVT3_TIME_HIGH, _EVT3_EXT_TRIGGER = 6, 8, 10
_EVT3_UNKNOWN_CODES = (1, 11, 12, 13)
_EVT3_MAX_TIME_HIGH_JITTER = 10

_CMP_TIME_HIGH, _CMP_TIME_LOW, _CMP_ADDR_X, _CMP_ADDR_Y, _CMP_VECT_BASE_Y, _CMP_VECT_8 = range(6)

_LIBCAER_WRAP_NS = (1 << 31) * 1000
_BITS_12 = np.arange(12, dtype=np.uint16)


def _words16(buffer):
    """Little-endian uint16 words of a uint8 buffer and the count of trailing bytes."""
    trailing = len(buffer) % 2
    return buffer[:len(buffer) - trailing].view('<u2').astype(np.int64), trailing


def _words64(buffer):
    trailing = len(buffer) % 8
    return buffer[:len(buffer) - trailing].view('<u8').astype(np.uint64), trailing


def _forward_fill(is_set, values, initial):
    """Per position, values[j] of the last j <= i with is_set[j], else `initial` (int64)."""
    index = np.where(is_set, np.arange(len(is_set)), -1)
    np.maximum.accumulate(index, out=index)
    table = np.empty(len(values) + 1, np.int64)
    table[0] = initial
    table[1:] = values
    return table[index + 1]


def _expand_masks(masks, base, extent_bits=12):
    """(word index, bit) of every set bit of `masks`, in stream order, and base + bit (uint16)."""
    bits = ((masks[:, None].astype(np.uint16) >> _BITS_12[:extent_bits]) & 1).astype(bool)
    word_index, bit = np.nonzero(bits)
    coordinate = ((base[word_index] + bit) & 0xFFFF).astype(np.int64)
    return word_index, coordinate


def _finish(t_ns, x, y, p, width, height, stats):
    keep = (x < min(width, 65536)) & (y < min(height, 65536))
    stats[0] += int(np.count_nonzero(~keep))
    return (np.asarray(t_ns, np.uint64)[keep].view(np.int64), x[keep].astype(np.uint16),
            y[keep].astype(np.uint16), p[keep].astype(np.uint8))


def _scatter(is_set, compact_values):
    """Length-n array holding compact_values at the positions where is_set is true."""
    out = np.zeros(len(is_set), np.int64)
    out[is_set] = compact_values
    return out


def _check_extent(width, height):
    if width < 0 or height < 0:
        raise ValueError(f'width and height must be >= 0, got {width}x{height}')


def decode_evt3(buffer, state, width, height):
    """EVT 3.0 words; `state` int64[6] is updated in place. Also returns the triggers."""
    _check_extent(width, height)
    words, trailing = _words16(buffer)
    stats = np.array([0, 0, trailing, 0], np.int64)
    code = words >> 12
    payload = words & 0xFFF
    position = np.arange(len(words))
    high0, low0, flags0 = int(state[0]), int(state[1]) & 0xFFF, int(state[2])
    is_high = code == _EVT3_TIME_HIGH
    is_low = code == _EVT3_TIME_LOW

    # The first word after which the time is valid: a TIME_LOW after a TIME_HIGH.
    valid_after = bool(flags0 & 1)
    if valid_after:
        start = 0
    else:
        high_seen = np.logical_or.accumulate(is_high) | bool(flags0 & 2)
        ready = np.flatnonzero(is_low & high_seen)
        start = int(ready[0]) + 1 if len(ready) else len(words)
        valid_after = len(ready) > 0
    active = position >= start
    # Before the time is valid only the time words are decoded.
    code = np.where(active | is_high | is_low, code, -1)

    # TIME_HIGH with rollover counting: a step back by more than the jitter is a wrap.
    high_values = payload[is_high]
    previous = np.concatenate([[(high0 >> 12) & 0xFFF], high_values[:-1]])
    wraps = (high_values < previous) & (previous - high_values > _EVT3_MAX_TIME_HIGH_JITTER)
    high_full = (((high0 >> 24) + np.cumsum(wraps)) << 24) | (high_values << 12)
    high_at = _forward_fill(is_high, _scatter(is_high, high_full), high0)
    low_at = _forward_fill(is_low, payload, low0)
    time_ns = (high_at | low_at).astype(np.uint64) * np.uint64(1000)

    y_at = _forward_fill(code == _EVT3_ADDR_Y, payload & 0x7FF, state[3])
    is_base = code == _EVT3_VECT_BASE_X
    polarity_at = _forward_fill(is_base, payload >> 11, state[5])
    # Vector base: last VECT_BASE_X plus 12 or 8 per vector word since then (uint16 wrap).
    step = np.where(code == _EVT3_VECT_12, 12, np.where(code == _EVT3_VECT_8, 8, 0))
    steps_through = np.cumsum(step)
    anchor = _forward_fill(is_base, (payload & 0x7FF) - steps_through, state[4])
    base_at = (anchor + steps_through - step) & 0xFFFF

    # Every CD event is one set bit of a 12-bit mask: ADDR_X is mask 1 at its own x.
    is_addr_x = code == _EVT3_ADDR_X
    is_vector = (code == _EVT3_VECT_12) | (code == _EVT3_VECT_8)
    emitting = np.flatnonzero(is_addr_x | is_vector)
    masks = np.where(is_addr_x, 1, np.where(code == _EVT3_VECT_12, payload, payload & 0xFF))
    bases = np.where(is_addr_x, payload & 0x7FF, base_at)
    polarities = np.where(is_addr_x, (payload >> 11) & 1, polarity_at)
    word_rank, x = _expand_masks(masks[emitting], bases[emitting])
    word = emitting[word_rank]
    events = _finish(time_ns[word], x, y_at[word], polarities[word], width, height, stats)

    is_trigger = code == _EVT3_EXT_TRIGGER
    triggers = (time_ns[is_trigger].view(np.int64), ((payload[is_trigger] >> 8) & 0xF)
                .astype(np.uint8), (payload[is_trigger] & 1).astype(np.uint8))
    stats[1] = int(np.count_nonzero(np.isin(code, _EVT3_UNKNOWN_CODES)))

    if len(words):
        state[0] = high_at[-1]
        state[1] = low_at[-1]
        state[2] = int(valid_after) | (2 if (flags0 & 2) or np.any(is_high) else 0)
        state[3] = y_at[-1]
        state[4] = (anchor[-1] + steps_through[-1]) & 0xFFFF
        state[5] = polarity_at[-1] & 1
    return (*events, *triggers, stats)


def decode_libcaer_cmp(buffer, state, time_base_ns, width, height):
    """libcaer_cmp words; `state` int64[3] (x, base_y, polarity) is updated in place."""
    _check_extent(width, height)
    words, trailing = _words16(buffer)
    stats = np.array([0, 0, trailing, 0], np.int64)
    code = words >> 12
    payload = words & 0xFFF
    high_at = _forward_fill(code == _CMP_TIME_HIGH, payload << 12, 0)
    low_at = _forward_fill(code == _CMP_TIME_LOW, payload, 0)
    time_ns = (np.uint64(time_base_ns & 0xFFFFFFFFFFFFFFFF)
               + (high_at | low_at).astype(np.uint64) * np.uint64(1000))
    x_at = _forward_fill(code == _CMP_ADDR_X, payload & 0x7FF, state[0])
    is_base = code == _CMP_VECT_BASE_Y
    polarity_at = _forward_fill(is_base, payload >> 11, state[2])
    step = np.where(code == _CMP_VECT_8, 8, 0)
    steps_through = np.cumsum(step)
    anchor = _forward_fill(is_base, (payload & 0x7FF) - steps_through, state[1])
    base_at = (anchor + steps_through - step) & 0xFFFF

    is_addr_y = code == _CMP_ADDR_Y
    emitting = np.flatnonzero(is_addr_y | (code == _CMP_VECT_8))
    masks = np.where(is_addr_y, 1, payload & 0xFF)
    bases = np.where(is_addr_y, payload & 0x7FF, base_at)
    polarities = np.where(is_addr_y, (payload >> 11) & 1, polarity_at)
    word_rank, y = _expand_masks(masks[emitting], bases[emitting], 8)
    word = emitting[word_rank]
    events = _finish(time_ns[word], x_at[word], y, polarities[word], width, height, stats)
    stats[1] = int(np.count_nonzero(code > _CMP_VECT_8))
    if len(words):
        state[0] = x_at[-1]
        state[1] = (anchor[-1] + steps_through[-1]) & 0xFFFF
        state[2] = polarity_at[-1] & 1
    return (*events, stats)


def decode_libcaer(buffer, time_base_ns, width, height):
    """Decode libcaer events: uint32 data, int32 ts_us; a decrease of ts_us is a 2^31 wrap."""
    _check_extent(width, height)
    trailing = len(buffer) % 8
    records = buffer[:len(buffer) - trailing].view(np.dtype([('data', '<u4'), ('ts', '<i4')]))
    stats = np.array([0, 0, trailing, 0], np.int64)
    valid = records['ts'] >= 0
    stats[3] = int(np.count_nonzero(~valid))
    records = records[valid]
    ts_us = records['ts'].astype(np.int64)
    previous = np.concatenate([[0], ts_us[:-1]])
    wraps = np.cumsum(ts_us < previous).astype(np.uint64)
    time_ns = (np.uint64(time_base_ns & 0xFFFFFFFFFFFFFFFF) + wraps * np.uint64(_LIBCAER_WRAP_NS)
               + ts_us.astype(np.uint64) * np.uint64(1000))
    data = records['data'].astype(np.int64)
    return (*_finish(time_ns, (data >> 17) & 0x7FFF, (data >> 2) & 0x7FFF, (data >> 1) & 1,
                     width, height, stats), stats)


def decode_mono(buffer, time_base_ns, width, height):
    """'mono' uint64 words: dt_ns bits 31..0, x 47..32, y 62..48, polarity bit 63."""
    _check_extent(width, height)
    words, trailing = _words64(buffer)
    stats = np.array([0, 0, trailing, 0], np.int64)
    time_ns = np.uint64(time_base_ns & 0xFFFFFFFFFFFFFFFF) + (words & np.uint64(0xFFFFFFFF))
    x = ((words >> np.uint64(32)) & np.uint64(0xFFFF)).astype(np.int64)
    y = ((words >> np.uint64(48)) & np.uint64(0x7FFF)).astype(np.int64)
    p = (words >> np.uint64(63)).astype(np.int64)
    return (*_finish(time_ns, x, y, p, width, height, stats), stats)


def decode_trigger(buffer, time_base_ns):
    """'trigger' uint64 words: dt_ns bits 31..0, channel 62..48 (kept mod 256), edge bit 63."""
    words, trailing = _words64(buffer)
    time_ns = np.uint64(time_base_ns & 0xFFFFFFFFFFFFFFFF) + (words & np.uint64(0xFFFFFFFF))
    channel = ((words >> np.uint64(48)) & np.uint64(0xFF)).astype(np.uint8)
    edge = (words >> np.uint64(63)).astype(np.uint8)
    return (time_ns.view(np.int64), channel, edge, np.array([0, 0, trailing, 0], np.int64))
