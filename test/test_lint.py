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
The ament linters (flake8, pep257, xmllint, copyright) over the package's own files.

They run exactly as `colcon test` runs them on a ROS install, through the ament_* wheels.
ament_copyright has no wheel and runs only where ROS is installed (skipped elsewhere).
ament_xmllint validates against the REP-149 schema, which it downloads; on a machine without
internet access the files are still checked for well-formedness and by catkin_pkg's parser.
"""

import importlib.util
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PYTHON_PATHS = [str(ROOT / name) for name in ('veckm_flow_ros', 'test', 'launch', 'benchmarks',
                                              'setup.py') if (ROOT / name).exists()]
XML_FILES = [str(ROOT / 'package.xml'), str(ROOT / 'interfaces/event_camera_msgs/package.xml')]


@pytest.mark.linter
def test_flake8():
    from ament_flake8.main import main_with_errors
    status, errors = main_with_errors(argv=PYTHON_PATHS)
    assert status == 0, f'flake8 found {len(errors)} problem(s):\n' + '\n'.join(errors)


@pytest.mark.linter
def test_pep257():
    from ament_pep257.main import main
    assert main(argv=PYTHON_PATHS) == 0, 'pep257 found problems (see output above)'


@pytest.mark.linter
def test_copyright():
    if importlib.util.find_spec('ament_copyright') is None:
        pytest.skip('ament_copyright has no PyPI wheel; it runs where ROS is installed')
    from ament_copyright.main import main
    assert main(argv=PYTHON_PATHS + [str(ROOT / 'csrc'), '--exclude', str(ROOT / 'LICENSE')]) == 0


@pytest.mark.linter
def test_xml_well_formed_and_package_format3():
    xmllint = shutil.which('xmllint')
    if xmllint is None:
        pytest.skip('xmllint (Debian libxml2-utils) is missing; scripts/setup.sh installs it')
    result = subprocess.run([xmllint, '--noout', *XML_FILES], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    from catkin_pkg.package import parse_package
    package = parse_package(str(ROOT / 'package.xml'))
    assert package.package_format == 3
    assert package.name == 'veckm_flow_ros'
    assert {'rclpy', 'event_camera_msgs', 'sensor_msgs'} <= {d.name for d in package.exec_depends}


@pytest.mark.linter
def test_xmllint_schema():
    if shutil.which('xmllint') is None:
        pytest.skip('xmllint (Debian libxml2-utils) is not installed')
    probe = subprocess.run(
        ['xmllint', '--noout', '--nonet', '--schema',
         'http://download.ros.org/schema/package_format3.xsd', XML_FILES[0]],
        capture_output=True, text=True)
    if 'failed to load' in probe.stderr or 'Failed to locate' in probe.stderr:
        pytest.skip('the REP-149 schema (download.ros.org) is not reachable from this machine')
    from ament_xmllint.main import main
    assert main(argv=XML_FILES) == 0
