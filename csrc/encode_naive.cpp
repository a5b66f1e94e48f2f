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

// encode_naive: the same encoding, arguments, results and checks as encode (encode.cpp), by
// the paper's Algorithm 1 as written: scatter PixelEmbed / PixelCount over the image, then for
// every target read its (2r+1)^2 window pixel by pixel, for each of the D channels. Its cost
// grows with r^2, where encode's does not; it is the baseline that `veckm-flow bench` times
// the fast kernels against on the same device. Kernels: cpu/encode_naive_cpu.cpp,
// cuda/encode_naive_cuda.cu (shared math: encode_naive_channel in encode_math.h).

#include "ops.h"

namespace veckm_flow {

const char kEncodeNaiveSchema[] =
    "encode_naive(Tensor t_ns, Tensor x, Tensor y, Tensor target_index, int width, int height, "
    "Tensor freq_t, Tensor freq_x, Tensor freq_y, float tau_s, int pixel_radius) -> "
    "(Tensor features, Tensor count)";

}  // namespace veckm_flow
