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
What a ROS user does: `colcon build` the package in a scratch workspace, run the installed node.

The package's tracked files are copied into `<tmp>/ws/src/veckm_flow_ros` (so the build cannot
touch this checkout), built with colcon from PyPI against the ROS 2 wheels in the venv, and the
installed `lib/veckm_flow_ros/veckm_flow_node` executable is started and stopped with SIGINT.
"""

import os
import pathlib
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
VENV_BIN = pathlib.Path(sys.executable).parent


def _tracked_files():
    result = subprocess.run(['git', 'ls-files', '--cached', '--others', '--exclude-standard'],
                            cwd=ROOT, capture_output=True, text=True, check=True)
    return [line for line in result.stdout.splitlines() if line]


@pytest.fixture(scope='module')
def colcon_workspace(tmp_path_factory):
    colcon = VENV_BIN / 'colcon'
    if not colcon.exists():
        pytest.skip(f'colcon is not installed in {VENV_BIN}; run scripts/setup.sh')
    workspace = tmp_path_factory.mktemp('ws')
    package_dir = workspace / 'src' / 'veckm_flow_ros'
    for relative in _tracked_files():
        source = ROOT / relative
        if source.is_file() and not relative.startswith('interfaces/'):
            target = package_dir / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    env = dict(os.environ, AMENT_PREFIX_PATH=str(VENV_BIN.parent),
               PATH=f'{VENV_BIN}{os.pathsep}{os.environ.get("PATH", "")}')
    result = subprocess.run(
        [str(colcon), 'build', '--symlink-install', '--event-handlers', 'console_direct-'],
        cwd=workspace, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, (
        f'colcon build failed ({result.returncode}):\n{result.stdout[-4000:]}\n'
        f'{result.stderr[-4000:]}')
    return workspace, env


def test_colcon_build_installs_node_and_share_files(colcon_workspace):
    workspace, env = colcon_workspace
    install = workspace / 'install' / 'veckm_flow_ros'
    assert (install / 'lib' / 'veckm_flow_ros' / 'veckm_flow_node').exists()
    assert (install / 'lib' / 'veckm_flow_ros' / 'veckm-flow').exists()
    assert (install / 'lib' / 'veckm_flow_ros' / 'veckm_egomotion_node').exists()
    share = install / 'share' / 'veckm_flow_ros'
    assert (share / 'package.xml').exists()
    assert (install / 'share' / 'ament_index' / 'resource_index' / 'packages'
            / 'veckm_flow_ros').exists()
    assert list((share / 'config').glob('*.yaml')), 'config/*.yaml not installed'
    assert list((share / 'launch').glob('*.launch.py')), 'launch/*.launch.py not installed'
    assert (share / 'launch' / 'veckm_flow_egomotion.launch.py').exists()
    assert (share / 'config' / 'veckm_egomotion.yaml').exists()
    # Both extensions are built; the egomotion one imports without torch (as its node does),
    # from the directory of the install's egg-link (the symlinked build).
    egg_link = next(install.glob('lib/python3*/site-packages/*.egg-link'))
    probe = ('import sys; sys.path.insert(0, open(sys.argv[1]).readline().strip()); '
             'import veckm_flow_ros._egomotion as m; '
             'assert "torch" not in sys.modules; print(m.__file__)')
    result = subprocess.run([sys.executable, '-c', probe, str(egg_link)],
                            env=dict(env, PYTHONPATH=''), cwd=workspace, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith(str(workspace)), result.stdout


def test_installed_node_starts_and_stops_cleanly(colcon_workspace):
    workspace, env = colcon_workspace
    install = workspace / 'install' / 'veckm_flow_ros'
    site_packages = next(install.glob('lib/python3*/site-packages'))
    env = dict(env, PYTHONPATH=f'{site_packages}{os.pathsep}{env.get("PYTHONPATH", "")}',
               ROS_DOMAIN_ID='87')
    # The default model: the shipped weights must be installed with the package.
    node = subprocess.Popen(
        [str(install / 'lib' / 'veckm_flow_ros' / 'veckm_flow_node'),
         '--ros-args', '-r', '__node:=colcon_smoke'],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(iter(node.stdout.readline, '')),
                              daemon=True)
    reader.start()
    try:
        # Wait for the start-up line rather than a fixed time: on a loaded 2-core machine the
        # imports alone take over 6 s.
        deadline = time.monotonic() + 60.0
        while (time.monotonic() < deadline and node.poll() is None
               and not any('default shipped model' in line for line in list(lines))):
            time.sleep(0.2)
        time.sleep(1.0)
        assert node.poll() is None, f'node exited early:\n{"".join(lines)}'
        node.send_signal(signal.SIGINT)
        node.wait(timeout=20)
        reader.join(timeout=5)
        output = ''.join(lines)
    finally:
        if node.poll() is None:
            node.kill()
    assert node.returncode == 0, f'node exit status {node.returncode}:\n{output}'
    assert 'Traceback' not in output, output
    assert 'default shipped model' in output, f'the node did not load its default model:\n{output}'
