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

// The egomotion estimator's solve with a gyroscope (called by Solver.solve_gyro of
// veckm_flow_ros/core/egomotion_solve.py): the sign vote, the cell-depth
// least squares with Huber rounds, the global check and the explained share. Plain C++ (no
// Python, no torch): module.cpp checks the arguments and calls solve_gyro.

#ifndef VECKM_FLOW_ROS_EGOMOTION_SOLVE_GYRO_H_
#define VECKM_FLOW_ROS_EGOMOTION_SOLVE_GYRO_H_

#include <cstdint>

#include "window.h"

namespace veckm_egomotion {

// The EgomotionConfig values the solve reads (same meaning and units).
struct GyroSettings {
  int refine_steps;
  int robust_iterations;
  double huber_scale;
  bool sign_start;
  int64_t sign_flows;
  double sign_tolerance;
  double rotation_error;
  double coarse_step_rad;  // the sphere grid's spacing, sqrt(4 pi / sphere_directions)
  double cell_huber_scale;  // the cell factors of the Huber rounds (cell_weights); 0: off
  bool affine_depth;  // refine accurate answers with affine cell depths (affine_depth.h)
  double accuracy_share;  // rotation_start_residual: the accuracy check's limit / median |m|
};

// The solve of one window. omega (3,) the gyroscope's rate [rad/s, camera frame];
// half_sphere (num_half, 3) the coarse grid's directions with z >= 0; previous (3,) the last
// window's direction or nullptr; warm: start the sign vote from `previous` (the caller keeps
// the warm-window count). Writes the unit direction (3,), the explained share `fit` and the
// final Huber weights robust (count,).
void solve_gyro(const Window & window, const double omega[3], const double * half_sphere,
                int64_t num_half, const double * previous, bool warm,
                const GyroSettings & settings, double direction[3], double * fit,
                double * robust);

}  // namespace veckm_egomotion

#endif  // VECKM_FLOW_ROS_EGOMOTION_SOLVE_GYRO_H_
