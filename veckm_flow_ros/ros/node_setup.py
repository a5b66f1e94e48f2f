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
The set-up both nodes share: QoS profiles, parameter declaration, logging, /diagnostics.

veckm_flow_node (ros/node.py) and veckm_egomotion_node (ros/egomotion_node.py) declare their
ParameterSpec tables the same way, log through one call site per severity and publish one
DiagnosticStatus per period; these helpers are that common part.
"""

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

from veckm_flow_ros.ros.messages import parameter_descriptor


def qos(depth: int, reliable: bool = True) -> QoSProfile:
    """Return a volatile keep-last QoS profile of `depth` messages, reliable or best effort."""
    reliability = ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth, reliability=reliability,
                      durability=DurabilityPolicy.VOLATILE)


def declare_parameters(node, specs) -> dict:
    """Declare each ParameterSpec of `specs` on `node`; return {name: value} as set at start."""
    return {spec.name: node.declare_parameter(spec.name, spec.default,
                                              parameter_descriptor(spec)).value
            for spec in specs}


def log_line(node, level: str, message: str):
    """Log one line at `level` ('error', 'warning', anything else: info)."""
    # One call site per severity: rclpy's logger refuses a new severity from a known site.
    logger = node.get_logger()
    if level == 'error':
        logger.error(message)
    elif level == 'warning':
        logger.warning(message)
    else:
        logger.info(message)


def publish_diagnostics(node, publisher, name: str, level, message: str, values: dict,
                        hardware_id: str = ''):
    """Publish one DiagnosticStatus (`values`: key -> text) as a DiagnosticArray, stamped now."""
    status = DiagnosticStatus(level=level, name=f'{node.get_name()}: {name}', message=message,
                              hardware_id=hardware_id,
                              values=[KeyValue(key=k, value=v) for k, v in values.items()])
    array = DiagnosticArray(status=[status])
    array.header.stamp = node.get_clock().now().to_msg()
    publisher.publish(array)
