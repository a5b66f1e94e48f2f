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

// The op library veckm_flow: every schema, declared here once (the schemas themselves and
// their argument checks are in csrc/<op>.cpp; the kernels register with TORCH_LIBRARY_IMPL in
// csrc/cpu/<op>_cpu.cpp and csrc/cuda/<op>_cuda.cu). The Python module veckm_flow_ros._C holds
// no Python functions: importing it registers torch.ops.veckm_flow.*, which
// veckm_flow_ros/ops.py wraps.

#include <Python.h>

#include <torch/library.h>

#include "ops.h"

TORCH_LIBRARY(veckm_flow, m) {
  // VecKM encoding of target events: the fast kernels and the paper's Algorithm 1 (baseline).
  m.def(veckm_flow::kEncodeSchema);
  m.def(veckm_flow::kEncodeNaiveSchema);
  // The flow MLP: dense, and C4-equivariant in its Fourier form.
  m.def(veckm_flow::kFlowMlpSchema);
  m.def(veckm_flow::kFlowMlpC4Schema);
  // event_camera_msgs/EventPacket decoders (CPU only: sequential state machines).
  m.def(veckm_flow::kDecodeEvt3Schema);
  m.def(veckm_flow::kDecodeLibcaerCmpSchema);
  m.def(veckm_flow::kDecodeLibcaerSchema);
  m.def(veckm_flow::kDecodeMonoSchema);
  m.def(veckm_flow::kDecodeTriggerSchema);
}

extern "C" {
PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {
      PyModuleDef_HEAD_INIT, "_C", "veckm_flow torch ops (registered on import)", -1, nullptr};
  return PyModule_Create(&module_def);
}
}
