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

// The event_camera_msgs/EventPacket decoders: schemas and argument checks (kernels:
// cpu/decode_cpu.cpp; the byte layouts of the formats: docs/algorithm.md).
//
// Every decoder reads an untrusted uint8 buffer and returns column tensors: t_ns int64,
// x uint16, y uint16, p uint8, plus `stats` int64[4] = (events dropped outside width x height,
// unknown words, trailing bytes that do not form a whole word, invalid timestamps).
// `state` (int64, modified in place) carries the decoder state across messages of one stream;
// its layout is private to the kernel and Python only creates it zero-filled.
// Decoding is a sequential state machine: there is only a CPU kernel.

#include <ATen/ATen.h>

#include "ops.h"

namespace veckm_flow {

// Prophesee EVT 3.0; state int64[6]. Also returns the external triggers.
const char kDecodeEvt3Schema[] =
    "decode_evt3(Tensor buffer, Tensor(a!) state, int width, int height) -> "
    "(Tensor t_ns, Tensor x, Tensor y, Tensor p, Tensor trigger_t_ns, "
    "Tensor trigger_channel, Tensor trigger_edge, Tensor stats)";
// libcaer compressed 16-bit words; state int64[3]; time restarts at time_base_ns per message.
const char kDecodeLibcaerCmpSchema[] =
    "decode_libcaer_cmp(Tensor buffer, Tensor(a!) state, int time_base_ns, int width, "
    "int height) -> (Tensor t_ns, Tensor x, Tensor y, Tensor p, Tensor stats)";
// libcaer polarity events (uint32 data, int32 ts_us).
const char kDecodeLibcaerSchema[] =
    "decode_libcaer(Tensor buffer, int time_base_ns, int width, int height) -> "
    "(Tensor t_ns, Tensor x, Tensor y, Tensor p, Tensor stats)";
// 'mono' 64-bit words (dt ns, x, y, polarity).
const char kDecodeMonoSchema[] =
    "decode_mono(Tensor buffer, int time_base_ns, int width, int height) -> "
    "(Tensor t_ns, Tensor x, Tensor y, Tensor p, Tensor stats)";
// 'trigger' 64-bit words (dt ns, channel, edge).
const char kDecodeTriggerSchema[] =
    "decode_trigger(Tensor buffer, int time_base_ns) -> "
    "(Tensor t_ns, Tensor channel, Tensor edge, Tensor stats)";

void check_buffer(const at::Tensor& buffer) {
  TORCH_CHECK(buffer.device().is_cpu(), "buffer must be a CPU tensor, got ", buffer.device());
  TORCH_CHECK(buffer.scalar_type() == at::kByte, "buffer must be uint8, got ",
              buffer.scalar_type());
  TORCH_CHECK(buffer.dim() == 1, "buffer must be 1-D (bytes), got shape ", buffer.sizes());
  TORCH_CHECK(buffer.is_contiguous(), "buffer must be contiguous");
}

void check_state(const at::Tensor& state, int64_t size) {
  TORCH_CHECK(state.device().is_cpu(), "state must be a CPU tensor, got ", state.device());
  TORCH_CHECK(state.scalar_type() == at::kLong, "state must be int64, got ", state.scalar_type());
  TORCH_CHECK(state.dim() == 1 && state.size(0) == size, "state must have shape (", size,
              "), got ", state.sizes());
  TORCH_CHECK(state.is_contiguous(), "state must be contiguous");
}

uint32_t check_extent(int64_t extent, const char* name) {
  TORCH_CHECK(extent >= 0, name, " must be >= 0, got ", extent);
  return static_cast<uint32_t>(extent > 65536 ? 65536 : extent);
}

}  // namespace veckm_flow
