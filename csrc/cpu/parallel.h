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

// Dynamically scheduled loops for the CPU kernels.
//
// at::parallel_for hands each thread one equal, contiguous share. On a machine where other
// threads run too (the node's receive thread, DDS, a camera driver) one share is often
// descheduled for a while and the whole op waits for it at the end. Here the work is cut into
// several parts per thread and the threads take parts from a shared counter, so a thread that
// runs takes over the parts of one that does not.

#ifndef VECKM_FLOW_CPU_PARALLEL_H_
#define VECKM_FLOW_CPU_PARALLEL_H_

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

namespace veckm_flow {

// Parts per thread: enough that a late thread's share is taken over, few enough that the
// per-part overhead (a restart of sliding sums, a scratch allocation) stays small.
constexpr int64_t kPartsPerThread = 4;

// Runs fn(part) for part in [0, parts) on at most at::get_num_threads() threads, each taking
// the next part from a shared counter.
template <typename F>
void parallel_parts(int64_t parts, const F& fn) {
  const int64_t threads = std::min<int64_t>(at::get_num_threads(), parts);
  if (threads <= 1 || at::in_parallel_region()) {
    for (int64_t part = 0; part < parts; ++part) fn(part);
    return;
  }
  std::atomic<int64_t> next{0};
  at::parallel_for(0, threads, 1, [&](int64_t, int64_t) {
    for (int64_t part = next.fetch_add(1); part < parts; part = next.fetch_add(1)) fn(part);
  });
}

// fn(begin, end) over [0, count) in chunks of `chunk` items, dynamically scheduled.
template <typename F>
void parallel_chunks(int64_t count, int64_t chunk, const F& fn) {
  if (count <= 0) return;
  chunk = std::max<int64_t>(chunk, 1);
  parallel_parts((count + chunk - 1) / chunk, [&](int64_t part) {
    fn(part * chunk, std::min(count, (part + 1) * chunk));
  });
}

// fn(begin, end) over [0, count) in about kPartsPerThread parts per thread, each of at least
// min_chunk items, dynamically scheduled.
template <typename F>
void parallel_balanced(int64_t count, int64_t min_chunk, const F& fn) {
  const int64_t parts = at::get_num_threads() * kPartsPerThread;
  parallel_chunks(count, std::max<int64_t>(min_chunk, (count + parts - 1) / parts), fn);
}

// fn(begin, end) over items [0, count), cut into parts of about equal estimated cost
// (cost_prefix[i]: summed cost of the items before i; size count + 1), each at least
// min_part_cost, at most parts_per_thread per thread (one part on one thread: a part may
// have a start-up cost), dynamically scheduled.
template <typename F>
void parallel_by_cost(const std::vector<int64_t>& cost_prefix, int64_t min_part_cost,
                      const F& fn, int64_t parts_per_thread = kPartsPerThread) {
  const auto count = static_cast<int64_t>(cost_prefix.size()) - 1;
  if (count <= 0) return;
  const int64_t total = cost_prefix.back();
  const int64_t threads = at::in_parallel_region() ? 1 : at::get_num_threads();
  const int64_t parts = std::max<int64_t>(
      1, std::min<int64_t>({threads == 1 ? 1 : threads * parts_per_thread, count,
                            total / std::max<int64_t>(min_part_cost, 1)}));
  if (parts == 1) {
    fn(0, count);
    return;
  }
  auto part_start = [&](int64_t part) -> int64_t {
    if (part == 0) return 0;
    if (part == parts) return count;
    return std::lower_bound(cost_prefix.begin(), cost_prefix.end(), total * part / parts) -
           cost_prefix.begin();
  };
  parallel_parts(parts, [&](int64_t part) {
    const int64_t begin = part_start(part), end = part_start(part + 1);
    if (end > begin) fn(begin, end);
  });
}

}  // namespace veckm_flow

#endif  // VECKM_FLOW_CPU_PARALLEL_H_
