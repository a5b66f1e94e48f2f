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
Replay a bag of EventPackets with `ros2 bag play --clock` into veckm_flow_node (sim time).

    ros2 launch veckm_flow_ros veckm_flow_bag.launch.py bag:=/path/to/bag rate:=1.0

The node runs with use_sim_time, so header stamps and latencies follow the bag's clock.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, ExecuteProcess, IncludeLaunchDescription
from launch.conditions import IfCondition, UnlessCondition
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.substitutions import FindPackageShare

PACKAGE = 'veckm_flow_ros'


def generate_launch_description():
    """Declare the arguments, the bag player and the flow node."""
    arguments = [
        DeclareLaunchArgument(
            'bag', description='Path of the bag (directory with metadata.yaml, or a file).'),
        DeclareLaunchArgument(
            'rate', default_value='1.0',
            description='Playback speed factor (1.0 = real time).'),
        DeclareLaunchArgument(
            'loop', default_value='false',
            description='Replay the bag in a loop (the node resets on the time jump).'),
        DeclareLaunchArgument(
            'events_topic', default_value='/event_camera/events',
            description='EventPacket topic in the bag.'),
        DeclareLaunchArgument(
            'params_file',
            default_value=PathJoinSubstitution([FindPackageShare(PACKAGE), 'config',
                                                'veckm_flow.yaml']),
            description='YAML file with the flow node parameters.'),
        DeclareLaunchArgument(
            'player_fastdds_profile',
            default_value=PathJoinSubstitution([FindPackageShare(PACKAGE), 'config',
                                                'fastdds_event_driver.xml']),
            description="Fast DDS XML profile of the bag player (default: the drivers' "
                        '16 MiB shared-memory segment, so a fast replay does not lose '
                        'packets on the way to the flow node); empty = Fast DDS defaults.'),
    ]
    play = ['ros2', 'bag', 'play', LaunchConfiguration('bag'), '--clock',
            '--rate', LaunchConfiguration('rate'),
            '--topics', LaunchConfiguration('events_topic')]
    profile = LaunchConfiguration('player_fastdds_profile')
    player_env = {'FASTDDS_DEFAULT_PROFILES_FILE': profile,
                  'FASTRTPS_DEFAULT_PROFILES_FILE': profile}
    players = [
        ExecuteProcess(cmd=play, output='screen', additional_env=player_env,
                       condition=UnlessCondition(LaunchConfiguration('loop'))),
        ExecuteProcess(cmd=play + ['--loop'], output='screen', additional_env=player_env,
                       condition=IfCondition(LaunchConfiguration('loop'))),
    ]
    flow = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(
            PathJoinSubstitution([FindPackageShare(PACKAGE), 'launch', 'veckm_flow.launch.py'])),
        launch_arguments={'events_topic': LaunchConfiguration('events_topic'),
                          'params_file': LaunchConfiguration('params_file'),
                          'use_sim_time': 'true'}.items())
    return LaunchDescription(arguments + [flow] + players)
