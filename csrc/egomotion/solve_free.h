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

// The egomotion estimator's solve without a gyroscope (called by Solver.solve_free of
// veckm_flow_ros/core/egomotion_solve.py): the joint least squares of
// omega and direction with Huber rounds, the accuracy check, the rotation start (rotation-only
// fit, sign vote) and the ridge towards the rotation-only omega. Plain C++ (no Python, no
// torch): module.cpp checks the arguments and calls solve_free.

#ifndef VECKM_FLOW_ROS_EGOMOTION_SOLVE_FREE_H_
#define VECKM_FLOW_ROS_EGOMOTION_SOLVE_FREE_H_

#include <cstdint>

#include "window.h"

namespace veckm_egomotion {

// The EgomotionConfig values the solve reads (same meaning and units).
struct FreeSettings {
  int refine_steps;
  int robust_iterations;
  double huber_scale;
  int64_t sign_flows;
  double rotation_error;
  bool rotation_start;
  double rotation_start_residual;
  double rotation_prior_weight;  // [s^2/rad^2]
  double coarse_step_rad;  // the sphere grid's spacing, sqrt(4 pi / sphere_directions)
  double cell_huber_scale;  // the cell factors of the Huber rounds (cell_weights); 0: off
  bool affine_depth;  // refine accurate answers with affine cell depths (affine_depth.h)
};

// The solve of one window. half_sphere (num_half, 3) the coarse grid's directions with
// z >= 0; previous (3,) the last window's direction or nullptr; skip_check: with the rotation
// start, leave the accuracy check's fit out (the caller keeps the count of windows in a row
// that do). Writes the unit direction (3,), omega (3,) [rad/s, camera frame], the explained
// share `fit` and the final Huber weights robust (count,); returns whether the joint least
// squares passed the accuracy check (false where it did not run).
bool solve_free(const Window & window, const double * half_sphere, int64_t num_half,
                const double * previous, bool skip_check, const FreeSettings & settings,
                double direction[3], double omega[3], double * fit, double * robust);

}  // namespace veckm_egomotion

#endif  // VECKM_FLOW_ROS_EGOMOTION_SOLVE_FREE_H_
