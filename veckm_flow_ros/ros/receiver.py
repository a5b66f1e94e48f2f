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
A thread of its own that takes serialized messages of one subscription (raw CDR).

Both nodes read their high-rate input this way (veckm_flow_node: ~/events,
veckm_egomotion_node: ~/imu): the executor would cost ~200 us of Python per message
(docs/threading.md). The thread wakes once per period and takes every message that arrived
meanwhile (fewer wake-ups and GIL hand-offs at high rates, at most one period of added
latency, or none where a consumer pokes it: poke() ends the pause); it waits on the
subscription only when none had come, and at least once a second runs the subscription's QoS
event callbacks (incompatible QoS or type warnings) that the executor would otherwise run.
The private rclpy calls it needs are the functions of rclpy_compat.
"""

import threading
import time

from rclpy.guard_condition import GuardCondition

from veckm_flow_ros.ros import rclpy_compat

# Longest wait before the thread looks at its stop flag again.
RECEIVE_WAIT_NS = 100_000_000
# Longest time between two looks at the QoS events while messages keep coming.
EVENTS_PERIOD_S = 1.0


class SerializedReceiver:
    """
    Receive thread for `subscription` (created with raw=True and an OwnThreadCallbackGroup).

    on_message(raw: bytes) is called for each message, in arrival order, on this thread
    (with_info: on_message(raw, info), info the rmw's message info dict); on_wake_end()
    (optional) after the messages of one wake-up. A failure of the middleware is
    logged once (`topic`, `consequence`) and ends the thread.
    """

    def __init__(self, node, subscription, msg_type, on_message, period_s: float, topic: str,
                 consequence: str, on_wake_end=None, name: str = 'veckm_receive',
                 with_info: bool = False):
        self._node, self._subscription, self._msg_type = node, subscription, msg_type
        self._with_info = with_info
        self._on_message, self._on_wake_end = on_message, on_wake_end
        self._period_s, self._topic, self._consequence = period_s, topic, consequence
        self._stop = threading.Event()
        self._poked = threading.Event()  # ends a pause early (poke, stop)
        self._wake = GuardCondition(None, None, context=node.context)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self):
        self._thread.start()

    def poke(self):
        """End the thread's pause: it takes what has arrived now (any thread, cheap)."""
        self._poked.set()

    def stop(self, timeout_s: float = 5.0):
        """Stop the thread and wait for it (idempotent)."""
        self._stop.set()
        self._poked.set()
        try:
            self._wake.trigger()
        except Exception:  # noqa: B902 - context already shut down: the thread sees it anyway
            pass
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def destroy(self):
        self._wake.destroy()

    def _take_all(self, take) -> int:
        """Hand every message the subscription holds to on_message; return how many."""
        count = 0
        while not self._stop.is_set():
            taken = take(self._subscription, self._msg_type)
            if taken is None:
                break
            count += 1
            if self._with_info:
                self._on_message(*taken)
            else:
                self._on_message(taken)
        return count

    def _run(self):
        subscription, wake, context = self._subscription, self._wake, self._node.context
        handlers = rclpy_compat.event_handlers(subscription)
        take = (rclpy_compat.take_serialized_with_info if self._with_info
                else rclpy_compat.take_serialized)
        try:
            wait_set = rclpy_compat.make_wait_set(context, 1, 1, len(handlers))
            in_use = rclpy_compat.entities_in_use(subscription, wake, ())
            in_use_with_events = rclpy_compat.entities_in_use(subscription, wake, handlers)
            events_s = taken_s = -float('inf')
            sparse = False
            while not self._stop.is_set() and context.ok():
                # At a steady rate the messages are there after each pause: take them without
                # the wait set (an rcl wait with Fast DDS costs ~0.3-0.6 ms of CPU per wake-up
                # on the 2-core VM: 6 % of a core for an IMU taken every 10 ms). The wait set
                # serves when nothing came, and at least every EVENTS_PERIOD_S for the QoS
                # events. After a sparse message the subscription was emptied just now: no
                # take before the wait.
                woke_s = time.monotonic()
                count = 0
                if not sparse:
                    with subscription.handle:
                        count = self._take_all(take)
                sparse = False
                events_due = woke_s - events_s >= EVENTS_PERIOD_S
                if not count or events_due:
                    # The event handlers join the wait set only when due (once a second):
                    # their bookkeeping is most of a wait's Python, paid per message where
                    # each message wakes the thread.
                    with in_use_with_events if events_due else in_use:
                        rclpy_compat.wait(wait_set, subscription, wake,
                                          handlers if events_due else (),
                                          RECEIVE_WAIT_NS if not count else 0)
                        woke_s = time.monotonic()
                        if events_due:
                            rclpy_compat.run_ready_event_callbacks(wait_set, handlers)
                            events_s = woke_s
                        taken = self._take_all(take)
                    # Messages further apart than the period (the flow node's clouds, 12-32
                    # ms): a pause would only add a take that finds nothing before the next
                    # wait (~1 % of a core at 42 messages/s).
                    sparse = bool(taken) and not count and woke_s - taken_s >= self._period_s
                    count += taken
                if count:
                    taken_s = woke_s
                if self._on_wake_end is not None:
                    self._on_wake_end()
                pause_s = self._period_s - (time.monotonic() - woke_s)
                if pause_s > 0 and not sparse:
                    self._poked.wait(pause_s)
                # Cleared before the next take: a poke from now on ends the next pause.
                self._poked.clear()
        except Exception as error:  # noqa: B902 - say why input stopped, unless shutting down
            if not self._stop.is_set() and context.ok():
                self._node.get_logger().error(f'receiving {self._topic} failed, '
                                              f'{self._consequence}: '
                                              f'{type(error).__name__}: {error}')
