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

// Launch shapes shared by the CUDA kernels: one thread per item, 1-D grids.

#pragma once

#include <cstdint>

namespace veckm_flow {

constexpr int kThreads = 256;

inline unsigned int blocks_for(int64_t items) {
  return static_cast<unsigned int>((items + kThreads - 1) / kThreads);
}

// Index of this thread's item in a 1-D grid.
__device__ inline int64_t item_index() {
  return blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
}

// This thread's (item, channel k) in a grid over items x d channels (k fastest, so a warp
// reads one item's channels side by side); false past the end.
__device__ inline bool item_and_channel(int64_t items, int64_t d, int64_t* item, int64_t* k) {
  const int64_t index = item_index();
  if (index >= items * d) return false;
  *item = index / d;
  *k = index % d;
  return true;
}

}  // namespace veckm_flow
