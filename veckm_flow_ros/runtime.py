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

"""Process-wide settings that the programs (not the library) apply: OpenMP, numpy's BLAS."""

import os


def set_omp_wait_policy(policy: str = 'PASSIVE') -> str:
    """
    Set OMP_WAIT_POLICY unless the user already did; return the value in force.

    OpenMP threads that spin while waiting cost 3-6x CPU time when the node's other threads
    (or other processes) share the cores. OpenMP reads the variable once, when torch is first
    imported: call this at the top of a program's main(), before anything imports torch.
    """
    return os.environ.setdefault('OMP_WAIT_POLICY', policy)


# Setters of the OpenBLAS builds numpy ships or links: the scipy-openblas wheels (64- and
# 32-bit integers) and a system OpenBLAS.
_OPENBLAS_SETTERS = ('scipy_openblas_set_num_threads64_', 'scipy_openblas_set_num_threads',
                     'openblas_set_num_threads64_', 'openblas_set_num_threads')


def _loaded_openblas_paths():
    """Paths of the OpenBLAS libraries mapped into this process (Linux /proc; else [])."""
    try:
        with open('/proc/self/maps') as maps:
            fields = [line.split(None, 5) for line in maps]
    except OSError:
        return []
    paths = {parts[5].strip() for parts in fields if len(parts) == 6}
    return sorted(path for path in paths
                  if 'openblas' in os.path.basename(path).lower() and '.so' in path)


def limit_blas_threads(count: int = 1) -> int:
    """
    Use `count` threads in numpy's OpenBLAS from now on; return how many libraries were set.

    numpy's OpenBLAS splits a matrix product of a few hundred rows over every core, and its
    worker threads then spin between calls: in the egomotion node (a product per search step,
    ~30 windows/s) the spinning took 30-50 % of a core and made each estimate slower. The
    small products of the estimator gain nothing from more threads. Process-wide: call it
    from a program's main(), not from library code. A user's OPENBLAS_NUM_THREADS wins over
    `count`; else it is set to `count` (for an OpenBLAS loaded later). The set_num_threads of
    each OpenBLAS already loaded is called; 0 when none is (numpy built with another BLAS:
    set that BLAS's variable instead).
    """
    import ctypes
    try:
        count = int(os.environ.setdefault('OPENBLAS_NUM_THREADS', str(int(count))))
    except ValueError:
        pass  # not a number: OpenBLAS ignores it too
    changed = 0
    for path in _loaded_openblas_paths():
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        for name in _OPENBLAS_SETTERS:
            setter = getattr(library, name, None)
            if setter is not None:
                setter.argtypes, setter.restype = [ctypes.c_int], None
                setter(int(count))
                changed += 1
                break
    return changed
