// Copyright 2026 The veckm_flow_ros Authors
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//     http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

// The Python module veckm_flow_ros._C holds no Python functions: importing it registers the
// torch ops (torch.ops.veckm_flow.*) declared by the TORCH_LIBRARY blocks of the other files.

#include <Python.h>

#include <torch/library.h>

// The one place the op namespace is created; each op file adds its schemas with
// TORCH_LIBRARY_FRAGMENT and its kernels with TORCH_LIBRARY_IMPL.
TORCH_LIBRARY(veckm_flow, m) {}

extern "C" {
PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {
      PyModuleDef_HEAD_INIT, "_C", "veckm_flow torch ops (registered on import)", -1, nullptr};
  return PyModule_Create(&module_def);
}
}
