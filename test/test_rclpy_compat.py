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
Each function of veckm_flow_ros.ros.rclpy_compat (the private rclpy APIs) over real Fast DDS.

`make test` runs this module on ROS 2 Kilted and on Jazzy (the `ros` marker). The last test
checks that every test module touching rclpy, DDS, message types or Fast DDS is marked `ros`
(conftest.ROS_FACING_MODULES).
"""

import pathlib
import re
import time

import pytest

rclpy = pytest.importorskip('rclpy')
pytest.importorskip('event_camera_msgs')

from event_camera_msgs.msg import EventPacket  # noqa: E402, I100
from rclpy.event_handler import SubscriptionEventCallbacks  # noqa: E402
from rclpy.guard_condition import GuardCondition  # noqa: E402
from rclpy.qos import QoSPolicyKind, QoSProfile, ReliabilityPolicy  # noqa: E402
from rclpy.serialization import deserialize_message  # noqa: E402

from conftest import ROS_FACING_MODULES  # noqa: E402, I100
from veckm_flow_ros.ros import rclpy_compat  # noqa: E402
from veckm_flow_ros.ros.node import OwnThreadCallbackGroup  # noqa: E402

TOPIC = 'rclpy_compat_events'
RELIABLE = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
BEST_EFFORT = QoSProfile(depth=10, reliability=ReliabilityPolicy.BEST_EFFORT)
TEST_DIR = pathlib.Path(__file__).resolve().parent


class Receiver:
    """A raw subscription served as the node serves ~/events: own thread group, own wait set."""

    def __init__(self, context, qos, **subscription_kwargs):
        self.node = rclpy.create_node('rclpy_compat_probe', context=context)
        self.subscription = self.node.create_subscription(
            EventPacket, TOPIC, lambda raw: None, qos, raw=True,
            callback_group=OwnThreadCallbackGroup(), **subscription_kwargs)
        self.wake = GuardCondition(None, None, context=context)
        self.handlers = rclpy_compat.event_handlers(self.subscription)
        self.wait_set = rclpy_compat.make_wait_set(context, 1, 1, len(self.handlers))

    def wait(self, timeout_s: float) -> float:
        """Wait once (entities held, as in the node); return the seconds it took."""
        start_s = time.monotonic()
        with rclpy_compat.entities_in_use(self.subscription, self.wake, self.handlers):
            rclpy_compat.wait(self.wait_set, self.subscription, self.wake, self.handlers,
                              int(timeout_s * 1e9))
        return time.monotonic() - start_s

    def close(self):
        self.node.destroy_node()


@pytest.fixture
def receiver_factory(ros_context):
    receivers = []

    def make(qos=RELIABLE, **subscription_kwargs):
        receivers.append(Receiver(ros_context, qos, **subscription_kwargs))
        return receivers[-1]
    yield make
    for receiver in receivers:
        receiver.close()


def test_event_handlers_are_those_of_the_subscription(receiver_factory):
    events = []
    receiver = receiver_factory(
        event_callbacks=SubscriptionEventCallbacks(incompatible_qos=events.append))
    handlers = receiver.handlers
    assert handlers and all(hasattr(handler, 'add_to_wait_set') for handler in handlers)
    assert events.append in [handler.callback for handler in handlers]


def test_wait_times_out_and_wakes_on_the_guard_condition(receiver_factory):
    receiver = receiver_factory()
    assert 0.15 <= receiver.wait(0.2) < 2.0  # nanoseconds in, nothing there
    receiver.wake.trigger()
    assert receiver.wait(5.0) < 1.0


def test_a_message_wakes_the_wait_and_is_taken_as_its_cdr_bytes(receiver_factory):
    receiver = receiver_factory()
    publisher = receiver.node.create_publisher(EventPacket, TOPIC, RELIABLE)
    deadline = time.monotonic() + 10.0
    while publisher.get_subscription_count() == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    message = EventPacket(encoding='evt3', width=640, height=480, seq=7,
                          events=bytes(range(256)) * 4)
    publisher.publish(message)
    taken = None
    while taken is None and time.monotonic() < deadline:
        receiver.wait(1.0)
        taken = rclpy_compat.take_serialized(receiver.subscription, EventPacket)
    assert isinstance(taken, bytes) and deserialize_message(taken, EventPacket) == message
    assert rclpy_compat.take_serialized(receiver.subscription, EventPacket) is None


def test_a_qos_event_reaches_its_callback(receiver_factory):
    """A best-effort publisher on a reliable subscription: 'requested incompatible QoS'."""
    events = []
    receiver = receiver_factory(
        event_callbacks=SubscriptionEventCallbacks(incompatible_qos=events.append))
    receiver.node.create_publisher(EventPacket, TOPIC, BEST_EFFORT)
    deadline = time.monotonic() + 10.0
    called = 0
    while not events and time.monotonic() < deadline:
        receiver.wait(0.5)
        called += rclpy_compat.run_ready_event_callbacks(receiver.wait_set, receiver.handlers)
    assert called == len(events) >= 1
    assert events[0].total_count >= 1
    assert events[0].last_policy_kind == QoSPolicyKind.RELIABILITY
    # Taken: the same event does not wake the wait set again.
    assert receiver.wait(0.2) >= 0.15
    assert rclpy_compat.run_ready_event_callbacks(receiver.wait_set, receiver.handlers) == 0


def test_entities_in_use_defer_their_destruction(receiver_factory):
    receiver = receiver_factory()
    subscription = receiver.subscription
    with rclpy_compat.entities_in_use(subscription, receiver.wake, receiver.handlers):
        receiver.node.destroy_subscription(subscription)
        # Still alive while in use: taking finds nothing, without error.
        assert rclpy_compat.take_serialized(subscription, EventPacket) is None
    with pytest.raises(Exception, match='destruction was requested'):
        with rclpy_compat.entities_in_use(subscription, receiver.wake, receiver.handlers):
            pass
    with pytest.raises(Exception, match='invalid'):
        rclpy_compat.take_serialized(subscription, EventPacket)


def test_the_receive_thread_pauses_between_close_messages_and_a_poke_ends_the_pause(
        ros_context):
    """
    ros/receiver.py: no pause after a sparse message, one after close ones; poke() ends it.

    A message after a quiet period longer than the receive period is taken at once, and so
    is the next (a pause after a sparse message would only add a take that finds nothing);
    after two messages closer than the period the thread pauses for the period.
    """
    from veckm_flow_ros.ros.receiver import SerializedReceiver
    node = rclpy.create_node('receiver_poke_probe', context=ros_context)
    subscription = node.create_subscription(EventPacket, TOPIC, lambda raw: None, RELIABLE,
                                            raw=True, callback_group=OwnThreadCallbackGroup())
    publisher = node.create_publisher(EventPacket, TOPIC, RELIABLE)
    received = []
    receiver = SerializedReceiver(node, subscription, EventPacket, received.append, 30.0,
                                  TOPIC, 'test', name='poke_test')
    receiver.start()

    def until(predicate, timeout_s):
        deadline = time.monotonic() + timeout_s
        while not predicate() and time.monotonic() < deadline:
            time.sleep(0.01)
        return predicate()
    try:
        assert until(lambda: publisher.get_subscription_count() > 0, 10.0)
        publisher.publish(EventPacket(encoding='evt3', seq=1))
        assert until(lambda: len(received) == 1, 10.0)  # the wait set took it at once
        publisher.publish(EventPacket(encoding='evt3', seq=2))
        assert until(lambda: len(received) == 2, 5.0)  # after a quiet period: no pause
        publisher.publish(EventPacket(encoding='evt3', seq=3))
        assert not until(lambda: len(received) == 3, 0.5)  # now in its 30 s pause
        receiver.poke()
        assert until(lambda: len(received) == 3, 5.0)
        assert [deserialize_message(raw, EventPacket).seq for raw in received] == [1, 2, 3]
    finally:
        receiver.stop()
        receiver.destroy()
        node.destroy_node()


@pytest.mark.parametrize('messages_keep_coming', [False, True])
def test_the_receive_thread_runs_the_qos_event_callbacks(ros_context, messages_keep_coming):
    """
    ros/receiver.py: a QoS event reaches its callback, with or without messages.

    The event handlers join the thread's wait set only once per EVENTS_PERIOD_S: a best-effort
    publisher on the reliable subscription ('requested incompatible QoS') is reported while
    nothing else comes, and while a compatible publisher sends a message every 20 ms (each
    one waking the thread, which then waits without the handlers).
    """
    from veckm_flow_ros.ros.receiver import EVENTS_PERIOD_S, SerializedReceiver
    events = []
    node = rclpy.create_node('receiver_events_probe', context=ros_context)
    subscription = node.create_subscription(
        EventPacket, TOPIC, lambda raw: None, RELIABLE, raw=True,
        callback_group=OwnThreadCallbackGroup(),
        event_callbacks=SubscriptionEventCallbacks(incompatible_qos=events.append))
    received = []
    receiver = SerializedReceiver(node, subscription, EventPacket, received.append, 0.005,
                                  TOPIC, 'test', name='events_test')
    receiver.start()
    try:
        if messages_keep_coming:
            publisher = node.create_publisher(EventPacket, TOPIC, RELIABLE)
            deadline = time.monotonic() + 10.0
            while publisher.get_subscription_count() == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            for seq in range(25):  # 0.5 s of messages before the incompatible publisher
                publisher.publish(EventPacket(encoding='evt3', seq=seq))
                time.sleep(0.02)
        node.create_publisher(EventPacket, TOPIC, BEST_EFFORT)
        start_s = time.monotonic()
        seq = 100
        while not events and time.monotonic() - start_s < 10.0:
            if messages_keep_coming:
                publisher.publish(EventPacket(encoding='evt3', seq=seq))
                seq += 1
            time.sleep(0.02)
        assert events and events[0].last_policy_kind == QoSPolicyKind.RELIABILITY
        # Discovery takes a moment; the handlers are looked at once per period after it.
        assert time.monotonic() - start_s < 3 * EVENTS_PERIOD_S + 2.0
        if messages_keep_coming:
            assert len(received) >= 25
    finally:
        receiver.stop()
        receiver.destroy()
        node.destroy_node()


ROS_FACING = re.compile(r'\b(rclpy|event_camera_msgs|sensor_msgs|std_msgs|diagnostic_msgs|'
                        r'FASTDDS_|FASTRTPS_|veckm_flow_ros\.ros\b|veckm_flow_node)')
# Modules that name ROS but touch none of it: launch argument tables (plain data; ROS launch
# is not installable from PyPI), the linters (package.xml), the pipeline (checks it has no
# rclpy). And the colcon build (Kilted only: it compiles the extension again, ~3 min; the
# build is setuptools' on both, and test_node starts and stops the node's process on Jazzy).
# The simulator and egomotion commands name sensor_msgs/msg/Imu only as a bag message type
# (rosbags' own serializer, no ROS install involved).
NOT_ROS_FACING = {'test_launch_files.py', 'test_lint.py', 'test_pipeline.py', 'test_colcon.py',
                  'test_simulate3d.py', 'test_egomotion.py'}


def test_every_ros_facing_test_module_is_marked_ros():
    """`make test` runs the `ros` tests on Jazzy as well: a module left unmarked is not."""
    unmarked = [path.name for path in sorted(TEST_DIR.glob('test_*.py'))
                if path.name not in NOT_ROS_FACING | ROS_FACING_MODULES
                and ROS_FACING.search(path.read_text())]
    assert not unmarked, (f'{unmarked} use rclpy, DDS, message types or Fast DDS: add them to '
                          f'conftest.ROS_FACING_MODULES (or here to NOT_ROS_FACING)')
