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

// The window both solves of the egomotion extension read (solve_gyro.h, solve_free.h).

#ifndef VECKM_FLOW_ROS_EGOMOTION_WINDOW_H_
#define VECKM_FLOW_ROS_EGOMOTION_WINDOW_H_

#include <cstdint>

namespace veckm_egomotion {

// One window's usable flows (egomotion_window.py's Window), sorted by depth cell; read-only views
// of `count` values unless said otherwise. Both solves take it.
struct Window {
  const double * a_rows;       // (3, count) a = A^T n per flow, row-major
  const double * g_rows;       // (3, count) g = B^T n per flow
  const double * m;            // (count,) normalized normal-flow magnitude [1/s]
  const double * weight;       // (count,) fit weight validity / (|flow| + floor)
  const double * slow;         // (count,) slow-flow factor s^2 / (s^2 + slow^2); read by the
                               // solve with a gyroscope only (nullptr for the other)
  const int64_t * starts;      // (num_cells,) first flow of each cell, increasing, starts[0] 0
  int64_t num_cells;
  const int64_t * input_order;  // (count,) the flows' distinct positions in the input
  int64_t count;
};

}  // namespace veckm_egomotion

#endif  // VECKM_FLOW_ROS_EGOMOTION_WINDOW_H_
