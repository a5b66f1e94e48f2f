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

// CUDA kernel of the flow MLP op (schema and checks: ../flow_mlp.cpp): three cuBLAS GEMMs.

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../ops.h"

namespace veckm_flow {
namespace {

at::Tensor flow_mlp_cuda(const at::Tensor& features, const at::Tensor& w1, const at::Tensor& w2,
                         const at::Tensor& w3, double flow_scale) {
  check_flow_mlp_args(features, w1, w2, w3);
  TORCH_CHECK(features.is_cuda(), "features must be a CUDA tensor for the CUDA kernel");
  const c10::cuda::CUDAGuard device_guard(features.device());
  if (features.size(0) == 0) return at::empty({0, 2}, features.options());
  // ReLU fused into the GEMM epilogue (cuBLASLt) through a zero bias where torch supports it;
  // otherwise torch falls back to addmm + relu: the same result.
  const auto zero_bias = at::zeros({w1.size(1)}, features.options());
  auto hidden = at::_addmm_activation(zero_bias, features, w1);
  hidden = at::_addmm_activation(zero_bias, hidden, w2);
  auto flow = at::mm(hidden, w3);
  if (flow_scale != 1.0) flow.mul_(flow_scale);
  return flow;
}

}  // namespace
}  // namespace veckm_flow

TORCH_LIBRARY_IMPL(veckm_flow, CUDA, m) {
  m.impl("flow_mlp", &veckm_flow::flow_mlp_cuda);
}
