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

"""Shared fixtures: paths to the project and to the optional shared data beside it."""

import os
import pathlib

import pytest

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = PROJECT_ROOT.parent / 'shared' / 'data'
# One DDS domain per test process, so parallel runs on a machine do not mix.
ROS_DOMAIN_ID = 100 + os.getpid() % 100
# The modules whose tests touch rclpy, DDS, message types or the Fast DDS profile: their tests
# are marked `ros`, and `make test` runs those on ROS 2 Jazzy as well as on Kilted
# (scripts/test.sh). test_rclpy_compat.py checks that no such module is missing here.
ROS_FACING_MODULES = frozenset({'test_node.py', 'test_hostile_node.py', 'test_hostile_offline.py',
                                'test_dds_profile.py', 'test_messages.py', 'test_rclpy_compat.py',
                                'test_egomotion_node.py', 'test_hostile_egomotion_node.py',
                                'test_flow_message.py'})


@pytest.hookimpl(tryfirst=True)  # before `-m ros` deselects by marker
def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.name in ROS_FACING_MODULES:
            item.add_marker(pytest.mark.ros)


@pytest.fixture(scope='module')
def ros_context():
    """Yield an rclpy context on ROS_DOMAIN_ID, localhost discovery; shut down after use."""
    import rclpy
    os.environ['ROS_DOMAIN_ID'] = str(ROS_DOMAIN_ID)
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=ROS_DOMAIN_ID)
    try:
        yield context
    finally:
        rclpy.shutdown(context=context)


@pytest.fixture(scope='session')
def project_root():
    return PROJECT_ROOT


def _shared_data(name: str, what: str) -> pathlib.Path:
    """Return ../shared/data/<name>; skip the test (saying what is missing) when absent."""
    path = SHARED_DATA / name
    if not path.is_dir():
        pytest.skip(f'{what} not available at {path}')
    return path


@pytest.fixture(scope='session')
def recordings_dir():
    """../shared/data/recordings (real event-camera bags); skips when absent."""
    return _shared_data('recordings', 'real recordings')


@pytest.fixture(scope='session')
def published_models_dir():
    """../shared/data/veckm_flow_cpp_models (CC BY-NC, never bundled); skips when absent."""
    return _shared_data('veckm_flow_cpp_models', 'published VecKM_flow_cpp weights')


@pytest.fixture(scope='session')
def model():
    """Load the shipped default model, as the node and the CLI do."""
    from veckm_flow_ros.core.model import load_model
    return load_model()


@pytest.fixture(scope='session')
def model_args():
    """Return the CLI arguments selecting the default model (none are needed)."""
    return []
