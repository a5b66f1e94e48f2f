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
Launch a Prophesee/SilkyEvCam camera (metavision_driver) and veckm_flow_node on its events.

    ros2 launch veckm_flow_ros veckm_flow_metavision.launch.py serial:=<serial>

The driver publishes /<camera_name>/events (evt3, best effort); the flow node subscribes to it.
"""


from veckm_flow_ros.ros.launch_arguments import (camera_with_flow_node, declare_arguments,
                                                 string_parameters)


def generate_launch_description():
    """Declare the arguments, the camera driver and the flow node."""
    arguments = declare_arguments('camera_name', 'serial', 'bias_file', 'params_file',
                                  'driver_fastdds_profile')
    return camera_with_flow_node(arguments, 'metavision_driver', {
        **string_parameters('serial', 'bias_file'), 'use_multithreading': False})
