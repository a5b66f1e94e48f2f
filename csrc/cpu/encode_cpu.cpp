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

// CPU kernel of the VecKM encoding op (schema and checks: ../encode.cpp; math:
// ../encode_math.h, shared with the CUDA kernel).
//
// encode, in four passes (cost O(N D + M D + rows x W D), independent of the radius r):
//  1. group the in-image events by pixel (two counting sorts, by x then y: O(N + W + H)):
//     "slots"; only slots within r rows of a target row are used below;
//  2. Q_slot[k] = sum over its events of exp(i time phase) times exp(i pixel phase), computed
//     as its row enters the window of pass 3 and kept in a ring of 2r + 1 rows (cache-sized,
//     instead of all slots' Q through memory);
//  3. for every row holding target pixels, slide a (2r+1)-row window of float32 column sums
//     of Q down the image (adding entering rows, subtracting leaving ones; rebuilt from the
//     ring every kReanchorRows image rows and zeroed when a column empties, so rounding does
//     not build up, and the same whatever the bands), then slide a (2r+1)-column float64
//     running sum along the row to each target pixel: the box sum, computed once per target
//     *pixel*;
//  4. per target event: multiply by exp(-i its time phase).
// Phasors are not a sine/cosine per (event, channel): time phasors are a coarse table over the
// call's time span (float64-wrapped entries) times a small-angle series, pixel phasors the
// product of per-column and per-row tables (cached per thread for the same sensor and model);
// both agree with the direct unit_phasor to ~2e-7; time phasors are computed once per
// distinct time frequency (time_frequency_period: 16 of 64 for a C4 model). Large scratch
// buffers are reused per thread (a streaming caller makes hundreds of calls per second; fresh
// pages fault). Parallel over bands of target rows and over targets: a few parts per thread,
// taken dynamically (parallel.h).

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "../encode_math.h"
#include "../ops.h"
#include "parallel.h"

// Hot loops (VECKM_CPU_CLONES) are plain loops over channels that the compiler vectorizes. On
// x86-64 they are compiled twice, for AVX2+FMA and for the baseline ISA, and picked at load
// time; on AArch64 once, for the baseline ARMv8-A, whose Advanced SIMD (NEON, 4 floats) and
// fused multiply-add every such CPU has (each of these functions' channel loops is vectorized:
// GCC's -fopt-info-vec on the cross build; scripts/check_aarch64.sh checks it).
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

// Two stable counting sorts (by x, then by y): O(N + W + H), so a small block on a large
// sensor does not pay for every pixel of the image.
PixelSlots group_by_pixel(const int32_t* x, const int32_t* y, int64_t n, int64_t width,
                          int64_t height) {
  PixelSlots slots;
  slots.event_slot.assign(n, -1);
  std::vector<int32_t> column_start(width + 1, 0);
  int64_t inside = 0;
  for (int64_t j = 0; j < n; ++j) {
    if (x[j] >= 0 && x[j] < width && y[j] >= 0 && y[j] < height) {
      ++column_start[x[j] + 1];
      ++inside;
    }
  }
  for (int64_t c = 0; c < width; ++c) column_start[c + 1] += column_start[c];
  std::vector<int32_t> by_column(inside);
  for (int64_t j = 0; j < n; ++j) {
    if (x[j] >= 0 && x[j] < width && y[j] >= 0 && y[j] < height) {
      by_column[column_start[x[j]]++] = static_cast<int32_t>(j);
    }
  }
  std::vector<int32_t> row_start(height + 1, 0);
  for (const int32_t j : by_column) ++row_start[y[j] + 1];
  for (int64_t r = 0; r < height; ++r) row_start[r + 1] += row_start[r];
  slots.event_order.resize(inside);
  {
    std::vector<int32_t> cursor(row_start.begin(), row_start.end() - 1);
    for (const int32_t j : by_column) slots.event_order[cursor[y[j]]++] = j;
  }
  slots.row_slot_start.assign(height + 1, 0);
  slots.slot_start.reserve(inside + 1);
  slots.slot_start.push_back(0);
  for (int64_t row = 0; row < height; ++row) {
    slots.row_slot_start[row] = static_cast<int32_t>(slots.slot_x.size());
    for (int32_t i = row_start[row]; i < row_start[row + 1];) {
      const int32_t column = x[slots.event_order[i]];
      const auto slot = static_cast<int32_t>(slots.slot_x.size());
      int32_t end = i;
      while (end < row_start[row + 1] && x[slots.event_order[end]] == column) {
        slots.event_slot[slots.event_order[end]] = slot;
        ++end;
      }
      slots.slot_x.push_back(column);
      slots.slot_y.push_back(static_cast<int32_t>(row));
      slots.slot_start.push_back(end);
      i = end;
    }
  }
  slots.row_slot_start[height] = static_cast<int32_t>(slots.slot_x.size());
  return slots;
}

// exp(i u T[k]) for event times u (tau units) as a tabulated coarse phasor exp(i q g T[k])
// (grid step g) times exp(i (u - q g) T[k]), whose angle is at most 1/16 rad: a small-angle
// series instead of a range-reduced sine/cosine per (event, channel). Table entries are
// formed in float64 and wrapped, so the product is as exact as unit_phasor (~2e-7).
struct TimePhasors {
  double origin = 0.0;    // u of entry 0
  double step = 1.0;      // g, in tau units
  double inv_step = 1.0;
  int64_t d = 0;             // distinct time frequencies tabulated (the period, <= D)
  std::vector<float> table;  // [entries][2d]: cos | sin
};

// The smallest period p (a divisor of D) with T[k] = T[k mod p] for all k. The symmetric
// models' frequencies come in orbits of the square's symmetries that share one T, stored
// element-major (k = element * orbits + orbit), so a C4 model's 64 channels have only 16
// distinct time frequencies: time phasors are computed for those and reused (4x less work).
int64_t time_frequency_period(const float* freq_t, int64_t d) {
  for (int64_t period = 1; period < d; ++period) {
    if (d % period != 0) continue;
    bool repeats = true;
    for (int64_t k = period; k < d && repeats; ++k) repeats = freq_t[k] == freq_t[k - period];
    if (repeats) return period;
  }
  return d;
}

// Above this many entries (a very long call) the direct sine/cosine is used instead.
constexpr int64_t kMaxTimeTableEntries = int64_t{1} << 15;

bool build_time_phasors(double u_min, double u_max, const float* freq_t, int64_t d,
                        TimePhasors* phasors) {
  float max_freq = 0.0f;
  for (int64_t k = 0; k < d; ++k) max_freq = std::max(max_freq, std::fabs(freq_t[k]));
  phasors->d = d;
  phasors->origin = u_min;
  phasors->step = max_freq > 0.0f ? 0.125 / static_cast<double>(max_freq) : 1.0;
  phasors->inv_step = 1.0 / phasors->step;
  const double span = (u_max - u_min) * phasors->inv_step;
  if (!(span < static_cast<double>(kMaxTimeTableEntries))) return false;
  const int64_t entries = static_cast<int64_t>(span) + 2;
  phasors->table.resize(entries * 2 * d);
  at::parallel_for(0, entries, 64, [&](int64_t begin, int64_t end) {
    for (int64_t q = begin; q < end; ++q) {
      const double units = phasors->origin + static_cast<double>(q) * phasors->step;
      float* row = phasors->table.data() + q * 2 * d;
      for (int64_t k = 0; k < d; ++k) unit_phasor(time_phase(units, freq_t[k]), &row[k], &row[d + k]);
    }
  });
  return true;
}

// Pixel phasors exp(i x X[k] / r) per column and exp(i y Y[k] / r) per row; their product is
// the phasor of pixel (x, y).
struct PixelPhasors {
  int64_t d = 0;
  std::vector<float> column;  // [W][2D]
  std::vector<float> row;     // [H][2D]
};

void fill_axis_phasors(std::vector<float>* table, int64_t low, int64_t high, int64_t size,
                       const float* freq, double inv_radius, int64_t d) {
  table->assign(size * 2 * d, 0.0f);
  for (int64_t v = low; v <= high; ++v) {
    float* entry = table->data() + v * 2 * d;
    for (int64_t k = 0; k < d; ++k) {
      unit_phasor(static_cast<float>(wrap_phase(static_cast<double>(v) *
                                                static_cast<double>(freq[k]) * inv_radius)),
                  &entry[k], &entry[d + k]);
    }
  }
}

// The pixel phasor tables of the last (sensor size, radius, frequencies) seen by this thread:
// a streaming caller encodes hundreds of blocks per second with the same model and sensor.
const PixelPhasors& cached_pixel_phasors(int64_t width, int64_t height, int64_t radius,
                                         const float* freq_x, const float* freq_y, int64_t d) {
  struct Cache {
    int64_t width = 0, height = 0, radius = 0;
    std::vector<float> freq_x, freq_y;
    PixelPhasors phasors;
  };
  thread_local Cache cache;
  if (cache.width != width || cache.height != height || cache.radius != radius ||
      cache.freq_x.size() != static_cast<size_t>(d) ||
      !std::equal(freq_x, freq_x + d, cache.freq_x.begin()) ||
      !std::equal(freq_y, freq_y + d, cache.freq_y.begin())) {
    const double inv_radius = 1.0 / static_cast<double>(radius);
    cache.phasors.d = d;
    fill_axis_phasors(&cache.phasors.column, 0, width - 1, width, freq_x, inv_radius, d);
    fill_axis_phasors(&cache.phasors.row, 0, height - 1, height, freq_y, inv_radius, d);
    cache.width = width;
    cache.height = height;
    cache.radius = radius;
    cache.freq_x.assign(freq_x, freq_x + d);
    cache.freq_y.assign(freq_y, freq_y + d);
  }
  return cache.phasors;
}

// The table row of the coarse phasor nearest to time `units` (cos | sin, phasors.d each), and
// the remaining angle per unit frequency (|remainder * T| <= 1/16 rad).
inline const float* coarse_time_phasor(const TimePhasors& phasors, double units,
                                       float* remainder) {
  const double offset = (units - phasors.origin) * phasors.inv_step;
  const auto q = static_cast<int64_t>(offset + 0.5);
  *remainder = static_cast<float>((offset - static_cast<double>(q)) * phasors.step);
  return phasors.table.data() + q * 2 * phasors.d;
}

// out[k] (re | im) = sum over the events of exp(i time phase) [direct or tabulated], for the
// phasors.d (= the time-frequency period) distinct time frequencies; units: the events' times
// (tau units), contiguous.
VECKM_CPU_CLONES void sum_time_phasors(const double* units_of_events, int32_t count,
                                       const TimePhasors& phasors,
                                       const float* __restrict__ freq_t,
                                       float* __restrict__ out) {
  const int64_t d = phasors.d;
  float* __restrict__ out_re = out;
  float* __restrict__ out_im = out + d;
  for (int64_t k = 0; k < d; ++k) {
    out_re[k] = 0.0f;
    out_im[k] = 0.0f;
  }
  if (phasors.table.empty()) {
    for (int32_t e = 0; e < count; ++e) {
      const double units = units_of_events[e];
      for (int64_t k = 0; k < d; ++k) {
        float c, s;
        unit_phasor(time_phase(units, freq_t[k]), &c, &s);
        out_re[k] += c;
        out_im[k] += s;
      }
    }
    return;
  }
  for (int32_t e = 0; e < count; ++e) {
    float remainder;
    const float* __restrict__ coarse_re =
        coarse_time_phasor(phasors, units_of_events[e], &remainder);
    const float* __restrict__ coarse_im = coarse_re + d;
    for (int64_t k = 0; k < d; ++k) {
      float c, s;
      small_angle_phasor(remainder * freq_t[k], &c, &s);
      out_re[k] += coarse_re[k] * c - coarse_im[k] * s;
      out_im[k] += coarse_re[k] * s + coarse_im[k] * c;
    }
  }
}

// Q of one slot: (sum of its time phasors) times its pixel phasor, [re(D) | im(D)];
// time_sum: scratch for the 2 x period time sums.
VECKM_CPU_CLONES void embed_slot(const double* units_of_events, int32_t count,
                                 const TimePhasors& time_phasors, const float* freq_t, int64_t d,
                                 const float* __restrict__ column_phasor,
                                 const float* __restrict__ row_phasor,
                                 float* __restrict__ time_sum, float* __restrict__ out) {
  const int64_t period = time_phasors.d;
  sum_time_phasors(units_of_events, count, time_phasors, freq_t, time_sum);
  for (int64_t base = 0; base < d; base += period) {
    for (int64_t o = 0; o < period; ++o) {
      const int64_t k = base + o;
      const float pixel_re = column_phasor[k] * row_phasor[k] - column_phasor[d + k] * row_phasor[d + k];
      const float pixel_im = column_phasor[k] * row_phasor[d + k] + column_phasor[d + k] * row_phasor[k];
      float re = time_sum[o], im = time_sum[period + o];
      complex_multiply(&re, &im, pixel_re, pixel_im);
      out[k] = re;
      out[d + k] = im;
    }
  }
}

// Column sums in float32: half the memory traffic of float64 (a 640-pixel row's are 320 KB
// instead of 640 KB, and each slot adds and later subtracts 128 of them); 9-16 % less CPU per
// stride-8 block of a full-frame scene at 4 M events/s. Rebuilt every kReanchorRows image rows
// (pool_target_rows) and zeroed when a column empties; against float64 sums the features
// differ by <= 2.2e-6 (dense, pixel-heavy and full-frame test streams).
using BoxSum = float;
constexpr int64_t kReanchorRows = 32;

VECKM_CPU_CLONES void accumulate(BoxSum* __restrict__ sum, const float* __restrict__ values, int64_t length, BoxSum sign) {
  for (int64_t k = 0; k < length; ++k) sum[k] += sign * static_cast<BoxSum>(values[k]);
}

// The running box along a row stays float64 (128 values, in L1): it slides along whole rows.
VECKM_CPU_CLONES void add_columns(double* __restrict__ sum,
                                  const BoxSum* __restrict__ column_sum, int64_t length,
                                  double sign) {
  for (int64_t k = 0; k < length; ++k) sum[k] += sign * column_sum[k];
}

// box * conj(pixel phasor) * sqrt(D) / count (count >= 1: the pixel holds the target).
VECKM_CPU_CLONES void finish_target_pixel(const double* __restrict__ box, int32_t count,
                                          const float* __restrict__ column_phasor,
                                          const float* __restrict__ row_phasor, int64_t d,
                                          float* __restrict__ out) {
  const double scale = std::sqrt(static_cast<double>(d)) / static_cast<double>(count);
  for (int64_t k = 0; k < d; ++k) {
    const float pixel_re = column_phasor[k] * row_phasor[k] - column_phasor[d + k] * row_phasor[d + k];
    const float pixel_im = column_phasor[k] * row_phasor[d + k] + column_phasor[d + k] * row_phasor[k];
    double re = box[k], im = box[d + k];
    complex_multiply(&re, &im, pixel_re, -pixel_im);
    out[k] = static_cast<float>(re * scale);
    out[d + k] = static_cast<float>(im * scale);
  }
}

// Features of target events [begin, end): pooled of its pixel * conj(its time phasor).
VECKM_CPU_CLONES void finish_target_events(int64_t begin, int64_t end, const int64_t* target_event,
                                           const int32_t* event_slot,
                                           const int32_t* target_of_slot, const float* pooled,
                                           const int32_t* pooled_count, const double* time_units,
                                           const TimePhasors& phasors,
                                           const float* __restrict__ freq_t, int64_t d,
                                           float* features, int32_t* count) {
  const int64_t period = phasors.d;
  std::vector<float> time_phasor(2 * period);  // cos | sin of the target's time phases
  float* __restrict__ cos_t = time_phasor.data();
  float* __restrict__ sin_t = cos_t + period;
  for (int64_t i = begin; i < end; ++i) {
    float* __restrict__ out = features + i * 2 * d;
    const int32_t slot = event_slot[target_event[i]];
    if (slot < 0) {  // outside the image: count 0, zero features (invalid)
      count[i] = 0;
      for (int64_t k = 0; k < 2 * d; ++k) out[k] = 0.0f;
      continue;
    }
    const int32_t target = target_of_slot[slot];
    count[i] = pooled_count[target];
    const float* __restrict__ in = pooled + static_cast<int64_t>(target) * 2 * d;
    const double units = time_units[target_event[i]];
    if (phasors.table.empty()) {
      for (int64_t o = 0; o < period; ++o) {
        unit_phasor(time_phase(units, freq_t[o]), &cos_t[o], &sin_t[o]);
      }
    } else {
      float remainder;
      const float* __restrict__ coarse_re = coarse_time_phasor(phasors, units, &remainder);
      const float* __restrict__ coarse_im = coarse_re + period;
      for (int64_t o = 0; o < period; ++o) {
        float fine_c, fine_s;
        small_angle_phasor(remainder * freq_t[o], &fine_c, &fine_s);
        cos_t[o] = coarse_re[o] * fine_c - coarse_im[o] * fine_s;
        sin_t[o] = coarse_re[o] * fine_s + coarse_im[o] * fine_c;
      }
    }
    for (int64_t base = 0; base < d; base += period) {
      for (int64_t o = 0; o < period; ++o) {
        const int64_t k = base + o;
        out[k] = in[k] * cos_t[o] + in[d + k] * sin_t[o];
        out[d + k] = in[d + k] * cos_t[o] - in[k] * sin_t[o];
      }
    }
  }
}

// The per-call inputs of passes 2-3.
struct PoolInputs {
  const PixelSlots* slots;
  const std::vector<int32_t>* target_of_slot;
  const double* slot_units;  // event times in slot order (tau units)
  const TimePhasors* time_phasors;
  const float* freq_t;
  const PixelPhasors* pixel;
  int64_t width, height, radius, d;
};

// Passes 2-3 for the target rows [row_begin, row_end) of target_rows: box sum per target
// pixel, normalised (everything but the target's own time phase), and its count. A row's slot
// embeddings Q are computed when the row enters the sliding window and kept in a ring of
// 2r + 1 rows until it leaves (a whole call's Q, 512 B per pixel with events, was tens of MB
// written and read twice through memory).
void pool_target_rows(const PoolInputs& in, const std::vector<int32_t>& target_rows,
                      int64_t row_begin, int64_t row_end, float* pooled, int32_t* pooled_count) {
  const PixelSlots& slots = *in.slots;
  const int64_t d = in.d, width = in.width, height = in.height, radius = in.radius;
  const int64_t channels = 2 * d;
  const int64_t ring_rows = 2 * radius + 1;
  thread_local std::vector<float> ring_buffer;  // [ring_rows][width][channels], reused
  if (static_cast<int64_t>(ring_buffer.size()) < ring_rows * width * channels) {
    ring_buffer.resize(ring_rows * width * channels);
  }
  std::vector<float> time_sum(2 * in.time_phasors->d);
  // Column sums, kept all-zero between uses (only the touched columns are cleared), per
  // thread: a call with scattered target rows restarts often, and clearing whole image rows of
  // 2D float64 each time would cost more than the sums.
  thread_local std::vector<BoxSum> column_sum_buffer;
  thread_local std::vector<int64_t> column_count_buffer;
  if (static_cast<int64_t>(column_count_buffer.size()) < width ||
      static_cast<int64_t>(column_sum_buffer.size()) < width * channels) {
    column_sum_buffer.assign(width * channels, 0.0);
    column_count_buffer.assign(width, 0);
  }
  BoxSum* column_sum = column_sum_buffer.data();
  int64_t* column_count = column_count_buffer.data();
  std::vector<int32_t> touched;  // columns written since the last clear
  std::vector<uint8_t> is_touched(width, 0);
  auto clear_columns = [&]() {
    for (const int32_t column : touched) {
      std::fill(column_sum + column * channels, column_sum + (column + 1) * channels, BoxSum(0));
      column_count[column] = 0;
      is_touched[column] = 0;
    }
    touched.clear();
  };
  std::vector<double> box(channels, 0.0);
  int64_t window_low = 0, window_high = -1;  // rows currently summed into column_sum

  // sign > 0: embed the row's slots into the ring and add them; < 0: subtract them; 0: add
  // them again from the ring (re-anchoring).
  auto add_row = [&](int64_t row, int sign) {
    const int32_t row_start = slots.row_slot_start[row];
    float* ring = ring_buffer.data() + (row % ring_rows) * width * channels;
    for (int32_t s = row_start; s < slots.row_slot_start[row + 1]; ++s) {
      const int64_t column = slots.slot_x[s];
      const int32_t first = slots.slot_start[s];
      const int32_t count = slots.slot_start[s + 1] - first;
      float* embedding = ring + (s - row_start) * channels;
      if (sign > 0) {  // entering the window: embed once, kept in the ring until it leaves
        embed_slot(in.slot_units + first, count, *in.time_phasors, in.freq_t, d,
                   in.pixel->column.data() + column * channels,
                   in.pixel->row.data() + row * channels, time_sum.data(), embedding);
      }
      if (!is_touched[column]) {
        is_touched[column] = 1;
        touched.push_back(static_cast<int32_t>(column));
      }
      BoxSum* sum = &column_sum[column * channels];
      column_count[column] += sign >= 0 ? count : -count;
      if (sign < 0 && column_count[column] == 0) {
        std::fill(sum, sum + channels, BoxSum(0));  // empty again: exactly zero
      } else {
        accumulate(sum, embedding, channels, sign >= 0 ? BoxSum(1) : BoxSum(-1));
      }
    }
  };
  // The sums are rebuilt (anchored) at target row i when its window does not overlap the
  // previous one, or when i is the first target row of a new group of kReanchorRows image
  // rows: float32 rounding left by rows that have left does not build up down the image, and
  // the sums at a row depend only on the rows since its anchor, not on where a band began --
  // a band starts at the anchor of its first row, so the features do not depend on the
  // number of threads.
  auto window_of = [&](int64_t i) {
    const int64_t row = target_rows[i];
    return std::make_pair(std::max<int64_t>(row - radius, 0),
                          std::min<int64_t>(row + radius, height - 1));
  };
  auto is_anchor = [&](int64_t i) {
    return i == 0 || window_of(i).first > window_of(i - 1).second ||
           target_rows[i] / kReanchorRows != target_rows[i - 1] / kReanchorRows;
  };
  int64_t first = row_begin;
  while (first > 0 && !is_anchor(first)) --first;

  for (int64_t i = first; i < row_end; ++i) {
    const int64_t row = target_rows[i];
    const auto [low, high] = window_of(i);
    if (i == first || low > window_high) {
      clear_columns();
      for (int64_t r = low; r <= high; ++r) add_row(r, 1);
    } else {
      for (int64_t r = window_low; r < low; ++r) add_row(r, -1);
      for (int64_t r = window_high + 1; r <= high; ++r) add_row(r, 1);
      if (is_anchor(i)) {  // rebuild from the ring (same order and values as a fresh start)
        clear_columns();
        for (int64_t r = low; r <= high; ++r) add_row(r, 0);
      }
    }
    window_low = low;
    window_high = high;
    if (i < row_begin) continue;  // replaying from the anchor up to the band's first row

    // Running sum along the row over columns [box_low, box_high].
    int64_t box_low = 0, box_high = -1, box_count = 0;
    for (int32_t s = slots.row_slot_start[row]; s < slots.row_slot_start[row + 1]; ++s) {
      const int32_t target = (*in.target_of_slot)[s];
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
      finish_target_pixel(box.data(), static_cast<int32_t>(box_count),
                          in.pixel->column.data() + column * channels,
                          in.pixel->row.data() + row * channels, d,
                          pooled + static_cast<int64_t>(target) * channels);
    }
  }
  clear_columns();
}

// The large per-call buffer (pooled target pixels) is kept per calling thread and reused: a
// streaming caller makes hundreds of calls per second, and fresh pages of a large allocation
// cost a page fault each. It holds the largest call's size (64 complex floats = 512 B per
// target pixel).
struct EncodeScratch {
  std::vector<float> pooled;
};

EncodeScratch& thread_scratch() {
  thread_local EncodeScratch scratch;
  return scratch;
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
  if (use_sparse_encode(target_index_in.numel(), width, height, pixel_radius, c10::kCPU)) {
    return encode_sparse_cpu(
        prepare_encode_call(t_ns_in, x_in, y_in, target_index_in, width, height, freq_t_in,
                            freq_x_in, freq_y_in, tau_s, pixel_radius, c10::kCPU, true),
        width, height, pixel_radius);
  }
  const int64_t n = t_ns_in.numel();
  const int64_t m = target_index_in.numel();
  const int64_t d = freq_t_in.numel();
  const int64_t channels = 2 * d;
  // Rows are all written below (invalid targets get zeros), so no zero-fill up front.
  auto features = at::empty({m, channels}, t_ns_in.options().dtype(at::kFloat));
  auto count = at::empty({m}, t_ns_in.options().dtype(at::kInt));
  if (m == 0) return {features, count};

  const auto [t_ns, x, y, target_index, freq_t, freq_x, freq_y] = contiguous_encode_tensors(
      t_ns_in, x_in, y_in, target_index_in, freq_t_in, freq_x_in, freq_y_in);
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
  float* features_ptr = features.data_ptr<float>();
  int32_t* count_ptr = count.data_ptr<int32_t>();

  // Times relative to the first event, in units of tau (exact int64 difference first).
  const int64_t t_ref_ns = t_ptr[0];
  const double inv_tau_ns = 1e-9 / tau_s;
  std::vector<double> time_units(n);
  parallel_balanced(n, 16384, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      time_units[j] = relative_time_units(t_ptr[j], t_ref_ns, inv_tau_ns);
    }
  });

  // 1. Group by pixel.
  const PixelSlots slots = group_by_pixel(x_ptr, y_ptr, n, width, height);
  const auto num_slots = static_cast<int64_t>(slots.slot_x.size());
  // The in-image events' times in slot order: one pass of independent loads, instead of a
  // dependent cache miss per event in the phasor sums below.
  std::vector<double> slot_units(slots.event_order.size());
  parallel_balanced(static_cast<int64_t>(slot_units.size()), 16384,
                    [&](int64_t begin, int64_t end) {
                      for (int64_t i = begin; i < end; ++i) {
                        slot_units[i] = time_units[slots.event_order[i]];
                      }
                    });

  // Which slots hold targets, and which rows hold them.
  std::vector<int32_t> target_of_slot(num_slots, -1);
  int32_t num_target_slots = 0;
  for (int64_t i = 0; i < m; ++i) {
    const int32_t slot = slots.event_slot[target_ptr[i]];
    if (slot >= 0 && target_of_slot[slot] < 0) target_of_slot[slot] = num_target_slots++;
  }
  if (num_target_slots == 0) {
    features.zero_();
    count.zero_();
    return {features, count};
  }
  std::vector<int32_t> target_rows;
  for (int64_t row = 0; row < height; ++row) {
    for (int32_t s = slots.row_slot_start[row]; s < slots.row_slot_start[row + 1]; ++s) {
      if (target_of_slot[s] >= 0) {
        target_rows.push_back(static_cast<int32_t>(row));
        break;
      }
    }
  }

  // Phasor tables: time (over the span of the in-image events) and pixel axes.
  double u_min = 0.0, u_max = 0.0;
  if (!slot_units.empty()) {
    const auto [low, high] = std::minmax_element(slot_units.begin(), slot_units.end());
    u_min = *low;
    u_max = *high;
  }
  TimePhasors time_phasors;
  const int64_t time_period = time_frequency_period(freq_t_ptr, d);
  if (!build_time_phasors(u_min, u_max, freq_t_ptr, time_period, &time_phasors)) {
    time_phasors.table.clear();  // too long a span: direct sine/cosine
  }
  const PixelPhasors& pixel =
      cached_pixel_phasors(width, height, pixel_radius, freq_x_ptr, freq_y_ptr, d);

  EncodeScratch& scratch = thread_scratch();

  // 2-3. Q per slot of the rows read, and box sums per target pixel, in bands of target rows
  // (each band restarts its sums).
  std::vector<float>& pooled = scratch.pooled;
  pooled.resize(static_cast<int64_t>(num_target_slots) * channels);
  std::vector<int32_t> pooled_count(num_target_slots, 0);
  const PoolInputs inputs{&slots,        &target_of_slot, slot_units.data(), &time_phasors,
                          freq_t_ptr,    &pixel,          width,             height,
                          pixel_radius,  d};
  // Cost of a target row: embedding the row entering its window (its events and slots), the
  // slots of the row leaving it, and its target pixels (each a box slide or restart of up to
  // 2r + 1 columns).
  const auto num_target_rows = static_cast<int64_t>(target_rows.size());
  auto slots_in_row = [&](int64_t row) -> int64_t {
    if (row < 0 || row >= height) return 0;
    return slots.row_slot_start[row + 1] - slots.row_slot_start[row];
  };
  auto events_in_row = [&](int64_t row) -> int64_t {
    if (row < 0 || row >= height) return 0;
    return slots.slot_start[slots.row_slot_start[row + 1]] -
           slots.slot_start[slots.row_slot_start[row]];
  };
  std::vector<int64_t> row_cost(num_target_rows + 1, 0);
  for (int64_t i = 0; i < num_target_rows; ++i) {
    const int64_t row = target_rows[i];
    int64_t targets_in_row = 0;
    for (int32_t s = slots.row_slot_start[row]; s < slots.row_slot_start[row + 1]; ++s) {
      targets_in_row += target_of_slot[s] >= 0;
    }
    row_cost[i + 1] = row_cost[i] + 3 * slots_in_row(row + pixel_radius) +
                      events_in_row(row + pixel_radius) +
                      slots_in_row(row - pixel_radius - 1) + 4 * targets_in_row + 1;
  }
  // Two bands per thread: each band starts by embedding and summing the 2r + 1 rows of its
  // first window again.
  parallel_by_cost(
      row_cost, 256,
      [&](int64_t begin, int64_t end) {
        pool_target_rows(inputs, target_rows, begin, end, pooled.data(), pooled_count.data());
      },
      2);

  // 4. Per target event: its own time phase.
  parallel_balanced(m, 256, [&](int64_t begin, int64_t end) {
    finish_target_events(begin, end, target_ptr, slots.event_slot.data(), target_of_slot.data(),
                         pooled.data(), pooled_count.data(), time_units.data(), time_phasors,
                         freq_t_ptr, d, features_ptr, count_ptr);
  });
  return {features, count};
}

}  // namespace
}  // namespace veckm_flow

TORCH_LIBRARY_IMPL(veckm_flow, CPU, m) {
  m.impl("encode", &veckm_flow::encode_cpu);
}
