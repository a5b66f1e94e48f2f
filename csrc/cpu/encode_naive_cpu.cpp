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

// CPU kernel of encode_naive (schema: ../encode_naive.cpp; checks: ../encode.cpp; math:
// encode_naive_channel in ../encode_math.h, shared with the CUDA kernel): the paper's
// Algorithm 1 as written, so that the baseline itself is tested here against the closed form
// and the fast op. Scatter over the events (sequential), then parallel over the targets.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <tuple>
#include <vector>

#include "../encode_math.h"
#include "../ops.h"

namespace veckm_flow {
namespace {

std::tuple<at::Tensor, at::Tensor> encode_naive_cpu(
    const at::Tensor& t_ns_in, const at::Tensor& x_in, const at::Tensor& y_in,
    const at::Tensor& target_index_in, int64_t width, int64_t height,
    const at::Tensor& freq_t_in, const at::Tensor& freq_x_in, const at::Tensor& freq_y_in,
    double tau_s, int64_t pixel_radius) {
  EncodeCall call = prepare_encode_call(t_ns_in, x_in, y_in, target_index_in, width, height,
                                        freq_t_in, freq_x_in, freq_y_in, tau_s, pixel_radius,
                                        c10::DeviceType::CPU, /*zero_outputs=*/true);
  const int64_t n = call.n, m = call.m, d = call.d, channels = call.channels;
  auto features = call.features, count = call.count;
  if (m == 0) return {features, count};
  const EncodeInputs in = call.data();
  const int64_t *t_ptr = in.t_ns, *target_ptr = in.target_index;
  const int32_t *x_ptr = in.x, *y_ptr = in.y;
  const float *freq_t_ptr = in.freq_t, *freq_x_ptr = in.freq_x, *freq_y_ptr = in.freq_y;
  const double inv_tau_ns = call.inv_tau_ns, inv_radius = call.inv_radius;

  // PixelEmbed and PixelCount over the whole image.
  auto pixel_embed = at::zeros({height * width, channels}, features.options());
  auto pixel_count = at::zeros({height * width}, count.options());
  float* embed_ptr = pixel_embed.data_ptr<float>();
  int32_t* pixel_count_ptr = pixel_count.data_ptr<int32_t>();
  for (int64_t j = 0; j < n; ++j) {
    if (x_ptr[j] < 0 || x_ptr[j] >= width || y_ptr[j] < 0 || y_ptr[j] >= height) continue;
    const int64_t pixel = y_ptr[j] * width + x_ptr[j];
    ++pixel_count_ptr[pixel];
    const double units = relative_time_units(t_ptr[j], t_ptr[0], inv_tau_ns);
    for (int64_t k = 0; k < d; ++k) {
      add_time_phasor(units, freq_t_ptr[k], &embed_ptr[pixel * channels + k],
                      &embed_ptr[pixel * channels + d + k]);
    }
  }
  // The window's spatial phasors exp(i (dx X + dy Y) / r).
  const int64_t side = 2 * pixel_radius + 1;
  std::vector<float> window_phasor(side * side * channels);
  for (int64_t window = 0; window < side * side; ++window) {
    const auto dx = static_cast<int32_t>(window % side - pixel_radius);
    const auto dy = static_cast<int32_t>(window / side - pixel_radius);
    for (int64_t k = 0; k < d; ++k) {
      unit_phasor(pixel_phase(dx, dy, freq_x_ptr[k], freq_y_ptr[k], inv_radius),
                  &window_phasor[window * channels + k],
                  &window_phasor[window * channels + d + k]);
    }
  }
  float* features_ptr = features.data_ptr<float>();
  int32_t* count_ptr = count.data_ptr<int32_t>();
  at::parallel_for(0, m, 64, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t j = target_ptr[i];
      // Outside the image: count 0, zero features (invalid).
      if (x_ptr[j] < 0 || x_ptr[j] >= width || y_ptr[j] < 0 || y_ptr[j] >= height) continue;
      const double units = relative_time_units(t_ptr[j], t_ptr[0], inv_tau_ns);
      for (int64_t k = 0; k < d; ++k) {
        count_ptr[i] = encode_naive_channel(
            embed_ptr, pixel_count_ptr, window_phasor.data(), x_ptr[j], y_ptr[j], width,
            height, pixel_radius, d, k, units, freq_t_ptr[k], &features_ptr[i * channels + k],
            &features_ptr[i * channels + d + k]);
      }
    }
  });
  return {features, count};
}

}  // namespace
}  // namespace veckm_flow

TORCH_LIBRARY_IMPL(veckm_flow, CPU, m) {
  m.impl("encode_naive", &veckm_flow::encode_naive_cpu);
}
