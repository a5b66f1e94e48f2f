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

// The egomotion estimator's input stage (called by InputStage.prepare of
// veckm_flow_ros/core/egomotion_window.py): even subsampling to max_flows, the usable flows,
// the per-pixel map look-up, the normal-flow transform, the depth cells with enough flows and
// the flows sorted by cell (stable: in input order within a cell).

#ifndef VECKM_FLOW_ROS_EGOMOTION_PREPARE_H_
#define VECKM_FLOW_ROS_EGOMOTION_PREPARE_H_

#include <cstdint>

namespace veckm_egomotion {

// One input column of `count` values of any numeric type (the buffer's struct code:
// b B h H i I l L q Q f d), `stride_bytes` apart.
struct Column
{
  const char * data;
  int64_t stride_bytes;
  char code;
  int64_t itemsize;

  double at(int64_t i) const;
};

struct PrepareSettings
{
  int64_t width, height;    // camera size [px]
  int64_t max_flows;
  double min_validity;
  double flow_floor_px_s;
  double slow_flow_px_s;
  int64_t num_cells;        // depth cells of the image; num_cells marks "no cell"
  int64_t min_cell_flows;
};

// Writes the window of N <= min(count, max_flows) flows: floats (10, N) row-major rows
// a (3), g (3), m, weight, validity, slow; ints (3, N) rows cell, region, input_order;
// starts (C,) the first flow of each used cell. Returns N (0: no usable flow) and sets
// *num_used_cells = C; -1 - p where the map's row p holds a cell index outside
// 0..num_cells. pixel_map (width * height, 8) float32: x, y, M^T (4), cell, region.
int64_t prepare(
  const Column & x_px, const Column & y_px, const Column & u_px_s, const Column & v_px_s,
  const Column * weight, int64_t count, const float * pixel_map,
  const PrepareSettings & settings, double * floats, int64_t * ints, int64_t * starts,
  int64_t * num_used_cells);

}  // namespace veckm_egomotion

#endif  // VECKM_FLOW_ROS_EGOMOTION_PREPARE_H_
