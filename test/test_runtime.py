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

"""Importing the package leaves the environment alone; the programs set process-wide options."""

import os
import subprocess
import sys

import pytest


def test_import_does_not_set_omp_wait_policy():
    environment = {k: v for k, v in os.environ.items() if k != 'OMP_WAIT_POLICY'}
    code = ('import os; import veckm_flow_ros, veckm_flow_ros.cli; '
            'print(os.environ.get("OMP_WAIT_POLICY"))')
    result = subprocess.run([sys.executable, '-c', code], env=environment, capture_output=True,
                            text=True, check=True)
    assert result.stdout.strip() == 'None'


def test_veckm_flow_main_sets_it_before_any_command(monkeypatch, capsys):
    from veckm_flow_ros.cli import main
    monkeypatch.delenv('OMP_WAIT_POLICY', raising=False)
    assert main([]) == 2  # no command: help
    assert os.environ['OMP_WAIT_POLICY'] == 'PASSIVE'


def test_set_omp_wait_policy_keeps_the_users_choice(monkeypatch):
    from veckm_flow_ros.runtime import set_omp_wait_policy
    monkeypatch.setenv('OMP_WAIT_POLICY', 'ACTIVE')
    assert set_omp_wait_policy() == 'ACTIVE'
    monkeypatch.delenv('OMP_WAIT_POLICY')
    assert set_omp_wait_policy() == 'PASSIVE' == os.environ['OMP_WAIT_POLICY']


@pytest.mark.parametrize('user_value, expected', [(None, 1), ('2', 2)])
def test_limit_blas_threads_sets_numpys_openblas(user_value, expected):
    code = """
import ctypes, numpy
from veckm_flow_ros.runtime import _loaded_openblas_paths, limit_blas_threads
numpy.ones((2, 2)) @ numpy.ones((2, 2))
counts = []
for path in _loaded_openblas_paths():
    library = ctypes.CDLL(path)
    for name in ('scipy_openblas_get_num_threads64_', 'scipy_openblas_get_num_threads',
                 'openblas_get_num_threads64_', 'openblas_get_num_threads'):
        getter = getattr(library, name, None)
        if getter is not None:
            counts.append(getter)
            break
print(limit_blas_threads(1), [getter() for getter in counts])
"""
    environment = {k: v for k, v in os.environ.items()
                   if k not in ('OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS')}
    if user_value is not None:
        environment['OPENBLAS_NUM_THREADS'] = user_value  # the user's choice wins
    result = subprocess.run([sys.executable, '-c', code], env=environment, capture_output=True,
                            text=True, check=True)
    changed, counts = result.stdout.split(' ', 1)
    if changed == '0':
        pytest.skip('numpy uses no OpenBLAS here')
    assert counts.strip() == str([expected] * int(changed))
