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

"""The node's input queue: whole packets, bounded by estimated events and by packet count."""

import collections
import threading
import time
from typing import List, Optional

from veckm_flow_ros.stream.frontend import InputPacket

MAX_QUEUED_PACKETS = 10000


class PacketQueue:
    """
    Thread-safe FIFO of packets bounded by estimated events and by packet count.

    put() drops the oldest whole packets to make room (a packet alone above the capacity is
    dropped itself); the drops are counted in dropped_packets / dropped_events.
    """

    def __init__(self, max_events: int, max_packets: int = MAX_QUEUED_PACKETS):
        self.max_events = int(max_events)
        self.max_packets = int(max_packets)
        self._packets = collections.deque()
        self._events = 0
        self._condition = threading.Condition()
        self.dropped_packets = 0
        self.dropped_events = 0

    def put(self, packet: InputPacket) -> int:
        """Enqueue `packet`; return the number of packets dropped to make room."""
        dropped = 0
        with self._condition:
            if packet.estimated_events > self.max_events:
                dropped = 1
                self.dropped_packets += 1
                self.dropped_events += packet.estimated_events
                return dropped
            while self._packets and (self._events + packet.estimated_events > self.max_events
                                     or len(self._packets) >= self.max_packets):
                oldest = self._packets.popleft()
                self._events -= oldest.estimated_events
                self.dropped_packets += 1
                self.dropped_events += oldest.estimated_events
                dropped += 1
            self._packets.append(packet)
            self._events += packet.estimated_events
            self._condition.notify()
        return dropped

    def take(self, timeout_s: float, max_events: Optional[int] = None) -> List[InputPacket]:
        """
        Remove and return the oldest packets, waiting up to timeout_s for the first.

        Returns whole packets up to max_events estimated events (at least one packet);
        None = everything queued.
        """
        with self._condition:
            if not self._packets:
                self._condition.wait(timeout_s)
            packets = []
            taken = 0
            while self._packets and (max_events is None or not packets
                                     or taken + self._packets[0].estimated_events
                                     <= max_events):
                packet = self._packets.popleft()
                taken += packet.estimated_events
                packets.append(packet)
            self._events -= taken
        return packets

    def drop_older_than(self, max_age_s: float, now_s: Optional[float] = None) -> int:
        """Drop the packets that arrived more than max_age_s ago; return how many (counted)."""
        now_s = time.monotonic() if now_s is None else now_s
        dropped = 0
        with self._condition:
            while self._packets and now_s - self._packets[0].received_s > max_age_s:
                oldest = self._packets.popleft()
                self._events -= oldest.estimated_events
                self.dropped_packets += 1
                self.dropped_events += oldest.estimated_events
                dropped += 1
        return dropped

    def wake(self):
        with self._condition:
            self._condition.notify_all()

    @property
    def queued_events(self) -> int:
        return self._events

    def __len__(self):
        return len(self._packets)
