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
- a packet that cannot be decoded is counted and skipped; decoder problems are counted;
- the sensor size is announced when first known and whenever it changes;
- every packet with events updates the sensor -> ROS time sync, and its events carry a Mark:
  the newest sensor time so far, the sensor -> ROS offset after this packet, and its frame_id.
  A flow block is stamped with the mark of the first packet whose events completed it.

    front_end = StreamFrontEnd(log=print)
    for step in front_end.feed(packet):
        ...  # Reset(reason) | Resize(width, height) | Events(events, mark)
"""

from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Union

from veckm_flow_ros.eventio.decode import DecodeError, PacketDecoder
from veckm_flow_ros.eventio.events import EventArray
from veckm_flow_ros.eventio.timesync import TimeSync

# Sensor time may step back this much between packets without meaning a new stream.
RESTART_TOLERANCE_NS = 100_000_000


@dataclass
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


@dataclass(frozen=True)
class Mark:
    """Where a packet leaves the stream: newest sensor time so far, offset, frame id."""

    newest_ns: int  # newest sensor time of this and all earlier packets of the stream [ns]
    offset_ns: int  # ROS time - sensor time after this packet's time sync update [ns]
    frame_id: str


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
    (packets, events, bad_packets, decode_problems, resets) count what feed() saw.
    """

    def __init__(self, log: LogFunction = _no_log):
        self.log = log
        self.packets = 0
        self.events = 0
        self.bad_packets = 0
        self.decode_problems = 0
        self.resets = 0
        self.sensor_size = None  # (width, height) of the last decoded packet
        self.restart()

    def restart(self):
        """Forget the stream: fresh decoder and time sync (the counters are kept)."""
        self.decoder = PacketDecoder()
        self.timesync = TimeSync()
        self._last_stamp_ns = None
        self._last_seq = None
        self._last_sensor_t_ns = None
        self._newest_ns = None

    def reset(self, reason: str) -> Reset:
        """Restart the stream for `reason`; return the Reset step for the estimator."""
        self.restart()
        self.resets += 1
        self.log('info', f'resetting decoder, time sync and estimator: {reason}')
        return Reset(reason)

    def feed(self, packet: InputPacket) -> List[Step]:
        """Decode one packet; return its steps in order (possibly none)."""
        steps = []
        self.packets += 1
        if self._went_back(packet):
            # Before decoding: a stateful decoder (evt3) would read the new stream's first
            # packet with the old stream's time state.
            steps.append(self.reset('the stream restarted (header stamp or seq went back)'))
        elif self._last_seq is not None and packet.seq > self._last_seq + 1:
            self.decoder.resync()  # lost upstream or dropped: evt3 time is stale
        self._last_stamp_ns, self._last_seq = packet.stamp_ns, packet.seq
        events = self._decode(packet)
        if events is None or len(events) == 0:
            return steps
        if (self._last_sensor_t_ns is not None
                and int(events.t_ns[0]) < self._last_sensor_t_ns - RESTART_TOLERANCE_NS):
            # The decoder read this packet fine: keep its events for the new stream.
            steps.append(self.reset('the stream restarted (sensor time went back)'))
            self._last_stamp_ns, self._last_seq = packet.stamp_ns, packet.seq
        size = (int(packet.width), int(packet.height))
        if self.sensor_size != size:
            self.sensor_size = size
            steps.append(Resize(*size))
        self.timesync.update(packet.stamp_ns, events)
        self._last_sensor_t_ns = int(events.t_ns[-1])
        newest = int(events.t_ns.max())
        if self._newest_ns is not None:
            newest = max(newest, self._newest_ns)
        self._newest_ns = newest
        self.events += len(events)
        steps.append(Events(events, Mark(newest, self.timesync.to_ros_ns(0), packet.frame_id)))
        return steps

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
