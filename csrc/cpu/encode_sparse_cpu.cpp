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

// The per-target (sparse) path of encode on the CPU (chosen by use_sparse_encode in
// ../encode.cpp; math: ../encode_math.h, shared with the CUDA kernel's sparse path). Its work
// follows the targets' neighbourhoods, not the image:
//  1. group the in-image events by pixel through a pixel -> slot map (O(N); the map is kept
//     per thread, all -1 between calls, and only the entries set are cleared again);
//  2. mark the slots inside some target pixel's (2r+1)^2 window;
//  3. Q of those slots only (time phasors times the pixel phasor);
//  4. per target pixel: the window sum of Q in float64 (row-major, the CUDA kernel's order);
//  5. per target event: normalised, times exp(-i its time phase).

#include <ATen/ATen.h>
#include <torch/library.h>

#include <vector>

#include "../encode_math.h"
#include "../ops.h"
#include "parallel.h"

namespace veckm_flow {
namespace {

// The pixel -> slot map of the calling thread, sized for the largest image seen; every entry
// is -1 outside a call. `PixelSlotMap::Use` restores the entries it set, also on errors.
class PixelSlotMap {
 public:
  class Use {
   public:
    Use(PixelSlotMap* owner, int64_t pixels) : owner_(owner) {
      if (static_cast<int64_t>(owner_->map_.size()) < pixels) owner_->map_.assign(pixels, -1);
    }
    ~Use() {
      for (const int64_t pixel : slot_pixel) owner_->map_[pixel] = -1;
    }
    int32_t* map() { return owner_->map_.data(); }
    std::vector<int64_t> slot_pixel;  // pixel id of each slot, in the order the slots were made

   private:
    PixelSlotMap* owner_;
  };

 private:
  std::vector<int32_t> map_;
};

PixelSlotMap& thread_slot_map() {
  thread_local PixelSlotMap map;
  return map;
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> encode_sparse_cpu(const EncodeCall& call, int64_t width,
                                                     int64_t height, int64_t pixel_radius) {
  const int64_t n = call.n, m = call.m, d = call.d, channels = call.channels;
  if (m == 0) return {call.features, call.count};
  const EncodeInputs in = call.data();
  const int64_t t_ref_ns = in.t_ns[0];

  // 1. Slots: events grouped by pixel (slots in order of first appearance).
  PixelSlotMap::Use slots(&thread_slot_map(), width * height);
  int32_t* slot_map = slots.map();
  std::vector<int32_t> event_slot(n, -1);
  std::vector<int32_t> slot_count;
  for (int64_t j = 0; j < n; ++j) {
    if (in.x[j] < 0 || in.x[j] >= width || in.y[j] < 0 || in.y[j] >= height) continue;
    const int64_t pixel = static_cast<int64_t>(in.y[j]) * width + in.x[j];
    int32_t slot = slot_map[pixel];
    if (slot < 0) {
      slot = slot_map[pixel] = static_cast<int32_t>(slots.slot_pixel.size());
      slots.slot_pixel.push_back(pixel);
      slot_count.push_back(0);
    }
    event_slot[j] = slot;
    ++slot_count[slot];
  }
  const auto num_slots = static_cast<int64_t>(slots.slot_pixel.size());
  std::vector<int32_t> slot_start(num_slots + 1, 0);
  for (int64_t s = 0; s < num_slots; ++s) slot_start[s + 1] = slot_start[s] + slot_count[s];
  std::vector<int32_t> slot_events(slot_start[num_slots]);
  {
    std::vector<int32_t> cursor(slot_start.begin(), slot_start.end() - 1);
    for (int64_t j = 0; j < n; ++j) {
      if (event_slot[j] >= 0) slot_events[cursor[event_slot[j]]++] = static_cast<int32_t>(j);
    }
  }

  // 2. Target pixels, and the slots inside their windows (embed_index: row of Q, or -1).
  std::vector<int32_t> target_of_slot(num_slots, -1);
  std::vector<int32_t> target_slot;  // slot of each target pixel
  for (int64_t i = 0; i < m; ++i) {
    const int32_t slot = event_slot[in.target_index[i]];
    if (slot >= 0 && target_of_slot[slot] < 0) {
      target_of_slot[slot] = static_cast<int32_t>(target_slot.size());
      target_slot.push_back(slot);
    }
  }
  const auto num_targets = static_cast<int64_t>(target_slot.size());
  if (num_targets == 0) return {call.features, call.count};
  std::vector<int32_t> embed_index(num_slots, -1);
  std::vector<int32_t> embedded;  // slots to embed
  for (const int32_t slot : target_slot) {
    const int64_t pixel = slots.slot_pixel[slot];
    for_each_window_slot(slot_map, static_cast<int32_t>(pixel % width),
                         static_cast<int32_t>(pixel / width), width, height, pixel_radius,
                         [&](int64_t window_slot) {
                           if (embed_index[window_slot] < 0) {
                             embed_index[window_slot] = static_cast<int32_t>(embedded.size());
                             embedded.push_back(static_cast<int32_t>(window_slot));
                           }
                         });
  }

  // 3. Q of the embedded slots.
  std::vector<float> embedding(embedded.size() * channels);
  parallel_balanced(static_cast<int64_t>(embedded.size()), 64, [&](int64_t begin, int64_t end) {
    for (int64_t e = begin; e < end; ++e) {
      const int32_t slot = embedded[e];
      float* re = embedding.data() + e * channels;
      float* im = re + d;
      for (int32_t i = slot_start[slot]; i < slot_start[slot + 1]; ++i) {
        const double units =
            relative_time_units(in.t_ns[slot_events[i]], t_ref_ns, call.inv_tau_ns);
        for (int64_t k = 0; k < d; ++k) add_time_phasor(units, in.freq_t[k], &re[k], &im[k]);
      }
      const int64_t pixel = slots.slot_pixel[slot];
      const auto x = static_cast<int32_t>(pixel % width), y = static_cast<int32_t>(pixel / width);
      for (int64_t k = 0; k < d; ++k) {
        apply_pixel_phasor(x, y, in.freq_x[k], in.freq_y[k], call.inv_radius, &re[k], &im[k]);
      }
    }
  });

  // 4. Window sums per target pixel, normalised (all but the target's own time phase).
  std::vector<float> pooled(num_targets * channels);
  std::vector<int32_t> pooled_count(num_targets);
  parallel_balanced(num_targets, 16, [&](int64_t begin, int64_t end) {
    std::vector<double> sum(channels);
    for (int64_t target = begin; target < end; ++target) {
      const int64_t pixel = slots.slot_pixel[target_slot[target]];
      const auto x = static_cast<int32_t>(pixel % width), y = static_cast<int32_t>(pixel / width);
      std::fill(sum.begin(), sum.end(), 0.0);
      int64_t count = 0;
      for_each_window_slot(slot_map, x, y, width, height, pixel_radius, [&](int64_t slot) {
        const float* q = embedding.data() + static_cast<int64_t>(embed_index[slot]) * channels;
        for (int64_t c = 0; c < channels; ++c) sum[c] += static_cast<double>(q[c]);
        count += slot_count[slot];
      });
      // count >= 1: the target pixel holds the target event itself.
      const double scale = std::sqrt(static_cast<double>(d)) / static_cast<double>(count);
      float* out = pooled.data() + target * channels;
      for (int64_t k = 0; k < d; ++k) {
        normalise_pooled(sum[k], sum[d + k],
                         pixel_phase(x, y, in.freq_x[k], in.freq_y[k], call.inv_radius), scale,
                         &out[k], &out[d + k]);
      }
      pooled_count[target] = static_cast<int32_t>(count);
    }
  });

  // 5. Per target event: its own time phase (targets outside the image keep zeros).
  float* features = call.features.data_ptr<float>();
  int32_t* count = call.count.data_ptr<int32_t>();
  parallel_balanced(m, 256, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t j = in.target_index[i];
      if (event_slot[j] < 0) continue;
      const int32_t target = target_of_slot[event_slot[j]];
      const float* window = pooled.data() + static_cast<int64_t>(target) * channels;
      float* out = features + i * channels;
      const double units = relative_time_units(in.t_ns[j], t_ref_ns, call.inv_tau_ns);
      for (int64_t k = 0; k < d; ++k) {
        out[k] = window[k];
        out[d + k] = window[d + k];
        apply_target_time_phase(units, in.freq_t[k], &out[k], &out[d + k]);
      }
      count[i] = pooled_count[target];
    }
  });
  return {call.features, call.count};
}

}  // namespace veckm_flow
