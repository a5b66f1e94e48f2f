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
The private rclpy APIs the node's receive thread uses, one small function each.

The node takes ~/events as raw CDR bytes on its own thread, without an executor (see
OwnThreadCallbackGroup below; the egomotion node takes ~/imu so): rclpy has no public API
for that. Its public ways in
(an executor's spin, rclpy.wait_for_message) build a wait set in Python on every wake-up or
create a subscription per message, which at 1000 messages/s cost more than the node can spare.
So the receive loop drives the same private pieces rclpy's own executor drives, and each of
them sits here, behind a function whose docstring says on which rclpy it was tested.
test/test_rclpy_compat.py exercises every function over real Fast DDS; `make test` runs it on
each distribution below.

Tested on (each function, unless its docstring says otherwise):
- ROS 2 Kilted: rclpy 9.1.2, rmw_fastrtps_cpp 9.3.3, Fast DDS 3.2.3;
- ROS 2 Jazzy: rclpy 7.1.6, rmw_fastrtps_cpp 8.4.3, Fast DDS 2.14.5.
Not tested on Humble (rclpy 3.3 has no wheel): every function here would need checking there;
one known difference is that Humble's event handlers are rclpy.qos_event.QoSEventHandler (the
module was renamed rclpy.event_handler later).
"""

from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy


def event_handlers(subscription) -> list:
    """
    Return the QoS event handlers rclpy created for `subscription` (incompatible QoS, ...).

    rclpy's Subscription.event_handlers attribute (set in its constructor; a list of
    rclpy.event_handler.EventHandler). Tested on Kilted rclpy 9.1.2 and Jazzy rclpy 7.1.6.
    """
    return list(subscription.event_handlers)


def make_wait_set(context, num_subscriptions: int, num_guard_conditions: int,
                  num_events: int):
    """
    Return an rcl wait set with room for that many subscriptions, guard conditions, events.

    rclpy_implementation.WaitSet(subscriptions, guard conditions, timers, clients, services,
    events, context handle), built once and refilled on every wait. Tested on Kilted rclpy
    9.1.2 and Jazzy rclpy 7.1.6 (same signature).
    """
    return _rclpy.WaitSet(num_subscriptions, num_guard_conditions, 0, 0, 0, num_events,
                          context.handle)


class entities_in_use:  # noqa: N801 - used as a function: `with entities_in_use(...)`
    """
    Keep the rcl objects of a subscription, a guard condition and event handlers alive.

    Within the block, destroying them (node.destroy_subscription, node shutdown) waits until
    the block ends, as in rclpy's executor: their handles (and the handlers, which forward to
    their event handles) are context managers counting uses. Raises rclpy's InvalidHandle when
    one of them is already destroyed (those entered before are released). One object can be
    entered again and again: a receive loop builds it once (a plain class: an ExitStack in a
    generator cost ~0.1 ms per wake-up on the 2-core VM). Tested on Kilted rclpy 9.1.2 and
    Jazzy rclpy 7.1.6.
    """

    def __init__(self, subscription, guard_condition, handlers):
        self._entities = (subscription.handle, guard_condition.handle, *handlers)

    def __enter__(self):
        entered = 0
        try:
            for entity in self._entities:
                entity.__enter__()
                entered += 1
        except BaseException:
            self._exit(entered, None, None, None)
            raise

    def __exit__(self, kind, value, traceback):
        self._exit(len(self._entities), kind, value, traceback)
        return False

    def _exit(self, count, kind, value, traceback):
        for entity in reversed(self._entities[:count]):
            entity.__exit__(kind, value, traceback)


def wait(wait_set, subscription, guard_condition, handlers, timeout_ns: int):
    """
    Wait until a message, the guard condition or a QoS event is there, or `timeout_ns` passed.

    Clears and refills `wait_set` (make_wait_set) with the three kinds of entity (the
    handlers through their Waitable.add_to_wait_set) and waits with the GIL released. Call it
    inside entities_in_use. Tested on Kilted rclpy 9.1.2 and Jazzy rclpy 7.1.6.
    """
    wait_set.clear_entities()
    wait_set.add_subscription(subscription.handle)
    wait_set.add_guard_condition(guard_condition.handle)
    for handler in handlers:
        handler.add_to_wait_set(wait_set)
    wait_set.wait(timeout_ns)


def run_ready_event_callbacks(wait_set, handlers) -> int:
    """
    Call the callback of each event handler whose event `wait_set` reported; return how many.

    What rclpy's executor does for them (Waitable.is_ready, take_data, then the callback with
    the event), taking the event even when there is no callback so that it does not wake the
    wait set again. Tested on Kilted rclpy 9.1.2 and Jazzy rclpy 7.1.6.
    """
    called = 0
    for handler in handlers:
        if handler.is_ready(wait_set):
            event = handler.take_data()
            if event and handler.callback is not None:
                handler.callback(event)
                called += 1
    return called


def take_serialized(subscription, msg_type):
    """
    Take one message from `subscription` as its serialized CDR bytes; None when there is none.

    Subscription.handle.take_message(msg_type, raw=True), which returns (bytes, message info)
    or None; no message object is built. Tested on Kilted rclpy 9.1.2 and Jazzy rclpy 7.1.6.
    """
    taken = subscription.handle.take_message(msg_type, True)
    return None if taken is None else taken[0]


def take_serialized_with_info(subscription, msg_type):
    """
    Take one message as (serialized CDR bytes, message info dict); None when there is none.

    The info holds the rmw's publication_sequence_number (per publisher, counting from 1;
    gaps are messages the subscription's history dropped before they were taken) among
    others. Tested on Kilted rclpy 9.1.2 and Jazzy rclpy 7.1.6.
    """
    return subscription.handle.take_message(msg_type, True)


class OwnThreadCallbackGroup(ReentrantCallbackGroup):
    """
    A callback group that no executor runs: its entities are served by the node's own thread.

    Used for the ~/events subscription and its QoS event handlers. The event handlers matter
    too: with Fast DDS they wake a wait set on every received message without being ready,
    so an executor holding them rebuilt its wait set in Python hundreds of times a second.
    """

    def can_execute(self, entity) -> bool:
        return False

    def beginning_execution(self, entity) -> bool:
        return False
