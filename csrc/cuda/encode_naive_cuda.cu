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

// CUDA kernels of encode_naive (schema: ../encode_naive.cpp; checks: ../encode.cpp; math:
// encode_naive_channel in ../encode_math.h, shared with the CPU kernel): the paper's
// Algorithm 1 written literally, the baseline that `veckm-flow bench` times encode against.
//  1. PixelEmbed [H * W][2D] and PixelCount: one thread per (event, channel), atomic adds
//     (the float sums' order, hence their last bits, may vary from run to run);
//  2. the window's spatial phasors exp(i (dx X + dy Y) / r): one thread per (offset, channel);
//  3. one thread per (target, channel): read the (2r+1)^2 window pixel by pixel.

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <tuple>

#include "../encode_math.h"
#include "../ops.h"
#include "launch.cuh"

namespace veckm_flow {
namespace {

__global__ void pixel_embed_kernel(const int64_t* t_ns, const int32_t* x, const int32_t* y,
                                   int64_t n, int64_t width, int64_t height, double inv_tau_ns,
                                   const float* freq_t, int64_t d, float* pixel_embed,
                                   int32_t* pixel_count) {
  int64_t j, k;
  if (!item_and_channel(n, d, &j, &k)) return;
  if (x[j] < 0 || x[j] >= width || y[j] < 0 || y[j] >= height) return;
  const int64_t pixel = y[j] * width + x[j];
  if (k == 0) atomicAdd(&pixel_count[pixel], 1);
  float cos_t = 0.0f, sin_t = 0.0f;
  add_time_phasor(relative_time_units(t_ns[j], t_ns[0], inv_tau_ns), freq_t[k], &cos_t, &sin_t);
  atomicAdd(&pixel_embed[pixel * 2 * d + k], cos_t);
  atomicAdd(&pixel_embed[pixel * 2 * d + d + k], sin_t);
}

__global__ void window_phasor_kernel(const float* freq_x, const float* freq_y, double inv_radius,
                                     int64_t radius, int64_t d, float* window_phasor) {
  const int64_t side = 2 * radius + 1;
  int64_t window, k;
  if (!item_and_channel(side * side, d, &window, &k)) return;
  const auto dx = static_cast<int32_t>(window % side - radius);
  const auto dy = static_cast<int32_t>(window / side - radius);
  unit_phasor(pixel_phase(dx, dy, freq_x[k], freq_y[k], inv_radius),
              &window_phasor[window * 2 * d + k], &window_phasor[window * 2 * d + d + k]);
}

__global__ void encode_naive_kernel(const int64_t* t_ns, const int32_t* x, const int32_t* y,
                                    const int64_t* target_index, int64_t m, int64_t width,
                                    int64_t height, int64_t radius, double inv_tau_ns,
                                    const float* freq_t, int64_t d, const float* pixel_embed,
                                    const int32_t* pixel_count, const float* window_phasor,
                                    float* features, int32_t* count) {
  int64_t i, k;
  if (!item_and_channel(m, d, &i, &k)) return;
  const int64_t j = target_index[i];
  // Outside the image: count 0, zero features (invalid).
  if (x[j] < 0 || x[j] >= width || y[j] < 0 || y[j] >= height) return;
  const int32_t window_count = encode_naive_channel(
      pixel_embed, pixel_count, window_phasor, x[j], y[j], width, height, radius, d, k,
      relative_time_units(t_ns[j], t_ns[0], inv_tau_ns), freq_t[k],
      &features[i * 2 * d + k], &features[i * 2 * d + d + k]);
  if (k == 0) count[i] = window_count;
}

std::tuple<at::Tensor, at::Tensor> encode_naive_cuda(
    const at::Tensor& t_ns_in, const at::Tensor& x_in, const at::Tensor& y_in,
    const at::Tensor& target_index_in, int64_t width, int64_t height,
    const at::Tensor& freq_t_in, const at::Tensor& freq_x_in, const at::Tensor& freq_y_in,
    double tau_s, int64_t pixel_radius) {
  const c10::cuda::CUDAGuard device_guard(t_ns_in.device());
  EncodeCall call = prepare_encode_call(t_ns_in, x_in, y_in, target_index_in, width, height,
                                        freq_t_in, freq_x_in, freq_y_in, tau_s, pixel_radius,
                                        c10::DeviceType::CUDA, /*zero_outputs=*/true);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const int64_t n = call.n, m = call.m, d = call.d, channels = call.channels;
  auto features = call.features, count = call.count;
  if (m == 0) return {features, count};
  const EncodeInputs in = call.data();

  // 1. PixelEmbed and PixelCount over the whole image.
  auto pixel_embed = at::zeros({height * width, channels}, features.options());
  auto pixel_count = at::zeros({height * width}, count.options());
  pixel_embed_kernel<<<blocks_for(n * d), kThreads, 0, stream>>>(
      in.t_ns, in.x, in.y, n, width, height,
      call.inv_tau_ns, in.freq_t, d, pixel_embed.data_ptr<float>(),
      pixel_count.data_ptr<int32_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();

  // 2. The window's spatial phasors.
  const int64_t side = 2 * pixel_radius + 1;
  auto window_phasor = at::empty({side * side, channels}, features.options());
  window_phasor_kernel<<<blocks_for(side * side * d), kThreads, 0, stream>>>(
      in.freq_x, in.freq_y, call.inv_radius, pixel_radius, d,
      window_phasor.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();

  // 3. Per (target, channel): the window, pixel by pixel.
  encode_naive_kernel<<<blocks_for(m * d), kThreads, 0, stream>>>(
      in.t_ns, in.x, in.y,
      in.target_index, m, width, height, pixel_radius, call.inv_tau_ns,
      in.freq_t, d, pixel_embed.data_ptr<float>(),
      pixel_count.data_ptr<int32_t>(), window_phasor.data_ptr<float>(),
      features.data_ptr<float>(), count.data_ptr<int32_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {features, count};
}

}  // namespace
}  // namespace veckm_flow

TORCH_LIBRARY_IMPL(veckm_flow, CUDA, m) {
  m.impl("encode_naive", &veckm_flow::encode_naive_cuda);
}
