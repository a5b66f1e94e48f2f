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

// The CPU MLP kernels' shared parts (flow_mlp_cpu.cpp, flow_mlp_c4_cpu.cpp): weights packed in
// column panels, the layer and tile drivers, and the portable micro-kernels (PortableMlp) in
// GCC vector extensions, compiled for the baseline ISA of any target (NEON on AArch64, SSE2 on
// x86-64). The x86-64 AVX2 + FMA micro-kernels (Avx2Mlp, mlp_avx2.h) plug into the same
// drivers. A micro-kernel set K provides, for float32 rows:
//   K::kBlockRows                       rows of one register block (<= 6)
//   K::block<kRows, kRelu>(a, lda, b, k_count, c, ldc)
//       c[0:kRows, 0:16] = relu(a[0:kRows, 0:k_count] @ b) (or without the ReLU), b one
//       packed panel (k_count, 16)
//   K::output_layer(h, rows, hidden, w3_t, flow_scale, flow)
//       flow[r] = (h[r] . w3_t[0], h[r] . w3_t[1]) * flow_scale; hidden % 16 == 0
//   K::c4_forward(x, c_in, groups, z), K::c4_inverse_relu(y, c, out): flow_mlp_c4_cpu.cpp.

#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace veckm_flow {

constexpr int64_t kTileRows = 24;  // rows whose activations stay in L1 across the layers
constexpr int64_t kBlockColumns = 16;

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

// VECKM_CPU_KERNELS=portable selects the portable micro-kernels on an AVX2 machine too (tests
// and the portable-against-AVX2 benchmark). Read at every call, so that one process can
// measure both.
inline bool portable_kernels_forced() {
  const char* value = std::getenv("VECKM_CPU_KERNELS");
  return value != nullptr && std::string(value) == "portable";
}

// 16 columns of one row in four 4-float vectors (one NEON or SSE register each): named members,
// not one 64-byte vector or an array, which GCC keeps in memory.
typedef float Vec4 __attribute__((vector_size(16)));
struct Row16 {
  Vec4 q0, q1, q2, q3;
};

struct PortableMlp {
  // AArch64 has 32 vector registers (6 rows = 24 accumulators); x86-64's baseline has 16.
#if defined(__aarch64__)
  static constexpr int kBlockRows = 6;
#else
  static constexpr int kBlockRows = 3;
#endif

  static Row16 load(const float* p) {
    Row16 row;
    std::memcpy(&row.q0, p, sizeof(Vec4));
    std::memcpy(&row.q1, p + 4, sizeof(Vec4));
    std::memcpy(&row.q2, p + 8, sizeof(Vec4));
    std::memcpy(&row.q3, p + 12, sizeof(Vec4));
    return row;
  }

  // sum += value * row (a multiply-add per lane where the target has one).
  static void multiply_add(float value, const Row16& row, Row16& sum) {
    sum.q0 += value * row.q0;
    sum.q1 += value * row.q1;
    sum.q2 += value * row.q2;
    sum.q3 += value * row.q3;
  }

  static void multiply_add(const Row16& left, const Row16& right, Row16& sum) {
    sum.q0 += left.q0 * right.q0;
    sum.q1 += left.q1 * right.q1;
    sum.q2 += left.q2 * right.q2;
    sum.q3 += left.q3 * right.q3;
  }

  // Row kRow of a block of kRows (a no-op beyond it).
  template <int kRow, int kRows>
  static void block_row(const float* a, int64_t lda, int64_t k, const Row16& b, Row16& c) {
    if constexpr (kRow < kRows) multiply_add(a[kRow * lda + k], b, c);
  }

  template <int kRow, int kRows, bool kRelu>
  static void store(float* c, int64_t ldc, Row16 row) {
    if constexpr (kRow < kRows) {
      if constexpr (kRelu) {
        // max(x, 0) with NaN -> 0, as _mm256_max_ps(x, 0)
        row.q0 = row.q0 > 0.0f ? row.q0 : Vec4{};
        row.q1 = row.q1 > 0.0f ? row.q1 : Vec4{};
        row.q2 = row.q2 > 0.0f ? row.q2 : Vec4{};
        row.q3 = row.q3 > 0.0f ? row.q3 : Vec4{};
      }
      float* out = c + kRow * ldc;
      std::memcpy(out, &row.q0, sizeof(Vec4));
      std::memcpy(out + 4, &row.q1, sizeof(Vec4));
      std::memcpy(out + 8, &row.q2, sizeof(Vec4));
      std::memcpy(out + 12, &row.q3, sizeof(Vec4));
    }
  }

  template <int kRows, bool kRelu>
  static void block(const float* a, int64_t lda, const float* b, int64_t k_count, float* c,
                    int64_t ldc) {
    Row16 c0{}, c1{}, c2{}, c3{}, c4{}, c5{};
    for (int64_t k = 0; k < k_count; ++k) {
      const Row16 row = load(b + k * kBlockColumns);
      block_row<0, kRows>(a, lda, k, row, c0);
      block_row<1, kRows>(a, lda, k, row, c1);
      block_row<2, kRows>(a, lda, k, row, c2);
      block_row<3, kRows>(a, lda, k, row, c3);
      block_row<4, kRows>(a, lda, k, row, c4);
      block_row<5, kRows>(a, lda, k, row, c5);
    }
    store<0, kRows, kRelu>(c, ldc, c0);
    store<1, kRows, kRelu>(c, ldc, c1);
    store<2, kRows, kRelu>(c, ldc, c2);
    store<3, kRows, kRelu>(c, ldc, c3);
    store<4, kRows, kRelu>(c, ldc, c4);
    store<5, kRows, kRelu>(c, ldc, c5);
  }

  static float lane_sum(const Row16& row) {
    const Vec4 pairs = (row.q0 + row.q1) + (row.q2 + row.q3);
    return (pairs[0] + pairs[1]) + (pairs[2] + pairs[3]);
  }

  static void output_layer(const float* hidden_rows, int64_t rows, int64_t hidden,
                           const float* w3_t, float flow_scale, float* flow) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* h = hidden_rows + r * hidden;
      Row16 sum_u{}, sum_v{};
      for (int64_t k = 0; k < hidden; k += kBlockColumns) {
        const Row16 value = load(h + k);
        multiply_add(value, load(w3_t + k), sum_u);
        multiply_add(value, load(w3_t + hidden + k), sum_v);
      }
      flow[r * 2] = lane_sum(sum_u) * flow_scale;
      flow[r * 2 + 1] = lane_sum(sum_v) * flow_scale;
    }
  }

  // Plain loops: the compiler vectorizes them for the target (width a multiple of 8).
  static void c4_forward(const float* x, int64_t c_in, int64_t groups, float* __restrict__ z) {
    const int64_t width = c_in / groups;
    for (int64_t g = 0; g < groups; ++g) {
      const float* __restrict__ p = x + g * 4 * width;
      float* out = z + g * width;
      for (int64_t c = 0; c < width; ++c) {
        const float even = p[c] + p[2 * width + c], odd = p[width + c] + p[3 * width + c];
        out[c] = even + odd;
        out[c_in + c] = even - odd;
        out[2 * c_in + c] = p[c] - p[2 * width + c];
        out[3 * c_in + c] = p[width + c] - p[3 * width + c];
      }
    }
  }

  static void c4_inverse_relu(const float* __restrict__ y, int64_t c, float* __restrict__ out) {
    for (int64_t k = 0; k < c; ++k) {
      const float sum = y[k] + y[c + k], difference = y[k] - y[c + k];
      const float yc = y[2 * c + k], ys = y[3 * c + k];
      out[k] = std::max(sum + yc, 0.0f);
      out[c + k] = std::max(difference + ys, 0.0f);
      out[2 * c + k] = std::max(sum - yc, 0.0f);
      out[3 * c + k] = std::max(difference - ys, 0.0f);
    }
  }
};

// The last rows - row (< K::kBlockRows) rows of a column panel.
template <class K, bool kRelu, int kRows = K::kBlockRows - 1>
inline void relu_block_rest(int64_t rest, const float* a, int64_t lda, const float* b,
                            int64_t k_count, float* c, int64_t ldc) {
  if constexpr (kRows > 0) {
    if (rest == kRows) {
      K::template block<kRows, kRelu>(a, lda, b, k_count, c, ldc);
    } else {
      relu_block_rest<K, kRelu, kRows - 1>(rest, a, lda, b, k_count, c, ldc);
    }
  }
}

// out[0:rows, 0:n] = relu(a[0:rows, 0:k] @ b) (or without the ReLU); b packed by pack_panels,
// n a multiple of 16. Column panels outermost so each panel stays in L1 across the row blocks.
template <class K, bool kRelu = true>
inline void relu_layer(const float* a, int64_t lda, int64_t rows, const float* packed,
                       int64_t k_count, int64_t n, float* out, int64_t ldo) {
  for (int64_t column = 0; column < n; column += kBlockColumns) {
    const float* b = packed + column * k_count;
    int64_t row = 0;
    for (; row + K::kBlockRows <= rows; row += K::kBlockRows) {
      K::template block<K::kBlockRows, kRelu>(a + row * lda, lda, b, k_count,
                                              out + row * ldo + column, ldo);
    }
    relu_block_rest<K, kRelu>(rows - row, a + row * lda, lda, b, k_count,
                              out + row * ldo + column, ldo);
  }
}

}  // namespace veckm_flow
