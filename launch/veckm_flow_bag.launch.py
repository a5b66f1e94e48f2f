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

The node runs with use_sim_time, so header stamps and latencies follow the bag's clock. The
player uses the drivers' Fast DDS profile by default, so a fast replay does not lose packets
on the way to the flow node.
"""


from launch import LaunchDescription
from launch.actions import ExecuteProcess
from launch.conditions import IfCondition, UnlessCondition
from launch.substitutions import LaunchConfiguration

from veckm_flow_ros.ros.launch_arguments import (declare_arguments, fastdds_profile_env,
                                                 include_flow_node)


def generate_launch_description():
    """Declare the arguments, the bag player and the flow node."""
    arguments = declare_arguments('bag', 'rate', 'loop', 'events_topic', 'params_file',
                                  'player_fastdds_profile')
    play = ['ros2', 'bag', 'play', LaunchConfiguration('bag'), '--clock',
            '--rate', LaunchConfiguration('rate'),
            '--topics', LaunchConfiguration('events_topic')]
    player_env = fastdds_profile_env(LaunchConfiguration('player_fastdds_profile'))
    players = [
        ExecuteProcess(cmd=play, output='screen', additional_env=player_env,
                       condition=UnlessCondition(LaunchConfiguration('loop'))),
        ExecuteProcess(cmd=play + ['--loop'], output='screen', additional_env=player_env,
                       condition=IfCondition(LaunchConfiguration('loop'))),
    ]
    flow = include_flow_node(LaunchConfiguration('events_topic'), use_sim_time='true')
    return LaunchDescription(arguments + [flow] + players)
