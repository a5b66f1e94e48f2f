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

// The time to contact per image region (called by Solver.time_to_contact of
// veckm_flow_ros/core/egomotion_solve.py; docs/egomotion.md, "FOE and time to contact"): per
// region the weighted median of the
// per-flow inverse times to contact of its own flows and, at neighbour_weight, of its 8
// neighbours' flows.

#ifndef VECKM_FLOW_ROS_EGOMOTION_TTC_H_
#define VECKM_FLOW_ROS_EGOMOTION_TTC_H_

#include <cstdint>

namespace veckm_egomotion {

struct TtcSettings
{
  int64_t rows, cols;       // the grid of regions
  int64_t min_ttc_flows;    // own flows a region needs
  double neighbour_weight;  // weight of the 8 neighbours' flows, [0, 1]
};

// a_rows, g_rows (3, count); m, validity, robust (count,); region (count,) in
// 0..rows * cols - 1; direction (3,) unit with direction[2] > 0; omega (3,) [rad/s].
// Writes grid (rows * cols,) float32 [s], NaN where undetermined.
void time_to_contact(
  const double * a_rows, const double * g_rows, const double * m, const double * validity,
  const double * robust, const int64_t * region, int64_t count, const double direction[3],
  const double omega[3], const TtcSettings & settings, float * grid);

}  // namespace veckm_egomotion

#endif  // VECKM_FLOW_ROS_EGOMOTION_TTC_H_
