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

A process started with the environment the launch files set (launch_arguments.
fastdds_profile_env: both FASTDDS_DEFAULT_PROFILES_FILE and FASTRTPS_DEFAULT_PROFILES_FILE) to
config/fastdds_event_driver.xml publishes through a shared-memory segment of at least 16 MiB
(Fast DDS's default: 512 KiB), and Fast DDS reports no XML problem. `make test` runs this on
ROS 2 Kilted (Fast DDS 3, segments /dev/shm/fastdds_*) and Jazzy (Fast DDS 2.14, fastrtps_*),
and checks which of the two variables each reads.
"""

from importlib import metadata
import os
import pathlib
import subprocess
import sys

import pytest

from veckm_flow_ros.ros.launch_arguments import fastdds_profile_env

PROFILE = pathlib.Path(__file__).resolve().parents[1] / 'config' / 'fastdds_event_driver.xml'
SHM_DIR = pathlib.Path('/dev/shm')
PROFILE_VARIABLES = ('FASTDDS_DEFAULT_PROFILES_FILE', 'FASTRTPS_DEFAULT_PROFILES_FILE')
# Which variable each Fast DDS major version reads (seen here: Fast DDS 3 still reads the old
# name too; 2.x never reads the new one). The launch files set both.
READS = {3: set(PROFILE_VARIABLES), 2: {'FASTRTPS_DEFAULT_PROFILES_FILE'}}
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
needs_shm = pytest.mark.skipif(not SHM_DIR.is_dir(),
                               reason='no /dev/shm: Fast DDS shared memory is Linux')


def _fast_dds_major() -> int:
    """Return the major version of the Fast DDS wheel in this environment (Kilted 3, Jazzy 2)."""
    for distribution in ('ros-fastdds', 'ros-fastrtps'):
        try:
            return int(metadata.version(distribution).split('.')[0])
        except metadata.PackageNotFoundError:
            continue
    pytest.skip('Fast DDS version unknown: neither the ros-fastdds nor the ros-fastrtps wheel')


def _segments() -> dict:
    sizes = {}
    # Fast DDS 3 names its segments fastdds_*, Fast DDS 2 fastrtps_*.
    for path in [*SHM_DIR.glob('fastdds_*'), *SHM_DIR.glob('fastrtps_*')]:
        try:
            sizes[path.name] = path.stat().st_size
        except FileNotFoundError:  # another process removed it meanwhile
            pass
    return sizes


def _new_segment_sizes(profile_env: dict):
    """Run the publisher with `profile_env` (no other profile variable): new segments, log."""
    env = {name: value for name, value in os.environ.items() if name not in PROFILE_VARIABLES}
    env.update({name: str(value) for name, value in profile_env.items()})
    before = _segments()
    child = subprocess.Popen([sys.executable, '-c', PUBLISHER], env=env, text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    printed = []  # Fast DDS 2 logs to stdout, Fast DDS 3 to stderr
    try:
        for line in child.stdout:
            printed.append(line)
            if line.strip() == 'published':
                break
        sizes = [size for name, size in _segments().items() if name not in before]
    finally:
        # Closing stdin ends the child (reading its stderr first would wait for that).
        stdout, stderr = child.communicate('', timeout=60)
    log = ''.join(printed) + stdout + stderr
    assert printed and printed[-1].strip() == 'published' and child.returncode == 0, log
    return sizes, log


@needs_shm
def test_driver_profile_gives_a_16_mib_shared_memory_segment():
    sizes, log = _new_segment_sizes(fastdds_profile_env(PROFILE))
    assert 'XMLPARSER' not in log and 'Error' not in log, log
    assert max(sizes, default=0) >= 16 * 1024 * 1024, sizes
    # Without it, Fast DDS's default segment (the case the profile is for).
    sizes, _ = _new_segment_sizes({})
    assert sizes and max(sizes) < 1024 * 1024, sizes


@needs_shm
@pytest.mark.parametrize('variable', PROFILE_VARIABLES)
def test_the_profile_variables_this_fast_dds_reads(variable):
    """Each variable alone: the 16 MiB segment where this Fast DDS reads it, else the default."""
    reads = variable in READS[_fast_dds_major()]
    sizes, _ = _new_segment_sizes({variable: PROFILE})
    assert sizes and (max(sizes) >= 16 * 1024 * 1024) == reads, (sizes, reads)


@needs_shm
def test_an_empty_profile_argument_means_fast_dds_defaults():
    """
    The launch files' `*_fastdds_profile:=''` sets the variables empty: Fast DDS defaults.

    Fast DDS logs that it cannot load '' (the README says so) and publishes as usual.
    """
    sizes, _ = _new_segment_sizes(fastdds_profile_env(''))
    assert sizes and max(sizes) < 1024 * 1024, sizes
