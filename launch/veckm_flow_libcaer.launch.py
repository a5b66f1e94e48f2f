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
Launch an iniVation DAVIS/DVXplorer camera (libcaer_driver) and veckm_flow_node on its events.

    ros2 launch veckm_flow_ros veckm_flow_libcaer.launch.py device_type:=davis

The driver publishes /<camera_name>/events (libcaer_cmp, best effort); the flow node
subscribes to it.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare

PACKAGE = 'veckm_flow_ros'


def generate_launch_description():
    """Declare the arguments, the camera driver and the flow node."""
    camera_name = LaunchConfiguration('camera_name')
    events_topic = ['/', camera_name, '/events']
    arguments = [
        DeclareLaunchArgument(
            'camera_name', default_value='event_camera',
            description='Name of the driver node; events go to /<camera_name>/events.'),
        DeclareLaunchArgument(
            'device_type', default_value='davis',
            description='libcaer device type: davis or dvxplorer.'),
        DeclareLaunchArgument(
            'serial', default_value='',
            description='Serial number of the camera; empty = the first camera found.'),
        DeclareLaunchArgument(
            'params_file',
            default_value=PathJoinSubstitution([FindPackageShare(PACKAGE), 'config',
                                                'veckm_flow.yaml']),
            description='YAML file with the flow node parameters.'),
        DeclareLaunchArgument(
            'driver_fastdds_profile',
            default_value=PathJoinSubstitution([FindPackageShare(PACKAGE), 'config',
                                                'fastdds_event_driver.xml']),
            description='Fast DDS XML profile of the driver process (default: a 16 MiB '
                        'shared-memory segment, so bursts at high event rates are not lost '
                        'on the way to the flow node); empty = Fast DDS defaults.'),
    ]
    profile = LaunchConfiguration('driver_fastdds_profile')
    driver = Node(
        package='libcaer_driver',
        executable='driver_node',
        name=camera_name,
        output='screen',
        parameters=[{
            'device_type': ParameterValue(LaunchConfiguration('device_type'), value_type=str),
            'serial': ParameterValue(LaunchConfiguration('serial'), value_type=str),
            'frame_id': '',
            'statistics_print_interval': 2.0,
            # 1 ms messages: the flow node's latency starts at the driver.
            'event_message_time_threshold': 1.0e-3,
        }],
        remappings=[('~/events', events_topic)],
        # Fast DDS 3 reads the first name, Fast DDS 2 (Humble, Jazzy) the second.
        additional_env={'FASTDDS_DEFAULT_PROFILES_FILE': profile,
                        'FASTRTPS_DEFAULT_PROFILES_FILE': profile},
    )
    flow = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(
            PathJoinSubstitution([FindPackageShare(PACKAGE), 'launch', 'veckm_flow.launch.py'])),
        launch_arguments={'events_topic': events_topic,
                          'params_file': LaunchConfiguration('params_file')}.items())
    return LaunchDescription(arguments + [driver, flow])
