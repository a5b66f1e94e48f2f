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

// CPU kernel of the C4-equivariant flow MLP op (schema and checks: ../flow_mlp_c4.cpp;
// micro-kernels and drivers shared with the dense MLP: mlp_portable.h, mlp_avx2.h). AVX2 + FMA
// micro-kernels on x86-64 CPUs that have them, portable ones elsewhere (AArch64: NEON).
//
// A layer that commutes with rotations by 90 degrees maps each Fourier component of the
// group C4 (per channel: z0 = p0+p1+p2+p3, z2 = p0-p1+p2-p3, zc = p0-p2, zs = p1-p3 over the
// four group elements' planes p_h) to the same component only: z0 -> y0 and z2 -> y2 by C x C
// matrices, (zc, zs) -> (yc, ys) by a 2C x 2C one. That is 6 C^2 multiply-adds instead of
// the dense layer's 16 C^2. Activations are stored element-major: plane h (C channels) at
// h * C; the input has `groups` such blocks of 4 planes (Re f, Im f). The inverse transform
// (with the 1/4 and 1/2 folded into the matrices) is followed by the ReLU.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "../ops.h"
#include "mlp_avx2.h"
#include "parallel.h"

namespace veckm_flow {
namespace {

struct C4Layer {
  std::vector<float> m0, m2, mp;  // packed panels: [C_in, C_out], [C_in, C_out], [2C_in, 2C_out]
  int64_t c_in = 0, c_out = 0, groups = 1;
};

// One layer on a tile of rows: in [rows, 4 c_in] planes -> out [rows, 4 c_out] planes (ReLU).
template <class K>
void c4_layer(const C4Layer& layer, const float* in, int64_t ld_in, int64_t rows, float* z,
              float* y, float* out) {
  const int64_t ci = layer.c_in, co = layer.c_out;
  for (int64_t r = 0; r < rows; ++r) {
    K::c4_forward(in + r * ld_in, ci, layer.groups, z + r * 4 * ci);
  }
  relu_layer<K, false>(z, 4 * ci, rows, layer.m0.data(), ci, co, y, 4 * co);
  relu_layer<K, false>(z + ci, 4 * ci, rows, layer.m2.data(), ci, co, y + co, 4 * co);
  relu_layer<K, false>(z + 2 * ci, 4 * ci, rows, layer.mp.data(), 2 * ci, 2 * co, y + 2 * co,
                       4 * co);
  for (int64_t r = 0; r < rows; ++r) K::c4_inverse_relu(y + r * 4 * co, co, out + r * 4 * co);
}

template <class K>
void flow_mlp_c4_rows(const float* features, const C4Layer& layer1, const C4Layer& layer2,
                      const float* w3_t, float flow_scale, int64_t begin, int64_t end,
                      float* flow) {
  const int64_t in_size = 4 * layer1.c_in, hidden = 4 * layer1.c_out;
  const int64_t widest = std::max(in_size, hidden);
  std::vector<float> z(kTileRows * widest), y(kTileRows * hidden);
  std::vector<float> hidden1(kTileRows * hidden), hidden2(kTileRows * hidden);
  for (int64_t tile = begin; tile < end; tile += kTileRows) {
    const int64_t rows = std::min(kTileRows, end - tile);
    c4_layer<K>(layer1, features + tile * in_size, in_size, rows, z.data(), y.data(),
                hidden1.data());
    c4_layer<K>(layer2, hidden1.data(), hidden, rows, z.data(), y.data(), hidden2.data());
    K::output_layer(hidden2.data(), rows, hidden, w3_t, flow_scale, flow + tile * 2);
  }
}

// The blocks and layouts: ../flow_mlp_c4.cpp and C4Layer above.
at::Tensor flow_mlp_c4_cpu(const at::Tensor& features_in, at::TensorList blocks,
                           const at::Tensor& w3_in, int64_t input_groups, double flow_scale) {
  check_flow_mlp_c4_args(features_in, blocks, w3_in, input_groups);
  const auto features = features_in.contiguous();
  const int64_t m = features.size(0);
  const int64_t c_in = blocks[0].size(0), c_out = blocks[0].size(1);
  auto flow = at::empty({m, 2}, features.options());
  if (m == 0) return flow;
  auto pack = [](const at::Tensor& block) {
    const auto dense = block.contiguous();
    return pack_panels(dense.data_ptr<float>(), dense.size(0), dense.size(1));
  };
  C4Layer layer1{pack(blocks[0]), pack(blocks[1]), pack(blocks[2]), c_in, c_out, input_groups};
  C4Layer layer2{pack(blocks[3]), pack(blocks[4]), pack(blocks[5]), c_out, c_out, 1};
  const auto w3_t = w3_in.t().contiguous();
  const float* features_ptr = features.data_ptr<float>();
  const float* w3_t_ptr = w3_t.data_ptr<float>();
  float* flow_ptr = flow.data_ptr<float>();
  const auto scale = static_cast<float>(flow_scale);
  with_mlp_kernels([&](auto kernels) {
    using Kernels = decltype(kernels);
    parallel_balanced((m + kTileRows - 1) / kTileRows, 4, [&](int64_t begin, int64_t end) {
      flow_mlp_c4_rows<Kernels>(features_ptr, layer1, layer2, w3_t_ptr, scale,
                                begin * kTileRows, std::min(end * kTileRows, m), flow_ptr);
    });
  });
  return flow;
}

}  // namespace
}  // namespace veckm_flow

TORCH_LIBRARY_IMPL(veckm_flow, CPU, m) {
  m.impl("flow_mlp_c4", &veckm_flow::flow_mlp_c4_cpu);
}
