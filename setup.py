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
Build the veckm_flow_ros package and its two compiled extensions.

The torch C++/CUDA extension veckm_flow_ros._C (the ops) and the egomotion estimator's plain
CPython extension veckm_flow_ros._egomotion (no torch).

A CPU-only extension is built when the installed torch has no CUDA; a CUDA one when it has, or
when FORCE_CUDA=1 (compile-only checks on a machine without GPU).
"""

import glob
import os

from setuptools import Extension, find_packages, setup
from torch.utils import cpp_extension

PACKAGE_NAME = 'veckm_flow_ros'
# Anchor on the real path: `colcon build --symlink-install` runs setup.py through a symlink.
ROOT = os.path.dirname(os.path.realpath(__file__))
CSRC = os.path.join(ROOT, 'csrc')


def _extension():
    force_cuda = os.environ.get('FORCE_CUDA', '0') == '1'
    with_cuda = force_cuda or (cpp_extension.CUDA_HOME is not None and _torch_has_cuda())
    sources = (glob.glob(os.path.join(CSRC, '*.cpp'))
               + glob.glob(os.path.join(CSRC, 'cpu', '*.cpp')))
    include_dirs = [CSRC]
    # No -std flag: torch's BuildExtension picks the C++ standard its headers need.
    cxx_flags = ['-O3', '-g0', '-fopenmp']
    extra_link_args = ['-fopenmp']
    if with_cuda:
        sources += glob.glob(os.path.join(CSRC, 'cuda', '*.cu'))
        # nvcc's local toolkit lacks cuBLAS/cuSPARSE headers; the CUDA torch wheel ships them.
        include_dirs += glob.glob(os.path.join(
            os.path.dirname(cpp_extension.__file__), '..', '..', '..', 'nvidia', 'cu*', 'include'))
        extension_class = cpp_extension.CUDAExtension
        compile_args = {'cxx': cxx_flags, 'nvcc': ['-O3']}
    else:
        extension_class = cpp_extension.CppExtension
        compile_args = {'cxx': cxx_flags}
    return extension_class(
        name=f'{PACKAGE_NAME}._C',
        # Absolute: colcon runs setup.py from its build directory, where csrc/ is not linked.
        sources=sorted(sources),
        include_dirs=include_dirs,
        extra_compile_args=compile_args,
        extra_link_args=extra_link_args,
    )


def _egomotion_extension():
    # A plain extension (buffer protocol, no torch or numpy headers): the egomotion node does
    # not import torch. Its sources live in csrc/egomotion/, outside _extension's globs.
    source_dir = os.path.join(CSRC, 'egomotion')
    return Extension(
        name=f'{PACKAGE_NAME}._egomotion',
        sources=sorted(glob.glob(os.path.join(source_dir, '*.cpp'))),
        include_dirs=[source_dir],
        language='c++',
        # no fused multiply-adds: the same roundings whatever the compiler contracts
        extra_compile_args=['-O3', '-g0', '-ffp-contract=off'],
    )


def _torch_has_cuda():
    import torch
    return torch.version.cuda is not None


setup(
    name=PACKAGE_NAME,
    version='0.1.0',
    packages=find_packages(exclude=['test']),
    ext_modules=[_extension(), _egomotion_extension()],
    cmdclass={'build_ext': cpp_extension.BuildExtension.with_options(no_python_abi_suffix=False)},
    package_data={PACKAGE_NAME: ['models/*.npz', 'models/DEFAULT', 'models/*.md', 'data/*']},
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/' + PACKAGE_NAME]),
        ('share/' + PACKAGE_NAME, ['package.xml']),
        ('share/' + PACKAGE_NAME + '/launch', glob.glob('launch/*.launch.py')),
        ('share/' + PACKAGE_NAME + '/config',
         glob.glob('config/*.yaml') + glob.glob('config/*.xml')),
    ],
    # torch and OpenCV come from the ROS install (package.xml) or a matching pip wheel; listing
    # them here would make console scripts of an apt install refuse to start (no pip metadata).
    install_requires=['setuptools', 'numpy'],
    extras_require={
        # The veckm-flow commands: bags, progress bars, plots and pictures.
        'offline': ['rosbags', 'tqdm', 'matplotlib', 'opencv-python-headless'],
    },
    zip_safe=False,
    maintainer='veckm_flow_ros maintainers',
    maintainer_email='veckm-flow-ros@example.com',
    description='Real-time per-event normal flow for event cameras (VecKM + MLP) on ROS 2.',
    license='Apache-2.0',
    entry_points={
        'console_scripts': [
            'veckm-flow = veckm_flow_ros.cli:main',
            'veckm_flow_node = veckm_flow_ros.ros:main',
            'veckm_egomotion_node = veckm_flow_ros.ros.egomotion_node:main',
        ],
    },
)
