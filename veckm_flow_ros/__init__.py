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
Real-time per-event normal flow for event cameras (VecKM encoding + MLP) on ROS 2.

Data flow: EventPacket bytes -> decode -> EventArray -> window/blocks -> encode (csrc op)
-> MLP -> flows -> publish / write / plot. Nothing outside `ros/` imports rclpy.

Importing the package changes nothing in the process; the programs (`veckm-flow`, the node,
the benchmarks) call veckm_flow_ros.runtime.set_omp_wait_policy() before importing torch.
"""

__version__ = '0.1.0'
