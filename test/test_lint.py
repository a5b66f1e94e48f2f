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
ament_xmllint validates against the REP-149 schema, which it downloads; the tests use no
network, so the files are checked for well-formedness, by catkin_pkg's parser and against
REP 149's content model (element order, counts, attributes) written out here.
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


# REP 149 (package format 3) as its XSD (download.ros.org/schema/package_format3.xsd) states
# it: the elements in this order, how often each may appear, and the required attributes.
# ament_xmllint validates against that XSD but must download it, and tests do not use the
# network (an `xmllint --nonet` probe could never load it), so the content model is checked here.
REP149_ORDER = (('name', 1, 1), ('version', 1, 1), ('description', 1, 1),
                ('maintainer', 1, None), ('license', 1, None), ('url', 0, None),
                ('author', 0, None), ('dependencies', 0, None), ('export', 0, 1))
REP149_DEPENDENCIES = {'build_depend', 'build_export_depend', 'buildtool_depend',
                       'buildtool_export_depend', 'exec_depend', 'depend', 'doc_depend',
                       'test_depend', 'conflict', 'replace', 'group_depend', 'member_of_group'}


def rep149_problems(path) -> list:
    """Return how a package.xml departs from the REP-149 format 3 content model."""
    import re
    import xml.etree.ElementTree as ElementTree
    root = ElementTree.parse(path).getroot()
    problems = []
    if root.tag != 'package' or root.get('format') != '3':
        problems.append(f'root is <{root.tag} format={root.get("format")!r}>, expected '
                        '<package format="3">')
    kinds = ['dependencies' if child.tag in REP149_DEPENDENCIES else child.tag
             for child in root if isinstance(child.tag, str)]
    position = 0
    for kind, least, most in REP149_ORDER:
        count = 0
        while position < len(kinds) and kinds[position] == kind:
            count, position = count + 1, position + 1
        if count < least or (most is not None and count > most):
            problems.append(f'<{kind}> appears {count} times at its place, expected '
                            f'{least}..{most or "n"}')
    if position < len(kinds):
        problems.append(f'<{kinds[position]}> out of order or not allowed (element '
                        f'{position + 1})')
    if not re.fullmatch(r'\d+\.\d+\.\d+', root.findtext('version', '')):
        problems.append(f'version {root.findtext("version")!r} is not X.Y.Z')
    problems += [f'maintainer {m.text!r} has no email' for m in root.findall('maintainer')
                 if not m.get('email')]
    return problems


@pytest.mark.linter
def test_package_xml_follows_rep149(tmp_path):
    for path in XML_FILES:
        assert rep149_problems(path) == [], path
    # The check can fail: a misplaced and a missing element are reported.
    broken = tmp_path / 'package.xml'
    text = pathlib.Path(XML_FILES[0]).read_text()
    broken.write_text(text.replace('<license>Apache-2.0</license>', '').replace(
        '</package>', '<license>Apache-2.0</license></package>'))
    problems = rep149_problems(broken)
    assert any('<license> appears 0 times' in problem for problem in problems), problems
