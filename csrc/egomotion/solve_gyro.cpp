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

// The gyroscope path's solve, step for step as EgomotionEstimator._solve_gyro and the methods
// it calls (_sign_vote, _fit_known, _search, _cost_sign, _cost_known, _cell_stats_known,
// _cell_fit, _reweight): the same constants, grids and rounds; float64 throughout except the
// sign vote's costs, float32 as in the reference (the vote only picks a start). The numpy
// code pays ~50 small calls per search round in a paced window with cold caches; here one
// window is one call.

#include "solve_gyro.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

namespace veckm_egomotion {
namespace {

using Vec3 = std::array<double, 3>;

// The constants of egomotion.py (their reasons are given there).
constexpr int kIntermediateRoundsLess = 3;
constexpr double kSameBasinDeg = 1.0;
constexpr double kWarmSameDeg = 5.0;
constexpr int kWarmRoundsLess = 1;
constexpr double kPi = 3.14159265358979323846;
constexpr int kPatternSide = 7;
constexpr int kPatternSize = kPatternSide * kPatternSide;

double dot(const Vec3 & a, const Vec3 & b)
{
  return a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
}

Vec3 normalized(const Vec3 & d)
{
  const double norm = std::sqrt(dot(d, d));
  return {d[0] / norm, d[1] / norm, d[2] / norm};
}

double cos_deg(double angle_deg)
{
  return std::cos(angle_deg * kPi / 180.0);
}

// The six products x x, y y, z z, x y, x z, y z of a direction (egomotion.py's _squares).
std::array<double, 6> squares(const Vec3 & d)
{
  return {d[0] * d[0], d[1] * d[1], d[2] * d[2], d[0] * d[1], d[0] * d[2], d[1] * d[2]};
}

// np.argmin of finite values: the first minimum.
int argmin(const double * values, int count)
{
  int best = 0;
  for (int k = 1; k < count; ++k) {
    if (values[k] < values[best]) {
      best = k;
    }
  }
  return best;
}

// Two unit vectors orthogonal to unit d and to each other (_tangent_basis).
void tangent_basis(const Vec3 & d, Vec3 & e1, Vec3 & e2)
{
  const double x = d[0], y = d[1], z = d[2];
  e1 = std::abs(x) < 0.9 ? Vec3{0.0, z, -y} : Vec3{-z, 0.0, x};
  const double scale = 1.0 / std::sqrt(e1[0] * e1[0] + e1[1] * e1[1] + e1[2] * e1[2]);
  e1 = {e1[0] * scale, e1[1] * scale, e1[2] * scale};
  e2 = {y * e1[2] - z * e1[1], z * e1[0] - x * e1[2], x * e1[1] - y * e1[0]};
}

// The minimum of the quadratic through the 3x3 costs around (row, col) of the 7x7 pattern
// (_quadratic_minimum): false at the border, where not convex, or beyond one spacing.
bool quadratic_minimum(const double * costs, int row, int col, double offset[2])
{
  if (!(row >= 1 && row < kPatternSide - 1 && col >= 1 && col < kPatternSide - 1)) {
    return false;
  }
  auto f = [&](int i, int j) {return costs[(row - 1 + i) * kPatternSide + col - 1 + j];};
  const double gx = 0.5 * (f(2, 1) - f(0, 1)), gy = 0.5 * (f(1, 2) - f(1, 0));
  const double hxx = f(2, 1) - 2.0 * f(1, 1) + f(0, 1);
  const double hyy = f(1, 2) - 2.0 * f(1, 1) + f(1, 0);
  const double hxy = 0.25 * (f(2, 2) - f(2, 0) - f(0, 2) + f(0, 0));
  const double det = hxx * hyy - hxy * hxy;
  if (!(hxx > 0 && det > 0)) {
    return false;
  }
  const double dx = (hxy * gy - hyy * gx) / det, dy = (hxy * gx - hxx * gy) / det;
  if (!(std::abs(dx) <= 1 && std::abs(dy) <= 1)) {
    return false;
  }
  offset[0] = dx;
  offset[1] = dy;
  return true;
}

// Per-cell weighted sums of a a^T (6 values, mixed products twice), a r (3) and the total of
// r^2 (_cell_stats_known).
struct CellStats
{
  std::vector<double> aa, ar;
  double total = 0.0;
};

// _cost_known: sum r^2 - sum_c max(0, S_br)^2 / S_bb per direction; mirror: then of -d.
class KnownCost
{
public:
  explicit KnownCost(const CellStats & stats)
  : stats_(stats), cells_(static_cast<int64_t>(stats.ar.size() / 3)) {}

  void operator()(const double * dirs, int count, bool mirror, double * out) const
  {
    const double * aa = stats_.aa.data();
    const double * ar = stats_.ar.data();
    for (int k = 0; k < count; ++k) {
      const Vec3 d{dirs[3 * k], dirs[3 * k + 1], dirs[3 * k + 2]};
      const auto sq = squares(d);
      double positive = 0.0, all = 0.0;
      for (int64_t c = 0; c < cells_; ++c) {
        const double * s = aa + 6 * c;
        const double s_bb = s[0] * sq[0] + s[1] * sq[1] + s[2] * sq[2] + s[3] * sq[3] +
          s[4] * sq[4] + s[5] * sq[5];
        const double s_br = ar[3 * c] * d[0] + ar[3 * c + 1] * d[1] + ar[3 * c + 2] * d[2];
        const double square = s_br * s_br / std::max(s_bb, 1e-300);
        all += square;
        positive += s_br > 0 ? square : 0.0;
      }
      out[k] = stats_.total - positive;
      if (mirror) {
        out[count + k] = stats_.total - (all - positive);
      }
    }
  }

private:
  const CellStats & stats_;
  int64_t cells_;
};

// _cost_sign on the sign vote's flows (float32): sum w max(0, -sign(r) a . d) per direction.
class SignCost
{
public:
  SignCost(const std::vector<float> & a_rows, const std::vector<float> & signed_weight)
  : a_rows_(a_rows), signed_(signed_weight), count_(signed_weight.size())
  {
    absolute_.resize(count_);
    for (size_t i = 0; i < count_; ++i) {
      absolute_[i] = std::abs(signed_[i]);
      for (int c = 0; c < 3; ++c) {
        linear_[c] += a_rows_[c * count_ + i] * signed_[i];
      }
    }
  }

  void operator()(const double * dirs, int count, bool mirror, double * out) const
  {
    std::vector<float> dx(count), dy(count), dz(count), sum(count, 0.0f);
    for (int k = 0; k < count; ++k) {
      dx[k] = static_cast<float>(dirs[3 * k]);
      dy[k] = static_cast<float>(dirs[3 * k + 1]);
      dz[k] = static_cast<float>(dirs[3 * k + 2]);
    }
    const float * ax = a_rows_.data();
    const float * ay = ax + count_;
    const float * az = ay + count_;
    // Flows outer, directions inner: the inner loop has no reduction and vectorizes.
    for (size_t i = 0; i < count_; ++i) {
      const float w = absolute_[i], x = ax[i], y = ay[i], z = az[i];
      float * acc = sum.data();
      for (int k = 0; k < count; ++k) {
        acc[k] += w * std::abs(x * dx[k] + y * dy[k] + z * dz[k]);
      }
    }
    for (int k = 0; k < count; ++k) {
      const float linear = dx[k] * linear_[0] + dy[k] * linear_[1] + dz[k] * linear_[2];
      out[k] = 0.5f * (sum[k] - linear);
      if (mirror) {
        out[count + k] = 0.5f * (sum[k] + linear);
      }
    }
  }

private:
  const std::vector<float> & a_rows_;
  const std::vector<float> & signed_;
  size_t count_;
  std::vector<float> absolute_;
  float linear_[3] = {0.0f, 0.0f, 0.0f};
};

class Solver
{
public:
  Solver(
    const GyroWindow & window, const double * half_sphere, int64_t num_half,
    const double * previous, const GyroSettings & settings)
  : w_(window), half_(half_sphere), num_half_(num_half), previous_(previous), s_(settings),
    n_(window.count), r_(n_), h_(n_), weight_(n_), robust_(n_, 1.0), residual_(n_),
    scratch_(n_), cell_(n_)
  {
    for (int64_t c = 0; c < w_.num_cells; ++c) {
      const int64_t end = c + 1 < w_.num_cells ? w_.starts[c + 1] : n_;
      std::fill(cell_.begin() + w_.starts[c], cell_.begin() + end, c);
    }
  }

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
    const Vec3 previous = previous_ ? Vec3{previous_[0], previous_[1], previous_[2]} : Vec3{};
    if (s_.sign_start) {
      direction = sign_vote(warm ? &previous : nullptr);
      have_direction = true;
      coarse_rounds = -1;
    }
    const std::vector<double> robust = robust_;
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
      std::vector<double> local_robust = robust_;
      robust_ = robust;
      Vec3 other{}, other_first{};
      CellStats other_stats;
      if (!fit_known(
          start_stats, nullptr, 1, s_.robust_iterations, &first, other, other_stats,
          other_first))
      {
        robust_.swap(local_robust);
      } else if (sign_cost_all(other) <= sign_cost_all(direction) * (1.0 + s_.sign_tolerance)) {
        direction = other;
        stats = std::move(other_stats);
      } else {
        robust_.swap(local_robust);
      }
    }
    double cost;
    const KnownCost final_cost(stats);
    final_cost(direction.data(), 1, false, &cost);
    *fit_out = 1.0 - cost / std::max(stats.total, 1e-300);
    std::copy(direction.begin(), direction.end(), direction_out);
  }

  const std::vector<double> & robust() const {return robust_;}

private:
  // Huber weights from the residuals, robust scale the median absolute residual (_reweight).
  void reweight(const std::vector<double> & residual)
  {
    for (int64_t i = 0; i < n_; ++i) {
      scratch_[i] = std::abs(residual[i]);
    }
    const double limit = s_.huber_scale * (1.4826 * median(scratch_) + 1e-12);
    for (int64_t i = 0; i < n_; ++i) {
      robust_[i] = std::min(1.0, limit / std::max(std::abs(residual[i]), 1e-300));
    }
  }

  // np.median (reorders values).
  static double median(std::vector<double> & values)
  {
    const size_t half = values.size() / 2;
    std::nth_element(values.begin(), values.begin() + half, values.end());
    const double high = values[half];
    if (values.size() % 2) {
      return high;
    }
    const double low = *std::max_element(values.begin(), values.begin() + half);
    return 0.5 * (low + high);
  }

  void cell_stats(CellStats & stats) const
  {
    const int64_t cells = w_.num_cells;
    stats.aa.assign(6 * cells, 0.0);
    stats.ar.assign(3 * cells, 0.0);
    stats.total = 0.0;
    const double * ax = w_.a_rows;
    const double * ay = ax + n_;
    const double * az = ay + n_;
    for (int64_t c = 0; c < cells; ++c) {
      const int64_t end = c + 1 < cells ? w_.starts[c + 1] : n_;
      double sum[10] = {0.0};
      for (int64_t i = w_.starts[c]; i < end; ++i) {
        const double w = weight_[i] * robust_[i], x = ax[i], y = ay[i], z = az[i], r = r_[i];
        sum[0] += x * x * w;
        sum[1] += y * y * w;
        sum[2] += z * z * w;
        sum[3] += 2.0 * x * y * w;
        sum[4] += 2.0 * x * z * w;
        sum[5] += 2.0 * y * z * w;
        sum[6] += x * r * w;
        sum[7] += y * r * w;
        sum[8] += z * r * w;
        sum[9] += r * r * w;
      }
      std::copy(sum, sum + 6, stats.aa.begin() + 6 * c);
      std::copy(sum + 6, sum + 9, stats.ar.begin() + 3 * c);
      stats.total += sum[9];
    }
  }

  // Per-flow residual of the cell-depth fit, cells of negative depth not fitted (_cell_fit).
  void cell_fit(const CellStats & stats, const Vec3 & d)
  {
    const auto sq = squares(d);
    std::vector<double> rho(w_.num_cells);
    for (int64_t c = 0; c < w_.num_cells; ++c) {
      const double * s = stats.aa.data() + 6 * c;
      const double s_bb = s[0] * sq[0] + s[1] * sq[1] + s[2] * sq[2] + s[3] * sq[3] +
        s[4] * sq[4] + s[5] * sq[5];
      const double * ar = stats.ar.data() + 3 * c;
      const double s_br = ar[0] * d[0] + ar[1] * d[1] + ar[2] * d[2];
      rho[c] = std::max(s_bb > 0 ? s_br / std::max(s_bb, 1e-300) : 0.0, 0.0);
    }
    const double * ax = w_.a_rows;
    for (int64_t i = 0; i < n_; ++i) {
      const double b = ax[i] * d[0] + ax[n_ + i] * d[1] + ax[2 * n_ + i] * d[2];
      residual_[i] = r_[i] - rho[cell_[i]] * b;
    }
  }

  // _search: the coarse grid (half sphere and mirror, plus the start and the previous
  // direction) or a local start, then 7x7 rounds shrinking 3x and a quadratic step.
  template<class Cost>
  Vec3 search(
    const Cost & cost, const Vec3 * start, bool coarse, bool final, bool scale_free,
    int fewer)
  {
    double step = s_.coarse_step_rad;
    Vec3 direction{};
    if (coarse || start == nullptr) {
      std::vector<double> candidates(half_, half_ + 3 * num_half_);
      if (start) {
        candidates.insert(candidates.end(), start->begin(), start->end());
      }
      if (previous_) {
        candidates.insert(candidates.end(), previous_, previous_ + 3);
      }
      const int count = static_cast<int>(candidates.size() / 3);
      std::vector<double> costs(2 * count);
      cost(candidates.data(), count, true, costs.data());
      const int best = argmin(costs.data(), count + static_cast<int>(num_half_));
      const double sign = best < count ? 1.0 : -1.0;
      const double * chosen = best < count ? &candidates[3 * best] : half_ + 3 * (best - count);
      direction = {sign * chosen[0], sign * chosen[1], sign * chosen[2]};
    } else {
      direction = *start;
      step *= 0.25;
    }
    const int levels = s_.refine_steps;
    int rounds = 0;
    if (levels && !final) {
      rounds = std::max(1, levels - kIntermediateRoundsLess);
    } else if (levels) {
      const double ratio = s_.coarse_step_rad / step * std::pow(3.0, -std::max(1, levels - 1));
      rounds = std::max(1, static_cast<int>(std::ceil(-std::log(ratio) / std::log(3.0) - 1e-9)));
    }
    if (rounds) {
      rounds = std::max(1, rounds - fewer);
    }
    double costs[kPatternSize];
    double dirs[3 * kPatternSize];
    Vec3 center{}, e1{}, e2{};
    int best = 0;
    for (int round = 0; round < rounds; ++round) {
      center = direction;
      tangent_basis(direction, e1, e2);
      for (int i = 0; i < kPatternSide; ++i) {
        for (int j = 0; j < kPatternSide; ++j) {
          const double si = step * ((i - 3) / 3.0), sj = step * ((j - 3) / 3.0);
          double * d = dirs + 3 * (i * kPatternSide + j);
          for (int c = 0; c < 3; ++c) {
            d[c] = center[c] + (si * e1[c] + sj * e2[c]);
          }
          if (!scale_free) {
            const double norm = std::sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
            for (int c = 0; c < 3; ++c) {
              d[c] /= norm;
            }
          }
        }
      }
      cost(dirs, kPatternSize, false, costs);
      best = argmin(costs, kPatternSize);
      direction = normalized({dirs[3 * best], dirs[3 * best + 1], dirs[3 * best + 2]});
      step /= 3.0;  // now the spacing of this round's pattern
    }
    if (rounds) {
      const int row = best / kPatternSide, col = best % kPatternSide;
      double offset[2];
      if (quadratic_minimum(costs, row, col, offset)) {
        const double along1 = (row - 3 + offset[0]) * step, along2 = (col - 3 + offset[1]) * step;
        for (int c = 0; c < 3; ++c) {
          direction[c] = center[c] + along1 * e1[c] + along2 * e2[c];
        }
      }
    }
    return normalized(direction);
  }

  // _sign_vote: the direction whose cheirality best agrees with the derotated flows' signs;
  // keeps the flows' signed weights (signed_) for the global check.
  Vec3 sign_vote(const Vec3 * warm_previous)
  {
    signed_.resize(n_);
    for (int64_t i = 0; i < n_; ++i) {
      const double r = r_[i], rotation = s_.rotation_error * h_[i];
      const double trust = r * r / (r * r + rotation * rotation + 1e-300);
      const double sign = r > 0 ? 1.0 : (r < 0 ? -1.0 : 0.0);
      signed_[i] = weight_[i] * robust_[i] * trust * sign;
    }
    // At most sign_flows flows, evenly spread in input order.
    const std::vector<int64_t> positions = input_positions();
    const int64_t stride = (n_ + s_.sign_flows - 1) / s_.sign_flows;
    const int64_t picked = (n_ + stride - 1) / stride;
    std::vector<float> a_sign(3 * picked), signed_sign(picked);
    for (int64_t p = 0; p < picked; ++p) {
      const int64_t i = positions[p * stride];
      for (int c = 0; c < 3; ++c) {
        a_sign[c * picked + p] = static_cast<float>(w_.a_rows[c * n_ + i]);
      }
      signed_sign[p] = static_cast<float>(signed_[i]);
    }
    const SignCost cost(a_sign, signed_sign);
    return search(
      cost, warm_previous, warm_previous == nullptr, false, false,
      warm_previous ? kWarmRoundsLess : 0);
  }

  // The flows' indices in input order (argsort of input_order; the caller checked that its
  // values are distinct and non-negative).
  std::vector<int64_t> input_positions() const
  {
    const int64_t * order = w_.input_order;
    const int64_t largest = *std::max_element(order, order + n_);
    std::vector<int64_t> positions;
    positions.reserve(n_);
    if (largest < 8 * n_ + 64) {
      std::vector<int64_t> rank(largest + 1, -1);
      for (int64_t i = 0; i < n_; ++i) {
        rank[order[i]] = i;
      }
      for (int64_t index : rank) {
        if (index >= 0) {
          positions.push_back(index);
        }
      }
    } else {
      for (int64_t i = 0; i < n_; ++i) {
        positions.push_back(i);
      }
      std::sort(
        positions.begin(), positions.end(),
        [order](int64_t i, int64_t j) {return order[i] < order[j];});
    }
    return positions;
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
      current = search(
        KnownCost(stats), have ? &current : nullptr, iteration <= coarse_rounds,
        iteration == robust_iterations, true, 0);
      have = true;
      if (iteration == 0) {
        first = current;
        if (known_first && dot(current, *known_first) >= cos_deg(kSameBasinDeg)) {
          return false;
        }
      }
      if (iteration < robust_iterations) {
        cell_fit(stats, current);
        reweight(residual_);
      }
    }
    direction = current;
    return true;
  }

  const GyroWindow & w_;
  const double * half_;
  int64_t num_half_;
  const double * previous_;
  const GyroSettings & s_;
  int64_t n_;
  std::vector<double> r_, h_, weight_, robust_, residual_, scratch_, signed_;
  std::vector<int64_t> cell_;
};

}  // namespace

void solve_gyro(
  const GyroWindow & window, const double omega[3], const double * half_sphere,
  int64_t num_half, const double * previous, bool warm, const GyroSettings & settings,
  double direction[3], double * fit, double * robust)
{
  Solver solver(window, half_sphere, num_half, previous, settings);
  solver.solve(omega, warm, direction, fit);
  std::copy(solver.robust().begin(), solver.robust().end(), robust);
}

}  // namespace veckm_egomotion
