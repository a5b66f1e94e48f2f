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

// Argument checks shared by the CPU and CUDA kernels of the VecKM encoding ops (schemas in
// veckm_encode.cpp). Each check names the offending argument and what it found.

#pragma once

#include <ATen/core/Tensor.h>

namespace veckm_flow {

// encode(): t_ns int64 [N]; x, y int32/int16/uint16 [N]; target_index int64 [M];
// freq_t/x/y float32 [D]; all on one device; width, height, pixel_radius, tau_s positive.
void check_encode_args(const at::Tensor& t_ns, const at::Tensor& x, const at::Tensor& y,
                       const at::Tensor& target_index, int64_t width, int64_t height,
                       const at::Tensor& freq_t, const at::Tensor& freq_x,
                       const at::Tensor& freq_y, double tau_s, int64_t pixel_radius);

// flow_mlp(): features float32 [M, 2D]; w1 [2D, H]; w2 [H, H]; w3 [H, 2]; one device.
void check_flow_mlp_args(const at::Tensor& features, const at::Tensor& w1, const at::Tensor& w2,
                         const at::Tensor& w3);

// Coordinates as contiguous int32 (uint16 sensor coordinates are widened).
at::Tensor coordinates_as_int32(const at::Tensor& coordinate);

}  // namespace veckm_flow
