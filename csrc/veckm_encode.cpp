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

// Schemas and argument checks of the VecKM encoding ops (kernels: cpu/veckm_encode_cpu.cpp,
// cuda/veckm_encode_cuda.cu; shared math: veckm_math.h).
//
// encode: for the target events (indices into the events), the VecKM local event encoding
//   f_n[k] = sqrt(D)/C_n sum_{j in window(n)} exp(i[(t_j-t_n)/tau T[k] + (x_j-x_n)/r X[k]
//            + (y_j-y_n)/r Y[k]])
//   over all events j whose pixel lies in the (2r+1)^2 window around the target's pixel.
//   Times are int64 ns (absolute sensor stamps are fine: differences are taken in int64);
//   events outside width x height are not context; a target outside the image gets count 0
//   and zero features (invalid). Returns features float32 [M, 2D] (Re f then Im f) and
//   count int32 [M] (C_n).
// flow_mlp: relu(relu(features @ w1) @ w2) @ w3 * flow_scale, float32 [M, 2].

#include "veckm_encode.h"

#include <ATen/ATen.h>
#include <torch/library.h>

namespace veckm_flow {

namespace {

void check_vector(const at::Tensor& tensor, const char* name, at::ScalarType dtype) {
  TORCH_CHECK(tensor.dim() == 1, name, " must be a 1-D tensor, got shape ", tensor.sizes());
  TORCH_CHECK(tensor.scalar_type() == dtype, name, " must have dtype ", dtype, ", got ",
              tensor.scalar_type());
}

void check_same_device(const at::Tensor& tensor, const char* name, const at::Tensor& first) {
  TORCH_CHECK(tensor.device() == first.device(), name, " is on ", tensor.device(),
              " but t_ns/features are on ", first.device(), "; all inputs must share a device");
}

void check_coordinate(const at::Tensor& tensor, const char* name, const at::Tensor& t_ns) {
  TORCH_CHECK(tensor.dim() == 1, name, " must be a 1-D tensor, got shape ", tensor.sizes());
  const auto dtype = tensor.scalar_type();
  TORCH_CHECK(dtype == at::kInt || dtype == at::kShort || dtype == at::kUInt16, name,
              " must have dtype int32, int16 or uint16, got ", dtype);
  TORCH_CHECK(tensor.numel() == t_ns.numel(), name, " must have as many elements as t_ns (",
              t_ns.numel(), "), got ", tensor.numel());
  check_same_device(tensor, name, t_ns);
}

void check_float(const at::Tensor& tensor, const char* name, const at::Tensor& features) {
  TORCH_CHECK(tensor.scalar_type() == at::kFloat, name, " must be float32, got ",
              tensor.scalar_type());
  check_same_device(tensor, name, features);
}

}  // namespace

at::Tensor coordinates_as_int32(const at::Tensor& coordinate) {
  return coordinate.to(at::kInt).contiguous();
}

void check_encode_args(const at::Tensor& t_ns, const at::Tensor& x, const at::Tensor& y,
                       const at::Tensor& target_index, int64_t width, int64_t height,
                       const at::Tensor& freq_t, const at::Tensor& freq_x,
                       const at::Tensor& freq_y, double tau_s, int64_t pixel_radius) {
  check_vector(t_ns, "t_ns", at::kLong);
  check_coordinate(x, "x", t_ns);
  check_coordinate(y, "y", t_ns);
  check_vector(target_index, "target_index", at::kLong);
  check_same_device(target_index, "target_index", t_ns);
  TORCH_CHECK(width > 0 && width <= 65536, "width must be in [1, 65536], got ", width);
  TORCH_CHECK(height > 0 && height <= 65536, "height must be in [1, 65536], got ", height);
  TORCH_CHECK(width * height <= (int64_t{1} << 30), "width * height must be at most 2^30, got ",
              width, " x ", height);
  TORCH_CHECK(pixel_radius >= 1 && pixel_radius <= 64, "pixel_radius must be in [1, 64], got ",
              pixel_radius);
  TORCH_CHECK(tau_s > 0.0 && tau_s <= 10.0, "tau_s must be in (0, 10] seconds, got ", tau_s);
  TORCH_CHECK(t_ns.numel() < (int64_t{1} << 31), "at most 2^31 - 1 events per call, got ",
              t_ns.numel());
  check_vector(freq_t, "freq_t", at::kFloat);
  check_vector(freq_x, "freq_x", at::kFloat);
  check_vector(freq_y, "freq_y", at::kFloat);
  TORCH_CHECK(freq_t.numel() > 0, "freq_t must not be empty");
  TORCH_CHECK(freq_x.numel() == freq_t.numel() && freq_y.numel() == freq_t.numel(),
              "freq_t, freq_x and freq_y must have the same length D, got ", freq_t.numel(),
              ", ", freq_x.numel(), ", ", freq_y.numel());
  check_same_device(freq_t, "freq_t", t_ns);
  check_same_device(freq_x, "freq_x", t_ns);
  check_same_device(freq_y, "freq_y", t_ns);
}

void check_flow_mlp_args(const at::Tensor& features, const at::Tensor& w1, const at::Tensor& w2,
                         const at::Tensor& w3) {
  TORCH_CHECK(features.dim() == 2, "features must be (M, 2D), got shape ", features.sizes());
  check_float(features, "features", features);
  check_float(w1, "w1", features);
  check_float(w2, "w2", features);
  check_float(w3, "w3", features);
  TORCH_CHECK(w1.dim() == 2 && w1.size(0) == features.size(1),
              "w1 must be (2D, H) with 2D = features.size(1) = ", features.size(1), ", got ",
              w1.sizes());
  TORCH_CHECK(w2.dim() == 2 && w2.size(0) == w1.size(1) && w2.size(1) == w1.size(1),
              "w2 must be (H, H) with H = w1.size(1) = ", w1.size(1), ", got ", w2.sizes());
  TORCH_CHECK(w3.dim() == 2 && w3.size(0) == w1.size(1) && w3.size(1) == 2,
              "w3 must be (H, 2) with H = ", w1.size(1), ", got ", w3.sizes());
}

}  // namespace veckm_flow

TORCH_LIBRARY_FRAGMENT(veckm_flow, m) {
  m.def(
      "encode(Tensor t_ns, Tensor x, Tensor y, Tensor target_index, int width, int height, "
      "Tensor freq_t, Tensor freq_x, Tensor freq_y, float tau_s, int pixel_radius) -> "
      "(Tensor features, Tensor count)");
  m.def("flow_mlp(Tensor features, Tensor w1, Tensor w2, Tensor w3, float flow_scale) -> Tensor");
}
