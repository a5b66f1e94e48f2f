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

// The gyroscope path's solve (docs/egomotion.md, "With a gyroscope", "Sign start", "Warm
// start"): the sign vote, the cell-depth least squares with their Huber rounds, the global
// check; float64 throughout except the sign vote's costs (float32: the vote only picks a
// start). One window is one call (a numpy version paid ~50 small calls per search round in
// a paced window with cold caches).

#include "solve_gyro.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "affine_depth.h"
#include "checks.h"
#include "search.h"

namespace veckm_egomotion {
namespace {

// The tolerance check's global least-squares fit stops when its first search ends this close
// to the local fit's first [deg]: both sit in the same basin, the check cannot change much.
constexpr double kSameBasinDeg = 1.0;
// A warm-started window (warm_start_windows) skips the global least-squares check when its
// fit ends within this angle of the previous window's direction [deg].
constexpr double kWarmSameDeg = 5.0;
// A warm-started window takes this many Huber rounds fewer than robust_iterations (at least
// 0) and its sign vote this many local rounds fewer (at least 1): it starts near the answer
// (as accurate on the held-out set, ~0.2-0.4 ms less CPU per paced window).
constexpr int kWarmRoundsLess = 1;
// The refinement's accuracy check runs only where the constant-depth fit explains at least
// this share of the derotated flow (measured: exact flows of the motion suite 0.998 and
// above, the flow model's 0.95 and below): it costs ~0.15 ms, which the flow model's
// windows, never accurate, would pay for nothing.
constexpr double kAffineMinFit = 0.99;

class Solver
{
public:
  Solver(
    const Window & window, const double * half_sphere, int64_t num_half,
    const double * previous, const GyroSettings & settings)
  : w_(window), grid_{half_sphere, num_half, previous, settings.coarse_step_rad,
      settings.refine_steps},
    flows_{window.a_rows, window.starts, window.num_cells, window.count}, s_(settings),
    n_(window.count), r_(n_), h_(n_), weight_(n_), robust_(n_, 1.0), residual_(n_),
    fit_weight_(n_), factors_(n_, 1.0) {}

  void solve(const double omega[3], bool warm, double direction_out[3], double * fit_out)
  {
    const double * g = w_.g_rows;
    for (int64_t i = 0; i < n_; ++i) {
      h_[i] = g[i] * omega[0] + g[n_ + i] * omega[1] + g[2 * n_ + i] * omega[2];
      r_[i] = w_.m[i] - h_[i];
      // Slow normal flows are unreliable in sign and size: they weigh less in this mode.
      weight_[i] = w_.weight[i] * w_.slow[i];
    }
    // Before any fit, the derotated magnitude itself is the residual: caps gross outliers.
    reweight(r_);
    CellStats start_stats;
    cell_stats(start_stats);
    Vec3 direction{};
    bool have_direction = false;
    int coarse_rounds = 1;
    const Vec3 previous = grid_.previous ?
      Vec3{grid_.previous[0], grid_.previous[1], grid_.previous[2]} : Vec3{};
    if (s_.sign_start) {
      fit_weights();
      sign_weights(
        r_.data(), h_.data(), fit_weight_.data(), n_, s_.rotation_error, signed_);
      direction = sign_vote(
        flows_, w_.input_order, signed_, s_.sign_flows, grid_, warm ? &previous : nullptr,
        kWarmRoundsLess);
      have_direction = true;
      coarse_rounds = -1;
    }
    const std::vector<double> robust = robust_, factors = factors_;
    const int robust_iterations = warm ? std::max(0, s_.robust_iterations - kWarmRoundsLess) :
      s_.robust_iterations;
    CellStats stats;
    Vec3 first{};
    fit_known(
      start_stats, have_direction ? &direction : nullptr, coarse_rounds, robust_iterations,
      nullptr, direction, stats, first);
    if (warm && dot(direction, previous) >= cos_deg(kWarmSameDeg)) {
      // the fit stayed near the previous direction: no global check
    } else if (s_.sign_start) {
      // The least squares' global minimum replaces the sign start where it agrees at least
      // about as well with the signs (a sign start in a wrong basin).
      std::vector<double> local_robust = robust_, local_factors = factors_;
      robust_ = robust;
      factors_ = factors;
      Vec3 other{}, other_first{};
      CellStats other_stats;
      if (!fit_known(
          start_stats, nullptr, 1, s_.robust_iterations, &first, other, other_stats,
          other_first))
      {
        robust_.swap(local_robust);
        factors_.swap(local_factors);
      } else if (sign_cost_all(other) <= sign_cost_all(direction) * (1.0 + s_.sign_tolerance)) {
        direction = other;
        stats = std::move(other_stats);
      } else {
        robust_.swap(local_robust);
        factors_.swap(local_factors);
      }
    }
    double cost;
    const KnownCost final_cost(stats);
    final_cost(direction.data(), 1, false, &cost);
    *fit_out = 1.0 - cost / std::max(stats.total, 1e-300);
    if (s_.affine_depth && *fit_out >= kAffineMinFit) {
      refine_affine(omega, direction);
    }
    std::copy(direction.begin(), direction.end(), direction_out);
  }

  // The final Huber weights without the cell factors (time to contact, inliers).
  void huber_only(double * robust) const
  {
    for (int64_t i = 0; i < n_; ++i) {
      robust[i] = robust_[i] / factors_[i];
    }
  }

private:
  // Where the flows are accurate (the accuracy check of solve_free.cpp, at the final
  // answer), the direction refined with affine depths within the cells (affine_depth.h),
  // omega kept; the explained share and the Huber weights stay the constant fit's.
  void refine_affine(const double omega[3], Vec3 & direction)
  {
    scratch_.resize(n_);
    for (int64_t i = 0; i < n_; ++i) {
      scratch_[i] = std::abs(w_.m[i]);
    }
    const double limit = s_.accuracy_share * median(scratch_);
    fit_weights();
    if (!accurate_fit(w_, fit_weight_.data(), direction.data(), omega, limit)) {
      return;
    }
    const AffineSettings affine{kAffineRounds, s_.huber_scale, s_.cell_huber_scale,
      kAffineMinFlows, limit};
    double known[3] = {omega[0], omega[1], omega[2]};
    refine_affine_depth(w_, weight_.data(), fit_weight_.data(), affine, direction.data(), known,
      true);
  }

  void reweight(const std::vector<double> & residual)
  {
    huber_weights(residual.data(), n_, s_.huber_scale, scratch_, robust_.data());
    std::fill(factors_.begin(), factors_.end(), 1.0);
  }

  // The fit's weights: weight times the Huber weights.
  void fit_weights()
  {
    for (int64_t i = 0; i < n_; ++i) {
      fit_weight_[i] = weight_[i] * robust_[i];
    }
  }

  void cell_stats(CellStats & stats)
  {
    fit_weights();
    known_cell_stats(flows_, r_.data(), fit_weight_.data(), stats);
  }

  // _cost_sign of one direction over all flows (float64), signed_ of the sign vote.
  double sign_cost_all(const Vec3 & d) const
  {
    const double * ax = w_.a_rows;
    double absolute = 0.0, linear = 0.0;
    for (int64_t i = 0; i < n_; ++i) {
      const double b = ax[i] * d[0] + ax[n_ + i] * d[1] + ax[2 * n_ + i] * d[2];
      absolute += std::abs(signed_[i]) * std::abs(b);
      linear += b * signed_[i];
    }
    return 0.5 * (absolute - linear);
  }

  // _fit_known: least squares of the direction with Huber rounds; false when known_first is
  // given and the first search ends within kSameBasinDeg of it.
  bool fit_known(
    const CellStats & start_stats, const Vec3 * start, int coarse_rounds,
    int robust_iterations, const Vec3 * known_first, Vec3 & direction, CellStats & stats,
    Vec3 & first)
  {
    stats = start_stats;
    Vec3 current = start ? *start : Vec3{};
    bool have = start != nullptr;
    for (int iteration = 0; iteration <= robust_iterations; ++iteration) {
      if (iteration) {
        cell_stats(stats);
      }
      SearchOptions options{iteration <= coarse_rounds};
      options.final = iteration == robust_iterations;
      current = search(KnownCost(stats), grid_, have ? &current : nullptr, options);
      have = true;
      if (iteration == 0) {
        first = current;
        if (known_first && dot(current, *known_first) >= cos_deg(kSameBasinDeg)) {
          return false;
        }
      }
      if (iteration < robust_iterations) {
        cell_residual(flows_, stats.aa.data(), stats.ar.data(), r_.data(), current,
          residual_.data());
        reweight(residual_);
        cell_weights(residual_.data(), weight_.data(), w_.starts, w_.num_cells, n_,
          s_.cell_huber_scale, scratch_, errors_, robust_.data(), factors_.data());
      }
    }
    direction = current;
    return true;
  }

  const Window & w_;
  const SearchGrid grid_;
  const Flows flows_;
  const GyroSettings & s_;
  int64_t n_;
  std::vector<double> r_, h_, weight_, robust_, residual_, fit_weight_, scratch_, signed_;
  std::vector<double> errors_, factors_;
};

}  // namespace

void solve_gyro(
  const Window & window, const double omega[3], const double * half_sphere,
  int64_t num_half, const double * previous, bool warm, const GyroSettings & settings,
  double direction[3], double * fit, double * robust)
{
  Solver solver(window, half_sphere, num_half, previous, settings);
  solver.solve(omega, warm, direction, fit);
  solver.huber_only(robust);
}

}  // namespace veckm_egomotion
