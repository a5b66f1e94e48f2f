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

// The contract of every veckm_flow op, shared by the op files (csrc/<op>.cpp: schema and
// argument checks) and the backend kernels (csrc/cpu/<op>_cpu.cpp, csrc/cuda/<op>_cuda.cu).
// The schemas are declared together, once, in veckm_flow.cpp. Each check names the offending
// argument and what it found.

#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <tuple>

namespace veckm_flow {

// tensor (called name) is on the device of `reference` (called reference_name).
inline void check_same_device(const at::Tensor& tensor, const char* name,
                              const at::Tensor& reference, const char* reference_name) {
  TORCH_CHECK(tensor.device() == reference.device(), name, " is on ", tensor.device(), " but ",
              reference_name, " is on ", reference.device(), "; all inputs must share a device");
}

// ---- encode, encode_naive (encode.cpp, encode_naive.cpp) -----------------------------------
extern const char kEncodeSchema[];
extern const char kEncodeNaiveSchema[];

// t_ns int64 [N]; x, y int32/int16/uint16 [N]; target_index int64 [M]; freq_t/x/y float32
// [D]; all on one device; width, height, pixel_radius, tau_s positive.
void check_encode_args(const at::Tensor& t_ns, const at::Tensor& x, const at::Tensor& y,
                       const at::Tensor& target_index, int64_t width, int64_t height,
                       const at::Tensor& freq_t, const at::Tensor& freq_x,
                       const at::Tensor& freq_y, double tau_s, int64_t pixel_radius);

// Every target_index value is an event index in [0, n) (one device sync on a GPU).
void check_target_range(const at::Tensor& target_index, int64_t n);

// The tensor arguments of encode / encode_naive as every kernel of the two reads them:
// contiguous, with the coordinates as int32 (uint16 sensor coordinates are widened).
struct EncodeTensors {
  at::Tensor t_ns, x, y, target_index, freq_t, freq_x, freq_y;
};
EncodeTensors contiguous_encode_tensors(const at::Tensor& t_ns, const at::Tensor& x,
                                        const at::Tensor& y, const at::Tensor& target_index,
                                        const at::Tensor& freq_t, const at::Tensor& freq_x,
                                        const at::Tensor& freq_y);

// What every encode kernel does first (encode.cpp): the argument checks, the check that t_ns
// is on `device_type`, the outputs features float32 [M, 2D] and count int32 [M] (zeroed when
// zero_outputs; invalid targets keep zeros), and, when M > 0, the contiguous tensors and,
// when check_targets_on_host, the check of the target indices (check_target_range, a device
// sync on a GPU; the CUDA encode kernel flags them itself instead).
struct EncodeInputs {
  const int64_t* t_ns;
  const int32_t *x, *y;
  const int64_t* target_index;
  const float *freq_t, *freq_x, *freq_y;
};
struct EncodeCall {
  int64_t n = 0, m = 0, d = 0, channels = 0;
  double inv_tau_ns = 0.0, inv_radius = 0.0;
  at::Tensor features, count;
  EncodeTensors in;
  // The inputs' data (M > 0 only).
  EncodeInputs data() const {
    return {in.t_ns.data_ptr<int64_t>(),        in.x.data_ptr<int32_t>(),
            in.y.data_ptr<int32_t>(),           in.target_index.data_ptr<int64_t>(),
            in.freq_t.data_ptr<float>(),        in.freq_x.data_ptr<float>(),
            in.freq_y.data_ptr<float>()};
  }
};
EncodeCall prepare_encode_call(const at::Tensor& t_ns, const at::Tensor& x, const at::Tensor& y,
                               const at::Tensor& target_index, int64_t width, int64_t height,
                               const at::Tensor& freq_t, const at::Tensor& freq_x,
                               const at::Tensor& freq_y, double tau_s, int64_t pixel_radius,
                               c10::DeviceType device_type, bool zero_outputs,
                               bool check_targets_on_host = true);

// Whether encode takes its per-target (sparse) path for this call: the environment variable
// VECKM_FLOW_ENCODE_PATH=dense|sparse forces a path (benchmarks and tests compare the two on
// the same inputs); otherwise sparse_encode_pays (encode_math.h) with the backend's factor.
bool use_sparse_encode(int64_t targets, int64_t width, int64_t height, int64_t pixel_radius,
                       c10::DeviceType device_type);

// The sparse path's CPU kernel (cpu/encode_sparse_cpu.cpp), called by the CPU encode kernel
// with its prepared call (zeroed outputs); returns encode's results.
std::tuple<at::Tensor, at::Tensor> encode_sparse_cpu(const EncodeCall& call, int64_t width,
                                                     int64_t height, int64_t pixel_radius);

// ---- flow_mlp (flow_mlp.cpp) -----------------------------------------------------------------
extern const char kFlowMlpSchema[];

// features float32 [M, 2D]; w1 [2D, H]; w2 [H, H]; w3 [H, 2]; one device.
void check_flow_mlp_args(const at::Tensor& features, const at::Tensor& w1, const at::Tensor& w2,
                         const at::Tensor& w3);

// ---- flow_mlp_c4 (flow_mlp_c4.cpp) -----------------------------------------------------------
extern const char kFlowMlpC4Schema[];

// features float32 [M, 4 C_in] on the CPU; blocks: 6 float32 matrices (C_in, C_out),
// (C_in, C_out), (2 C_in, 2 C_out), then the same for C_out inputs; w3 float32 [4 C_out, 2].
void check_flow_mlp_c4_args(const at::Tensor& features, at::TensorList blocks,
                            const at::Tensor& w3, int64_t input_groups);

// ---- decode_* (decode.cpp) -------------------------------------------------------------------
extern const char kDecodeEvt3Schema[];
extern const char kDecodeLibcaerCmpSchema[];
extern const char kDecodeLibcaerSchema[];
extern const char kDecodeMonoSchema[];
extern const char kDecodeTriggerSchema[];

// buffer: contiguous uint8 [bytes] on the CPU.
void check_buffer(const at::Tensor& buffer);

// state: contiguous int64 [size] on the CPU.
void check_state(const at::Tensor& state, int64_t size);

// width or height >= 0, returned clamped to 65536: coordinates are uint16, so a sensor wider
// than 65535 keeps every coordinate.
uint32_t check_extent(int64_t extent, const char* name);

}  // namespace veckm_flow
