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
Map sensor time to ROS time, and count gaps in EventPacket sequence numbers.

TimeSync follows event_camera_renderer: per message, the offset between the header stamp
(host time when the message's first driver packet arrived) and the sensor time of its first
event is measured; the first measurement sets the offset, later ones are blended in with
weight alpha = 0.01 (offset <- (1 - alpha) * offset + alpha * (stamp - t_first)). When the
header stamp jumps backwards (a looping bag, a restarted driver) the offset is reset.

A measurement that disagrees with the offset by more than max_jump_ns is a discontinuity (a
corrupt sensor time, a sensor clock that jumped, a header stamp that jumped), not drift:
blending it in would put stamps wrong by up to the jump for hundreds of messages. is_jump()
tells; the caller (stream.frontend) drops a lone outlier or, when the next message confirms
the new clock, re-synchronises (reset(), then update() as for a first message).

    sync = TimeSync()
    if not sync.is_jump(stamp_ns, result.events):
        sync.update(stamp_ns, result.events)  # once per decoded message
    ros_ns = sync.to_ros_ns(t_sensor_ns)      # int or int64 array
"""

from typing import Optional

import numpy as np

DEFAULT_ALPHA = 0.01
# A measured offset further than this from the current one is a jump, not drift (the node's
# parameter time_sync_max_jump_ms; the offset of clean recordings moves by < 1 ms per message).
DEFAULT_MAX_JUMP_NS = 500_000_000
# A seq step forward of more than this many messages is not a loss (a driver restart, a
# corrupt header): a restart, counted as such.
MAX_SEQ_GAP = 1_000_000


class TimeSync:
    """
    Smoothed offset from sensor time (ns) to ROS time (ns).

    The offset is kept as an exact integer plus a float remainder, so that ROS stamps of
    ~1.7e18 ns lose no precision to float64.
    """

    def __init__(self, alpha: float = DEFAULT_ALPHA, max_jump_ns: int = DEFAULT_MAX_JUMP_NS):
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f'alpha must be in (0, 1], got {alpha}')
        if not max_jump_ns > 0:
            raise ValueError(f'max_jump_ns must be > 0 ns, got {max_jump_ns}')
        self.alpha = float(alpha)
        self.max_jump_ns = int(max_jump_ns)
        self.resets = 0
        self.reset()

    def reset(self):
        """Forget the offset; the next update() sets it from scratch."""
        self._offset_ns = None
        self._remainder_ns = 0.0
        self._last_stamp_ns = None

    @property
    def offset_ns(self) -> int:
        """ROS time minus sensor time (ns); ValueError before the first update."""
        self._check_initialized()
        return self._offset_ns

    def update(self, stamp_ns: int, events) -> bool:
        """
        Feed one message: its header stamp (ns) and its decoded events.

        events: an EventArray, an int64 array of sensor times (ns) or the first sensor time
        (int); a message without events changes nothing. Returns True when the offset was
        (re)set: at the first message and when the stamp went backwards. A jump (see
        is_jump) is blended like any message: callers check is_jump first.
        """
        t_first_ns = _first_time(events)
        if t_first_ns is None:
            return False
        stamp_ns = int(stamp_ns)
        measured = stamp_ns - t_first_ns
        went_back = self._last_stamp_ns is not None and stamp_ns < self._last_stamp_ns
        self._last_stamp_ns = stamp_ns
        if self._offset_ns is None or went_back:
            self.resets += int(went_back)
            self._offset_ns = measured
            self._remainder_ns = 0.0
            return True
        blended = self._remainder_ns + self.alpha * ((measured - self._offset_ns)
                                                     - self._remainder_ns)
        step = int(np.floor(blended))
        self._offset_ns += step
        self._remainder_ns = blended - step
        return False

    def disagreement_ns(self, stamp_ns: int, events) -> Optional[int]:
        """Measured minus current offset [ns] for a message; None before the first update."""
        t_first_ns = _first_time(events)
        if t_first_ns is None or self._offset_ns is None:
            return None
        return int(stamp_ns) - t_first_ns - self._offset_ns

    def is_jump(self, stamp_ns: int, events) -> bool:
        """Return True when the message disagrees with the offset by more than max_jump_ns."""
        disagreement_ns = self.disagreement_ns(stamp_ns, events)
        return disagreement_ns is not None and abs(disagreement_ns) > self.max_jump_ns

    def to_ros_ns(self, t_sensor_ns):
        """ROS time (ns) of sensor time t_sensor_ns (int, or int64 array -> int64 array)."""
        self._check_initialized()
        offset = self._offset_ns + int(round(self._remainder_ns))
        if isinstance(t_sensor_ns, np.ndarray):
            return t_sensor_ns.astype(np.int64) + np.int64(offset)
        return int(t_sensor_ns) + offset

    def _check_initialized(self):
        if self._offset_ns is None:
            raise ValueError('TimeSync has seen no message with events yet: call update() '
                             'with a decoded message first')


def _first_time(events) -> Optional[int]:
    if events is None:
        return None
    if isinstance(events, (int, np.integer)):
        return int(events)
    t_ns = getattr(events, 't_ns', events)
    if len(t_ns) == 0:
        return None
    return int(t_ns[0])


class SeqGapCounter:
    """
    Count messages lost upstream from EventPacket.seq (+1 per message).

    update(seq) returns the number of messages missing just before this one. A seq that does
    not increase (driver restart, looping bag), or that leaps ahead by more than MAX_SEQ_GAP
    (a corrupt header: a jump to 2^63 is no 2^63 lost messages), is a restart, not a loss.
    """

    def __init__(self):
        self.gaps = 0          # number of places where messages were missing
        self.missing = 0       # total missing messages
        self.restarts = 0
        self._last_seq = None

    def update(self, seq: int) -> int:
        """Feed one message's seq; return how many messages are missing before it."""
        seq = int(seq)
        last, self._last_seq = self._last_seq, seq
        if last is None or seq == last + 1:
            return 0
        if seq <= last or seq - last - 1 > MAX_SEQ_GAP:
            self.restarts += 1
            return 0
        missing = seq - last - 1
        self.gaps += 1
        self.missing += missing
        return missing

    def reset(self):
        """Forget the last seq (the counts are kept)."""
        self._last_seq = None
