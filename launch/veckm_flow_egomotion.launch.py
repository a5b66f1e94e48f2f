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

r"""
Launch veckm_flow_node and veckm_egomotion_node on its ~/flow, on an existing events topic.

    ros2 launch veckm_flow_ros veckm_flow_egomotion.launch.py \\
        events_topic:=/event_camera/events camera_info_topic:=/event_camera/camera_info \\
        imu_topic:=/imu/data

Outputs: /veckm_flow/flow, /veckm_flow/flow_image, /veckm_egomotion/twist (angular velocity
[rad/s], unit translation direction), /veckm_egomotion/foe, /veckm_egomotion/time_to_contact,
/veckm_egomotion/min_time_to_contact, /diagnostics.
"""


from launch import LaunchDescription
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.descriptions import ParameterValue

from veckm_flow_ros.ros.launch_arguments import (
    declare_arguments, egomotion_fastdds_env, include_flow_node, PACKAGE)

# The flow node's name in veckm_flow.launch.py (its node_name default): ~/flow resolves here.
FLOW_TOPIC = '/veckm_flow/flow'


def generate_launch_description():
    """Declare the arguments, the flow node (included) and the egomotion node."""
    arguments = declare_arguments('events_topic', 'params_file', 'egomotion_params_file',
                                  'camera_info_topic', 'imu_topic', 'use_sim_time',
                                  'log_level', 'egomotion_fastdds_profile')
    use_sim_time = LaunchConfiguration('use_sim_time')
    egomotion = Node(
        package=PACKAGE,
        executable='veckm_egomotion_node',
        name='veckm_egomotion',
        output='screen',
        parameters=[
            LaunchConfiguration('egomotion_params_file'),
            {'use_sim_time': ParameterValue(use_sim_time, value_type=bool)},
        ],
        remappings=[('~/flow', FLOW_TOPIC),
                    ('~/camera_info', LaunchConfiguration('camera_info_topic')),
                    ('~/imu', LaunchConfiguration('imu_topic'))],
        arguments=['--ros-args', '--log-level', LaunchConfiguration('log_level')],
        additional_env=egomotion_fastdds_env(LaunchConfiguration('egomotion_fastdds_profile')),
    )
    flow = include_flow_node(LaunchConfiguration('events_topic'), use_sim_time=use_sim_time,
                             log_level=LaunchConfiguration('log_level'))
    return LaunchDescription(arguments + [flow, egomotion])
