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
The launch files, checked without ROS launch (not installable from PyPI).

A static check parses each file with `ast`: it defines generate_launch_description, declares
the expected arguments (through veckm_flow_ros.ros.launch_arguments, their one definition),
each with a description, and uses neither eval nor subprocess. Where
`launch` and `launch_ros` are importable (a ROS install), each file is also imported and its
LaunchDescription built.
"""

import ast
import importlib.util
import pathlib

import pytest

from veckm_flow_ros.ros import launch_arguments

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
LAUNCH_DIR = REPO_ROOT / 'launch'
EXPECTED_ARGUMENTS = {
    'veckm_flow.launch.py': {'events_topic', 'params_file', 'use_sim_time', 'node_name',
                             'log_level', 'node_fastdds_profile'},
    'veckm_flow_metavision.launch.py': {'camera_name', 'serial', 'bias_file', 'params_file',
                                        'driver_fastdds_profile'},
    'veckm_flow_libcaer.launch.py': {'camera_name', 'device_type', 'serial', 'params_file',
                                     'driver_fastdds_profile'},
    'veckm_flow_bag.launch.py': {'bag', 'rate', 'loop', 'events_topic', 'params_file',
                                 'player_fastdds_profile'},
    'veckm_flow_egomotion.launch.py': {'events_topic', 'params_file', 'egomotion_params_file',
                                       'camera_info_topic', 'imu_topic', 'use_sim_time',
                                       'log_level', 'egomotion_fastdds_profile'},
}
FORBIDDEN_NAMES = {'eval', 'exec', 'subprocess', 'os.system', 'Popen'}


def _call_name(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ''


def _declared_arguments(tree: ast.AST) -> dict:
    """Map argument name -> description (None when missing) of the file's declarations."""
    declared = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _call_name(node) == 'declare_arguments':
            for arg in node.args:
                shared = launch_arguments.ARGUMENTS.get(arg.value)
                declared[arg.value] = shared.description if shared else None
        if isinstance(node, ast.Call) and _call_name(node) == 'DeclareLaunchArgument':
            name = node.args[0].value if node.args else None
            keywords = {k.arg: k.value for k in node.keywords}
            description = keywords.get('description')
            declared[name] = (description.value if isinstance(description, ast.Constant)
                              else None)
    return declared


def test_every_launch_file_is_checked():
    assert sorted(path.name for path in LAUNCH_DIR.glob('*.launch.py')) == sorted(
        EXPECTED_ARGUMENTS)


@pytest.mark.parametrize('file_name', sorted(EXPECTED_ARGUMENTS))
def test_launch_file_static(file_name):
    source = (LAUNCH_DIR / file_name).read_text()
    tree = ast.parse(source, filename=file_name)
    functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert 'generate_launch_description' in functions
    declared = _declared_arguments(tree)
    assert set(declared) == EXPECTED_ARGUMENTS[file_name]
    for name, description in declared.items():
        assert description and len(description) > 10, f'argument {name} has no description'
    used = {_call_name(node) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    imported = {alias.name for node in ast.walk(tree)
                if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
    assert not (used | imported) & FORBIDDEN_NAMES
    assert ("executable='veckm_flow_node'" in source or 'include_flow_node' in source
            or 'camera_with_flow_node' in source)
    if any(name.endswith('_fastdds_profile') for name in declared):
        # The profile reaches the event source's process (see the shared module's test below).
        assert ('fastdds_profile_env' in source or 'fastdds_env' in source
                or 'camera_with_flow_node' in source)


def test_shared_launch_pieces():
    source = pathlib.Path(launch_arguments.__file__).read_text()
    # The Fast DDS profile reaches a process for Fast DDS 3 and 2 alike.
    environment = launch_arguments.fastdds_profile_env('profile.xml')
    assert environment == {'FASTDDS_DEFAULT_PROFILES_FILE': 'profile.xml',
                           'FASTRTPS_DEFAULT_PROFILES_FILE': 'profile.xml'}
    assert 'additional_env=fastdds_profile_env(' in source
    # The egomotion node reads its readers' memory policy from its profile.
    assert launch_arguments.egomotion_fastdds_env('profile.xml') == dict(
        environment, RMW_FASTRTPS_USE_QOS_FROM_XML='1')
    assert "executable='veckm_flow_node'" not in source  # the node is launched in one place
    assert "'launch', 'veckm_flow.launch.py'" in source
    used = set().union(*EXPECTED_ARGUMENTS.values())
    assert set(launch_arguments.ARGUMENTS) == used  # no argument defined but never declared
    for name, argument in launch_arguments.ARGUMENTS.items():
        assert len(argument.description) > 10, name
        assert argument.default is None or not argument.share_default, name


@pytest.mark.parametrize('file_name', sorted(EXPECTED_ARGUMENTS))
def test_launch_file_builds_a_description(file_name):
    if (importlib.util.find_spec('launch') is None
            or importlib.util.find_spec('launch_ros') is None):
        pytest.skip('launch/launch_ros are not installable from PyPI; they run on a ROS install')
    spec = importlib.util.spec_from_file_location(file_name.replace('.', '_'),
                                                  LAUNCH_DIR / file_name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from launch import LaunchDescription
    from launch.actions import DeclareLaunchArgument
    description = module.generate_launch_description()
    assert isinstance(description, LaunchDescription)
    # Top-level declarations only: resolving the included files needs the package installed.
    names = {entity.name for entity in description.entities
             if isinstance(entity, DeclareLaunchArgument)}
    assert names == EXPECTED_ARGUMENTS[file_name]


def test_egomotion_launch_wires_the_flow_into_the_egomotion_node():
    """The egomotion node's ~/flow is the included flow node's output; its inputs remapped."""
    source = (LAUNCH_DIR / 'veckm_flow_egomotion.launch.py').read_text()
    tree = ast.parse(source)
    assert "executable='veckm_egomotion_node'" in source
    assert "name='veckm_egomotion'" in source  # egomotion_node.NODE_NAME (test_egomotion_node)
    assigned = {node.targets[0].id: node.value.value for node in tree.body
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)}
    flow_node_name = launch_arguments.ARGUMENTS['node_name'].default
    assert assigned['FLOW_TOPIC'] == f'/{flow_node_name}/flow'
    for remapping in ("'~/flow', FLOW_TOPIC",
                      "'~/camera_info', LaunchConfiguration('camera_info_topic')",
                      "'~/imu', LaunchConfiguration('imu_topic')"):
        assert f'({remapping})' in source, remapping
    config = REPO_ROOT / 'config' / 'veckm_egomotion.yaml'
    assert launch_arguments.ARGUMENTS['egomotion_params_file'].share_default == (
        'config', config.name) and config.is_file()
