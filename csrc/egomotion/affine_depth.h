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

// The last stage of the solve without a gyroscope where the joint least squares are accurate
// (solve_free.cpp): the answer refined with an inverse depth that is affine, not constant,
// within each depth cell, rho_i = rho_c + gamma_c . (p_i - p_c) (p the undistorted
// normalized position, p_c the cell's weighted centroid). A plane's inverse depth is affine
// in p, so this model is exact on planar surfaces, where the constant one leaves a small
// misfit that grows with the translational flow; near the plane's ambiguous solutions the
// cost is flat, and that misfit moved omega by up to 1.4 deg/s on the approaches
// (docs/egomotion.md, "Affine depth within cells"). Plain C++, no Python.

#ifndef VECKM_FLOW_ROS_EGOMOTION_AFFINE_DEPTH_H_
#define VECKM_FLOW_ROS_EGOMOTION_AFFINE_DEPTH_H_

#include <cstdint>

#include "window.h"

namespace veckm_egomotion {

// The refinement's Huber rounds (reweight, search again) and the fewest flows of a cell that
// gets a depth gradient (three unknowns; fewer keep a constant depth), for both solves.
constexpr int kAffineRounds = 1;
constexpr int64_t kAffineMinFlows = 6;

struct AffineSettings {
  int rounds;               // Huber rounds (reweight, search again) after the first search
  double huber_scale;       // as FreeSettings
  double cell_huber_scale;  // as FreeSettings
  int64_t min_flows;        // cells with fewer flows keep a constant depth
  double limit;             // the refined fit's median |residual| must be below this [1/s]
};

// Refines direction (3, unit) and omega (3,) [rad/s] in place by a local search of the
// least squares with affine cell depths (omega and the cell depths eliminated; omega_known:
// omega kept, from a gyroscope), starting from them; weights: the flows' weights (count,) without Huber weights, first: the first
// search's (the constant-depth fit's, with its Huber weights). Returns false, leaving them
// unchanged, when a cost is not finite or when the refined fit's median |residual| is not
// below settings.limit (the depth varies inside the cells other than by a plane: the
// refinement is then no more trustworthy than the constant-depth fit).
bool refine_affine_depth(const Window & window, const double * weights, const double * first,
                         const AffineSettings & settings, double direction[3],
                         double omega[3], bool omega_known = false);

}  // namespace veckm_egomotion

#endif  // VECKM_FLOW_ROS_EGOMOTION_AFFINE_DEPTH_H_
