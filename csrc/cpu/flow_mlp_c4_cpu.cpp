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
// micro-kernels shared with the dense MLP: mlp_avx2.h). x86-64 with AVX2 and FMA only.
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

#ifdef VECKM_HAVE_AVX2_KERNEL

struct C4Layer {
  std::vector<float> m0, m2, mp;  // packed panels: [C_in, C_out], [C_in, C_out], [2C_in, 2C_out]
  int64_t c_in = 0, c_out = 0, groups = 1;
};

// z = [z0 | z2 | zc | zs] (each c_in wide) of one row x; `groups` blocks of 4 planes of
// c_in / groups channels.
__attribute__((target("avx2,fma"))) inline void c4_forward(const float* x, int64_t c_in,
                                                          int64_t groups, float* z) {
  const int64_t width = c_in / groups;
  for (int64_t g = 0; g < groups; ++g) {
    const float* block = x + g * 4 * width;
    float* out = z + g * width;
    for (int64_t c = 0; c < width; c += 8) {
      const __m256 p0 = _mm256_loadu_ps(block + c), p1 = _mm256_loadu_ps(block + width + c);
      const __m256 p2 = _mm256_loadu_ps(block + 2 * width + c);
      const __m256 p3 = _mm256_loadu_ps(block + 3 * width + c);
      const __m256 even = _mm256_add_ps(p0, p2), odd = _mm256_add_ps(p1, p3);
      _mm256_storeu_ps(out + c, _mm256_add_ps(even, odd));
      _mm256_storeu_ps(out + c_in + c, _mm256_sub_ps(even, odd));
      _mm256_storeu_ps(out + 2 * c_in + c, _mm256_sub_ps(p0, p2));
      _mm256_storeu_ps(out + 3 * c_in + c, _mm256_sub_ps(p1, p3));
    }
  }
}

// Planes of one row from y = [y0 | y2 | yc | ys] (each c wide), with the ReLU.
__attribute__((target("avx2,fma"))) inline void c4_inverse_relu(const float* y, int64_t c,
                                                               float* out) {
  const __m256 zero = _mm256_setzero_ps();
  for (int64_t k = 0; k < c; k += 8) {
    const __m256 y0 = _mm256_loadu_ps(y + k), y2 = _mm256_loadu_ps(y + c + k);
    const __m256 yc = _mm256_loadu_ps(y + 2 * c + k), ys = _mm256_loadu_ps(y + 3 * c + k);
    const __m256 sum = _mm256_add_ps(y0, y2), difference = _mm256_sub_ps(y0, y2);
    _mm256_storeu_ps(out + k, _mm256_max_ps(_mm256_add_ps(sum, yc), zero));
    _mm256_storeu_ps(out + c + k, _mm256_max_ps(_mm256_add_ps(difference, ys), zero));
    _mm256_storeu_ps(out + 2 * c + k, _mm256_max_ps(_mm256_sub_ps(sum, yc), zero));
    _mm256_storeu_ps(out + 3 * c + k, _mm256_max_ps(_mm256_sub_ps(difference, ys), zero));
  }
}

// One layer on a tile of rows: in [rows, 4 c_in] planes -> out [rows, 4 c_out] planes (ReLU).
__attribute__((target("avx2,fma"))) void c4_layer(const C4Layer& layer, const float* in,
                                                  int64_t ld_in, int64_t rows, float* z,
                                                  float* y, float* out) {
  const int64_t ci = layer.c_in, co = layer.c_out;
  for (int64_t r = 0; r < rows; ++r) c4_forward(in + r * ld_in, ci, layer.groups, z + r * 4 * ci);
  relu_layer<false>(z, 4 * ci, rows, layer.m0.data(), ci, co, y, 4 * co);
  relu_layer<false>(z + ci, 4 * ci, rows, layer.m2.data(), ci, co, y + co, 4 * co);
  relu_layer<false>(z + 2 * ci, 4 * ci, rows, layer.mp.data(), 2 * ci, 2 * co, y + 2 * co,
                    4 * co);
  for (int64_t r = 0; r < rows; ++r) c4_inverse_relu(y + r * 4 * co, co, out + r * 4 * co);
}

__attribute__((target("avx2,fma"))) void flow_mlp_c4_rows(const float* features,
                                                          const C4Layer& layer1,
                                                          const C4Layer& layer2,
                                                          const float* w3_t, float flow_scale,
                                                          int64_t begin, int64_t end,
                                                          float* flow) {
  const int64_t in_size = 4 * layer1.c_in, hidden = 4 * layer1.c_out;
  const int64_t widest = std::max(in_size, hidden);
  std::vector<float> z(kTileRows * widest), y(kTileRows * hidden);
  std::vector<float> hidden1(kTileRows * hidden), hidden2(kTileRows * hidden);
  for (int64_t tile = begin; tile < end; tile += kTileRows) {
    const int64_t rows = std::min(kTileRows, end - tile);
    c4_layer(layer1, features + tile * in_size, in_size, rows, z.data(), y.data(),
             hidden1.data());
    c4_layer(layer2, hidden1.data(), hidden, rows, z.data(), y.data(), hidden2.data());
    output_layer(hidden2.data(), rows, hidden, w3_t, flow_scale, flow + tile * 2);
  }
}

#endif  // VECKM_HAVE_AVX2_KERNEL

// The blocks and layouts: ../flow_mlp_c4.cpp and C4Layer above.
at::Tensor flow_mlp_c4_cpu(const at::Tensor& features_in, at::TensorList blocks,
                           const at::Tensor& w3_in, int64_t input_groups, double flow_scale) {
  check_flow_mlp_c4_args(features_in, blocks, w3_in, input_groups);
  const auto features = features_in.contiguous();
  const int64_t m = features.size(0);
  const int64_t c_in = blocks[0].size(0), c_out = blocks[0].size(1);
  auto flow = at::empty({m, 2}, features.options());
  if (m == 0) return flow;
#ifdef VECKM_HAVE_AVX2_KERNEL
  TORCH_CHECK(cpu_has_avx2_fma(), "flow_mlp_c4 needs a CPU with AVX2 and FMA");
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
  parallel_balanced((m + kTileRows - 1) / kTileRows, 4, [&](int64_t begin, int64_t end) {
    flow_mlp_c4_rows(features_ptr, layer1, layer2, w3_t_ptr, scale, begin * kTileRows,
                     std::min(end * kTileRows, m), flow_ptr);
  });
  return flow;
#else
  TORCH_CHECK(false, "flow_mlp_c4 is built for x86-64 with AVX2 only");
#endif
}

}  // namespace
}  // namespace veckm_flow

TORCH_LIBRARY_IMPL(veckm_flow, CPU, m) {
  m.impl("flow_mlp_c4", &veckm_flow::flow_mlp_c4_cpu);
}
