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

// The x86-64 AVX2 + FMA micro-kernels of the CPU MLPs (Avx2Mlp: the interface and the drivers
// they plug into are in mlp_portable.h): register-blocked 6 x 16 blocks with the ReLU fused at
// the store, the two-output last layer, the C4 transforms of a row. Compiled only on x86-64
// (VECKM_HAVE_AVX2_KERNEL); callers check cpu_has_avx2_fma() at run time.

#pragma once

#include <cstdint>

#include "mlp_portable.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define VECKM_HAVE_AVX2_KERNEL 1
#endif

#ifdef VECKM_HAVE_AVX2_KERNEL

namespace veckm_flow {

#define VECKM_AVX2 __attribute__((target("avx2,fma")))

struct Avx2Mlp {
  static constexpr int kBlockRows = 6;

  // Row kRow of a block of kRows (a no-op beyond it): two multiply-adds of 8 columns.
  template <int kRow, int kRows>
  VECKM_AVX2 static inline void multiply_add(const float* a, int64_t lda, int64_t k, __m256 b0,
                                             __m256 b1, __m256& c0, __m256& c1) {
    if constexpr (kRow < kRows) {
      const __m256 value = _mm256_broadcast_ss(a + kRow * lda + k);
      c0 = _mm256_fmadd_ps(value, b0, c0);
      c1 = _mm256_fmadd_ps(value, b1, c1);
    }
  }

  template <int kRow, int kRows, bool kRelu>
  VECKM_AVX2 static inline void store(float* c, int64_t ldc, __m256 low, __m256 high) {
    if constexpr (kRow < kRows) {
      if constexpr (kRelu) {
        const __m256 zero = _mm256_setzero_ps();
        low = _mm256_max_ps(low, zero);
        high = _mm256_max_ps(high, zero);
      }
      _mm256_storeu_ps(c + kRow * ldc, low);
      _mm256_storeu_ps(c + kRow * ldc + 8, high);
    }
  }

  // c[0:rows, 0:16] = relu(a[0:rows, 0:k] @ b[0:k, 0:16]); rows <= 6. The 12 accumulators
  // are named variables (an array of __m256 is spilled to the stack by GCC on every
  // iteration).
  template <int kRows, bool kRelu>
  VECKM_AVX2 static void block(const float* a, int64_t lda, const float* b, int64_t k_count,
                               float* c, int64_t ldc) {
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    for (int64_t k = 0; k < k_count; ++k) {
      const __m256 b0 = _mm256_loadu_ps(b + k * kBlockColumns);
      const __m256 b1 = _mm256_loadu_ps(b + k * kBlockColumns + 8);
      multiply_add<0, kRows>(a, lda, k, b0, b1, c00, c01);
      multiply_add<1, kRows>(a, lda, k, b0, b1, c10, c11);
      multiply_add<2, kRows>(a, lda, k, b0, b1, c20, c21);
      multiply_add<3, kRows>(a, lda, k, b0, b1, c30, c31);
      multiply_add<4, kRows>(a, lda, k, b0, b1, c40, c41);
      multiply_add<5, kRows>(a, lda, k, b0, b1, c50, c51);
    }
    store<0, kRows, kRelu>(c, ldc, c00, c01);
    store<1, kRows, kRelu>(c, ldc, c10, c11);
    store<2, kRows, kRelu>(c, ldc, c20, c21);
    store<3, kRows, kRelu>(c, ldc, c30, c31);
    store<4, kRows, kRelu>(c, ldc, c40, c41);
    store<5, kRows, kRelu>(c, ldc, c50, c51);
  }

  // Two dots per row (w3_t is w3 transposed, (2, H)).
  VECKM_AVX2 static void output_layer(const float* hidden_rows, int64_t rows, int64_t hidden,
                                      const float* w3_t, float flow_scale, float* flow) {
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

  // z = [z0 | z2 | zc | zs] (each c_in wide) of one row x; `groups` blocks of 4 planes of
  // c_in / groups channels.
  VECKM_AVX2 static void c4_forward(const float* x, int64_t c_in, int64_t groups, float* z) {
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
  VECKM_AVX2 static void c4_inverse_relu(const float* y, int64_t c, float* out) {
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
};

#undef VECKM_AVX2

inline bool cpu_has_avx2_fma() {
  static const bool supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return supported;
}

}  // namespace veckm_flow

#endif  // VECKM_HAVE_AVX2_KERNEL

namespace veckm_flow {

// Calls run(kernels) with the micro-kernels for this CPU: Avx2Mlp on x86-64 with AVX2 and FMA
// (unless VECKM_CPU_KERNELS=portable), PortableMlp elsewhere.
template <class Run>
void with_mlp_kernels(Run&& run) {
#ifdef VECKM_HAVE_AVX2_KERNEL
  if (cpu_has_avx2_fma() && !portable_kernels_forced()) {
    run(Avx2Mlp{});
    return;
  }
#endif
  run(PortableMlp{});
}

}  // namespace veckm_flow
