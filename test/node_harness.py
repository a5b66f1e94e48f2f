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

"""The node under test, a probe node beside it and one executor: the base of both nodes' tests."""

import time

from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter


class NodeHarness:
    """`node_class` built with `parameters` as overrides, and a probe node, on one executor."""

    def __init__(self, context, node_class, probe_name: str, parameters: dict):
        overrides = [Parameter(name, value=value) for name, value in parameters.items()]
        self.node = node_class(context=context, parameter_overrides=overrides)
        self.probe = Node(probe_name, context=context)
        self.executor = SingleThreadedExecutor(context=context)
        self.executor.add_node(self.node)
        self.executor.add_node(self.probe)

    def wait_for_discovery(self, connected):
        """Spin until connected() (the probe's endpoints matched the node's), at most 10 s."""
        assert self.spin_until(connected, 10.0), \
            'DDS discovery between probe and node did not complete'

    def spin_until(self, predicate, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate():
                return True
            self.executor.spin_once(timeout_sec=0.01)
        return predicate()

    def spin_for(self, duration_s: float):
        self.spin_until(lambda: False, duration_s)

    def close(self):
        self.executor.shutdown()
        self.node.destroy_node()
        self.probe.destroy_node()


def closing_factory(make):
    """Yield make (a harness factory) from a fixture; close every harness it made afterwards."""
    created = []

    def make_and_keep(**parameters):
        harness = make(**parameters)
        created.append(harness)
        return harness
    yield make_and_keep
    for harness in created:
        harness.close()
