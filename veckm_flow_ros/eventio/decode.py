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
Decode event_camera_msgs/msg/EventPacket payloads into EventArray / TriggerArray.

One `PacketDecoder` per topic. It keeps the decoding state of each encoding across messages
(evt3 time and address state, libcaer_cmp address state) and counts messages, events and
problems:

    decoder = PacketDecoder()
    result = decoder.decode(msg.encoding, msg.events, msg.time_base, msg.width, msg.height)
    result.events      # EventArray: t_ns int64 (sensor time, ns), x, y uint16, p uint8
    result.triggers    # TriggerArray: external trigger edges (evt3 EXT_TRIGGER, 'trigger')
    result.problems    # list[str]: what was wrong with this message; empty when nothing

Packets are untrusted bytes. Per-message problems (a byte count that is not a whole number of
words, invalid evt3 type codes, x >= width or y >= height, negative libcaer timestamps, sensor
time going backwards) never raise: the affected bytes/words/events are skipped, described in
`result.problems` and counted in `decoder.problem_counts`; the state stays consistent, so the
next good packet decodes correctly. Only a message that cannot be decoded at all (unknown
encoding, time_base beyond 2^63 - 1) raises DecodeError.

Encodings (all little-endian; byte layouts in docs/algorithm.md): 'evt3' (Prophesee EVT 3.0,
stateful across messages), 'libcaer_cmp' (time restarts at time_base in every message),
'libcaer' (8 bytes per event, 2^31 us wrap), 'mono' (8 bytes per event, dt in ns from
time_base) and 'trigger'.

Two backends give identical results: the C++ kernels of the torch extension
(veckm_flow_ros.ops.decode_*, csrc/cpu/decode_cpu.cpp; the default when the extension
is importable) and the vectorised numpy reference (decode_numpy.py).
"""

from collections import Counter
from dataclasses import dataclass, field
import warnings

import numpy as np

from veckm_flow_ros.eventio import decode_numpy
from veckm_flow_ros.eventio.events import EventArray, TriggerArray

ENCODINGS = ('evt3', 'libcaer', 'libcaer_cmp', 'mono', 'trigger')
BACKENDS = ('auto', 'cpp', 'numpy')
_STATE_SIZES = {'evt3': decode_numpy.EVT3_STATE_SIZE,
                'libcaer_cmp': decode_numpy.LIBCAER_CMP_STATE_SIZE}
_WORD_BYTES = {'evt3': 2, 'libcaer_cmp': 2, 'libcaer': 8, 'mono': 8, 'trigger': 8}
_INVALID_CODES = {'evt3': 'invalid type codes (1, 11, 12, 13)',
                  'libcaer_cmp': 'undefined type codes (6..15)'}
# Indices of the int64 `stats` returned by every kernel (numpy and C++).
_STAT_OUT_OF_BOUNDS, _STAT_INVALID_WORDS, _STAT_TRAILING_BYTES, _STAT_INVALID_TIMESTAMPS = range(4)
# The problem each counter reports: (stats index, problem kind, message template).
_STAT_REPORTS = (
    (_STAT_TRAILING_BYTES, 'truncated', '{encoding}: {num_bytes} bytes is not a whole number of '
     '{word_bytes}-byte words: the last {count} byte(s) were ignored'),
    (_STAT_INVALID_WORDS, 'invalid_code', '{encoding}: {count} word(s) with {codes} were ignored'),
    (_STAT_OUT_OF_BOUNDS, 'out_of_bounds', '{encoding}: {count} event(s) outside the '
     '{width}x{height} sensor (x >= width or y >= height) were dropped'),
    (_STAT_INVALID_TIMESTAMPS, 'invalid_timestamp', '{encoding}: {count} event(s) with a '
     'negative timestamp were dropped'))
_INT64_MAX = (1 << 63) - 1


class DecodeError(ValueError):
    """A message that cannot be decoded at all (unknown encoding, bad time_base): skip it."""


@dataclass
class DecodeResult:
    """One decoded message: CD events, trigger edges and problem descriptions (str)."""

    events: EventArray
    triggers: TriggerArray
    problems: list = field(default_factory=list)


_EXTENSION = []


def _load_extension():
    """Return (torch, ops) when the compiled decoders load, else None (cached)."""
    if not _EXTENSION:
        try:
            import torch
            from veckm_flow_ros import ops  # loads veckm_flow_ros._C
            _EXTENSION.append((torch, ops))
        except (ImportError, OSError):
            _EXTENSION.append(None)
    return _EXTENSION[0]


_READ_ONLY_WARNED = False


def _from_read_only(torch, buffer):
    """Wrap a read-only buffer (e.g. bytes); the kernels only read it."""
    global _READ_ONLY_WARNED
    with warnings.catch_warnings():
        # torch warns once per process that the array is not writable; nothing writes to it.
        warnings.simplefilter('ignore', UserWarning)
        tensor = torch.from_numpy(buffer)
    _READ_ONLY_WARNED = True
    return tensor


def extension_available() -> bool:
    """Return True when the compiled decoders can be used (backend 'cpp')."""
    return _load_extension() is not None


def as_uint8_array(data) -> np.ndarray:
    """View bytes, bytearray, memoryview, array('B') or a uint8 numpy array as uint8[N]."""
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8:
            raise DecodeError(f'event buffer must hold uint8, got dtype {data.dtype}')
        return np.ascontiguousarray(data).reshape(-1)
    try:
        return np.frombuffer(data, np.uint8)
    except (TypeError, ValueError) as error:
        raise DecodeError(f'event buffer must be bytes-like (bytes, array("B"), uint8 numpy '
                          f'array), got {type(data).__name__}: {error}') from None


class PacketDecoder:
    """
    Stateful decoder of the EventPacket messages of one topic.

    backend: 'cpp' (compiled kernels; ValueError when the extension is not built), 'numpy'
    (the reference) or 'auto' (cpp when importable, else numpy).

    Counters since construction (reset() keeps them): messages, events, triggers, bytes and
    problem_counts, a Counter of problem kind -> number of affected items: 'truncated' (bytes
    that do not form a whole word), 'invalid_code' (words), 'out_of_bounds' (events dropped),
    'invalid_timestamp' (libcaer events dropped), 'time_backwards' (decreasing times),
    'unknown_encoding' and 'bad_time_base' (messages refused). sensor_size is the
    (width, height) of the last message.
    """

    def __init__(self, backend: str = 'auto'):
        if backend not in BACKENDS:
            raise ValueError(f'unknown decoder backend {backend!r}; choose one of {BACKENDS}')
        extension = _load_extension() if backend != 'numpy' else None
        if backend == 'cpp' and extension is None:
            raise ValueError('decoder backend "cpp" needs the compiled extension '
                             'veckm_flow_ros._C; build it (python setup.py build_ext --inplace) '
                             'or use backend="numpy"')
        self.backend = 'cpp' if extension is not None else 'numpy'
        self._torch, self._ops = extension if extension is not None else (None, None)
        self.messages = 0
        self.events = 0
        self.triggers = 0
        self.bytes = 0
        self.problem_counts = Counter()
        self.sensor_size = None
        self.reset()

    def reset(self):
        """Forget the stream state (camera restart, bag loop); the counters are kept."""
        self._states = {}
        self._last_t_ns = {}

    def resync(self):
        """
        Messages were lost before the next one (a seq gap, or packets dropped under load).

        evt3 carries its time across messages (TIME_HIGH words only every 4.096 ms), so the
        next message's first events would get the last decoded message's time, up to the gap
        too early. Its events are dropped until a TIME_HIGH and a TIME_LOW arrive, as at the
        start of a stream; the rollover count is kept. The other encodings stamp from
        time_base in every message and need nothing.
        """
        state = self._states.get('evt3')
        if state is not None:
            state[2] = 0  # time not valid, no TIME_HIGH seen yet (same bits in both backends)

    def counters(self) -> dict:
        """All counters as a flat dict (for diagnostics and `veckm-flow info`)."""
        totals = {'messages': self.messages, 'events': self.events, 'triggers': self.triggers,
                  'bytes': self.bytes}
        totals.update(self.problem_counts)
        return totals

    def decode_message(self, msg) -> DecodeResult:
        """Decode an EventPacket-like object (encoding, events, time_base, width, height)."""
        return self.decode(msg.encoding, msg.events, msg.time_base, msg.width, msg.height)

    def decode(self, encoding: str, data, time_base: int, width: int, height: int
               ) -> DecodeResult:
        """
        Decode one message's `events` buffer.

        encoding: EventPacket.encoding, one of ENCODINGS. data: the encoded bytes (bytes,
        array('B') from rclpy, not copied, or a uint8 ndarray). time_base: EventPacket.time_base
        (uint64 ns; ignored by evt3). width, height: sensor size in pixels; events with
        x >= width or y >= height are dropped and reported.

        Returns DecodeResult(events, triggers, problems), times in int64 ns of sensor time.
        Raises DecodeError for an unknown encoding or a time_base > 2^63 - 1 (nothing decoded;
        counted in problem_counts).
        """
        if encoding not in _WORD_BYTES:
            self.problem_counts['unknown_encoding'] += 1
            raise DecodeError(f'unknown event encoding {encoding!r}; supported encodings: '
                              f'{", ".join(ENCODINGS)}')
        time_base = int(time_base)
        if not 0 <= time_base <= _INT64_MAX:
            self.problem_counts['bad_time_base'] += 1
            raise DecodeError(f'{encoding}: time_base {time_base} ns is outside 0..2^63-1; '
                              'message skipped')
        width, height = max(int(width), 0), max(int(height), 0)
        buffer = as_uint8_array(data)
        if self._torch is not None:
            columns = self._decode_cpp(encoding, buffer, time_base, width, height)
        else:
            columns = self._decode_numpy(encoding, buffer, time_base, width, height)
        if encoding == 'trigger':
            events, triggers = EventArray.empty(), TriggerArray(*columns[:3])
        else:
            events = EventArray(*columns[:4])
            triggers = (TriggerArray(*columns[4:7]) if encoding == 'evt3'
                        else TriggerArray.empty())
        problems = []
        self._report(encoding, columns[-1], len(buffer), width, height, problems)
        self._check_time_order(encoding, triggers.t_ns if encoding == 'trigger' else events.t_ns,
                               problems)
        self.messages += 1
        self.events += len(events)
        self.triggers += len(triggers)
        self.bytes += len(buffer)
        self.sensor_size = (width, height)
        return DecodeResult(events, triggers, problems)

    # -- backends ------------------------------------------------------------------------------

    def _state(self, encoding, zeros):
        state = self._states.get(encoding)
        if state is None and encoding in _STATE_SIZES:
            state = self._states[encoding] = zeros(_STATE_SIZES[encoding])
        return state

    def _decode_cpp(self, encoding, buffer, time_base, width, height):
        torch = self._torch
        if buffer.flags.writeable or _READ_ONLY_WARNED:
            tensor = torch.from_numpy(buffer)
        else:
            tensor = _from_read_only(torch, buffer)
        ops = self._ops
        state = self._state(encoding, lambda size: torch.zeros(size, dtype=torch.int64))
        if encoding == 'evt3':
            out = ops.decode_evt3(tensor, state, width, height)
        elif encoding == 'libcaer_cmp':
            out = ops.decode_libcaer_cmp(tensor, state, time_base, width, height)
        elif encoding == 'libcaer':
            out = ops.decode_libcaer(tensor, time_base, width, height)
        elif encoding == 'mono':
            out = ops.decode_mono(tensor, time_base, width, height)
        else:
            out = ops.decode_trigger(tensor, time_base)
        return [column.numpy() for column in out]

    def _decode_numpy(self, encoding, buffer, time_base, width, height):
        state = self._state(encoding, lambda size: np.zeros(size, np.int64))
        if encoding == 'evt3':
            return decode_numpy.decode_evt3(buffer, state, width, height)
        if encoding == 'libcaer_cmp':
            return decode_numpy.decode_libcaer_cmp(buffer, state, time_base, width, height)
        if encoding == 'libcaer':
            return decode_numpy.decode_libcaer(buffer, time_base, width, height)
        if encoding == 'mono':
            return decode_numpy.decode_mono(buffer, time_base, width, height)
        return decode_numpy.decode_trigger(buffer, time_base)

    # -- problems ------------------------------------------------------------------------------

    def _problem(self, problems, kind, count, text):
        self.problem_counts[kind] += int(count)
        problems.append(text)

    def _report(self, encoding, stats, num_bytes, width, height, problems):
        """Count and describe each non-zero counter of a decode call's `stats` (_STAT_REPORTS)."""
        for index, kind, text in _STAT_REPORTS:
            count = int(stats[index])
            if count:
                self._problem(problems, kind, count, text.format(
                    encoding=encoding, count=count, num_bytes=num_bytes, width=width,
                    height=height, word_bytes=_WORD_BYTES[encoding],
                    codes=_INVALID_CODES.get(encoding, 'invalid codes')))

    def _check_time_order(self, encoding, t_ns, problems):
        """Report times that decrease, inside the message and against the previous message."""
        if not len(t_ns):
            return
        previous = self._last_t_ns.get(encoding)
        self._last_t_ns[encoding] = int(t_ns[-1])
        in_order = previous is None or t_ns[0] >= previous
        if in_order and not np.any(t_ns[1:] < t_ns[:-1]):
            return
        # Compared, not subtracted: times near +-2^63 (a hostile time_base) would overflow a
        # difference in int64 and hide the steps back.
        before = np.concatenate([t_ns[:1] if previous is None else np.array([previous]),
                                 t_ns[:-1]]).astype(np.int64)
        backwards = t_ns < before
        # b > t in int64, so b - t computed modulo 2^64 in uint64 is exact.
        largest_ns = int((before[backwards].astype(np.uint64)
                          - t_ns[backwards].astype(np.uint64)).max())
        self._problem(problems, 'time_backwards', np.count_nonzero(backwards),
                      f'{encoding}: sensor time went backwards {np.count_nonzero(backwards)} '
                      f'time(s) (largest step back {largest_ns} ns)')
