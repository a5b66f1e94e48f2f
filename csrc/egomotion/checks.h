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

// What EgomotionEstimator checks around a solve (docs/egomotion.md, "Undetermined windows"
// and "The gyroscope's bias"): the translation ratio, the sign disagreement and the accuracy
// check, in the extension so that a window pays no numpy pass for them.

#ifndef VECKM_FLOW_ROS_EGOMOTION_CHECKS_H_
#define VECKM_FLOW_ROS_EGOMOTION_CHECKS_H_

#include <cstdint>

#include "window.h"

namespace veckm_egomotion {

// The checks' results for one window at (direction, omega).
struct Checks
{
  // Median |fitted translational normal flow| (cell depth clipped at 0 times a . d) over
  // median |rotational normal flow g . omega|; inf for a non-finite omega or no rotation,
  // NaN for a non-finite direction.
  double translation_ratio;
  // Share (0..1) of the sign vote's weight (weight x slow x Huber(r) x trust, as the sign
  // start weighs the flows) whose derotated flow r = m - g . omega has the sign opposite to
  // a . d; 0 without window.slow (no gyroscope) or without any weight.
  double sign_disagreement;
  // The accuracy check (accurate_fit), when asked for; else false.
  bool accurate;
};

// The checks of one window at (direction, omega [rad/s]). robust (count,) the solve's
// final Huber weights (without the cell factors); huber_scale and rotation_error as
// EgomotionConfig; accuracy_share: the accuracy check's limit on the median |residual| as
// a share of the median |m| (rotation_start_residual), or a negative value to skip it.
Checks window_checks(
  const Window & window, const double * robust, const double direction[3],
  const double omega[3], double huber_scale, double rotation_error, double accuracy_share);

// The accuracy check: the median |residual| of the cell-depth fit at (direction, omega)
// with the weights fit_weight (count,) below limit, or below kDepthFreeLimit x limit on the
// kDepthFreeShare of the flows with the smallest |a . d| (free of the depth model's misfit).
bool accurate_fit(
  const Window & window, const double * fit_weight, const double direction[3],
  const double omega[3], double limit);

}  // namespace veckm_egomotion

#endif  // VECKM_FLOW_ROS_EGOMOTION_CHECKS_H_
