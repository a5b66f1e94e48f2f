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

// encode: for the target events (indices into the events), the VecKM local event encoding
//   f_n[k] = sqrt(D)/C_n sum_{j in window(n)} exp(i[(t_j-t_n)/tau T[k] + (x_j-x_n)/r X[k]
//            + (y_j-y_n)/r Y[k]])
//   over all events j whose pixel lies in the (2r+1)^2 window around the target's pixel.
//   Times are int64 ns (absolute sensor stamps are fine: differences are taken in int64);
//   events outside width x height are not context; a target outside the image gets count 0
//   and zero features (invalid). Returns features float32 [M, 2D] (Re f then Im f) and
//   count int32 [M] (C_n). A target_index outside [0, N) is refused on the CPU; the CUDA
//   kernel does not wait for the device to check it, it gives that target count -1 and zero
//   features instead (the error flag travels with the results).
// Kernels: cpu/encode_cpu.cpp, cuda/encode_cuda.cu (shared math: encode_math.h). The argument
// checks below also serve encode_naive, which has the same arguments and results.

#include <ATen/ATen.h>

#include <cstdlib>
#include <cstring>

#include "encode_math.h"
#include "ops.h"

namespace veckm_flow {

const char kEncodeSchema[] =
    "encode(Tensor t_ns, Tensor x, Tensor y, Tensor target_index, int width, int height, "
    "Tensor freq_t, Tensor freq_x, Tensor freq_y, float tau_s, int pixel_radius) -> "
    "(Tensor features, Tensor count)";

namespace {

void check_vector(const at::Tensor& tensor, const char* name, at::ScalarType dtype) {
  TORCH_CHECK(tensor.dim() == 1, name, " must be a 1-D tensor, got shape ", tensor.sizes());
  TORCH_CHECK(tensor.scalar_type() == dtype, name, " must have dtype ", dtype, ", got ",
              tensor.scalar_type());
}

void check_coordinate(const at::Tensor& tensor, const char* name, const at::Tensor& t_ns) {
  TORCH_CHECK(tensor.dim() == 1, name, " must be a 1-D tensor, got shape ", tensor.sizes());
  const auto dtype = tensor.scalar_type();
  TORCH_CHECK(dtype == at::kInt || dtype == at::kShort || dtype == at::kUInt16, name,
              " must have dtype int32, int16 or uint16, got ", dtype);
  TORCH_CHECK(tensor.numel() == t_ns.numel(), name, " must have as many elements as t_ns (",
              t_ns.numel(), "), got ", tensor.numel());
  check_same_device(tensor, name, t_ns, "t_ns");
}

}  // namespace

EncodeTensors contiguous_encode_tensors(const at::Tensor& t_ns, const at::Tensor& x,
                                        const at::Tensor& y, const at::Tensor& target_index,
                                        const at::Tensor& freq_t, const at::Tensor& freq_x,
                                        const at::Tensor& freq_y) {
  return {t_ns.contiguous(),         x.to(at::kInt).contiguous(), y.to(at::kInt).contiguous(),
          target_index.contiguous(), freq_t.contiguous(),        freq_x.contiguous(),
          freq_y.contiguous()};
}

void check_encode_args(const at::Tensor& t_ns, const at::Tensor& x, const at::Tensor& y,
                       const at::Tensor& target_index, int64_t width, int64_t height,
                       const at::Tensor& freq_t, const at::Tensor& freq_x,
                       const at::Tensor& freq_y, double tau_s, int64_t pixel_radius) {
  check_vector(t_ns, "t_ns", at::kLong);
  check_coordinate(x, "x", t_ns);
  check_coordinate(y, "y", t_ns);
  check_vector(target_index, "target_index", at::kLong);
  check_same_device(target_index, "target_index", t_ns, "t_ns");
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
  check_same_device(freq_t, "freq_t", t_ns, "t_ns");
  check_same_device(freq_x, "freq_x", t_ns, "t_ns");
  check_same_device(freq_y, "freq_y", t_ns, "t_ns");
}

EncodeCall prepare_encode_call(const at::Tensor& t_ns, const at::Tensor& x, const at::Tensor& y,
                               const at::Tensor& target_index, int64_t width, int64_t height,
                               const at::Tensor& freq_t, const at::Tensor& freq_x,
                               const at::Tensor& freq_y, double tau_s, int64_t pixel_radius,
                               c10::DeviceType device_type, bool zero_outputs,
                               bool check_targets_on_host) {
  check_encode_args(t_ns, x, y, target_index, width, height, freq_t, freq_x, freq_y, tau_s,
                    pixel_radius);
  TORCH_CHECK(t_ns.device().type() == device_type, "t_ns must be a ", device_type,
              " tensor for the ", device_type, " kernel, got one on ", t_ns.device());
  EncodeCall call;
  call.n = t_ns.numel();
  call.m = target_index.numel();
  call.d = freq_t.numel();
  call.channels = 2 * call.d;
  call.inv_tau_ns = 1e-9 / tau_s;
  call.inv_radius = 1.0 / static_cast<double>(pixel_radius);
  const auto float_options = t_ns.options().dtype(at::kFloat);
  const auto int_options = t_ns.options().dtype(at::kInt);
  call.features = zero_outputs ? at::zeros({call.m, call.channels}, float_options)
                               : at::empty({call.m, call.channels}, float_options);
  call.count = zero_outputs ? at::zeros({call.m}, int_options) : at::empty({call.m}, int_options);
  if (call.m > 0) {
    TORCH_CHECK(call.n > 0, "target_index holds ", call.m, " targets but there are no events");
    call.in = contiguous_encode_tensors(t_ns, x, y, target_index, freq_t, freq_x, freq_y);
    if (check_targets_on_host) check_target_range(call.in.target_index, call.n);
  }
  return call;
}

namespace {

// Break-even of sparse_encode_pays per backend: the sparse path pays while the targets'
// windows cover less than this many times the image. CPU: measured, it never pays
// (benchmarks/RESULTS.md, "Per-target encoding"). CUDA: the sparse kernel has not yet run on
// a GPU, so it stays off by default until scripts/device_check.sh has checked it against the
// dense path and measured the break-even (bench_peer.py's dense and sparse columns); the first
// estimate from the dense kernel's cost per image pixel is a factor of about 16.
// VECKM_FLOW_ENCODE_PATH=sparse selects it explicitly.
constexpr double kSparseFactorCpu = 0.0;
constexpr double kSparseFactorCuda = 0.0;

}  // namespace

bool use_sparse_encode(int64_t targets, int64_t width, int64_t height, int64_t pixel_radius,
                       c10::DeviceType device_type) {
  const char* forced = std::getenv("VECKM_FLOW_ENCODE_PATH");
  if (forced != nullptr && forced[0] != '\0' && std::strcmp(forced, "auto") != 0) {
    TORCH_CHECK(std::strcmp(forced, "dense") == 0 || std::strcmp(forced, "sparse") == 0,
                "VECKM_FLOW_ENCODE_PATH must be dense, sparse or auto, got '", forced, "'");
    return std::strcmp(forced, "sparse") == 0;
  }
  const double factor = device_type == c10::DeviceType::CUDA ? kSparseFactorCuda
                                                             : kSparseFactorCpu;
  return sparse_encode_pays(targets, width, height, pixel_radius, factor);
}

void check_target_range(const at::Tensor& target_index, int64_t n) {
  if (target_index.numel() == 0) return;
  TORCH_CHECK(n > 0, "target_index holds ", target_index.numel(),
              " targets but there are no events");
  auto [lowest, highest] = at::aminmax(target_index);
  const auto bounds = at::stack({lowest, highest}).cpu();  // one device sync
  const int64_t lowest_index = bounds[0].item<int64_t>();
  const int64_t highest_index = bounds[1].item<int64_t>();
  TORCH_CHECK(lowest_index >= 0 && highest_index < n,
              "target_index values must be event indices in [0, ", n, "), got [",
              lowest_index, ", ", highest_index, "]");
}

}  // namespace veckm_flow
