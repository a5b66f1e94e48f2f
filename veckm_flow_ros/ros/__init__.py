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
The ROS 2 side.

The veckm_flow_node, the veckm_egomotion_node (egomotion_node.py) and their message
conversions: the only sub-package that imports rclpy.
"""


def main(args=None):
    """Console script veckm_flow_node: set the process-wide OpenMP policy, then run the node."""
    from veckm_flow_ros.runtime import set_omp_wait_policy
    set_omp_wait_policy()  # before the node's imports load torch
    from veckm_flow_ros.ros.node import main as node_main
    return node_main(args)
