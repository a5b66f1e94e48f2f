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

// The input stage (see prepare.h): one pass over the flows (a numpy version took ~40 calls,
// each of which starts cold in a paced window).

#include "prepare.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace veckm_egomotion {

namespace {

template<class T>
double load(const char * p)
{
  T value;
  std::memcpy(&value, p, sizeof(T));
  return static_cast<double>(value);
}

}  // namespace

double Column::at(int64_t i) const
{
  const char * p = data + i * stride_bytes;
  switch (code) {
    case 'd': return load<double>(p);
    case 'f': return load<float>(p);
    case 'b': return load<int8_t>(p);
    case 'B': return load<uint8_t>(p);
    case 'h': return load<int16_t>(p);
    case 'H': return load<uint16_t>(p);
    case 'i': return load<int32_t>(p);
    case 'I': return load<uint32_t>(p);
    case 'l': case 'q': return load<int64_t>(p);
    default: return load<uint64_t>(p);  // 'L', 'Q' (module.cpp admits no other code)
  }
}

int64_t prepare(
  const Column & x_px, const Column & y_px, const Column & u_px_s, const Column & v_px_s,
  const Column * weight, int64_t count, const float * pixel_map,
  const PrepareSettings & settings, double * floats, int64_t * ints, int64_t * starts,
  int64_t * num_used_cells)
{
  *num_used_cells = 0;
  // Even subsampling first (np.linspace(0, count - 1, max_flows).astype(int64)).
  const bool subsample = count > settings.max_flows;
  const int64_t used = subsample ? settings.max_flows : count;
  const double step = subsample ?
    static_cast<double>(count - 1) / static_cast<double>(settings.max_flows - 1) : 1.0;
  const double width = static_cast<double>(settings.width);
  const double height = static_cast<double>(settings.height);
  const double infinity = std::numeric_limits<double>::infinity();
  const int64_t no_cell = settings.num_cells;
  // Pass 1: the usable flows in input order, and a prefetch of each one's map row. A paced
  // window finds the map (32 bytes per pixel, MBs) out of the caches: issued here, ahead of
  // their use, the row loads overlap instead of stalling pass 2 one after another.
  std::vector<int64_t> pixel;
  std::vector<double> nx_px, ny_px, speed, validity;
  for (auto * column : {&nx_px, &ny_px, &speed, &validity}) {
    column->reserve(used);
  }
  pixel.reserve(used);
  for (int64_t i = 0; i < used; ++i) {
    const int64_t source = !subsample ? i :
      (i == used - 1 ? count - 1 : static_cast<int64_t>(static_cast<double>(i) * step));
    const double x = std::nearbyint(x_px.at(source)), y = std::nearbyint(y_px.at(source));
    const double u = u_px_s.at(source), v = v_px_s.at(source);
    const double flow_speed = std::sqrt(u * u + v * v);
    // Comparisons are false for NaN; x < width and speed < inf also reject infinities.
    bool keep = x >= 0 && x < width && y >= 0 && y < height && flow_speed > 1e-9 &&
      flow_speed < infinity;
    double w = 1.0;
    if (weight) {
      w = weight->at(source);
      keep = keep && w > 0 && w >= settings.min_validity && w < infinity;
    }
    if (!keep) {
      continue;
    }
    pixel.push_back(static_cast<int64_t>(y * width + x));
    __builtin_prefetch(pixel_map + 8 * pixel.back());
    nx_px.push_back(u / flow_speed);
    ny_px.push_back(v / flow_speed);
    speed.push_back(flow_speed);
    validity.push_back(w);
  }
  // Pass 2: the map look-up and the normal-flow transform.
  const int64_t kept = static_cast<int64_t>(pixel.size());
  std::vector<int64_t> cell(kept), region(kept);
  std::vector<double> nx_unit(kept), ny_unit(kept), m(kept), px(kept), py(kept);
  for (int64_t k = 0; k < kept; ++k) {
    const float * map = pixel_map + 8 * pixel[k];
    // (the map is the estimator's; a cell index out of range must not index the counts)
    if (!(map[6] >= 0 && map[6] <= static_cast<float>(no_cell))) {
      return -1 - pixel[k];
    }
    const double nx = static_cast<double>(map[2]) * nx_px[k] +
      static_cast<double>(map[3]) * ny_px[k];
    const double ny = static_cast<double>(map[4]) * nx_px[k] +
      static_cast<double>(map[5]) * ny_px[k];
    const double norm = std::sqrt(nx * nx + ny * ny);
    const double magnitude = speed[k] / norm;
    // Flows without normalized coordinates or magnitude go to one more cell, never used.
    cell[k] = std::isfinite(magnitude) ? static_cast<int64_t>(map[6]) : no_cell;
    region[k] = static_cast<int64_t>(map[7]);
    nx_unit[k] = nx / norm;
    ny_unit[k] = ny / norm;
    m[k] = magnitude;
    px[k] = map[0];
    py[k] = map[1];
  }
  // Cells with too few flows tell nothing about depth: their flows are left out.
  std::vector<int64_t> counts(no_cell + 1, 0);
  for (int64_t k = 0; k < kept; ++k) {
    ++counts[cell[k]];
  }
  std::vector<int64_t> offset(no_cell + 1, -1), renumbered(no_cell + 1, -1);
  int64_t total = 0, cells_used = 0;
  for (int64_t c = 0; c < no_cell; ++c) {
    if (counts[c] >= settings.min_cell_flows) {
      starts[cells_used] = total;
      renumbered[c] = cells_used++;
      offset[c] = total;
      total += counts[c];
    }
  }
  if (total == 0) {
    return 0;
  }
  // The usable flows sorted by cell, in input order within a cell (a stable counting sort).
  std::vector<int64_t> sorted(total);
  for (int64_t k = 0; k < kept; ++k) {
    if (offset[cell[k]] >= 0) {
      sorted[offset[cell[k]]++] = k;
    }
  }
  const int64_t n = total;
  const double floor = settings.flow_floor_px_s, slow = settings.slow_flow_px_s;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t k = sorted[j];
    const double nx = nx_unit[k], ny = ny_unit[k], x = px[k], y = py[k], s = speed[k];
    // a = A^T n = (-nx, -ny, q), q = nx px + ny py; g = B^T n = (py q + ny, -(px q + nx),
    // nx py - ny px).
    const double q = nx * x + ny * y;
    floats[j] = -nx;
    floats[n + j] = -ny;
    floats[2 * n + j] = q;
    floats[3 * n + j] = y * q + ny;
    floats[4 * n + j] = -(x * q + nx);
    floats[5 * n + j] = nx * y - ny * x;
    floats[6 * n + j] = m[k];
    floats[7 * n + j] = floor > 0 ? validity[k] / (s + floor) : validity[k];
    floats[8 * n + j] = validity[k];
    floats[9 * n + j] = slow > 0 ? s * s / (s * s + slow * slow) : 1.0;
    ints[j] = renumbered[cell[k]];
    ints[n + j] = region[k];
    ints[2 * n + j] = k;
  }
  *num_used_cells = cells_used;
  return n;
}

}  // namespace veckm_egomotion
