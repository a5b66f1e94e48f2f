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

// The solve without a gyroscope (docs/egomotion.md, "Without a gyroscope", "Rotation start",
// "Accurate flows keep the least squares"): the joint least squares of omega and direction
// with their Huber rounds, the accuracy check, the rotation start with its rotation-only fit
// and sign vote, the ridge towards the rotation-only omega; float64 throughout except the
// coarse grid's costs of the joint least squares and the sign vote's (float32: both only
// pick a start).

#include "solve_free.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "affine_depth.h"
#include "checks.h"
#include "search.h"

namespace veckm_egomotion {
namespace {

// The joint least squares' first search from the rotation start takes a first step this many
// times the sphere grid's spacing (a warm or local start: 0.25): the start's omega is the
// rotation-only fit, so the direction may have to move further (held-out set, the rotation
// start forced on every window: exact magnitudes 2.5 deg median at 0.25, 1.2 at 0.5, 0.9 at
// 1.0; the flow model's flows 11.0, 11.6 and 13.9 deg).
constexpr double kRotationStartReach = 0.5;

// _cell_stats_free: per cell a a^T (6, mixed products twice), a m (3) and g a^T (9,
// row-major); g g^T (9), g m (3), m^2 over all flows, and H's constant part h0 (6 distinct
// entries of g g^T, regularised).
struct FreeStats
{
  int64_t cells = 0;
  std::vector<double> aa, am, ga;
  double h0[6], gg[9], gm[3], total;
};

// The symmetric 3x3 system h (6 distinct entries) x = rhs by the adjugate.
template<class T>
void solve_sym3(const T h[6], const T rhs[3], T x[3])
{
  const T cof[6] = {
    h[1] * h[2] - h[5] * h[5], h[0] * h[2] - h[4] * h[4], h[0] * h[1] - h[3] * h[3],
    h[4] * h[5] - h[3] * h[2], h[3] * h[5] - h[4] * h[1], h[3] * h[4] - h[0] * h[5]};
  T det = h[0] * cof[0] + h[3] * cof[3] + h[4] * cof[4];
  if (det == T(0)) {
    det = std::numeric_limits<T>::min();
  }
  const T adjugate[9] = {cof[0], cof[3], cof[4], cof[3], cof[1], cof[5], cof[4], cof[5], cof[2]};
  for (int i = 0; i < 3; ++i) {
    x[i] = (adjugate[3 * i] * rhs[0] + adjugate[3 * i + 1] * rhs[1] +
      adjugate[3 * i + 2] * rhs[2]) / det;
  }
}

// The cost and omega of directions without a gyroscope in T (float: the coarse grid's
// costs, from a float32 copy of the cell sums). Per cell T = [G; am] d (4 values), then
// the products T_i T_j / S_bb (a numpy version summed per-cell tables of those products as
// quadratic forms of d in one BLAS product: the same sums, three times the arithmetic). The
// directions go through the cells a block (Lanes) at a time, in vector types: each
// direction's sums keep the cells' order and the scalar code's operations, so the results do
// not depend on the block.
// Non-mirror calls keep each direction's omega (companion).
template<class T>
class FreeCost
{
public:
  // 32 bytes of directions: 8 in float, 4 in double (two SSE registers each without AVX)
  typedef T Lanes __attribute__((vector_size(32)));
  static constexpr int kBlock = static_cast<int>(sizeof(Lanes) / sizeof(T));
  // (a template argument would drop the vector attribute: std::vector<Lanes> holds T)
  struct Slot
  {
    Lanes lanes;
  };

  explicit FreeCost(const FreeStats & stats)
  : cells_(stats.cells), aa_(stats.aa.begin(), stats.aa.end()), x_(12 * cells_),
    total_(static_cast<T>(stats.total)), inv_(cells_), t_(4 * cells_),
    omega_(3 * kPatternSize)
  {
    for (int64_t c = 0; c < cells_; ++c) {
      std::copy(stats.ga.begin() + 9 * c, stats.ga.begin() + 9 * c + 9, x_.begin() + 12 * c);
      std::copy(stats.am.begin() + 3 * c, stats.am.begin() + 3 * c + 3, x_.begin() + 12 * c + 9);
    }
    std::copy(stats.h0, stats.h0 + 6, h0_);
    std::copy(stats.gg, stats.gg + 9, gg_);
    std::copy(stats.gm, stats.gm + 3, gm_);
  }

  // Omega of direction d. prior_weight > 0: plus prior_weight |omega - prior|^2 in the
  // residual.
  void omega(
    const std::array<T, 3> & d, T out[3], const double * prior = nullptr,
    double prior_weight = 0.0) const
  {
    Lanes w[3];
    omega_block(Block(&d, 1), w, prior, prior_weight);
    for (int i = 0; i < 3; ++i) {
      out[i] = w[i][0];
    }
  }

  void operator()(const double * dirs, int count, bool mirror, double * out) const
  {
    for (int first = 0; first < count; first += kBlock) {
      const int used = std::min(kBlock, count - first);
      std::array<T, 3> d[kBlock];
      for (int k = 0; k < used; ++k) {
        for (int i = 0; i < 3; ++i) {
          d[k][i] = static_cast<T>(dirs[3 * (first + k) + i]);
        }
      }
      Lanes w[3];
      omega_block(Block(d, used), w);
      if (!mirror) {
        for (int k = 0; k < used && first + k < kPatternSize; ++k) {
          for (int i = 0; i < 3; ++i) {
            omega_[3 * (first + k) + i] = w[i][k];
          }
        }
      }
      // Cheirality: with this omega, a cell whose depth would be negative is not fitted.
      // S_br = am . d - omega . (G d) = T_3 - omega . T_0..2
      const Lanes zero = Lanes{} * T(0);
      Lanes positive = zero, all = zero;
      for (int64_t c = 0; c < cells_; ++c) {
        const Slot * t = t_.data() + 4 * c;
        const Lanes inv = inv_[c].lanes;
        const Lanes s_br = t[3].lanes -
          (w[0] * t[0].lanes + w[1] * t[1].lanes + w[2] * t[2].lanes);
        // the products in a fixed order, with and without the mirror
        const Lanes square = mirror ? s_br * s_br * inv : s_br * inv * s_br;
        all += square;
        positive += s_br > zero ? square : zero;
      }
      for (int k = 0; k < used; ++k) {
        T quadratic = 0;
        for (int j = 0; j < 3; ++j) {
          const T rotated = w[0][k] * gg_[j] + w[1][k] * gg_[3 + j] + w[2][k] * gg_[6 + j];
          quadratic += (rotated - T(2) * gm_[j]) * w[j][k];
        }
        const T total_r = total_ + quadratic;
        out[first + k] = total_r - positive[k];
        if (mirror) {
          out[count + first + k] = total_r - (all[k] - positive[k]);
        }
      }
    }
  }

  // The omega values of the last non-mirror call (of at most kPatternSize directions: the
  // search's pattern), 3 per direction.
  const double * companion() const {return omega_.data();}

private:
  // Up to kBlock directions and their six products (squares()), one vector per component;
  // the unused lanes repeat the last direction.
  struct Block
  {
    Lanes d[3], sq[6];

    Block(const std::array<T, 3> * dirs, int used)
    {
      for (int k = 0; k < kBlock; ++k) {
        const std::array<T, 3> & one = dirs[std::min(k, used - 1)];
        const auto products = squares(one);
        for (int i = 0; i < 3; ++i) {
          d[i][k] = one[i];
        }
        for (int p = 0; p < 6; ++p) {
          sq[p][k] = products[p];
        }
      }
    }
  };

  // Omega of each direction of the block (w[i][k]); the cells' 1 / S_bb and T in inv_, t_.
  void omega_block(
    const Block & block, Lanes w[3], const double * prior = nullptr,
    double prior_weight = 0.0) const
  {
    // sum_c T_i T_j / S_bb for the pairs (0 0, 1 1, 2 2, 0 1, 0 2, 1 2) and (i 3)
    const Lanes zero = Lanes{} * T(0);
    const Lanes floor = zero + std::numeric_limits<T>::min();
    Lanes moments[9];
    for (Lanes & moment : moments) {
      moment = zero;
    }
    for (int64_t c = 0; c < cells_; ++c) {
      const T * s = aa_.data() + 6 * c;
      const T * x = x_.data() + 12 * c;
      const Lanes s_bb = s[0] * block.sq[0] + s[1] * block.sq[1] + s[2] * block.sq[2] +
        s[3] * block.sq[3] + s[4] * block.sq[4] + s[5] * block.sq[5];
      const Lanes inv = T(1) / (s_bb < floor ? floor : s_bb);  // std::max(s_bb, floor)
      Lanes t[4];
      for (int i = 0; i < 4; ++i) {
        t[i] = x[3 * i] * block.d[0] + x[3 * i + 1] * block.d[1] + x[3 * i + 2] * block.d[2];
        t_[4 * c + i].lanes = t[i];
      }
      inv_[c].lanes = inv;
      const Lanes u0 = t[0] * inv, u1 = t[1] * inv, u2 = t[2] * inv;
      moments[0] += u0 * t[0];
      moments[1] += u1 * t[1];
      moments[2] += u2 * t[2];
      moments[3] += u0 * t[1];
      moments[4] += u0 * t[2];
      moments[5] += u1 * t[2];
      moments[6] += u0 * t[3];
      moments[7] += u1 * t[3];
      moments[8] += u2 * t[3];
    }
    // H = gg - the first 6, rhs = gm - the last 3
    for (int k = 0; k < kBlock; ++k) {
      T h[6], rhs[3], out[3];
      for (int p = 0; p < 6; ++p) {
        h[p] = h0_[p] - moments[p][k];
      }
      for (int i = 0; i < 3; ++i) {
        rhs[i] = gm_[i] - moments[6 + i][k];
      }
      if (prior) {
        const T weight = static_cast<T>(prior_weight);
        for (int i = 0; i < 3; ++i) {
          h[i] = h[i] + weight;
          rhs[i] = rhs[i] + weight * static_cast<T>(prior[i]);
        }
      }
      solve_sym3(h, rhs, out);
      for (int i = 0; i < 3; ++i) {
        w[i][k] = out[i];
      }
    }
  }

  int64_t cells_;
  std::vector<T> aa_, x_;
  T h0_[6], gg_[9], gm_[3], total_;
  mutable std::vector<Slot> inv_, t_;
  mutable std::vector<double> omega_;
};

// The joint least squares' costs: float32 on the coarse grid (mirror), float64 elsewhere.
class FitCost
{
public:
  explicit FitCost(const FreeStats & stats)
  : coarse_(stats), fine_(stats) {}

  void operator()(const double * dirs, int count, bool mirror, double * out) const
  {
    if (mirror) {
      coarse_(dirs, count, true, out);
    } else {
      fine_(dirs, count, false, out);
    }
  }

  const FreeCost<double> & fine() const {return fine_;}

private:
  FreeCost<float> coarse_;
  FreeCost<double> fine_;
};

class FreeSolver
{
public:
  FreeSolver(
    const Window & window, const double * half_sphere, int64_t num_half,
    const double * previous, const FreeSettings & settings)
  : w_(window), grid_{half_sphere, num_half, previous, settings.coarse_step_rad,
      settings.refine_steps},
    flows_{window.a_rows, window.starts, window.num_cells, window.count}, s_(settings),
    n_(window.count), robust_(n_, 1.0), fit_weight_(n_), r_(n_), residual_(n_),
    factors_(n_, 1.0) {}

  // skip_check: with the rotation start, leave the accuracy check's fit out and take the
  // rotation start (the caller decides, EgomotionEstimator._solve_free). Returns whether the
  // joint least squares passed the accuracy check (false where it did not run).
  bool solve(bool skip_check, double direction_out[3], double omega_out[3], double * fit_out)
  {
    Fit fitted;
    bool done = false, refine = false;
    // The median |m|: the Huber threshold of every reweighting of m alone, and the accuracy
    // check's scale.
    std::vector<double> magnitude(n_);
    for (int64_t i = 0; i < n_; ++i) {
      magnitude[i] = std::abs(w_.m[i]);
    }
    median_magnitude_ = median(magnitude);
    // The accuracy check's limit: the joint least squares serve where the flows are accurate
    // enough (accurate()), and only there are they refined with affine depths.
    limit_ = s_.rotation_start_residual * median_magnitude_;
    bool accurate = false;
    if (!s_.rotation_start) {
      done = fit_free(nullptr, nullptr, false, fitted, s_.affine_depth, &refine);
    } else if (!skip_check) {
      // Else the rotation-only fit stands in for a gyroscope in the sign vote for the start.
      done = fit_free(nullptr, nullptr, true, fitted, s_.affine_depth, &refine);
      accurate = done;
    }
    if (!done) {
      const Vec3 rotation = rotation_only();
      std::vector<double> h(n_), r(n_);
      const double * g = w_.g_rows;
      for (int64_t i = 0; i < n_; ++i) {
        h[i] = g[i] * rotation[0] + g[n_ + i] * rotation[1] + g[2 * n_ + i] * rotation[2];
        r[i] = w_.m[i] - h[i];
      }
      std::vector<double> signed_weight;
      sign_weights(r.data(), h.data(), w_.weight, n_, s_.rotation_error, signed_weight);
      const Vec3 start = sign_vote(
        flows_, w_.input_order, signed_weight, s_.sign_flows, grid_, nullptr, 0);
      fit_free(&start, &rotation, false, fitted);
    }
    *fit_out = explained_share(fitted);
    if (refine) {
      // Accurate flows: the constant-depth fit stopped before its last Huber round, whose
      // weights start the refinement with affine depths within the cells (affine_depth.h).
      // Where the refined fit is not accurate, the constant-depth fit takes its last round
      // after all. The explained share stays the constant fit's.
      huber_round(fitted.aa.data(), fitted.ar.data(), fitted.direction);
      fit_weights();
      const AffineSettings affine{kAffineRounds, s_.huber_scale, s_.cell_huber_scale,
        kAffineMinFlows, limit_};
      Fit refined = fitted;
      if (refine_affine_depth(w_, w_.weight, fit_weight_.data(), affine,
        refined.direction.data(), refined.omega.data()))
      {
        fitted.direction = refined.direction;
        fitted.omega = refined.omega;
      } else {
        fit_free(&fitted.direction, nullptr, false, fitted, false, nullptr,
          s_.robust_iterations);
        *fit_out = explained_share(fitted);
      }
    }
    std::copy(fitted.direction.begin(), fitted.direction.end(), direction_out);
    std::copy(fitted.omega.begin(), fitted.omega.end(), omega_out);
    return accurate;
  }

  // The final Huber weights without the cell factors (time to contact, inliers).
  void huber_only(double * robust) const
  {
    for (int64_t i = 0; i < n_; ++i) {
      robust[i] = robust_[i] / factors_[i];
    }
  }

private:
  // A fit's direction, omega and the last round's cell sums of a a^T and a r (r_ holds the
  // derotated flows).
  struct Fit
  {
    Vec3 direction{}, omega{};
    std::vector<double> aa, ar;
  };

  // The explained share of the flow left after rotation, as with a gyroscope (r_ and the
  // Huber weights of the fit's last round).
  double explained_share(const Fit & fitted) const
  {
    CellStats sums;
    sums.aa = fitted.aa;
    sums.ar = fitted.ar;
    sums.total = 0.0;
    for (int64_t i = 0; i < n_; ++i) {
      sums.total += w_.weight[i] * robust_[i] * (r_[i] * r_[i]);
    }
    double cost;
    const KnownCost known(sums);
    known(fitted.direction.data(), 1, false, &cost);
    return 1.0 - cost / std::max(sums.total, 1e-300);
  }

  // The Huber weights and cell factors of a fit's residuals (a Huber round): cell sums aa,
  // ar as Fit's, r_ the derotated flows.
  void huber_round(const double * aa, const double * ar, const Vec3 & direction)
  {
    cell_residual(flows_, aa, ar, r_.data(), direction, residual_.data());
    reweight(residual_.data());
    cell_weights(residual_.data(), w_.weight, w_.starts, w_.num_cells, n_,
      s_.cell_huber_scale, scratch_, errors_, robust_.data(), factors_.data());
  }

  void reweight(const double * residual)
  {
    huber_weights(residual, n_, s_.huber_scale, scratch_, robust_.data());
    std::fill(factors_.begin(), factors_.end(), 1.0);
  }

  // reweight(w_.m), its median known
  void reweight_magnitudes()
  {
    huber_weights_below(
      w_.m, n_, huber_limit(median_magnitude_, s_.huber_scale), robust_.data());
    std::fill(factors_.begin(), factors_.end(), 1.0);
  }

  void fit_weights()
  {
    for (int64_t i = 0; i < n_; ++i) {
      fit_weight_[i] = w_.weight[i] * robust_[i];
    }
  }

  // _cell_stats_free with the current Huber weights.
  void cell_stats(FreeStats & stats)
  {
    fit_weights();
    // a a^T, a m and m^2: the known-omega sums with r = m
    CellStats known;
    known_cell_stats(flows_, w_.m, fit_weight_.data(), known);
    const int64_t cells = w_.num_cells;
    stats.cells = cells;
    stats.aa = std::move(known.aa);
    stats.am = std::move(known.ar);
    stats.total = known.total;
    stats.ga.resize(9 * cells);
    const double * a = w_.a_rows;
    const double * g = w_.g_rows;
    for (int64_t c = 0; c < cells; ++c) {
      double sum[9] = {0.0};  // in registers: a store per flow would alias g and a
      for (int64_t i = w_.starts[c]; i < flows_.end(c); ++i) {
        const double weight = fit_weight_[i];
        for (int k = 0; k < 3; ++k) {
          const double gk = g[k * n_ + i];
          sum[3 * k] += gk * a[i] * weight;
          sum[3 * k + 1] += gk * a[n_ + i] * weight;
          sum[3 * k + 2] += gk * a[2 * n_ + i] * weight;
        }
      }
      std::copy(sum, sum + 9, stats.ga.begin() + 9 * c);
    }
    rotation_sums(stats.gg, stats.gm, stats.h0);
  }

  // Over all flows with the fit's weights: g g^T (9), g m (3) and the regularised g g^T
  // (6 distinct entries), the normal equations of the rotation-only fit.
  void rotation_sums(double gg[9], double gm[3], double h[6]) const
  {
    double sum_gg[9] = {0.0}, sum_gm[3] = {0.0};  // local: kept in registers
    const double * g = w_.g_rows;
    for (int64_t i = 0; i < n_; ++i) {
      const double weight = fit_weight_[i];
      const double wg[3] = {g[i] * weight, g[n_ + i] * weight, g[2 * n_ + i] * weight};
      for (int p = 0; p < 3; ++p) {
        for (int q = 0; q < 3; ++q) {
          sum_gg[3 * p + q] += wg[p] * g[q * n_ + i];
        }
        sum_gm[p] += wg[p] * w_.m[i];
      }
    }
    std::copy(sum_gg, sum_gg + 9, gg);
    std::copy(sum_gm, sum_gm + 3, gm);
    const double regular = 1e-12 * (gg[0] + gg[4] + gg[8]);
    const double sym[6] = {gg[0] + regular, gg[4] + regular, gg[8] + regular, gg[1], gg[2],
      gg[5]};
    std::copy(sym, sym + 6, h);
  }

  // _fit_free: the joint least squares of omega and direction with Huber rounds. start: a
  // local start, else the sphere grid; rotation: the omega the final one is pulled towards;
  // check: ask accurate() after the second search (the first without Huber rounds) and
  // return false when it fails; early: where that search's answer is accurate, stop there,
  // before its Huber round, and set *stopped (the affine refinement takes over); from: the
  // first round (a later one resumes a fit stopped early, its Huber weights set).
  bool fit_free(const Vec3 * start, const Vec3 * rotation, bool check, Fit & fit,
                bool early = false, bool * stopped = nullptr, int from = 0)
  {
    if (from == 0) {
      reweight_magnitudes();  // caps gross outliers before any fit
    }
    const int last = s_.robust_iterations;
    Vec3 direction = start ? *start : Vec3{};
    bool have = start != nullptr;
    FreeStats stats;
    Vec3 omega{};
    for (int iteration = from; iteration <= last; ++iteration) {
      if (iteration || !have_first_) {
        cell_stats(stats);
      } else {
        stats = first_;  // same Huber weights (of m alone) as before
      }
      if (iteration == 0) {
        first_ = stats;
        have_first_ = true;
      }
      const FitCost cost(stats);
      SearchOptions options{start == nullptr && iteration <= 1};
      options.final = iteration == last;
      options.reach = iteration == 0 ? kRotationStartReach : 0.25;
      bool have_omega = false;
      direction = search(
        cost, grid_, have ? &direction : nullptr, options, cost.fine().companion(), 3,
        omega.data(), &have_omega);
      have = true;
      if (iteration == last || !have_omega) {
        cost.fine().omega(direction, omega.data());
      }
      // else: only for the Huber weights, omega from the last grid (smooth in d)
      if (check && iteration == std::min(1, last) && !accurate(direction, omega)) {
        return false;
      }
      if (iteration == last && rotation && s_.rotation_prior_weight > 0) {
        // Ridge towards the rotation-only fit (docs/egomotion.md, "Rotation start"): the
        // posterior mean with a prior of variance 1 / rotation_prior_weight around it and
        // flows whose error variance per unit weight is the fit's mean squared residual.
        double residual;
        cost.fine()(direction.data(), 1, false, &residual);
        double weight_sum = 0.0;
        for (int64_t i = 0; i < n_; ++i) {
          weight_sum += w_.weight[i] * robust_[i];
        }
        const double pull = s_.rotation_prior_weight * std::max(residual, 0.0) /
          std::max(weight_sum, 1e-300);
        cost.fine().omega(direction, omega.data(), rotation->data(), pull);
      }
      const double * g = w_.g_rows;
      for (int64_t i = 0; i < n_; ++i) {
        r_[i] = w_.m[i] - (g[i] * omega[0] + g[n_ + i] * omega[1] + g[2 * n_ + i] * omega[2]);
      }
      // The cell sums of a r follow from those of a m and g a^T: a r = a m - a (g . omega).
      fit.ar.resize(3 * stats.cells);
      for (int64_t c = 0; c < stats.cells; ++c) {
        const double * ga = stats.ga.data() + 9 * c;
        for (int j = 0; j < 3; ++j) {
          fit.ar[3 * c + j] = stats.am[3 * c + j] -
            (omega[0] * ga[j] + omega[1] * ga[3 + j] + omega[2] * ga[6 + j]);
        }
      }
      if (early && iteration == std::min(1, last) && iteration < last &&
        (check || accurate(direction, omega)))
      {
        *stopped = true;
        break;
      }
      if (iteration < last) {
        huber_round(stats.aa.data(), fit.ar.data(), direction);
      }
    }
    fit.direction = direction;
    fit.omega = omega;
    fit.aa = std::move(stats.aa);
    return true;
  }

  // The accuracy check (rotation_start_residual; checks.h): the median |residual| (cell
  // depths fitted) below limit_, or below half of it on the flows of the smallest |a . d|.
  bool accurate(const Vec3 & direction, const Vec3 & omega)
  {
    fit_weights();
    return accurate_fit(w_, fit_weight_.data(), direction.data(), omega.data(), limit_);
  }

  // _rotation_only: omega of the least squares m = g . omega, translation ignored
  // (Huber-capped); leaves the Huber weights at 1.
  Vec3 rotation_only()
  {
    reweight_magnitudes();
    fit_weights();
    double gg[9], gm[3], h[6];
    rotation_sums(gg, gm, h);
    Vec3 omega{};
    solve_sym3(h, gm, omega.data());
    std::fill(robust_.begin(), robust_.end(), 1.0);
    return omega;
  }

  const Window & w_;
  const SearchGrid grid_;
  const Flows flows_;
  const FreeSettings & s_;
  int64_t n_;
  double limit_ = 0.0, median_magnitude_ = 0.0;
  FreeStats first_;
  bool have_first_ = false;
  std::vector<double> robust_, fit_weight_, r_, residual_, scratch_, errors_, factors_;
};

}  // namespace

bool solve_free(
  const Window & window, const double * half_sphere, int64_t num_half,
  const double * previous, bool skip_check, const FreeSettings & settings, double direction[3],
  double omega[3], double * fit, double * robust)
{
  FreeSolver solver(window, half_sphere, num_half, previous, settings);
  const bool accurate = solver.solve(skip_check, direction, omega, fit);
  solver.huber_only(robust);
  return accurate;
}

}  // namespace veckm_egomotion
