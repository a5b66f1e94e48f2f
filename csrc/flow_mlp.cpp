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

// flow_mlp: flow = relu(relu(features @ w1) @ w2) @ w3 * flow_scale, float32 [M, 2]
// (kernels: cpu/flow_mlp_cpu.cpp, cuda/flow_mlp_cuda.cu).

#include <ATen/ATen.h>

#include "ops.h"

namespace veckm_flow {

const char kFlowMlpSchema[] =
    "flow_mlp(Tensor features, Tensor w1, Tensor w2, Tensor w3, float flow_scale) -> Tensor";

namespace {

void check_float(const at::Tensor& tensor, const char* name, const at::Tensor& features) {
  TORCH_CHECK(tensor.scalar_type() == at::kFloat, name, " must be float32, got ",
              tensor.scalar_type());
  check_same_device(tensor, name, features, "features");
}

}  // namespace

void check_flow_mlp_args(const at::Tensor& features, const at::Tensor& w1, const at::Tensor& w2,
                         const at::Tensor& w3) {
  TORCH_CHECK(features.dim() == 2, "features must be (M, 2D), got shape ", features.sizes());
  check_float(features, "features", features);
  check_float(w1, "w1", features);
  check_float(w2, "w2", features);
  check_float(w3, "w3", features);
  TORCH_CHECK(w1.dim() == 2 && w1.size(0) == features.size(1),
              "w1 must be (2D, H) with 2D = features.size(1) = ", features.size(1), ", got ",
              w1.sizes());
  TORCH_CHECK(w2.dim() == 2 && w2.size(0) == w1.size(1) && w2.size(1) == w1.size(1),
              "w2 must be (H, H) with H = w1.size(1) = ", w1.size(1), ", got ", w2.sizes());
  TORCH_CHECK(w3.dim() == 2 && w3.size(0) == w1.size(1) && w3.size(1) == 2,
              "w3 must be (H, 2) with H = ", w1.size(1), ", got ", w3.sizes());
}

}  // namespace veckm_flow
