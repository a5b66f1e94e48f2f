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
The pieces the launch files share: argument declarations, the flow node, the camera driver.

launch/*.launch.py are installed to share/ and import this module from the installed package.

ARGUMENTS is plain data (name -> default and description), readable without ROS launch; the
functions build launch actions and import `launch` / `launch_ros` when called.

    arguments = declare_arguments('camera_name', 'serial', 'params_file')
"""

from dataclasses import dataclass
from typing import Optional, Tuple

PACKAGE = 'veckm_flow_ros'


@dataclass(frozen=True)
class Argument:
    """A launch argument: its description and default (a value, or a file of the share dir)."""

    description: str
    default: Optional[str] = None
    share_default: Tuple[str, ...] = ()  # path inside share/veckm_flow_ros, when the default


_FASTDDS_PROFILE = ('Fast DDS XML profile of the {} (default: a 16 MiB shared-memory segment, '
                    'so bursts at high event rates are not lost on the way to the flow node); '
                    'empty = Fast DDS defaults.')

ARGUMENTS = {
    'events_topic': Argument("EventPacket topic of the events (remapped onto the node's "
                             '~/events).', '/event_camera/events'),
    'params_file': Argument('YAML file with the flow node parameters (model, device, '
                            'block_ms, ...).', share_default=('config', 'veckm_flow.yaml')),
    'use_sim_time': Argument('Use /clock (true when replaying a bag with --clock).', 'false'),
    'node_name': Argument('Node name; outputs are /<node_name>/flow and '
                          '/<node_name>/flow_image.', 'veckm_flow'),
    'log_level': Argument('Logging level of the node (debug, info, warn, error).', 'info'),
    'camera_name': Argument('Name of the driver node; events go to /<camera_name>/events.',
                            'event_camera'),
    'serial': Argument('Serial number of the camera; empty = the first camera found.', ''),
    'device_type': Argument('libcaer device type: davis or dvxplorer.', 'davis'),
    'bias_file': Argument('Metavision bias file; empty = the camera defaults.', ''),
    'driver_fastdds_profile': Argument(_FASTDDS_PROFILE.format('driver process'),
                                       share_default=('config', 'fastdds_event_driver.xml')),
    'node_fastdds_profile': Argument(
        'Fast DDS XML profile of the flow node process (default: a 16 MiB shared-memory '
        'segment: at ~1 M flows/s one ~/flow message outgrows the default 512 KiB segment); '
        'empty = Fast DDS defaults.', share_default=('config', 'fastdds_event_driver.xml')),
    'egomotion_fastdds_profile': Argument(
        'Fast DDS XML profile of the egomotion node process, read with '
        'RMW_FASTRTPS_USE_QOS_FROM_XML=1 (default: readers that free each ~/flow message once '
        'taken, so a huge cloud does not stay in memory; a replacement must set the history '
        'memory policy of the readers).', share_default=('config', 'fastdds_egomotion.xml')),
    'bag': Argument('Path of the bag (directory with metadata.yaml, or a file).'),
    'rate': Argument('Playback speed factor (1.0 = real time).', '1.0'),
    'loop': Argument('Replay the bag in a loop (the node resets on the time jump).', 'false'),
    'player_fastdds_profile': Argument(_FASTDDS_PROFILE.format('bag player'),
                                       share_default=('config', 'fastdds_event_driver.xml')),
    'egomotion_params_file': Argument('YAML file with the egomotion node parameters '
                                      '(window_s, use_imu, imu_rotation_xyzw, ...).',
                                      share_default=('config', 'veckm_egomotion.yaml')),
    'camera_info_topic': Argument('sensor_msgs/CameraInfo topic of the event camera '
                                  "(remapped onto the egomotion node's ~/camera_info).",
                                  '/event_camera/camera_info'),
    'imu_topic': Argument("sensor_msgs/Imu topic (remapped onto the egomotion node's ~/imu); "
                          'without messages there the angular velocity is estimated from the '
                          'flow.', '/event_camera/imu'),
}


def share_path(*parts: str):
    """Return a substitution for a file of the installed package's share directory."""
    from launch.substitutions import PathJoinSubstitution
    from launch_ros.substitutions import FindPackageShare
    return PathJoinSubstitution([FindPackageShare(PACKAGE), *parts])


def declare_arguments(*names: str) -> list:
    """Return a DeclareLaunchArgument for each name of ARGUMENTS, in order."""
    from launch.actions import DeclareLaunchArgument
    declarations = []
    for name in names:
        argument = ARGUMENTS[name]
        default = share_path(*argument.share_default) if argument.share_default \
            else argument.default
        extra = {} if default is None else {'default_value': default}
        declarations.append(DeclareLaunchArgument(name, description=argument.description,
                                                  **extra))
    return declarations


def fastdds_profile_env(profile) -> dict:
    """Environment that makes a process read the Fast DDS XML profile `profile`."""
    # Fast DDS 3 (Kilted) reads the first name (and still the second), Fast DDS 2 (Humble,
    # Jazzy) only the second: test/test_dds_profile.py checks this on Kilted and Jazzy.
    return {'FASTDDS_DEFAULT_PROFILES_FILE': profile, 'FASTRTPS_DEFAULT_PROFILES_FILE': profile}


def egomotion_fastdds_env(profile) -> dict:
    """Environment of the egomotion node: its Fast DDS profile, QoS taken from the XML."""
    # rmw_fastrtps otherwise imposes a history memory policy that keeps a buffer of the largest
    # message each reader received (config/fastdds_egomotion.xml says why).
    return dict(fastdds_profile_env(profile), RMW_FASTRTPS_USE_QOS_FROM_XML='1')


def include_flow_node(events_topic, **launch_arguments):
    """Include veckm_flow.launch.py on `events_topic`, with its params_file argument."""
    from launch.actions import IncludeLaunchDescription
    from launch.launch_description_sources import PythonLaunchDescriptionSource
    from launch.substitutions import LaunchConfiguration
    launch_arguments = {'events_topic': events_topic,
                        'params_file': LaunchConfiguration('params_file'), **launch_arguments}
    return IncludeLaunchDescription(
        PythonLaunchDescriptionSource(share_path('launch', 'veckm_flow.launch.py')),
        launch_arguments=launch_arguments.items())


def string_parameters(*names: str) -> dict:
    """Return {name: the launch argument `name` as a string parameter} for a driver node."""
    from launch.substitutions import LaunchConfiguration
    from launch_ros.descriptions import ParameterValue
    return {name: ParameterValue(LaunchConfiguration(name), value_type=str) for name in names}


def camera_with_flow_node(arguments: list, driver_package: str, driver_parameters: dict):
    """
    Return the LaunchDescription of an event camera driver and the flow node on its events.

    arguments: the declarations of the launch file (they must include camera_name,
    params_file and driver_fastdds_profile). driver_parameters: the driver's own parameters
    (LaunchConfiguration values allowed); frame_id, statistics and 1 ms messages are added.
    """
    from launch import LaunchDescription
    from launch.substitutions import LaunchConfiguration
    from launch_ros.actions import Node
    camera_name = LaunchConfiguration('camera_name')
    events_topic = ['/', camera_name, '/events']
    driver = Node(
        package=driver_package,
        executable='driver_node',
        name=camera_name,
        output='screen',
        parameters=[{
            **driver_parameters,
            'frame_id': '',
            'statistics_print_interval': 2.0,
            # 1 ms messages: the flow node's latency starts at the driver.
            'event_message_time_threshold': 1.0e-3,
        }],
        remappings=[('~/events', events_topic)],
        additional_env=fastdds_profile_env(LaunchConfiguration('driver_fastdds_profile')),
    )
    return LaunchDescription(arguments + [driver, include_flow_node(events_topic)])
