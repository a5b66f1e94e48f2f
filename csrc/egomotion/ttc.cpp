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

// The time to contact per region (see ttc.h): the weighted medians found by block sums, then
// a cumulative sum within the median's block (cost ~ regions x (flows / block + block)).

#include "ttc.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace veckm_egomotion {

namespace {

struct Flow
{
  double inverse, weight;
  int64_t region;
};

// The flows' indices in increasing order of their (positive, finite) inverse: an LSD radix
// sort of the doubles' bit patterns (monotone for positive values), 11 bits per pass, passes
// where every key has the same digit skipped. A comparison sort of a few thousand flows
// costs twice as much. The lowest kIgnoredBits bits are not sorted: values within 2^-32
// relative (below float32's resolution of the result) keep their input order.
std::vector<uint32_t> sorted_by_inverse(const std::vector<Flow> & flows)
{
  const size_t count = flows.size();
  std::vector<uint64_t> keys(count), keys_out(count);
  std::vector<uint32_t> order(count), order_out(count);
  for (size_t k = 0; k < count; ++k) {
    std::memcpy(&keys[k], &flows[k].inverse, sizeof(uint64_t));
    order[k] = static_cast<uint32_t>(k);
  }
  constexpr int kBits = 11;
  constexpr uint64_t kMask = (1u << kBits) - 1;
  std::vector<size_t> start(kMask + 1);
  constexpr int kIgnoredBits = 20;
  for (int shift = kIgnoredBits; shift < 64; shift += kBits) {
    std::fill(start.begin(), start.end(), 0);
    for (uint64_t key : keys) {
      ++start[(key >> shift) & kMask];
    }
    if (start[(keys[0] >> shift) & kMask] == count) {
      continue;
    }
    size_t total = 0;
    for (size_t & bucket : start) {
      const size_t size = bucket;
      bucket = total;
      total += size;
    }
    for (size_t k = 0; k < count; ++k) {
      const size_t to = start[(keys[k] >> shift) & kMask]++;
      keys_out[to] = keys[k];
      order_out[to] = order[k];
    }
    keys.swap(keys_out);
    order.swap(order_out);
  }
  return order;
}

}  // namespace

void time_to_contact(
  const double * a_rows, const double * g_rows, const double * m, const double * validity,
  const double * robust, const int64_t * region, int64_t count, const double direction[3],
  const double omega[3], const TtcSettings & settings, float * grid)
{
  const int64_t regions = settings.rows * settings.cols;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::fill(grid, grid + regions, nan);
  // Inverse time to contact r d_z / b per flow, weight |b| validity robust; flows whose sign
  // no positive depth explains are left out (docs/egomotion.md, "FOE and time to contact").
  std::vector<Flow> flows;
  flows.reserve(count);
  std::vector<int64_t> own(regions, 0);
  for (int64_t i = 0; i < count; ++i) {
    const double b = direction[0] * a_rows[i] + direction[1] * a_rows[count + i] +
      direction[2] * a_rows[2 * count + i];
    const double r = m[i] - (omega[0] * g_rows[i] + omega[1] * g_rows[count + i] +
      omega[2] * g_rows[2 * count + i]);
    const double w = std::abs(b) * validity[i] * robust[i];
    if (!(w > 1e-12)) {
      continue;
    }
    const double inverse = r * direction[2] / b;
    if (!(inverse > 0)) {
      continue;
    }
    flows.push_back({inverse, w, region[i]});
    ++own[region[i]];
  }
  if (flows.empty()) {
    return;
  }
  // The weighted median of a region is the first flow (in order of the inverse) whose
  // cumulative weight in the region's pool reaches half of the pool's total. In two steps:
  // the sums of blocks of kBlock consecutive flows per region, pooled over the 3 x 3
  // neighbourhood, find the median's block; a cumulative sum within that block finds the flow.
  constexpr int64_t kBlock = 64;
  const std::vector<uint32_t> order = sorted_by_inverse(flows);
  const int64_t kept = static_cast<int64_t>(order.size());
  const int64_t blocks = (kept + kBlock - 1) / kBlock;
  std::vector<double> block_sum(regions * blocks, 0.0);
  for (int64_t p = 0; p < kept; ++p) {
    const Flow & flow = flows[order[p]];
    block_sum[flow.region * blocks + p / kBlock] += flow.weight;
  }
  const int64_t rows = settings.rows, cols = settings.cols;
  const int64_t needed = std::max<int64_t>(settings.min_ttc_flows, 1);
  // the share of region s's flows in region t's pool
  auto share = [&](int64_t s, int64_t t) {
      const int64_t dr = s / cols - t / cols, dc = s % cols - t % cols;
      if (dr < -1 || dr > 1 || dc < -1 || dc > 1) {
        return 0.0;
      }
      return s == t ? 1.0 : settings.neighbour_weight;
    };
  std::vector<int64_t> pool;
  std::vector<double> pool_share;
  for (int64_t t = 0; t < regions; ++t) {
    if (own[t] < needed) {
      continue;
    }
    pool.clear();
    pool_share.clear();
    for (int64_t dr = -1; dr <= 1; ++dr) {
      for (int64_t dc = -1; dc <= 1; ++dc) {
        const int64_t r = t / cols + dr, c = t % cols + dc;
        if (r >= 0 && r < rows && c >= 0 && c < cols) {
          pool.push_back(r * cols + c);
          pool_share.push_back(share(r * cols + c, t));
        }
      }
    }
    std::vector<double> pooled(blocks, 0.0);
    double total = 0.0;
    for (int64_t block = 0; block < blocks; ++block) {
      for (size_t k = 0; k < pool.size(); ++k) {
        pooled[block] += pool_share[k] * block_sum[pool[k] * blocks + block];
      }
      total += pooled[block];
    }
    const double half = 0.5 * total;
    double before = 0.0;
    int64_t block = 0;
    for (; block < blocks && before + pooled[block] < half; ++block) {
      before += pooled[block];
    }
    // (rounding can leave the sums short of half: the last flow)
    int64_t pick = kept - 1;
    if (block < blocks) {
      const double rest = half - before;
      const int64_t end = std::min(kept, (block + 1) * kBlock);
      double within = 0.0;
      pick = end - 1;
      for (int64_t p = block * kBlock; p < end; ++p) {
        const Flow & flow = flows[order[p]];
        within += share(flow.region, t) * flow.weight;
        if (!(within < rest)) {
          pick = p;
          break;
        }
      }
    }
    grid[t] = static_cast<float>(1.0 / flows[order[pick]].inverse);
  }
}

}  // namespace veckm_egomotion
