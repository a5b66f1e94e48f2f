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
The Fast DDS profile the driver launch files give a camera driver, loaded by real Fast DDS.

A process started with FASTDDS_DEFAULT_PROFILES_FILE set to config/fastdds_event_driver.xml
publishes through a shared-memory segment of at least 16 MiB (Fast DDS's default: 512 KiB),
and Fast DDS reports no XML problem.
"""

import os
import pathlib
import subprocess
import sys

import pytest

PROFILE = pathlib.Path(__file__).resolve().parents[1] / 'config' / 'fastdds_event_driver.xml'
SHM_DIR = pathlib.Path('/dev/shm')
# A publisher that sends one EventPacket, says so and waits for its stdin to close.
PUBLISHER = """
import sys
import rclpy
from event_camera_msgs.msg import EventPacket
rclpy.init()
node = rclpy.create_node('profile_check')
publisher = node.create_publisher(EventPacket, 'profile_check_events', 10)
publisher.publish(EventPacket(encoding='mono', events=bytes(64 * 1024)))
print('published', flush=True)
sys.stdin.read()
node.destroy_node()
rclpy.shutdown()
"""


def _segments() -> dict:
    sizes = {}
    for path in SHM_DIR.glob('fastdds_*'):
        try:
            sizes[path.name] = path.stat().st_size
        except FileNotFoundError:  # another process removed it meanwhile
            pass
    return sizes


def _new_segment_sizes(profile):
    """Run the publisher (with the profile, or Fast DDS defaults); its new segments' sizes."""
    env = dict(os.environ)
    for name in ('FASTDDS_DEFAULT_PROFILES_FILE', 'FASTRTPS_DEFAULT_PROFILES_FILE'):
        env.pop(name, None)
        if profile is not None:
            env[name] = str(profile)
    before = _segments()
    child = subprocess.Popen([sys.executable, '-c', PUBLISHER], env=env, text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    try:
        published = child.stdout.readline().strip() == 'published'
        sizes = [size for name, size in _segments().items() if name not in before]
    finally:
        # Closing stdin ends the child (reading its stderr first would wait for that).
        _, stderr = child.communicate('', timeout=60)
    assert published and child.returncode == 0, stderr
    return sizes, stderr


@pytest.mark.skipif(not SHM_DIR.is_dir(), reason='no /dev/shm: Fast DDS shared memory is Linux')
def test_driver_profile_gives_a_16_mib_shared_memory_segment():
    sizes, stderr = _new_segment_sizes(PROFILE)
    assert 'XMLPARSER' not in stderr and 'Error' not in stderr, stderr
    assert max(sizes, default=0) >= 16 * 1024 * 1024, sizes
    # Without it, Fast DDS's default segment (the case the profile is for).
    sizes, _ = _new_segment_sizes(None)
    assert sizes and max(sizes) < 1024 * 1024, sizes


@pytest.mark.skipif(not SHM_DIR.is_dir(), reason='no /dev/shm: Fast DDS shared memory is Linux')
def test_an_empty_profile_argument_means_fast_dds_defaults():
    """
    The launch files' `*_fastdds_profile:=''` sets the variables empty: Fast DDS defaults.

    Fast DDS logs that it cannot load '' (the README says so) and publishes as usual.
    """
    sizes, _ = _new_segment_sizes('')
    assert sizes and max(sizes) < 1024 * 1024, sizes
