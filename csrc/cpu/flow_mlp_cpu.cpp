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
// in row chunks. Parallel over tiles/chunks (at::parallel_for).

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
__attribute__((target("avx2,fma"))) inline void store_relu(float* c, __m256 low, __m256 high) {
  const __m256 zero = _mm256_setzero_ps();
  _mm256_storeu_ps(c, _mm256_max_ps(low, zero));
  _mm256_storeu_ps(c + 8, _mm256_max_ps(high, zero));
}

template <int kRows>
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
  store_relu(c, c00, c01);
  if constexpr (kRows > 1) store_relu(c + ldc, c10, c11);
  if constexpr (kRows > 2) store_relu(c + 2 * ldc, c20, c21);
  if constexpr (kRows > 3) store_relu(c + 3 * ldc, c30, c31);
  if constexpr (kRows > 4) store_relu(c + 4 * ldc, c40, c41);
  if constexpr (kRows > 5) store_relu(c + 5 * ldc, c50, c51);
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

// out[0:rows, 0:n] = relu(a[0:rows, 0:k] @ b); b packed by pack_panels, n a multiple of 16.
// Column panels outermost so that each panel stays in L1 across the row blocks.
__attribute__((target("avx2,fma"))) void relu_layer(const float* a, int64_t lda, int64_t rows,
                                                    const float* packed, int64_t k_count,
                                                    int64_t n, float* out, int64_t ldo) {
  for (int64_t column = 0; column < n; column += kBlockColumns) {
    const float* b = packed + column * k_count;
    int64_t row = 0;
    for (; row + kBlockRows <= rows; row += kBlockRows) {
      relu_block<6>(a + row * lda, lda, b, kBlockColumns, k_count, out + row * ldo + column,
                    ldo);
    }
    const float* a_rest = a + row * lda;
    float* out_rest = out + row * ldo + column;
    switch (rows - row) {
      case 5: relu_block<5>(a_rest, lda, b, kBlockColumns, k_count, out_rest, ldo); break;
      case 4: relu_block<4>(a_rest, lda, b, kBlockColumns, k_count, out_rest, ldo); break;
      case 3: relu_block<3>(a_rest, lda, b, kBlockColumns, k_count, out_rest, ldo); break;
      case 2: relu_block<2>(a_rest, lda, b, kBlockColumns, k_count, out_rest, ldo); break;
      case 1: relu_block<1>(a_rest, lda, b, kBlockColumns, k_count, out_rest, ldo); break;
      default: break;
    }
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
    for (int64_t r = 0; r < rows; ++r) {
      const float* h = hidden2.data() + r * hidden;
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
      flow[(tile + r) * 2] = _mm_cvtss_f32(totals) * flow_scale;
      flow[(tile + r) * 2 + 1] = _mm_cvtss_f32(_mm_shuffle_ps(totals, totals, 1)) * flow_scale;
    }
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
    at::parallel_for(0, (m + kTileRows - 1) / kTileRows, 16, [&](int64_t begin, int64_t end) {
      flow_mlp_rows(features_ptr, in_size, w1_ptr, w2_ptr, w3_t_ptr, hidden, scale,
                    begin * kTileRows, std::min(end * kTileRows, m), flow_ptr);
    });
    return flow;
  }
#endif
  flow_mlp_blas(features, w1, w2, w3, flow_scale, flow);
  return flow;
}

}  // namespace
}  // namespace veckm_flow

TORCH_LIBRARY_IMPL(veckm_flow, CPU, m) {
  m.impl("flow_mlp", &veckm_flow::flow_mlp_cpu);
}
