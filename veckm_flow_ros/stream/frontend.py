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
The one stream front end: EventPacket fields in, estimator steps out.

The node, `veckm-flow replay` and `veckm-flow info` all feed packets through a StreamFrontEnd,
so that they agree on what a packet means:

- a header stamp or seq that goes back, or a sensor time more than RESTART_TOLERANCE_NS
  before the previous packet's, starts a new stream (bag loop, driver restart): decoder and
  time sync start afresh and the estimator is reset;
- a seq gap (lost upstream or dropped by the node's queue) resynchronises the decoder (evt3
  keeps the time high word between packets, which is stale after a gap);
- a packet that cannot be decoded is counted and skipped; decoder problems are counted; a
  packet that fails in any other way is counted and skipped too, and the stream restarts: one
  bad packet never costs the packets around it;
- a packet claiming a sensor larger than max_sensor_size is counted as bad and dropped, so
  that memory (estimator tables, images) is bounded by configuration, not by a header;
- the sensor size is announced when first known and whenever it changes;
- events more than max_jump_ns of sensor time away from the median of their packet are
  dropped (counted as decode problems: a packet cannot span that long; corrupt time words);
- a packet that leaves the stream's clock -- its sensor time more than RESTART_TOLERANCE_NS
  before the previous packet's, or disagreeing with its header stamp by more than
  max_jump_ns against the sensor -> ROS offset so far (a time sync jump) -- is held back
  (at most MAX_HELD_PACKETS): when a later packet follows it (same offset, time going on)
  the clock really restarted or jumped, and they start a new stream (time sync
  re-synchronised, not blended; counted in resets and time_sync_jumps); when a later packet
  follows the old clock, the held ones had corrupt times and are dropped (counted in
  bad_packets and time_outliers). So a lone corrupt packet costs only itself, and no stamp
  strays from the header stamps by more than max_jump_ns;
- every packet accepted with events updates the sensor -> ROS time sync;
- its events carry a Mark: the newest sensor time so far, the sensor -> ROS offset after this
  packet, its frame_id and the range of header stamps [first_stamp_ns, stamp_ns] of the
  stream so far. A flow block is stamped with the mark of the first packet whose events
  completed it.

    front_end = StreamFrontEnd(log=print)
    for step in front_end.feed(packet):
        ...  # Reset(reason) | Resize(width, height) | Events(events, mark)
"""

from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Union

import numpy as np

from veckm_flow_ros.eventio.decode import DecodeError, PacketDecoder
from veckm_flow_ros.eventio.events import EventArray
from veckm_flow_ros.eventio.timesync import TimeSync
from veckm_flow_ros.stream.parameters import default_config

# Sensor time may step back this much between packets without meaning a new stream.
RESTART_TOLERANCE_NS = 100_000_000
_DEFAULTS = default_config()
# The largest sensor accepted by default [px] (parameters max_sensor_width_px, _height_px).
DEFAULT_MAX_SENSOR_SIZE = (_DEFAULTS['max_sensor_width_px'], _DEFAULTS['max_sensor_height_px'])
DEFAULT_MAX_JUMP_NS = int(round(_DEFAULTS['time_sync_max_jump_ms'] * 1e6))
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
# Packets off the stream's clock held at most, waiting for a second one on the same clock.
MAX_HELD_PACKETS = 4


@dataclass(repr=False)
class InputPacket:
    """An EventPacket reduced to what the front end needs (payload referenced, not copied)."""

    encoding: str
    data: Any  # bytes, memoryview or array('B')
    time_base: int
    width: int
    height: int
    seq: int
    stamp_ns: int
    frame_id: str
    estimated_events: int = 0  # for the node's bounded queue
    received_s: float = 0.0  # time.monotonic() on arrival (node)

    def __repr__(self):
        # The payload by its size and first bytes: packets are logged and fuzzed in thousands.
        data = bytes(memoryview(self.data)[:16]) if hasattr(self.data, '__len__') else self.data
        return (f'InputPacket({self.encoding!r}, <{_length(self.data)} bytes {data!r}...>, '
                f'time_base={self.time_base}, {self.width}x{self.height}, seq={self.seq}, '
                f'stamp_ns={self.stamp_ns}, frame_id={self.frame_id!r})')


def _length(data) -> str:
    try:
        return str(len(data))
    except TypeError:
        return '?'


@dataclass(frozen=True)
class Mark:
    """Where a packet leaves the stream: newest sensor time so far, offset, frame id."""

    newest_ns: int  # newest sensor time of this and all earlier packets of the stream [ns]
    offset_ns: int  # ROS time - sensor time after this packet's time sync update [ns]
    frame_id: str
    stamp_ns: int = 0  # this packet's header stamp [ns]
    first_stamp_ns: int = 0  # header stamp of the stream's first packet with events [ns]


@dataclass(frozen=True)
class Reset:
    """The stream restarted: forget the estimator's events."""

    reason: str


@dataclass(frozen=True)
class Resize:
    """The sensor size is now width x height [px] (first packet, or a change)."""

    width: int
    height: int


@dataclass(frozen=True)
class Events:
    """Decoded events of one packet, with the packet's mark."""

    events: EventArray
    mark: Mark


Step = Union[Reset, Resize, Events]
LogFunction = Callable[[str, str], None]  # (level: 'info' | 'warning' | 'error', message)


def _no_log(level: str, message: str):
    pass


class StreamFrontEnd:
    """
    Decoder, time sync, seq gaps and restart detection of one event stream.

    log(level, message) receives one line per problem (callers throttle); the counters
    (packets, events, bad_packets, oversized_packets and time_outliers (both also in
    bad_packets), decode_problems, resets, time_sync_jumps (also in resets)) count what
    feed() saw. max_sensor_size: the
    largest (width, height) [px] accepted; max_jump_ns: the time sync jump bound [ns].
    """

    def __init__(self, log: LogFunction = _no_log, max_sensor_size=DEFAULT_MAX_SENSOR_SIZE,
                 max_jump_ns: int = DEFAULT_MAX_JUMP_NS):
        self.log = log
        self.max_sensor_size = (int(max_sensor_size[0]), int(max_sensor_size[1]))
        self.max_jump_ns = int(max_jump_ns)
        self.packets = 0
        self.events = 0
        self.bad_packets = 0
        self.oversized_packets = 0
        self.decode_problems = 0
        self.resets = 0
        self.time_sync_jumps = 0
        self.time_outliers = 0
        self.sensor_size = None  # (width, height) of the last decoded packet
        self.restart()

    def restart(self, restart_decoder: bool = True):
        """Forget the stream: fresh decoder and time sync (the counters are kept)."""
        if restart_decoder:
            self.decoder = PacketDecoder()
        # Packets off the stream's clock, waiting for a second one on theirs:
        # (packet, events, 'back' | 'jump', disagreement with the offset [ns]).
        self._held = []
        self.timesync = TimeSync(max_jump_ns=self.max_jump_ns)
        self._last_stamp_ns = None
        self._last_seq = None
        self._last_sensor_t_ns = None
        self._newest_ns = None
        self._first_stamp_ns = None

    def reset(self, reason: str, restart_decoder: bool = True) -> Reset:
        """Restart the stream for `reason`; return the Reset step for the estimator."""
        self._drop_held('the stream restarted')
        self.restart(restart_decoder)
        self.resets += 1
        self.log('info', f'resetting decoder, time sync and estimator: {reason}')
        return Reset(reason)

    def feed(self, packet: InputPacket) -> List[Step]:
        """Decode one packet; return its steps in order (possibly none); never raises."""
        steps = []
        self.packets += 1
        try:
            self._feed(packet, steps)
        except Exception as error:  # noqa: B902 - one bad packet must not cost the others
            # Whatever failed (a header field of the wrong type, an overflow), the packet is
            # skipped and the stream starts afresh: the decoder state may be half updated.
            # Steps already made (held packets released) are complete and kept.
            self.bad_packets += 1
            self.log('warning', f'dropping packet seq {getattr(packet, "seq", "?")}: '
                                f'{type(error).__name__}: {error} ({self.bad_packets} bad '
                                'packets so far)')
            steps.append(self.reset(f'{type(error).__name__} while decoding'))
        return steps

    def _feed(self, packet: InputPacket, steps: list):
        if self._went_back(packet):
            if self._held:
                # No later packet can confirm or refute them: they keep their own clock.
                self._start_clock(self._held[:1] + [held for held in self._held[1:]
                                                    if self._consistent(self._held[0], *held[:2])],
                                  steps)
            # Before decoding: a stateful decoder (evt3) would read the new stream's first
            # packet with the old stream's time state.
            steps.append(self.reset('the stream restarted (header stamp or seq went back)'))
        elif self._last_seq is not None and packet.seq > self._last_seq + 1:
            self.decoder.resync()  # lost upstream or dropped: evt3 time is stale
        self._last_stamp_ns, self._last_seq = int(packet.stamp_ns), int(packet.seq)
        if self._oversized(packet):
            self.decoder.resync()  # as if lost: evt3 time may be stale after it
            return
        events = self._decode(packet)
        if events is None or len(events) == 0:
            return
        events = self._drop_time_outliers(packet, events)
        suspect = self._clock_break(packet, events)
        if suspect is None:
            self._drop_held('a later packet follows the clock before')
            self._accept(packet, events, steps)
            return
        new_clock = [held for held in self._held if self._consistent(held, packet, events)]
        this = (packet, events, suspect,
                self.timesync.disagreement_ns(packet.stamp_ns, events) or 0)
        if not new_clock:
            self._held.append(this)
            if len(self._held) > MAX_HELD_PACKETS:
                self._drop_held('too many packets off the clock', count=1)
            return
        # A second packet on the new clock: a restart or a jump, not an outlier.
        self._start_clock(new_clock + [this], steps)

    def _start_clock(self, packets: list, steps: list):
        """Start a stream on the clock of `packets` (held ones first); drop the other held."""
        self._held = [held for held in self._held if all(held is not p for p in packets)]
        self._drop_held('they follow neither clock')
        if packets[0][2] == 'jump':
            self.time_sync_jumps += 1
        steps.append(self.reset(self._break_reason(packets[0]), restart_decoder=False))
        for held in packets:
            self._accept(*held[:2], steps)

    def _clock_break(self, packet: InputPacket, events: EventArray) -> Optional[str]:
        """'back' or 'jump' when the packet leaves the stream's clock, else None."""
        if (self._last_sensor_t_ns is not None
                and int(events.t_ns[0]) < self._last_sensor_t_ns - RESTART_TOLERANCE_NS):
            return 'back'  # a camera restart, or a corrupt time
        if self.timesync.is_jump(packet.stamp_ns, events):
            return 'jump'  # a clock jump, or a corrupt time
        return None

    def _consistent(self, held, packet: InputPacket, events: EventArray) -> bool:
        """Return True when the packet follows a held one: time going on, the same offset."""
        held_packet, held_events = held[:2]
        if int(events.t_ns[0]) < int(held_events.t_ns[-1]) - RESTART_TOLERANCE_NS:
            return False
        held_offset_ns = int(held_packet.stamp_ns) - int(held_events.t_ns[0])
        offset_ns = int(packet.stamp_ns) - int(events.t_ns[0])
        return abs(offset_ns - held_offset_ns) <= self.max_jump_ns

    def _break_reason(self, held) -> str:
        packet, _, kind, disagreement_ns = held[:4]
        if kind == 'back':
            return 'the stream restarted (sensor time went back)'
        return (f'time sync jump: the sensor time of packet seq {packet.seq} and the next '
                f'disagree with their header stamps by {disagreement_ns * 1e-6:+.1f} ms '
                f'against the offset so far (bound time_sync_max_jump_ms = '
                f'{self.max_jump_ns * 1e-6:g} ms); offset re-synchronised '
                f'({self.time_sync_jumps} jumps so far)')

    def _drop_held(self, why: str, count: Optional[int] = None):
        """Drop held packets (the oldest `count`; all by default): corrupt times."""
        count = len(self._held) if count is None else count
        dropped, self._held = self._held[:count], self._held[count:]
        for packet, _, kind, disagreement_ns in dropped:
            self.bad_packets += 1
            self.time_outliers += 1
            what = ('its sensor time went back' if kind == 'back' else
                    f'its sensor time disagrees with its header stamp by '
                    f'{disagreement_ns * 1e-6:+.1f} ms against the offset so far (bound '
                    f'time_sync_max_jump_ms = {self.max_jump_ns * 1e-6:g} ms)')
            self.log('warning', f'dropping packet seq {packet.seq} ({packet.encoding}): '
                                f'{what}, and {why}: a corrupt time ({self.time_outliers} '
                                'such packets so far)')

    def _accept(self, packet: InputPacket, events: EventArray, steps: list):
        """Give the packet's events to the stream: size, time sync, mark."""
        size = (int(packet.width), int(packet.height))
        if self.sensor_size != size:
            self.sensor_size = size
            steps.append(Resize(*size))
        self.timesync.update(packet.stamp_ns, events)
        if self._first_stamp_ns is None:
            self._first_stamp_ns = int(packet.stamp_ns)
        self._last_sensor_t_ns = int(events.t_ns[-1])
        newest = int(events.t_ns.max())
        if self._newest_ns is not None:
            newest = max(newest, self._newest_ns)
        self._newest_ns = newest
        self.events += len(events)
        steps.append(Events(events, Mark(newest, self.timesync.to_ros_ns(0), packet.frame_id,
                                         int(packet.stamp_ns), self._first_stamp_ns)))

    def _oversized(self, packet: InputPacket) -> bool:
        """Count and report a packet claiming a sensor beyond max_sensor_size."""
        max_width, max_height = self.max_sensor_size
        if int(packet.width) <= max_width and int(packet.height) <= max_height:
            return False
        self.bad_packets += 1
        self.oversized_packets += 1
        self.log('warning', f'dropping packet seq {packet.seq}: its sensor size '
                            f'{packet.width}x{packet.height} px exceeds max_sensor_width_px x '
                            f'max_sensor_height_px = {max_width}x{max_height} px '
                            f'({self.oversized_packets} such packets so far); raise these '
                            'parameters if the camera is that large')
        return True

    def _drop_time_outliers(self, packet: InputPacket, events: EventArray) -> EventArray:
        """Drop events further than max_jump_ns from the median time of their packet."""
        t_ns = events.t_ns
        if int(t_ns.max()) - int(t_ns.min()) <= self.max_jump_ns:
            return events  # the usual case: nothing to look at
        median_ns = int(np.partition(t_ns, len(t_ns) // 2)[len(t_ns) // 2])
        low_ns = max(median_ns - self.max_jump_ns, _INT64_MIN)  # no int64 overflow
        high_ns = min(median_ns + self.max_jump_ns, _INT64_MAX)
        keep = (t_ns >= np.int64(low_ns)) & (t_ns <= np.int64(high_ns))
        dropped = len(events) - int(np.count_nonzero(keep))
        self.decode_problems += 1
        self.log('warning', f'packet seq {packet.seq} ({packet.encoding}): {dropped} event(s) '
                            f'more than {self.max_jump_ns * 1e-6:g} ms of sensor time from the '
                            f'median of the packet were dropped (corrupt time words) '
                            f'({self.decode_problems} decode problems so far)')
        return events[keep]

    def _went_back(self, packet: InputPacket) -> bool:
        """Header stamp or seq going back means a new stream (bag loop, driver restart)."""
        return ((self._last_stamp_ns is not None and packet.stamp_ns < self._last_stamp_ns)
                or (self._last_seq is not None and packet.seq < self._last_seq))

    def _decode(self, packet: InputPacket) -> Optional[EventArray]:
        """Return the packet's events, or None when it cannot be decoded (counted, logged)."""
        try:
            result = self.decoder.decode(packet.encoding, packet.data, packet.time_base,
                                         packet.width, packet.height)
        except DecodeError as error:
            self.bad_packets += 1
            self.log('warning', f'dropping packet seq {packet.seq}: {error} '
                                f'({self.bad_packets} bad packets so far)')
            return None
        if result.problems:
            self.decode_problems += len(result.problems)
            self.log('warning', f'packet seq {packet.seq} ({packet.encoding}): '
                                f'{"; ".join(result.problems)} ({self.decode_problems} decode '
                                'problems so far)')
        return result.events
