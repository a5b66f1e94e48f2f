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

// CUDA kernel of the VecKM encoding op (schema and checks: ../encode.cpp; math:
// ../encode_math.h, shared with the CPU kernel).
//
// Same decomposition and numerics as cpu/encode_cpu.cpp:
//  1. group in-image events by pixel (sort on the pixel id): slots;
//  2. Q_slot[k] = sum_events exp(i time phase) * exp(i pixel phase)   (float, one thread per
//     (slot, k));
//  3. box sum of Q over the (2r+1)^2 window of each target pixel, separable: float64 running
//     column sums for the rows holding targets (one thread per (segment of rows, x, k)), then
//     float64 row sums at the target pixels (one thread per (target pixel, k)), normalised by
//     sqrt(D)/C;
//  4. per target event: times exp(-i its time phase).
// Rows are processed in chunks that bound the float64 column-sum buffer.
// With few targets (use_sparse_encode, ../encode.cpp) the per-target path replaces 3-4: Q only
// for the slots inside some target's window, then one thread per (target event, k) sums its
// window through the pixel -> slot map (gather_window_channel, shared with the CPU's sparse
// path) and finishes the feature: no column sums over whole rows.
// No host synchronisation: the numbers of slots, target pixels and target rows stay on the
// device (kernels launch over host-known bounds and read the true counts there), and a
// target_index outside [0, N) is not checked on the host but gets count -1 and zero features
// (the op's error flag on CUDA, read with the results).

#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cmath>

#include "../encode_math.h"
#include "../ops.h"
#include "launch.cuh"

namespace veckm_flow {
namespace {

// Bound on the float64 column-sum buffer per chunk of target rows.
constexpr int64_t kColumnSumBytes = int64_t{512} << 20;

__global__ void pixel_key_kernel(const int32_t* x, const int32_t* y, int64_t n, int64_t width,
                                 int64_t height, int32_t* key) {
  const int64_t j = item_index();
  if (j >= n) return;
  const bool inside = x[j] >= 0 && x[j] < width && y[j] >= 0 && y[j] < height;
  // width * height <= 2^30 (checked), so keys and the outside key fit in int32.
  key[j] = static_cast<int32_t>(inside ? y[j] * width + x[j] : width * height);
}

// run_start[j] = 1 where a run of equal in-image keys begins in the sorted keys.
__global__ void run_start_kernel(const int32_t* sorted_key, int64_t n, int32_t outside_key,
                                 uint8_t* run_start) {
  const int64_t j = item_index();
  if (j >= n) return;
  run_start[j] = sorted_key[j] != outside_key && (j == 0 || sorted_key[j] != sorted_key[j - 1]);
}

// Slot of every event, scattered back through the sort order (-1: outside the image).
// run_count[j] = number of run starts at sorted positions <= j.
__global__ void event_slot_kernel(const int64_t* order, const int32_t* sorted_key,
                                  const int64_t* run_count, int64_t n, int32_t outside_key,
                                  int64_t* event_slot) {
  const int64_t j = item_index();
  if (j >= n) return;
  event_slot[order[j]] = sorted_key[j] == outside_key ? -1 : run_count[j] - 1;
}

// Slots, their number left on the device (num_slots = run_count[n - 1]): slot s, the s-th run
// of equal in-image keys, starts at sorted position slot_start[s] and has the pixel key
// slot_key[s]; slot_map maps that pixel to s; slot_start[num_slots] is where the out-of-image
// events begin.
__global__ void build_slots_kernel(const int32_t* sorted_key, const int64_t* run_count,
                                   int64_t n, int32_t outside_key, int64_t* slot_start,
                                   int64_t* slot_key, int32_t* slot_map) {
  const int64_t j = item_index();
  if (j >= n) return;
  const int32_t key = sorted_key[j];
  if (key == outside_key) return;
  const int64_t slot = run_count[j] - 1;
  if (j == 0 || sorted_key[j - 1] != key) {
    slot_start[slot] = j;
    slot_key[slot] = key;
    slot_map[key] = static_cast<int32_t>(slot);
  }
  if (j == n - 1 || sorted_key[j + 1] == outside_key) slot_start[slot + 1] = j + 1;
}

// Slot of each target event (-1: outside the image). A target_index outside [0, n) gets slot
// -1 and count -1 (with zero features): the error flag that replaces a host-side check.
__global__ void target_slot_kernel(const int64_t* target_index, int64_t m,
                                   const int64_t* event_slot, int64_t n, int64_t* target_slot,
                                   int32_t* count) {
  const int64_t i = item_index();
  if (i >= m) return;
  const int64_t j = target_index[i];
  if (j < 0 || j >= n) {
    target_slot[i] = -1;
    count[i] = -1;
    return;
  }
  target_slot[i] = event_slot[j];
}

// Marks the slots holding targets and the rows holding those slots (all writers write 1).
__global__ void mark_targets_kernel(const int64_t* target_slot, int64_t m,
                                    const int64_t* slot_key, int64_t width, uint8_t* slot_flag,
                                    uint8_t* row_flag) {
  const int64_t i = item_index();
  if (i >= m) return;
  const int64_t slot = target_slot[i];
  if (slot < 0) return;
  slot_flag[slot] = 1;
  row_flag[slot_key[slot] / width] = 1;
}

// The target pixels (flagged slots) and target rows (flagged rows) in ascending order, by
// their ranks (inclusive prefix sums of the flags): no host read of how many there are.
__global__ void compact_flags_kernel(const uint8_t* flag, const int64_t* rank, int64_t size,
                                     const int64_t* value, int64_t* compact, int64_t* to_index) {
  const int64_t i = item_index();
  if (i >= size || flag[i] == 0) return;
  compact[rank[i] - 1] = value == nullptr ? i : value[i];
  to_index[i] = rank[i] - 1;
}

// Index of each target event's pixel among the target pixels (-1: outside the image).
__global__ void compact_targets_kernel(const int64_t* target_slot, int64_t m,
                                       const int64_t* slot_to_target, int64_t* target_compact) {
  const int64_t i = item_index();
  if (i >= m) return;
  const int64_t slot = target_slot[i];
  target_compact[i] = slot < 0 ? -1 : slot_to_target[slot];
}

// needed [slots] (nullptr: every slot): only the flagged slots are embedded.
// slot_capacity: the host's bound on the slots; num_slots (on the device): their number.
__global__ void embed_slot_kernel(const int64_t* order, const int64_t* slot_start,
                                  const int64_t* slot_key, int64_t slot_capacity,
                                  const int64_t* num_slots, const uint8_t* needed,
                                  const int64_t* t_ns, double inv_tau_ns, const float* freq_t,
                                  const float* freq_x, const float* freq_y, double inv_radius,
                                  int64_t width, int64_t d, float* slot_embed) {
  int64_t slot, k;
  if (!item_and_channel(slot_capacity, d, &slot, &k)) return;
  if (slot >= *num_slots || (needed != nullptr && needed[slot] == 0)) return;
  const int64_t t_ref_ns = t_ns[0];
  float re = 0.0f, im = 0.0f;
  for (int64_t i = slot_start[slot]; i < slot_start[slot + 1]; ++i) {
    add_time_phasor(relative_time_units(t_ns[order[i]], t_ref_ns, inv_tau_ns), freq_t[k], &re,
                    &im);
  }
  apply_pixel_phasor(static_cast<int32_t>(slot_key[slot] % width),
                     static_cast<int32_t>(slot_key[slot] / width), freq_x[k], freq_y[k],
                     inv_radius, &re, &im);
  slot_embed[slot * 2 * d + k] = re;
  slot_embed[slot * 2 * d + d + k] = im;
}

// Sparse path: flags the slots inside the window of some target (one thread per (target
// event, window pixel); all writers write 1).
__global__ void mark_window_slots_kernel(const int64_t* target_slot, int64_t m,
                                         const int64_t* slot_key, const int32_t* slot_map,
                                         int64_t width, int64_t height, int64_t radius,
                                         uint8_t* needed) {
  const int64_t side = 2 * radius + 1;
  const int64_t item = item_index();
  if (item >= m * side * side) return;
  const int64_t slot = target_slot[item / (side * side)];
  if (slot < 0) return;
  const int64_t pixel_x = slot_key[slot] % width + item % side - radius;
  const int64_t pixel_y = slot_key[slot] / width + (item / side) % side - radius;
  if (pixel_x < 0 || pixel_x >= width || pixel_y < 0 || pixel_y >= height) return;
  const int32_t window_slot = slot_map[pixel_y * width + pixel_x];
  if (window_slot >= 0) needed[window_slot] = 1;
}

// Sparse path: one thread per (target event, k): the window sum, normalised, times the
// target's own time phase. Targets outside the image keep their zeros.
__global__ void gather_targets_kernel(const int64_t* target_index, const int64_t* target_slot,
                                      int64_t m, const int64_t* slot_key,
                                      const int32_t* slot_map, const float* slot_embed,
                                      const int64_t* slot_count, const int64_t* t_ns,
                                      double inv_tau_ns, const float* freq_t,
                                      const float* freq_x, const float* freq_y,
                                      double inv_radius, int64_t width, int64_t height,
                                      int64_t radius, int64_t d, float* features,
                                      int32_t* count) {
  int64_t i, k;
  if (!item_and_channel(m, d, &i, &k)) return;
  const int64_t slot = target_slot[i];
  if (slot < 0) return;
  const auto x = static_cast<int32_t>(slot_key[slot] % width);
  const auto y = static_cast<int32_t>(slot_key[slot] / width);
  double re, im;
  const int64_t window_count = gather_window_channel(slot_map, slot_embed, slot_count, x, y,
                                                     width, height, radius, d, k, &re, &im);
  // window_count >= 1: the target pixel holds the target event itself.
  const double scale = sqrt(static_cast<double>(d)) / static_cast<double>(window_count);
  float out_re, out_im;
  normalise_pooled(re, im, pixel_phase(x, y, freq_x[k], freq_y[k], inv_radius), scale, &out_re,
                   &out_im);
  apply_target_time_phase(relative_time_units(t_ns[target_index[i]], t_ns[0], inv_tau_ns),
                          freq_t[k], &out_re, &out_im);
  features[i * 2 * d + k] = out_re;
  features[i * 2 * d + d + k] = out_im;
  if (k == 0) count[i] = static_cast<int32_t>(window_count);
}

// Column sums over rows [row - r, row + r] for the target rows of this chunk (sorted,
// distinct). One thread per (segment of kRowsPerSegment target rows, column, channel) keeps
// a running float64 sum down the column: moving to the next target row adds the rows that
// enter the window and subtracts those that leave it, so the cost per target row does not
// depend on r (the window is recomputed only after a gap wider than the window). The sums
// of float32 values in float64 are exact here, so the subtractions leave no drift.
constexpr int64_t kRowsPerSegment = 32;

// The chunk holds the target rows [chunk_begin, chunk_begin + rows_bound) (the host's bound)
// up to the last one (num_target_rows, on the device).
__global__ void column_sum_kernel(const int64_t* target_rows, int64_t chunk_begin,
                                  int64_t rows_bound, const int64_t* num_target_rows,
                                  const int32_t* slot_map, const float* slot_embed,
                                  const int64_t* slot_count, int64_t width, int64_t height,
                                  int64_t radius, int64_t d, double* column_sum,
                                  int64_t* column_count) {
  const int64_t channels = 2 * d;
  const int64_t rows_left = *num_target_rows - chunk_begin;
  const int64_t rows_in_chunk = rows_left < rows_bound ? rows_left : rows_bound;
  if (rows_in_chunk <= 0) return;
  target_rows += chunk_begin;
  const int64_t segments = (rows_in_chunk + kRowsPerSegment - 1) / kRowsPerSegment;
  const int64_t item = item_index();
  if (item >= segments * width * channels) return;
  const int64_t channel = item % channels;
  const int64_t column = (item / channels) % width;
  const int64_t segment = item / (channels * width);
  const int64_t first = segment * kRowsPerSegment;
  const int64_t last = first + kRowsPerSegment < rows_in_chunk ? first + kRowsPerSegment
                                                               : rows_in_chunk;
  const bool with_count = channel == 0;
  double sum = 0.0;
  int64_t count = 0;
  int64_t low = 0, high = -1;  // rows currently summed (empty)
  for (int64_t i = first; i < last; ++i) {
    const int64_t row = target_rows[i];
    const int64_t new_low = row - radius < 0 ? 0 : row - radius;
    const int64_t new_high = row + radius > height - 1 ? height - 1 : row + radius;
    int64_t add_from = high + 1;
    if (new_low > high) {  // no overlap with the previous window: start afresh
      sum = 0.0;
      count = 0;
      add_from = new_low;
    } else {
      for (int64_t r = low; r < new_low; ++r) {
        const int32_t slot = slot_map[r * width + column];
        if (slot < 0) continue;
        sum -= static_cast<double>(slot_embed[slot * channels + channel]);
        if (with_count) count -= slot_count[slot];
      }
    }
    for (int64_t r = add_from; r <= new_high; ++r) {
      const int32_t slot = slot_map[r * width + column];
      if (slot < 0) continue;
      sum += static_cast<double>(slot_embed[slot * channels + channel]);
      if (with_count) count += slot_count[slot];
    }
    low = new_low;
    high = new_high;
    column_sum[(i * width + column) * channels + channel] = sum;
    if (with_count) column_count[i * width + column] = count;
  }
}

// Row sums of the column sums at each target pixel of this chunk, normalised.
// target_capacity: the host's bound on the target pixels; num_target_slots (on the device):
// their number. row_to_index: a target row's index among the target rows.
__global__ void box_sum_kernel(const int64_t* target_slot_key, const int64_t* row_to_index,
                               int64_t target_capacity, const int64_t* num_target_slots,
                               int64_t chunk_begin, int64_t chunk_end, const double* column_sum,
                               const int64_t* column_count, const float* freq_x,
                               const float* freq_y, double inv_radius, int64_t width,
                               int64_t radius, int64_t d, float* pooled, int32_t* pooled_count) {
  int64_t target, k;
  if (!item_and_channel(target_capacity, d, &target, &k)) return;
  if (target >= *num_target_slots) return;
  const auto x = static_cast<int32_t>(target_slot_key[target] % width);
  const auto y = static_cast<int32_t>(target_slot_key[target] / width);
  const int64_t row_index = row_to_index[y];
  if (row_index < chunk_begin || row_index >= chunk_end) return;
  const int64_t local_row = row_index - chunk_begin;
  const int64_t low = x - radius < 0 ? 0 : x - radius;
  const int64_t high = x + radius > width - 1 ? width - 1 : x + radius;
  const int64_t channels = 2 * d;
  double re = 0.0, im = 0.0;
  int64_t count = 0;
  for (int64_t column = low; column <= high; ++column) {
    const double* sums = column_sum + (local_row * width + column) * channels;
    re += sums[k];
    im += sums[d + k];
    count += column_count[local_row * width + column];
  }
  // count >= 1: the target pixel holds the target event itself.
  const double scale = sqrt(static_cast<double>(d)) / static_cast<double>(count);
  normalise_pooled(re, im, pixel_phase(x, y, freq_x[k], freq_y[k], inv_radius), scale,
                   &pooled[target * channels + k], &pooled[target * channels + d + k]);
  if (k == 0) pooled_count[target] = static_cast<int32_t>(count);
}

__global__ void finish_targets_kernel(const int64_t* target_index, const int64_t* target_compact,
                                      int64_t m, const int64_t* t_ns, double inv_tau_ns,
                                      const float* freq_t, int64_t d, const float* pooled,
                                      const int32_t* pooled_count, float* features,
                                      int32_t* count) {
  int64_t i, k;
  if (!item_and_channel(m, d, &i, &k)) return;
  const int64_t target = target_compact[i];
  if (target < 0) return;  // outside the image: count 0, zero features (invalid)
  const int64_t channels = 2 * d;
  float re = pooled[target * channels + k];
  float im = pooled[target * channels + d + k];
  apply_target_time_phase(relative_time_units(t_ns[target_index[i]], t_ns[0], inv_tau_ns),
                          freq_t[k], &re, &im);
  features[i * channels + k] = re;
  features[i * channels + d + k] = im;
  if (k == 0) count[i] = pooled_count[target];
}

std::tuple<at::Tensor, at::Tensor> encode_cuda(const at::Tensor& t_ns_in, const at::Tensor& x_in,
                                               const at::Tensor& y_in,
                                               const at::Tensor& target_index_in, int64_t width,
                                               int64_t height, const at::Tensor& freq_t_in,
                                               const at::Tensor& freq_x_in,
                                               const at::Tensor& freq_y_in, double tau_s,
                                               int64_t pixel_radius) {
  const c10::cuda::CUDAGuard device_guard(t_ns_in.device());
  EncodeCall call = prepare_encode_call(t_ns_in, x_in, y_in, target_index_in, width, height,
                                        freq_t_in, freq_x_in, freq_y_in, tau_s, pixel_radius,
                                        c10::DeviceType::CUDA, /*zero_outputs=*/true,
                                        /*check_targets_on_host=*/false);
  const int64_t n = call.n, m = call.m, d = call.d, channels = call.channels;
  auto features = call.features, count = call.count;
  if (m == 0) return {features, count};
  const EncodeInputs in = call.data();
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const double inv_tau_ns = call.inv_tau_ns, inv_radius = call.inv_radius;
  const int64_t outside_key = width * height;
  const bool sparse = use_sparse_encode(m, width, height, pixel_radius, c10::DeviceType::CUDA);

  // 1. Slots: sort events by pixel id (int32 keys: half the radix passes of int64);
  //    out-of-image events sort last under outside_key. The number of slots stays on the
  //    device: arrays are sized by the host's bound slot_capacity.
  const auto long_options = t_ns_in.options().dtype(at::kLong);
  const auto int_options = t_ns_in.options().dtype(at::kInt);
  const auto byte_options = t_ns_in.options().dtype(at::kByte);
  const int64_t slot_capacity = std::min(n, width * height);
  auto key = at::empty({n}, int_options);
  pixel_key_kernel<<<blocks_for(n), kThreads, 0, stream>>>(in.x, in.y, n, width, height,
                                                           key.data_ptr<int32_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  auto [sorted_key, order] = at::sort(key);
  sorted_key = sorted_key.contiguous();
  order = order.contiguous();
  auto run_start = at::empty({n}, byte_options);
  run_start_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
      sorted_key.data_ptr<int32_t>(), n, static_cast<int32_t>(outside_key),
      run_start.data_ptr<uint8_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  auto run_count = at::cumsum(run_start, 0, at::kLong);
  const int64_t* num_slots = run_count.data_ptr<int64_t>() + (n - 1);
  // Slot j holds the sorted events [slot_start[j], slot_start[j + 1]).
  auto slot_start = at::zeros({slot_capacity + 1}, long_options);
  auto slot_key = at::zeros({slot_capacity}, long_options);
  auto slot_map = at::full({height * width}, -1, int_options);
  build_slots_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
      sorted_key.data_ptr<int32_t>(), run_count.data_ptr<int64_t>(), n,
      static_cast<int32_t>(outside_key), slot_start.data_ptr<int64_t>(),
      slot_key.data_ptr<int64_t>(), slot_map.data_ptr<int32_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  // Past num_slots the differences are meaningless and never read.
  auto slot_count = (slot_start.narrow(0, 1, slot_capacity) -
                     slot_start.narrow(0, 0, slot_capacity)).contiguous();
  auto event_slot = at::empty({n}, long_options);
  event_slot_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
      order.data_ptr<int64_t>(), sorted_key.data_ptr<int32_t>(), run_count.data_ptr<int64_t>(),
      n, static_cast<int32_t>(outside_key), event_slot.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  auto target_slot = at::empty({m}, long_options);
  target_slot_kernel<<<blocks_for(m), kThreads, 0, stream>>>(
      in.target_index, m, event_slot.data_ptr<int64_t>(), n, target_slot.data_ptr<int64_t>(),
      count.data_ptr<int32_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();

  // 2. Q per slot (sparse: only the slots inside some target's window).
  at::Tensor needed;
  if (sparse) {
    needed = at::zeros({slot_capacity}, byte_options);
    const int64_t side = 2 * pixel_radius + 1;
    mark_window_slots_kernel<<<blocks_for(m * side * side), kThreads, 0, stream>>>(
        target_slot.data_ptr<int64_t>(), m, slot_key.data_ptr<int64_t>(),
        slot_map.data_ptr<int32_t>(), width, height, pixel_radius, needed.data_ptr<uint8_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  auto slot_embed = at::empty({slot_capacity, channels}, features.options());
  embed_slot_kernel<<<blocks_for(slot_capacity * d), kThreads, 0, stream>>>(
      order.data_ptr<int64_t>(), slot_start.data_ptr<int64_t>(), slot_key.data_ptr<int64_t>(),
      slot_capacity, num_slots, sparse ? needed.data_ptr<uint8_t>() : nullptr, in.t_ns,
      inv_tau_ns, in.freq_t, in.freq_x, in.freq_y, inv_radius, width, d,
      slot_embed.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();

  if (sparse) {  // 3-4 per target event
    gather_targets_kernel<<<blocks_for(m * d), kThreads, 0, stream>>>(
        in.target_index, target_slot.data_ptr<int64_t>(), m, slot_key.data_ptr<int64_t>(),
        slot_map.data_ptr<int32_t>(), slot_embed.data_ptr<float>(),
        slot_count.data_ptr<int64_t>(), in.t_ns, inv_tau_ns, in.freq_t, in.freq_x, in.freq_y,
        inv_radius, width, height, pixel_radius, d, features.data_ptr<float>(),
        count.data_ptr<int32_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return {features, count};
  }

  // Target pixels (slots holding targets, ascending) and the rows holding them (ascending),
  // compacted by their ranks; their numbers stay on the device, bounded on the host by the
  // targets, the slots and the rows.
  auto slot_flag = at::zeros({slot_capacity}, byte_options);
  auto row_flag = at::zeros({height}, byte_options);
  mark_targets_kernel<<<blocks_for(m), kThreads, 0, stream>>>(
      target_slot.data_ptr<int64_t>(), m, slot_key.data_ptr<int64_t>(), width,
      slot_flag.data_ptr<uint8_t>(), row_flag.data_ptr<uint8_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const int64_t target_capacity = std::min(m, slot_capacity);
  const int64_t rows_bound = std::min(m, height);
  auto slot_rank = at::cumsum(slot_flag, 0, at::kLong);
  auto row_rank = at::cumsum(row_flag, 0, at::kLong);
  const int64_t* num_target_slots = slot_rank.data_ptr<int64_t>() + (slot_capacity - 1);
  const int64_t* num_target_rows = row_rank.data_ptr<int64_t>() + (height - 1);
  auto target_slot_key = at::empty({target_capacity}, long_options);
  auto slot_to_target = at::empty({slot_capacity}, long_options);  // read for target slots only
  compact_flags_kernel<<<blocks_for(slot_capacity), kThreads, 0, stream>>>(
      slot_flag.data_ptr<uint8_t>(), slot_rank.data_ptr<int64_t>(), slot_capacity,
      slot_key.data_ptr<int64_t>(), target_slot_key.data_ptr<int64_t>(),
      slot_to_target.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  auto target_rows = at::empty({rows_bound}, long_options);
  auto row_to_index = at::empty({height}, long_options);  // read for target rows only
  compact_flags_kernel<<<blocks_for(height), kThreads, 0, stream>>>(
      row_flag.data_ptr<uint8_t>(), row_rank.data_ptr<int64_t>(), height, nullptr,
      target_rows.data_ptr<int64_t>(), row_to_index.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  auto target_compact = at::empty({m}, long_options);
  compact_targets_kernel<<<blocks_for(m), kThreads, 0, stream>>>(
      target_slot.data_ptr<int64_t>(), m, slot_to_target.data_ptr<int64_t>(),
      target_compact.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();

  // 3. Box sums, in chunks of target rows (chunks past the last target row return at once).
  auto pooled = at::empty({target_capacity, channels}, features.options());
  auto pooled_count = at::empty({target_capacity}, count.options());
  const int64_t row_bytes = width * channels * static_cast<int64_t>(sizeof(double));
  const int64_t rows_per_chunk =
      std::max<int64_t>(1, std::min<int64_t>(rows_bound, kColumnSumBytes / row_bytes));
  auto column_sum = at::empty({rows_per_chunk, width, channels},
                              t_ns_in.options().dtype(at::kDouble));
  auto column_count = at::empty({rows_per_chunk, width}, long_options);
  for (int64_t chunk_begin = 0; chunk_begin < rows_bound; chunk_begin += rows_per_chunk) {
    const int64_t rows = std::min(rows_per_chunk, rows_bound - chunk_begin);
    const int64_t segments = (rows + kRowsPerSegment - 1) / kRowsPerSegment;
    column_sum_kernel<<<blocks_for(segments * width * channels), kThreads, 0, stream>>>(
        target_rows.data_ptr<int64_t>(), chunk_begin, rows, num_target_rows,
        slot_map.data_ptr<int32_t>(), slot_embed.data_ptr<float>(),
        slot_count.data_ptr<int64_t>(), width, height, pixel_radius, d,
        column_sum.data_ptr<double>(), column_count.data_ptr<int64_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    box_sum_kernel<<<blocks_for(target_capacity * d), kThreads, 0, stream>>>(
        target_slot_key.data_ptr<int64_t>(), row_to_index.data_ptr<int64_t>(), target_capacity,
        num_target_slots, chunk_begin, chunk_begin + rows, column_sum.data_ptr<double>(),
        column_count.data_ptr<int64_t>(), in.freq_x, in.freq_y, inv_radius, width,
        pixel_radius, d, pooled.data_ptr<float>(), pooled_count.data_ptr<int32_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }

  // 4. Per target event.
  finish_targets_kernel<<<blocks_for(m * d), kThreads, 0, stream>>>(
      in.target_index, target_compact.data_ptr<int64_t>(), m, in.t_ns, inv_tau_ns, in.freq_t, d,
      pooled.data_ptr<float>(), pooled_count.data_ptr<int32_t>(), features.data_ptr<float>(),
      count.data_ptr<int32_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {features, count};
}

}  // namespace
}  // namespace veckm_flow

TORCH_LIBRARY_IMPL(veckm_flow, CUDA, m) {
  m.impl("encode", &veckm_flow::encode_cuda);
}
