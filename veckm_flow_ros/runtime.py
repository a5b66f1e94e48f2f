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

"""Process-wide settings that the programs (not the library) apply before importing torch."""

import os


def set_omp_wait_policy(policy: str = 'PASSIVE') -> str:
    """
    Set OMP_WAIT_POLICY unless the user already did; return the value in force.

    OpenMP threads that spin while waiting cost 3-6x CPU time when the node's other threads
    (or other processes) share the cores. OpenMP reads the variable once, when torch is first
    imported: call this at the top of a program's main(), before anything imports torch.
    """
    return os.environ.setdefault('OMP_WAIT_POLICY', policy)
