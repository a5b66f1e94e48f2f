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

// CPU kernel of the flow MLP op (schema and checks: ../flow_mlp.cpp):
//   flow = relu(relu(features @ w1) @ w2) @ w3 * flow_scale.
//
// A fused kernel runs the three layers on tiles of 24 rows whose activations stay in L1: each
// hidden layer is a register-blocked micro-kernel of 16 columns (weights streamed from L2),
// ReLU fused at the store: AVX2 + FMA on x86-64 CPUs that have them (checked at run time),
// portable vector code elsewhere (mlp_portable.h; NEON on AArch64). For hidden sizes that are
// not a multiple of 16 (or VECKM_FLOW_MLP=blas) the layers go to ATen's BLAS in row chunks. Parallel over tiles (a few parts per thread, taken dynamically: parallel.h)
// or chunks (at::parallel_for).

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "../ops.h"
#include "mlp_avx2.h"
#include "parallel.h"

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

// Rows [begin, end) of the MLP; w1, w2 packed by pack_panels; w3_t is w3 transposed (2, H) so
// the last layer is two dots.
template <class K>
void flow_mlp_rows(const float* features, int64_t in_size, const float* w1, const float* w2,
                   const float* w3_t, int64_t hidden, float flow_scale, int64_t begin,
                   int64_t end, float* flow) {
  std::vector<float> hidden1(kTileRows * hidden), hidden2(kTileRows * hidden);
  for (int64_t tile = begin; tile < end; tile += kTileRows) {
    const int64_t rows = std::min(kTileRows, end - tile);
    relu_layer<K>(features + tile * in_size, in_size, rows, w1, in_size, hidden,
                  hidden1.data(), hidden);
    relu_layer<K>(hidden1.data(), hidden, rows, w2, hidden, hidden, hidden2.data(), hidden);
    K::output_layer(hidden2.data(), rows, hidden, w3_t, flow_scale, flow + tile * 2);
  }
}

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
  if (hidden % kBlockColumns == 0 && !fused_kernel_disabled()) {
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
    with_mlp_kernels([&](auto kernels) {
      using Kernels = decltype(kernels);
      parallel_balanced((m + kTileRows - 1) / kTileRows, 4, [&](int64_t begin, int64_t end) {
        flow_mlp_rows<Kernels>(features_ptr, in_size, w1_ptr, w2_ptr, w3_t_ptr, hidden, scale,
                               begin * kTileRows, std::min(end * kTileRows, m), flow_ptr);
      });
    });
    return flow;
  }
  flow_mlp_blas(features, w1, w2, w3, flow_scale, flow);
  return flow;
}

}  // namespace
}  // namespace veckm_flow

TORCH_LIBRARY_IMPL(veckm_flow, CPU, m) {
  m.impl("flow_mlp", &veckm_flow::flow_mlp_cpu);
}
