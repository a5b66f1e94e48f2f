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

// The AVX2 + FMA building blocks of the CPU MLP kernels (flow_mlp_cpu.cpp, flow_mlp_c4_cpu.cpp):
// register-blocked 6 x 16 micro-kernels with the ReLU fused at the store, weights packed in
// column panels, and the two-output last layer. Compiled only on x86-64 (VECKM_HAVE_AVX2_KERNEL);
// callers check cpu_has_avx2_fma() at run time.

#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define VECKM_HAVE_AVX2_KERNEL 1
#endif

#ifdef VECKM_HAVE_AVX2_KERNEL

namespace veckm_flow {

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
inline std::vector<float> pack_panels(const float* weights, int64_t k_count, int64_t n) {
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
__attribute__((target("avx2,fma"))) inline void relu_layer(const float* a, int64_t lda, int64_t rows,
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

inline bool cpu_has_avx2_fma() {
  static const bool supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return supported;
}

}  // namespace veckm_flow

#endif  // VECKM_HAVE_AVX2_KERNEL
