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

// What both solves share (solve_gyro.cpp, solve_free.cpp; docs/egomotion.md gives the
// equations and the reasons): the direction search, the Huber weights, the cell sums and
// costs of the known-omega least squares (equation (2)) and the sign vote (float32: the vote
// only picks a start). test/egomotion_reference.py writes the costs from the equations.

#ifndef VECKM_FLOW_ROS_EGOMOTION_SEARCH_H_
#define VECKM_FLOW_ROS_EGOMOTION_SEARCH_H_

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

namespace veckm_egomotion {

using Vec3 = std::array<double, 3>;

// A search whose result only starts another search or sets the Huber weights takes this
// many rounds fewer than refine_steps (2 by default: a grid spacing of 1/27 of its first
// step, then the quadratic step).
constexpr int kIntermediateRoundsLess = 3;
constexpr double kPi = 3.14159265358979323846;
constexpr int kPatternSide = 7;
constexpr int kPatternSize = kPatternSide * kPatternSide;

inline double dot(const Vec3 & a, const Vec3 & b)
{
  return a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
}

inline Vec3 normalized(const Vec3 & d)
{
  const double norm = std::sqrt(dot(d, d));
  return {d[0] / norm, d[1] / norm, d[2] / norm};
}

inline double cos_deg(double angle_deg)
{
  return std::cos(angle_deg * kPi / 180.0);
}

// The six products x x, y y, z z, x y, x z, y z of a direction.
template<class T>
std::array<T, 6> squares(const std::array<T, 3> & d)
{
  return {d[0] * d[0], d[1] * d[1], d[2] * d[2], d[0] * d[1], d[0] * d[2], d[1] * d[2]};
}

// np.argmin of finite values: the first minimum.
inline int argmin(const double * values, int count)
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
inline void tangent_basis(const Vec3 & d, Vec3 & e1, Vec3 & e2)
{
  const double x = d[0], y = d[1], z = d[2];
  e1 = std::abs(x) < 0.9 ? Vec3{0.0, z, -y} : Vec3{-z, 0.0, x};
  const double scale = 1.0 / std::sqrt(e1[0] * e1[0] + e1[1] * e1[1] + e1[2] * e1[2]);
  e1 = {e1[0] * scale, e1[1] * scale, e1[2] * scale};
  e2 = {y * e1[2] - z * e1[1], z * e1[0] - x * e1[2], x * e1[1] - y * e1[0]};
}

// The minimum of the quadratic through the 3x3 costs around (row, col) of the 7x7 pattern
// (_quadratic_minimum): false at the border, where not convex, or beyond one spacing.
inline bool quadratic_minimum(const double * costs, int row, int col, double offset[2])
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

// The value at offset (2,) [spacings] of the quadratic through the 3x3 values around (row,
// col) of the 7x7 pattern; values holds `width` per pattern point, out `width` (_quadratic_at).
inline void quadratic_at(
  const double * values, int width, int row, int col, const double offset[2], double * out)
{
  const double dx = offset[0], dy = offset[1];
  for (int k = 0; k < width; ++k) {
    auto f = [&](int i, int j) {
        return values[((row - 1 + i) * kPatternSide + col - 1 + j) * width + k];
      };
    out[k] = f(1, 1) + 0.5 * (f(2, 1) - f(0, 1)) * dx + 0.5 * (f(1, 2) - f(1, 0)) * dy +
      0.5 * (f(2, 1) - 2.0 * f(1, 1) + f(0, 1)) * dx * dx +
      0.5 * (f(1, 2) - 2.0 * f(1, 1) + f(1, 0)) * dy * dy +
      0.25 * (f(2, 2) - f(2, 0) - f(0, 2) + f(0, 0)) * dx * dy;
  }
}

// np.median (reorders values).
inline double median(std::vector<double> & values)
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

// Huber weights robust (n,) for the threshold limit: min(1, limit / |residual|).
inline void huber_weights_below(
  const double * residual, int64_t n, double limit, double * robust)
{
  for (int64_t i = 0; i < n; ++i) {
    robust[i] = std::min(1.0, limit / std::max(std::abs(residual[i]), 1e-300));
  }
}

// The Huber threshold for a median absolute residual (_reweight's robust scale).
inline double huber_limit(double median_absolute, double huber_scale)
{
  return huber_scale * (1.4826 * median_absolute + 1e-12);
}

// Huber weights robust (n,) from the residuals, robust scale the median absolute residual
// (_reweight); scratch: room for n values.
inline void huber_weights(
  const double * residual, int64_t n, double huber_scale, std::vector<double> & scratch,
  double * robust)
{
  scratch.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    scratch[i] = std::abs(residual[i]);
  }
  huber_weights_below(residual, n, huber_limit(median(scratch), huber_scale), robust);
}

// Least cell factor of the Huber rounds (cell_huber_scale): weights stay positive.
constexpr double kMinCellFactor = 1e-3;

// The cell factors of _reweight (after a fit): robust (n,) of each cell's flows times
// clip(scale median_c(e_c) / e_c, kMinCellFactor, 1), e_c = sum w |residual| / sum w over
// the cell's flows (cells start at starts (num_cells,), the last ends at n), the factors
// written to factors (n,) (all 1 with scale 0). scratch, errors: room for num_cells values.
inline void cell_weights(
  const double * residual, const double * weight, const int64_t * starts, int64_t num_cells,
  int64_t n, double scale, std::vector<double> & scratch, std::vector<double> & errors,
  double * robust, double * factors)
{
  std::fill(factors, factors + n, 1.0);
  if (!(scale > 0) || num_cells == 0) {
    return;
  }
  errors.resize(num_cells);
  for (int64_t c = 0; c < num_cells; ++c) {
    const int64_t end = c + 1 < num_cells ? starts[c + 1] : n;
    double weighted = 0.0, total = 0.0;
    for (int64_t i = starts[c]; i < end; ++i) {
      weighted += weight[i] * std::abs(residual[i]);
      total += weight[i];
    }
    errors[c] = weighted / std::max(total, 1e-300);
  }
  scratch.assign(errors.begin(), errors.end());
  const double limit = scale * median(scratch);
  for (int64_t c = 0; c < num_cells; ++c) {
    const double factor = std::max(
      kMinCellFactor, std::min(1.0, limit / std::max(errors[c], 1e-300)));
    const int64_t end = c + 1 < num_cells ? starts[c + 1] : n;
    for (int64_t i = starts[c]; i < end; ++i) {
      robust[i] *= factor;
      factors[i] = factor;
    }
  }
}

// Per-cell weighted sums of a a^T (6 values, mixed products twice), a r (3) and the total of
// r^2 (_cell_stats_known).
struct CellStats
{
  std::vector<double> aa, ar;
  double total = 0.0;
};

// One window's flows sorted by depth cell, as the solves read them.
struct Flows
{
  const double * a_rows;  // (3, count) a = A^T n per flow, row-major
  const int64_t * starts;  // (num_cells,) first flow of each cell
  int64_t num_cells;
  int64_t count;

  int64_t end(int64_t c) const {return c + 1 < num_cells ? starts[c + 1] : count;}
};

// _cell_stats_known: per cell the sums of a a^T, a r with weights w (count,), and of r^2.
inline void known_cell_stats(
  const Flows & flows, const double * r, const double * w, CellStats & stats)
{
  const int64_t n = flows.count, cells = flows.num_cells;
  stats.aa.assign(6 * cells, 0.0);
  stats.ar.assign(3 * cells, 0.0);
  stats.total = 0.0;
  const double * ax = flows.a_rows;
  const double * ay = ax + n;
  const double * az = ay + n;
  for (int64_t c = 0; c < cells; ++c) {
    double sum[10] = {0.0};
    for (int64_t i = flows.starts[c]; i < flows.end(c); ++i) {
      const double weight = w[i], x = ax[i], y = ay[i], z = az[i], ri = r[i];
      sum[0] += x * x * weight;
      sum[1] += y * y * weight;
      sum[2] += z * z * weight;
      sum[3] += 2.0 * x * y * weight;
      sum[4] += 2.0 * x * z * weight;
      sum[5] += 2.0 * y * z * weight;
      sum[6] += x * ri * weight;
      sum[7] += y * ri * weight;
      sum[8] += z * ri * weight;
      sum[9] += ri * ri * weight;
    }
    std::copy(sum, sum + 6, stats.aa.begin() + 6 * c);
    std::copy(sum + 6, sum + 9, stats.ar.begin() + 3 * c);
    stats.total += sum[9];
  }
}

// The cells' depths rho (num_cells,) for direction d, negative depths clipped to 0 (_cell_fit).
inline void cell_depths(
  const double * aa, const double * ar, int64_t cells, const Vec3 & d, double * rho)
{
  const auto sq = squares(d);
  for (int64_t c = 0; c < cells; ++c) {
    const double * s = aa + 6 * c;
    const double s_bb = s[0] * sq[0] + s[1] * sq[1] + s[2] * sq[2] + s[3] * sq[3] +
      s[4] * sq[4] + s[5] * sq[5];
    const double * t = ar + 3 * c;
    const double s_br = t[0] * d[0] + t[1] * d[1] + t[2] * d[2];
    rho[c] = std::max(s_bb > 0 ? s_br / std::max(s_bb, 1e-300) : 0.0, 0.0);
  }
}

// Per-flow residual r - rho_cell a . d of the cell-depth fit (_cell_fit); b_out (count,), if
// given, receives a . d.
inline void cell_residual(
  const Flows & flows, const double * aa, const double * ar, const double * r,
  const Vec3 & d, double * residual, double * b_out = nullptr)
{
  std::vector<double> rho(flows.num_cells);
  cell_depths(aa, ar, flows.num_cells, d, rho.data());
  const int64_t n = flows.count;
  const double * ax = flows.a_rows;
  for (int64_t c = 0; c < flows.num_cells; ++c) {
    for (int64_t i = flows.starts[c]; i < flows.end(c); ++i) {
      const double b = ax[i] * d[0] + ax[n + i] * d[1] + ax[2 * n + i] * d[2];
      residual[i] = r[i] - rho[c] * b;
      if (b_out) {
        b_out[i] = b;
      }
    }
  }
}

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

// The sphere grid and settings of a search.
struct SearchGrid
{
  const double * half_sphere;  // (num_half, 3) the coarse grid's directions with z >= 0
  int64_t num_half;
  const double * previous;  // (3,) the last window's direction, or nullptr
  double coarse_step_rad;  // the sphere grid's spacing, sqrt(4 pi / sphere_directions)
  int refine_steps;
};

// How one search runs (_search's arguments of the same names).
struct SearchOptions
{
  bool coarse;
  bool final = true;
  bool scale_free = true;
  int fewer = 0;
  double reach = 0.25;
};

// _search: the coarse grid (half sphere and mirror, plus the start and the previous
// direction) or a local start, then 7x7 rounds shrinking 3x and a quadratic step. cost(dirs,
// count, mirror, out) writes count (2 count with mirror) costs. companion: `width` values per
// direction that the last cost call left (e.g. omega); then *value receives them at the
// result (the best point's, or the quadratic's through its neighbours) and *have_value
// whether there were rounds.
template<class Cost>
Vec3 search(
  const Cost & cost, const SearchGrid & grid, const Vec3 * start, const SearchOptions & options,
  const double * companion = nullptr, int width = 0, double * value = nullptr,
  bool * have_value = nullptr)
{
  double step = grid.coarse_step_rad;
  Vec3 direction{};
  if (options.coarse || start == nullptr) {
    const int64_t num_half = grid.num_half;
    std::vector<double> candidates(grid.half_sphere, grid.half_sphere + 3 * num_half);
    if (start) {
      candidates.insert(candidates.end(), start->begin(), start->end());
    }
    if (grid.previous) {
      candidates.insert(candidates.end(), grid.previous, grid.previous + 3);
    }
    const int count = static_cast<int>(candidates.size() / 3);
    std::vector<double> costs(2 * count);
    cost(candidates.data(), count, true, costs.data());
    const int best = argmin(costs.data(), count + static_cast<int>(num_half));
    const double sign = best < count ? 1.0 : -1.0;
    const double * chosen = best < count ? &candidates[3 * best] :
      grid.half_sphere + 3 * (best - count);
    direction = {sign * chosen[0], sign * chosen[1], sign * chosen[2]};
  } else {
    direction = *start;
    step *= options.reach;
  }
  const int levels = grid.refine_steps;
  int rounds = 0;
  if (levels && !options.final) {
    rounds = std::max(1, levels - kIntermediateRoundsLess);
  } else if (levels) {
    const double ratio = grid.coarse_step_rad / step * std::pow(3.0, -std::max(1, levels - 1));
    rounds = std::max(1, static_cast<int>(std::ceil(-std::log(ratio) / std::log(3.0) - 1e-9)));
  }
  if (rounds) {
    rounds = std::max(1, rounds - options.fewer);
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
        if (!options.scale_free) {
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
  if (have_value) {
    *have_value = rounds > 0 && companion != nullptr;
  }
  if (rounds) {
    const int row = best / kPatternSide, col = best % kPatternSide;
    double offset[2];
    const bool moved = quadratic_minimum(costs, row, col, offset);
    if (companion && value) {
      if (moved) {
        quadratic_at(companion, width, row, col, offset, value);
      } else {
        std::copy(companion + width * best, companion + width * (best + 1), value);
      }
    }
    if (moved) {
      const double along1 = (row - 3 + offset[0]) * step, along2 = (col - 3 + offset[1]) * step;
      for (int c = 0; c < 3; ++c) {
        direction[c] = center[c] + along1 * e1[c] + along2 * e2[c];
      }
    }
  }
  return normalized(direction);
}

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

// The flows' indices in input order (argsort of input_order, whose values the caller checked
// to be distinct and non-negative).
inline std::vector<int64_t> input_positions(const int64_t * order, int64_t n)
{
  const int64_t largest = *std::max_element(order, order + n);
  std::vector<int64_t> positions;
  positions.reserve(n);
  if (largest < 8 * n + 64) {
    std::vector<int64_t> rank(largest + 1, -1);
    for (int64_t i = 0; i < n; ++i) {
      rank[order[i]] = i;
    }
    for (int64_t index : rank) {
      if (index >= 0) {
        positions.push_back(index);
      }
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      positions.push_back(i);
    }
    std::sort(
      positions.begin(), positions.end(),
      [order](int64_t i, int64_t j) {return order[i] < order[j];});
  }
  return positions;
}

// _sign_vote: the flows' signed weights (n,) weight trust sign(r), trust = r^2 / (r^2 +
// (rotation_error h)^2), r the derotated flows and h the rotational flows.
inline void sign_weights(
  const double * r, const double * h, const double * weight, int64_t n, double rotation_error,
  std::vector<double> & signed_weight)
{
  signed_weight.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    const double rotation = rotation_error * h[i];
    const double trust = r[i] * r[i] / (r[i] * r[i] + rotation * rotation + 1e-300);
    const double sign = r[i] > 0 ? 1.0 : (r[i] < 0 ? -1.0 : 0.0);
    signed_weight[i] = weight[i] * trust * sign;
  }
}

// _sign_vote's search: the direction whose cheirality best agrees with the signed weights
// (sign_weights) of at most sign_flows flows, evenly spread in input order. warm_previous:
// a local search around it with `fewer` rounds less, else the sphere grid.
inline Vec3 sign_vote(
  const Flows & flows, const int64_t * input_order, const std::vector<double> & signed_weight,
  int64_t sign_flows, const SearchGrid & grid, const Vec3 * warm_previous, int fewer)
{
  const int64_t n = flows.count;
  const std::vector<int64_t> positions = input_positions(input_order, n);
  const int64_t stride = (n + sign_flows - 1) / sign_flows;
  const int64_t picked = (n + stride - 1) / stride;
  std::vector<float> a_sign(3 * picked), signed_sign(picked);
  for (int64_t p = 0; p < picked; ++p) {
    const int64_t i = positions[p * stride];
    for (int c = 0; c < 3; ++c) {
      a_sign[c * picked + p] = static_cast<float>(flows.a_rows[c * n + i]);
    }
    signed_sign[p] = static_cast<float>(signed_weight[i]);
  }
  const SignCost cost(a_sign, signed_sign);
  SearchOptions options{warm_previous == nullptr};
  options.final = false;
  options.scale_free = false;
  options.fewer = warm_previous ? fewer : 0;
  return search(cost, grid, warm_previous, options);
}

}  // namespace veckm_egomotion

#endif  // VECKM_FLOW_ROS_EGOMOTION_SEARCH_H_
