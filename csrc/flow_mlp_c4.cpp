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

// flow_mlp_c4: the flow MLP of a C4-equivariant model given as Fourier blocks (the same
// flows as the dense weights, with 6/16 of the multiply-adds; see cpu/flow_mlp_c4_cpu.cpp).
// blocks = [m1_0, m1_2, m1_pair, m2_0, m2_2, m2_pair]; features [M, 4 C_in] element-major in
// `input_groups` blocks; w3 [4 C_out, 2] on the element-major hidden planes. CPU only (x86-64
// with AVX2 and FMA).

#include <ATen/ATen.h>

#include "ops.h"

namespace veckm_flow {

const char kFlowMlpC4Schema[] =
    "flow_mlp_c4(Tensor features, Tensor[] blocks, Tensor w3, int input_groups, "
    "float flow_scale) -> Tensor";

void check_flow_mlp_c4_args(const at::Tensor& features, at::TensorList blocks,
                            const at::Tensor& w3, int64_t input_groups) {
  TORCH_CHECK(features.device().is_cpu() && features.scalar_type() == at::kFloat &&
                  features.dim() == 2,
              "flow_mlp_c4: features must be a float32 CPU matrix, got ",
              features.scalar_type(), " ", features.sizes());
  TORCH_CHECK(blocks.size() == 6, "flow_mlp_c4: expected 6 blocks, got ", blocks.size());
  const int64_t c_in = blocks[0].size(0), c_out = blocks[0].size(1);
  TORCH_CHECK(input_groups >= 1 && c_in % (8 * input_groups) == 0 && c_out % 16 == 0 &&
                  features.size(1) == 4 * c_in,
              "flow_mlp_c4: features (", features.size(1), " columns) do not fit blocks of ",
              c_in, " x ", c_out, " in ", input_groups, " group(s)");
  for (int layer = 0; layer < 2; ++layer) {
    const int64_t ci = layer == 0 ? c_in : c_out;
    for (int k = 0; k < 3; ++k) {
      const auto& block = blocks[3 * layer + k];
      const int64_t factor = k == 2 ? 2 : 1;
      TORCH_CHECK(block.device().is_cpu() && block.scalar_type() == at::kFloat &&
                      block.dim() == 2 && block.size(0) == factor * ci &&
                      block.size(1) == factor * c_out,
                  "flow_mlp_c4: block ", 3 * layer + k, " must be float32 (", factor * ci,
                  ", ", factor * c_out, "), got ", block.sizes());
    }
  }
  TORCH_CHECK(w3.dim() == 2 && w3.size(0) == 4 * c_out && w3.size(1) == 2 &&
                  w3.scalar_type() == at::kFloat,
              "flow_mlp_c4: w3 must be float32 (", 4 * c_out, ", 2), got ", w3.sizes());
}

}  // namespace veckm_flow
