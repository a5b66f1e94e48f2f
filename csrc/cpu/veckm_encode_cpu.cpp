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

// CPU kernels of the VecKM encoding ops (schemas and checks: ../veckm_encode.cpp; math:
// ../veckm_math.h).
//
// encode, in four passes (cost O(N D + M D + rows x W D), independent of the radius r):
//  1. group the in-image events by pixel (counting sort on the pixel id): "slots";
//  2. Q_slot[k] = sum over its events of exp(i time phase) times exp(i pixel phase);
//  3. for every row holding target pixels, slide a (2r+1)-row window of float64 column sums
//     of Q down the image (adding entering rows, subtracting leaving ones), then slide a
//     (2r+1)-column running sum along the row to each target pixel: the box sum, computed
//     once per target *pixel*, in float64 so that add/subtract leaves no drift;
//  4. per target event: multiply by exp(-i its time phase).
// Parallel over slots, bands of target rows and targets (at::parallel_for, OpenMP here).

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "veckm_encode.h"
#include "veckm_math.h"

// Hot loops are compiled twice, for AVX2+FMA and for the baseline ISA, and picked at load time.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define VECKM_CPU_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define VECKM_CPU_CLONES
#endif

namespace veckm_flow {
namespace {

// Events grouped by pixel. Slots are ordered by pixel id (row-major), so by row, then by x.
struct PixelSlots {
  std::vector<int32_t> event_order;     // in-image event indices, grouped by slot
  std::vector<int32_t> slot_start;      // [U + 1] ranges in event_order
  std::vector<int32_t> slot_x;          // [U]
  std::vector<int32_t> slot_y;          // [U]
  std::vector<int32_t> row_slot_start;  // [H + 1] ranges of slots per row
  std::vector<int32_t> event_slot;      // [N] slot of each event, -1 outside the image
};

PixelSlots group_by_pixel(const int32_t* x, const int32_t* y, int64_t n, int64_t width,
                          int64_t height) {
  PixelSlots slots;
  const int64_t num_pixels = width * height;
  std::vector<int32_t> pixel_start(num_pixels + 1, 0);
  slots.event_slot.assign(n, -1);
  int64_t inside = 0;
  for (int64_t j = 0; j < n; ++j) {
    if (x[j] >= 0 && x[j] < width && y[j] >= 0 && y[j] < height) {
      ++pixel_start[static_cast<int64_t>(y[j]) * width + x[j] + 1];
      ++inside;
    }
  }
  for (int64_t p = 0; p < num_pixels; ++p) pixel_start[p + 1] += pixel_start[p];
  slots.event_order.resize(inside);
  // pixel_start[p] is used as the fill cursor of pixel p; afterwards it holds p's end.
  for (int64_t j = 0; j < n; ++j) {
    if (x[j] >= 0 && x[j] < width && y[j] >= 0 && y[j] < height) {
      const int64_t pixel = static_cast<int64_t>(y[j]) * width + x[j];
      slots.event_order[pixel_start[pixel]++] = static_cast<int32_t>(j);
    }
  }
  slots.row_slot_start.assign(height + 1, 0);
  slots.slot_start.push_back(0);
  int64_t previous_end = 0;
  for (int64_t row = 0; row < height; ++row) {
    slots.row_slot_start[row] = static_cast<int32_t>(slots.slot_x.size());
    for (int64_t column = 0; column < width; ++column) {
      const int64_t end = pixel_start[row * width + column];
      if (end == previous_end) continue;
      const auto slot = static_cast<int32_t>(slots.slot_x.size());
      for (int64_t i = previous_end; i < end; ++i) slots.event_slot[slots.event_order[i]] = slot;
      slots.slot_x.push_back(static_cast<int32_t>(column));
      slots.slot_y.push_back(static_cast<int32_t>(row));
      slots.slot_start.push_back(static_cast<int32_t>(end));
      previous_end = end;
    }
  }
  slots.row_slot_start[height] = static_cast<int32_t>(slots.slot_x.size());
  return slots;
}

// Q of one slot: [re(D) | im(D)] floats.
VECKM_CPU_CLONES void embed_slot(const int32_t* events, int32_t count, const double* time_units,
                                 int32_t x, int32_t y, const float* freq_t, const float* freq_x,
                                 const float* freq_y, double inv_radius, int64_t d,
                                 float* out) {
  float* out_re = out;
  float* out_im = out + d;
  for (int64_t k = 0; k < d; ++k) {
    out_re[k] = 0.0f;
    out_im[k] = 0.0f;
  }
  for (int32_t e = 0; e < count; ++e) {
    const double units = time_units[events[e]];
    for (int64_t k = 0; k < d; ++k) {
      float c, s;
      unit_phasor(time_phase(units, freq_t[k]), &c, &s);
      out_re[k] += c;
      out_im[k] += s;
    }
  }
  for (int64_t k = 0; k < d; ++k) {
    float c, s;
    unit_phasor(pixel_phase(x, y, freq_x[k], freq_y[k], inv_radius), &c, &s);
    complex_multiply(&out_re[k], &out_im[k], c, s);
  }
}

VECKM_CPU_CLONES void accumulate(double* sum, const float* values, int64_t length, double sign) {
  for (int64_t k = 0; k < length; ++k) sum[k] += sign * static_cast<double>(values[k]);
}

VECKM_CPU_CLONES void add_columns(double* sum, const double* column_sum, int64_t length,
                                  double sign) {
  for (int64_t k = 0; k < length; ++k) sum[k] += sign * column_sum[k];
}

VECKM_CPU_CLONES void finish_target_pixel(const double* box, int32_t x, int32_t y, int32_t count,
                                          const float* freq_x, const float* freq_y,
                                          double inv_radius, int64_t d, float* out) {
  const double scale = std::sqrt(static_cast<double>(d)) / static_cast<double>(count);
  for (int64_t k = 0; k < d; ++k) {
    normalise_pooled(box[k], box[d + k], pixel_phase(x, y, freq_x[k], freq_y[k], inv_radius),
                     scale, &out[k], &out[d + k]);
  }
}

VECKM_CPU_CLONES void finish_target_event(const float* pooled, double units, const float* freq_t,
                                          int64_t d, float* out) {
  for (int64_t k = 0; k < d; ++k) {
    float c, s;
    unit_phasor(time_phase(units, freq_t[k]), &c, &s);
    float re = pooled[k], im = pooled[d + k];
    complex_multiply(&re, &im, c, -s);
    out[k] = re;
    out[d + k] = im;
  }
}

// Pass 3 for the target rows [row_begin, row_end) of target_rows. Writes, for each target
// slot, pooled (normalised, without the time phase) and its count.
void pool_target_rows(const PixelSlots& slots, const std::vector<int32_t>& target_rows,
                      int64_t row_begin, int64_t row_end, const std::vector<int32_t>& target_of_slot,
                      const float* slot_embed, const int32_t* slot_count, int64_t width,
                      int64_t height, int64_t radius, int64_t d, const float* freq_x,
                      const float* freq_y, float* pooled, int32_t* pooled_count) {
  const int64_t channels = 2 * d;
  const double inv_radius = 1.0 / static_cast<double>(radius);
  std::vector<double> column_sum(width * channels, 0.0);
  std::vector<int64_t> column_count(width, 0);
  std::vector<double> box(channels, 0.0);
  int64_t window_low = 0, window_high = -1;  // rows currently summed into column_sum

  auto add_row = [&](int64_t row, double sign) {
    for (int32_t s = slots.row_slot_start[row]; s < slots.row_slot_start[row + 1]; ++s) {
      const int64_t column = slots.slot_x[s];
      accumulate(&column_sum[column * channels], slot_embed + s * channels, channels, sign);
      column_count[column] += sign > 0 ? slot_count[s] : -slot_count[s];
    }
  };

  for (int64_t i = row_begin; i < row_end; ++i) {
    const int64_t row = target_rows[i];
    const int64_t low = std::max<int64_t>(row - radius, 0);
    const int64_t high = std::min<int64_t>(row + radius, height - 1);
    if (low > window_high) {
      // No overlap with the previous window: restart (this also re-anchors the sums).
      std::fill(column_sum.begin(), column_sum.end(), 0.0);
      std::fill(column_count.begin(), column_count.end(), 0);
      for (int64_t r = low; r <= high; ++r) add_row(r, 1.0);
    } else {
      for (int64_t r = window_low; r < low; ++r) add_row(r, -1.0);
      for (int64_t r = window_high + 1; r <= high; ++r) add_row(r, 1.0);
    }
    window_low = low;
    window_high = high;

    // Running sum along the row over columns [box_low, box_high].
    int64_t box_low = 0, box_high = -1, box_count = 0;
    for (int32_t s = slots.row_slot_start[row]; s < slots.row_slot_start[row + 1]; ++s) {
      const int32_t target = target_of_slot[s];
      if (target < 0) continue;
      const int64_t column = slots.slot_x[s];
      const int64_t low_x = std::max<int64_t>(column - radius, 0);
      const int64_t high_x = std::min<int64_t>(column + radius, width - 1);
      const int64_t slide_cost = (low_x - box_low) + (high_x - box_high);
      if (low_x > box_high || slide_cost >= high_x - low_x + 1) {
        std::fill(box.begin(), box.end(), 0.0);
        box_count = 0;
        for (int64_t c = low_x; c <= high_x; ++c) {
          add_columns(box.data(), &column_sum[c * channels], channels, 1.0);
          box_count += column_count[c];
        }
      } else {
        for (int64_t c = box_low; c < low_x; ++c) {
          add_columns(box.data(), &column_sum[c * channels], channels, -1.0);
          box_count -= column_count[c];
        }
        for (int64_t c = box_high + 1; c <= high_x; ++c) {
          add_columns(box.data(), &column_sum[c * channels], channels, 1.0);
          box_count += column_count[c];
        }
      }
      box_low = low_x;
      box_high = high_x;
      pooled_count[target] = static_cast<int32_t>(box_count);
      finish_target_pixel(box.data(), slots.slot_x[s], slots.slot_y[s],
                          static_cast<int32_t>(box_count), freq_x, freq_y, inv_radius, d,
                          pooled + target * channels);
    }
  }
}

std::tuple<at::Tensor, at::Tensor> encode_cpu(const at::Tensor& t_ns_in, const at::Tensor& x_in,
                                              const at::Tensor& y_in,
                                              const at::Tensor& target_index_in, int64_t width,
                                              int64_t height, const at::Tensor& freq_t_in,
                                              const at::Tensor& freq_x_in,
                                              const at::Tensor& freq_y_in, double tau_s,
                                              int64_t pixel_radius) {
  check_encode_args(t_ns_in, x_in, y_in, target_index_in, width, height, freq_t_in, freq_x_in,
                    freq_y_in, tau_s, pixel_radius);
  TORCH_CHECK(t_ns_in.device().is_cpu(), "t_ns must be a CPU tensor for the CPU kernel");
  const int64_t n = t_ns_in.numel();
  const int64_t m = target_index_in.numel();
  const int64_t d = freq_t_in.numel();
  const int64_t channels = 2 * d;
  auto features = at::zeros({m, channels}, t_ns_in.options().dtype(at::kFloat));
  auto count = at::zeros({m}, t_ns_in.options().dtype(at::kInt));
  if (m == 0) return {features, count};

  const auto t_ns = t_ns_in.contiguous();
  const auto x = coordinates_as_int32(x_in);
  const auto y = coordinates_as_int32(y_in);
  const auto target_index = target_index_in.contiguous();
  const auto freq_t = freq_t_in.contiguous();
  const auto freq_x = freq_x_in.contiguous();
  const auto freq_y = freq_y_in.contiguous();
  const int64_t* t_ptr = t_ns.data_ptr<int64_t>();
  const int32_t* x_ptr = x.data_ptr<int32_t>();
  const int32_t* y_ptr = y.data_ptr<int32_t>();
  const int64_t* target_ptr = target_index.data_ptr<int64_t>();
  const float* freq_t_ptr = freq_t.data_ptr<float>();
  const float* freq_x_ptr = freq_x.data_ptr<float>();
  const float* freq_y_ptr = freq_y.data_ptr<float>();
  for (int64_t i = 0; i < m; ++i) {
    TORCH_CHECK(target_ptr[i] >= 0 && target_ptr[i] < n, "target_index[", i, "] = ",
                target_ptr[i], " is not an event index in [0, ", n, ")");
  }

  // Times relative to the first event, in units of tau (exact int64 difference first).
  const int64_t t_ref_ns = t_ptr[0];
  const double inv_tau_ns = 1e-9 / tau_s;
  std::vector<double> time_units(n);
  at::parallel_for(0, n, 16384, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      time_units[j] = relative_time_units(t_ptr[j], t_ref_ns, inv_tau_ns);
    }
  });

  // 1. Group by pixel.
  const PixelSlots slots = group_by_pixel(x_ptr, y_ptr, n, width, height);
  const auto num_slots = static_cast<int64_t>(slots.slot_x.size());

  // Which slots hold targets, and which rows hold them.
  std::vector<int32_t> target_of_slot(num_slots, -1);
  int32_t num_target_slots = 0;
  for (int64_t i = 0; i < m; ++i) {
    const int32_t slot = slots.event_slot[target_ptr[i]];
    if (slot >= 0 && target_of_slot[slot] < 0) target_of_slot[slot] = num_target_slots++;
  }
  if (num_target_slots == 0) return {features, count};
  std::vector<int32_t> target_rows;
  for (int64_t row = 0; row < height; ++row) {
    for (int32_t s = slots.row_slot_start[row]; s < slots.row_slot_start[row + 1]; ++s) {
      if (target_of_slot[s] >= 0) {
        target_rows.push_back(static_cast<int32_t>(row));
        break;
      }
    }
  }

  // 2. Q per slot (only slots within r rows of a target row matter; computing all is simpler
  // and the rows near targets are most of them in practice).
  const double inv_radius = 1.0 / static_cast<double>(pixel_radius);
  std::vector<float> slot_embed(num_slots * channels);
  std::vector<int32_t> slot_count(num_slots);
  at::parallel_for(0, num_slots, 256, [&](int64_t begin, int64_t end) {
    for (int64_t s = begin; s < end; ++s) {
      const int32_t first = slots.slot_start[s];
      slot_count[s] = slots.slot_start[s + 1] - first;
      embed_slot(slots.event_order.data() + first, slot_count[s], time_units.data(),
                 slots.slot_x[s], slots.slot_y[s], freq_t_ptr, freq_x_ptr, freq_y_ptr,
                 inv_radius, d, slot_embed.data() + s * channels);
    }
  });

  // 3. Box sums per target pixel, in bands of target rows (each band restarts its sums).
  std::vector<float> pooled(static_cast<int64_t>(num_target_slots) * channels);
  std::vector<int32_t> pooled_count(num_target_slots, 0);
  const auto num_target_rows = static_cast<int64_t>(target_rows.size());
  const int64_t band = std::max<int64_t>(
      4, num_target_rows / std::max<int64_t>(1, 4 * at::get_num_threads()));
  at::parallel_for(0, num_target_rows, band, [&](int64_t begin, int64_t end) {
    pool_target_rows(slots, target_rows, begin, end, target_of_slot, slot_embed.data(),
                     slot_count.data(), width, height, pixel_radius, d, freq_x_ptr, freq_y_ptr,
                     pooled.data(), pooled_count.data());
  });

  // 4. Per target event: its own time phase.
  float* features_ptr = features.data_ptr<float>();
  int32_t* count_ptr = count.data_ptr<int32_t>();
  at::parallel_for(0, m, 1024, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int32_t slot = slots.event_slot[target_ptr[i]];
      if (slot < 0) continue;  // outside the image: count 0, zero features (invalid)
      const int32_t target = target_of_slot[slot];
      count_ptr[i] = pooled_count[target];
      finish_target_event(pooled.data() + static_cast<int64_t>(target) * channels,
                          time_units[target_ptr[i]], freq_t_ptr, d, features_ptr + i * channels);
    }
  });
  return {features, count};
}

// The MLP in row chunks that stay in cache, one chunk per task (a single parallel region:
// no BLAS-level barriers per small product); the products use ATen's BLAS.
at::Tensor flow_mlp_cpu(const at::Tensor& features_in, const at::Tensor& w1_in,
                        const at::Tensor& w2_in, const at::Tensor& w3_in, double flow_scale) {
  check_flow_mlp_args(features_in, w1_in, w2_in, w3_in);
  const auto features = features_in.contiguous();
  const auto w1 = w1_in.contiguous();
  const auto w2 = w2_in.contiguous();
  const auto w3 = w3_in.contiguous();
  const int64_t m = features.size(0);
  const int64_t hidden = w1.size(1);
  auto flow = at::empty({m, 2}, features.options());
  if (m == 0) return flow;
  constexpr int64_t kChunk = 512;
  at::parallel_for(0, (m + kChunk - 1) / kChunk, 1, [&](int64_t chunk_begin, int64_t chunk_end) {
    auto hidden1 = at::empty({kChunk, hidden}, features.options());
    auto hidden2 = at::empty({kChunk, hidden}, features.options());
    for (int64_t chunk = chunk_begin; chunk < chunk_end; ++chunk) {
      const int64_t begin = chunk * kChunk;
      const int64_t rows = std::min(kChunk, m - begin);
      auto h1 = hidden1.narrow(0, 0, rows);
      auto h2 = hidden2.narrow(0, 0, rows);
      at::mm_out(h1, features.narrow(0, begin, rows), w1);
      h1.relu_();
      at::mm_out(h2, h1, w2);
      h2.relu_();
      auto out = flow.narrow(0, begin, rows);
      at::mm_out(out, h2, w3);
      if (flow_scale != 1.0) out.mul_(flow_scale);
    }
  });
  return flow;
}

}  // namespace
}  // namespace veckm_flow

TORCH_LIBRARY_IMPL(veckm_flow, CPU, m) {
  m.impl("encode", &veckm_flow::encode_cpu);
  m.impl("flow_mlp", &veckm_flow::flow_mlp_cpu);
}
