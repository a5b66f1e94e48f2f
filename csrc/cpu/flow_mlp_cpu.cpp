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

// CPU kernel of the flow MLP op (schema and checks: ../veckm_encode.cpp):
//   flow = relu(relu(features @ w1) @ w2) @ w3 * flow_scale.
//
// On x86-64 CPUs with AVX2 and FMA (checked at run time) a fused kernel runs the three layers
// on tiles of 24 rows whose activations stay in L1: each hidden layer is a register-blocked
// 6 x 16 micro-kernel (12 accumulators, weights streamed from L2), ReLU fused at the store.
// Elsewhere, or for hidden sizes that are not a multiple of 16, the layers go to ATen's BLAS
// in row chunks. Parallel over tiles (a few parts per thread, taken dynamically: parallel.h)
// or chunks (at::parallel_for).

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define VECKM_HAVE_AVX2_KERNEL 1
#endif

#include "parallel.h"
#include "veckm_encode.h"

namespace veckm_flow {
namespace {

// The layers through ATen's BLAS, in row chunks that stay in cache, one chunk per task (a
// single parallel region: no BLAS-level barriers per small product).
void flow_mlp_blas(const at::Tensor& features, const at::Tensor& w1, const at::Tensor& w2,
                   const at::Tensor& w3, double flow_scale, at::Tensor& flow) {
  const int64_t m = features.size(0);
  const int64_t hidden = w1.size(1);
  constexpr int64_t kChunk = 512;
  at::parallel_for(0, (m + kChunk - 1) / kChunk, 1, [&](int64_t chunk_begin, int64_t chunk_end) {
    auto hidden1 = at::empty({kChunk, hidden}, features.options());
    auto hidden2 = at::empty({kChunk, hidden}, features.options());
    for (int64_t chunk = chunk_begin; chunk < chunk_end; ++chunk) {
      const int64_t begin = chunk * kChunk;
      const int64_t rows = std::min(kChunk, m - begin);
      auto h1 = hidden1.narrow(0, 0, rows);
      auto h2 = hidden2.narrow(0, 0, rows);
      at::mm_out(h1, features.narrow(0, begin, rows), w1);
      h1.relu_();
      at::mm_out(h2, h1, w2);
      h2.relu_();
      auto out = flow.narrow(0, begin, rows);
      at::mm_out(out, h2, w3);
      if (flow_scale != 1.0) out.mul_(flow_scale);
    }
  });
}

#ifdef VECKM_HAVE_AVX2_KERNEL

constexpr int64_t kTileRows = 24;  // 4 micro-tiles of 6 rows
constexpr int64_t kBlockRows = 6;
constexpr int64_t kBlockColumns = 16;

// c[0:rows, 0:16] = relu(a[0:rows, 0:k] @ b[0:k, 0:16]); rows <= 6. The 12 accumulators are
// named variables (an array of __m256 is spilled to the stack by GCC on every iteration).
template <bool kRelu>
__attribute__((target("avx2,fma"))) inline void store_relu(float* c, __m256 low, __m256 high) {
  if constexpr (kRelu) {
    const __m256 zero = _mm256_setzero_ps();
    low = _mm256_max_ps(low, zero);
    high = _mm256_max_ps(high, zero);
  }
  _mm256_storeu_ps(c, low);
  _mm256_storeu_ps(c + 8, high);
}

template <int kRows, bool kRelu = true>
__attribute__((target("avx2,fma"))) inline void relu_block(const float* a, int64_t lda,
                                                          const float* b, int64_t ldb,
                                                          int64_t k_count, float* c,
                                                          int64_t ldc) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int64_t k = 0; k < k_count; ++k) {
    const __m256 b0 = _mm256_loadu_ps(b + k * ldb);
    const __m256 b1 = _mm256_loadu_ps(b + k * ldb + 8);
    __m256 value = _mm256_broadcast_ss(a + k);
    c00 = _mm256_fmadd_ps(value, b0, c00);
    c01 = _mm256_fmadd_ps(value, b1, c01);
    if constexpr (kRows > 1) {
      value = _mm256_broadcast_ss(a + lda + k);
      c10 = _mm256_fmadd_ps(value, b0, c10);
      c11 = _mm256_fmadd_ps(value, b1, c11);
    }
    if constexpr (kRows > 2) {
      value = _mm256_broadcast_ss(a + 2 * lda + k);
      c20 = _mm256_fmadd_ps(value, b0, c20);
      c21 = _mm256_fmadd_ps(value, b1, c21);
    }
    if constexpr (kRows > 3) {
      value = _mm256_broadcast_ss(a + 3 * lda + k);
      c30 = _mm256_fmadd_ps(value, b0, c30);
      c31 = _mm256_fmadd_ps(value, b1, c31);
    }
    if constexpr (kRows > 4) {
      value = _mm256_broadcast_ss(a + 4 * lda + k);
      c40 = _mm256_fmadd_ps(value, b0, c40);
      c41 = _mm256_fmadd_ps(value, b1, c41);
    }
    if constexpr (kRows > 5) {
      value = _mm256_broadcast_ss(a + 5 * lda + k);
      c50 = _mm256_fmadd_ps(value, b0, c50);
      c51 = _mm256_fmadd_ps(value, b1, c51);
    }
  }
  store_relu<kRelu>(c, c00, c01);
  if constexpr (kRows > 1) store_relu<kRelu>(c + ldc, c10, c11);
  if constexpr (kRows > 2) store_relu<kRelu>(c + 2 * ldc, c20, c21);
  if constexpr (kRows > 3) store_relu<kRelu>(c + 3 * ldc, c30, c31);
  if constexpr (kRows > 4) store_relu<kRelu>(c + 4 * ldc, c40, c41);
  if constexpr (kRows > 5) store_relu<kRelu>(c + 5 * ldc, c50, c51);
}

// Weights (k, n) repacked as n / 16 contiguous panels of (k, 16): a panel is read with unit
// stride (row-major rows 512 B apart would map a whole panel onto a few L1 sets).
std::vector<float> pack_panels(const float* weights, int64_t k_count, int64_t n) {
  std::vector<float> packed(k_count * n);
  for (int64_t panel = 0; panel < n / kBlockColumns; ++panel) {
    for (int64_t k = 0; k < k_count; ++k) {
      std::copy(weights + k * n + panel * kBlockColumns,
                weights + k * n + (panel + 1) * kBlockColumns,
                packed.data() + (panel * k_count + k) * kBlockColumns);
    }
  }
  return packed;
}

// out[0:rows, 0:n] = relu(a[0:rows, 0:k] @ b) (or without the ReLU); b packed by pack_panels,
// n a multiple of 16. Column panels outermost so each panel stays in L1 across the row blocks.
template <bool kRelu = true>
__attribute__((target("avx2,fma"))) void relu_layer(const float* a, int64_t lda, int64_t rows,
                                                    const float* packed, int64_t k_count,
                                                    int64_t n, float* out, int64_t ldo) {
  for (int64_t column = 0; column < n; column += kBlockColumns) {
    const float* b = packed + column * k_count;
    int64_t row = 0;
    for (; row + kBlockRows <= rows; row += kBlockRows) {
      relu_block<6, kRelu>(a + row * lda, lda, b, kBlockColumns, k_count,
                           out + row * ldo + column, ldo);
    }
    const float* a_rest = a + row * lda;
    float* out_rest = out + row * ldo + column;
    switch (rows - row) {
      case 5: relu_block<5, kRelu>(a_rest, lda, b, kBlockColumns, k_count, out_rest, ldo); break;
      case 4: relu_block<4, kRelu>(a_rest, lda, b, kBlockColumns, k_count, out_rest, ldo); break;
      case 3: relu_block<3, kRelu>(a_rest, lda, b, kBlockColumns, k_count, out_rest, ldo); break;
      case 2: relu_block<2, kRelu>(a_rest, lda, b, kBlockColumns, k_count, out_rest, ldo); break;
      case 1: relu_block<1, kRelu>(a_rest, lda, b, kBlockColumns, k_count, out_rest, ldo); break;
      default: break;
    }
  }
}

// The last layer on a tile: flow[r] = (h[r] . w3_t[0], h[r] . w3_t[1]) * flow_scale, two dots
// per row (w3_t is w3 transposed, (2, H)).
__attribute__((target("avx2,fma"))) inline void output_layer(const float* hidden_rows,
                                                            int64_t rows, int64_t hidden,
                                                            const float* w3_t,
                                                            float flow_scale, float* flow) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* h = hidden_rows + r * hidden;
    __m256 sum_u = _mm256_setzero_ps(), sum_v = _mm256_setzero_ps();
    for (int64_t k = 0; k < hidden; k += 8) {
      const __m256 value = _mm256_loadu_ps(h + k);
      sum_u = _mm256_fmadd_ps(value, _mm256_loadu_ps(w3_t + k), sum_u);
      sum_v = _mm256_fmadd_ps(value, _mm256_loadu_ps(w3_t + hidden + k), sum_v);
    }
    // Horizontal sums of both accumulators at once.
    const __m256 pair = _mm256_hadd_ps(sum_u, sum_v);  // u0+u1 u2+u3 v0+v1 v2+v3 | ...
    const __m128 halves = _mm_add_ps(_mm256_castps256_ps128(pair),
                                     _mm256_extractf128_ps(pair, 1));
    const __m128 totals = _mm_hadd_ps(halves, halves);  // u v u v
    flow[r * 2] = _mm_cvtss_f32(totals) * flow_scale;
    flow[r * 2 + 1] = _mm_cvtss_f32(_mm_shuffle_ps(totals, totals, 1)) * flow_scale;
  }
}

// Rows [begin, end) of the MLP; w1, w2 packed by pack_panels; w3_t is w3 transposed (2, H) so the last layer is two dots.
__attribute__((target("avx2,fma"))) void flow_mlp_rows(const float* features, int64_t in_size,
                                                       const float* w1, const float* w2,
                                                       const float* w3_t, int64_t hidden,
                                                       float flow_scale, int64_t begin,
                                                       int64_t end, float* flow) {
  std::vector<float> hidden1(kTileRows * hidden), hidden2(kTileRows * hidden);
  for (int64_t tile = begin; tile < end; tile += kTileRows) {
    const int64_t rows = std::min(kTileRows, end - tile);
    relu_layer(features + tile * in_size, in_size, rows, w1, in_size, hidden, hidden1.data(),
               hidden);
    relu_layer(hidden1.data(), hidden, rows, w2, hidden, hidden, hidden2.data(), hidden);
    output_layer(hidden2.data(), rows, hidden, w3_t, flow_scale, flow + tile * 2);
  }
}

// ---- C4-equivariant MLP in the group's Fourier basis ---------------------------------------
//
// A layer that commutes with rotations by 90 degrees maps each Fourier component of the
// group C4 (per channel: z0 = p0+p1+p2+p3, z2 = p0-p1+p2-p3, zc = p0-p2, zs = p1-p3 over the
// four group elements' planes p_h) to the same component only: z0 -> y0 and z2 -> y2 by C x C
// matrices, (zc, zs) -> (yc, ys) by a 2C x 2C one. That is 6 C^2 multiply-adds instead of
// the dense layer's 16 C^2. Activations are stored element-major: plane h (C channels) at
// h * C; the input has `groups` such blocks of 4 planes (Re f, Im f). The inverse transform
// (with the 1/4 and 1/2 folded into the matrices) is followed by the ReLU.

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

bool cpu_has_avx2_fma() {
  static const bool supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return supported;
}

#endif  // VECKM_HAVE_AVX2_KERNEL

// VECKM_FLOW_MLP=blas forces the BLAS path (for benchmarks and tests of the fallback).
bool fused_kernel_disabled() {
  static const bool disabled = [] {
    const char* value = std::getenv("VECKM_FLOW_MLP");
    return value != nullptr && std::string(value) == "blas";
  }();
  return disabled;
}

at::Tensor flow_mlp_cpu(const at::Tensor& features_in, const at::Tensor& w1_in,
                        const at::Tensor& w2_in, const at::Tensor& w3_in, double flow_scale) {
  check_flow_mlp_args(features_in, w1_in, w2_in, w3_in);
  TORCH_CHECK(features_in.device().is_cpu(), "features must be a CPU tensor for the CPU kernel");
  const auto features = features_in.contiguous();
  const auto w1 = w1_in.contiguous();
  const auto w2 = w2_in.contiguous();
  const auto w3 = w3_in.contiguous();
  const int64_t m = features.size(0);
  const int64_t hidden = w1.size(1);
  auto flow = at::empty({m, 2}, features.options());
  if (m == 0) return flow;
#ifdef VECKM_HAVE_AVX2_KERNEL
  if (hidden % kBlockColumns == 0 && cpu_has_avx2_fma() && !fused_kernel_disabled()) {
    const auto w3_t = w3.t().contiguous();
    const int64_t in_size = features.size(1);
    const float* features_ptr = features.data_ptr<float>();
    const std::vector<float> w1_packed = pack_panels(w1.data_ptr<float>(), in_size, hidden);
    const std::vector<float> w2_packed = pack_panels(w2.data_ptr<float>(), hidden, hidden);
    const float* w1_ptr = w1_packed.data();
    const float* w2_ptr = w2_packed.data();
    const float* w3_t_ptr = w3_t.data_ptr<float>();
    float* flow_ptr = flow.data_ptr<float>();
    const auto scale = static_cast<float>(flow_scale);
    // Grain: whole tiles, enough rows per task to amortise the per-task scratch.
    parallel_balanced((m + kTileRows - 1) / kTileRows, 4, [&](int64_t begin, int64_t end) {
      flow_mlp_rows(features_ptr, in_size, w1_ptr, w2_ptr, w3_t_ptr, hidden, scale,
                    begin * kTileRows, std::min(end * kTileRows, m), flow_ptr);
    });
    return flow;
  }
#endif
  flow_mlp_blas(features, w1, w2, w3, flow_scale, flow);
  return flow;
}

// flow_mlp_c4: the same MLP given as Fourier blocks (see C4Layer); blocks = [m1_0, m1_2,
// m1_pair, m2_0, m2_2, m2_pair]; features [M, 4 C_in] element-major in `input_groups` blocks;
// w3 [4 C_out, 2] on the element-major hidden planes.
at::Tensor flow_mlp_c4_cpu(const at::Tensor& features_in, at::TensorList blocks,
                           const at::Tensor& w3_in, int64_t input_groups, double flow_scale) {
  TORCH_CHECK(features_in.device().is_cpu() && features_in.scalar_type() == at::kFloat &&
                  features_in.dim() == 2,
              "flow_mlp_c4: features must be a float32 CPU matrix, got ",
              features_in.scalar_type(), " ", features_in.sizes());
  TORCH_CHECK(blocks.size() == 6, "flow_mlp_c4: expected 6 blocks, got ", blocks.size());
  const auto features = features_in.contiguous();
  const int64_t m = features.size(0);
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
                      "flow_mlp_c4: block ", 3 * layer + k, " must be float32 (",
                      factor * ci, ", ", factor * c_out, "), got ", block.sizes());
    }
  }
  TORCH_CHECK(w3_in.dim() == 2 && w3_in.size(0) == 4 * c_out && w3_in.size(1) == 2 &&
                  w3_in.scalar_type() == at::kFloat,
              "flow_mlp_c4: w3 must be float32 (", 4 * c_out, ", 2), got ", w3_in.sizes());
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

TORCH_LIBRARY_FRAGMENT(veckm_flow, m) {
  m.def("flow_mlp_c4(Tensor features, Tensor[] blocks, Tensor w3, int input_groups, "
        "float flow_scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(veckm_flow, CPU, m) {
  m.impl("flow_mlp", &veckm_flow::flow_mlp_cpu);
  m.impl("flow_mlp_c4", &veckm_flow::flow_mlp_c4_cpu);
}
