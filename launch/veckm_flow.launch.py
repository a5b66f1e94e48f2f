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
Launch veckm_flow_node alone, on an existing events topic.

    ros2 launch veckm_flow_ros veckm_flow.launch.py events_topic:=/event_camera/events

Outputs: /<node_name>/flow (PointCloud2), /<node_name>/flow_image (Image), /diagnostics.
"""


from launch import LaunchDescription
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.descriptions import ParameterValue

from veckm_flow_ros.ros.launch_arguments import declare_arguments, fastdds_profile_env, PACKAGE


def generate_launch_description():
    """Declare the arguments and the node."""
    arguments = declare_arguments('events_topic', 'params_file', 'use_sim_time', 'node_name',
                                  'log_level', 'node_fastdds_profile')
    node = Node(
        package=PACKAGE,
        executable='veckm_flow_node',
        name=LaunchConfiguration('node_name'),
        output='screen',
        parameters=[
            LaunchConfiguration('params_file'),
            {'use_sim_time': ParameterValue(LaunchConfiguration('use_sim_time'),
                                            value_type=bool)},
        ],
        remappings=[('~/events', LaunchConfiguration('events_topic'))],
        arguments=['--ros-args', '--log-level', LaunchConfiguration('log_level')],
        additional_env=fastdds_profile_env(LaunchConfiguration('node_fastdds_profile')),
    )
    return LaunchDescription(arguments + [node])
