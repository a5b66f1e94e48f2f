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

// Schemas of the event_camera_msgs/EventPacket decoders (kernels: cpu/decode_cpu.cpp).
//
// Every decoder reads an untrusted uint8 buffer and returns column tensors: t_ns int64,
// x uint16, y uint16, p uint8, plus `stats` int64[4] = (events dropped outside width x height,
// unknown words, trailing bytes that do not form a whole word, invalid timestamps).
// `state` (int64, modified in place) carries the decoder state across messages of one stream;
// its layout is private to the kernel and Python only creates it zero-filled.
// Decoding is a sequential state machine: there is only a CPU kernel.

#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(veckm_flow, m) {
  // Prophesee EVT 3.0; state int64[6]. Also returns the external triggers.
  m.def(
      "decode_evt3(Tensor buffer, Tensor(a!) state, int width, int height) -> "
      "(Tensor t_ns, Tensor x, Tensor y, Tensor p, Tensor trigger_t_ns, "
      "Tensor trigger_channel, Tensor trigger_edge, Tensor stats)");
  // libcaer compressed 16-bit words; state int64[3]; time restarts at time_base_ns per message.
  m.def(
      "decode_libcaer_cmp(Tensor buffer, Tensor(a!) state, int time_base_ns, int width, "
      "int height) -> (Tensor t_ns, Tensor x, Tensor y, Tensor p, Tensor stats)");
  // libcaer polarity events (uint32 data, int32 ts_us).
  m.def(
      "decode_libcaer(Tensor buffer, int time_base_ns, int width, int height) -> "
      "(Tensor t_ns, Tensor x, Tensor y, Tensor p, Tensor stats)");
  // 'mono' 64-bit words (dt ns, x, y, polarity).
  m.def(
      "decode_mono(Tensor buffer, int time_base_ns, int width, int height) -> "
      "(Tensor t_ns, Tensor x, Tensor y, Tensor p, Tensor stats)");
  // 'trigger' 64-bit words (dt ns, channel, edge).
  m.def(
      "decode_trigger(Tensor buffer, int time_base_ns) -> "
      "(Tensor t_ns, Tensor channel, Tensor edge, Tensor stats)");
}
