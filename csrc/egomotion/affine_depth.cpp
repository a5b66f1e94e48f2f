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

#include "affine_depth.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "search.h"

namespace veckm_egomotion {

namespace {

// Symmetric 3x3 matrices as 6 entries: 00, 11, 22, 01, 02, 12.
using Sym3 = std::array<double, 6>;

// Largest step of one local search iteration and its first probe spacing [rad].
constexpr double kMaxStepRad = 0.05;
constexpr double kFirstProbeRad = 0.005;
constexpr double kStopRad = 1e-4;
// The searches before the last Huber round stop earlier: they only set the weights.
constexpr double kIntermediateStopRad = 1e-3;
constexpr int kMaxIterations = 16;
// Ridge on the depth gradient, relative to the cell's sum of (a . d)^2 q q^T diagonal: cells
// whose flows lie on a line get no gradient across it.
constexpr double kGradientRidge = 1e-6;

// The inverse (6 entries) of a symmetric positive 3x3 matrix m (6 entries), by the
// adjugate; false when singular.
bool invert3(const Sym3 & m, Sym3 & inverse)
{
  const double cof[6] = {
    m[1] * m[2] - m[5] * m[5], m[0] * m[2] - m[4] * m[4], m[0] * m[1] - m[3] * m[3],
    m[4] * m[5] - m[3] * m[2], m[3] * m[5] - m[4] * m[1], m[3] * m[4] - m[0] * m[5]};
  const double det = m[0] * cof[0] + m[3] * cof[3] + m[4] * cof[4];
  if (!(det > 0) || !std::isfinite(det)) {
    return false;
  }
  const double scale = 1.0 / det;
  for (int k = 0; k < 6; ++k) {
    inverse[k] = cof[k] * scale;
  }
  return true;
}

// The products of a direction's components that weigh the 6 distinct entries of a symmetric
// matrix in d^T A d: x x, y y, z z, 2 x y, 2 x z, 2 y z.
inline Sym3 pair_products(const Vec3 & d)
{
  return {d[0] * d[0], d[1] * d[1], d[2] * d[2], 2 * d[0] * d[1], 2 * d[0] * d[2],
    2 * d[1] * d[2]};
}

// out = s rhs for a symmetric s (6 entries).
inline void apply3(const Sym3 & s, const double rhs[3], double out[3])
{
  out[0] = s[0] * rhs[0] + s[3] * rhs[1] + s[4] * rhs[2];
  out[1] = s[3] * rhs[0] + s[1] * rhs[1] + s[5] * rhs[2];
  out[2] = s[4] * rhs[0] + s[5] * rhs[1] + s[2] * rhs[2];
}

// The least squares of one window with affine cell depths, for one set of weights.
class AffineCost
{
public:
  AffineCost(const Window & window, const AffineSettings & settings)
  : w_(window), s_(settings), n_(window.count), cells_(window.num_cells),
    x_(n_), y_(n_), q1_(n_), q2_(n_), affine_(cells_), used_affine_(cells_), t_(36 * cells_), u_(9 * cells_),
    v_(27 * cells_)
  {
    // Positions from the rows: a = (-n_x, -n_y, x n_x + y n_y), g_2 = y n_x - x n_y, so
    // (x, y) is the rotation by n of (a_2, g_2) (n unit).
    const double * a = w_.a_rows;
    const double * g = w_.g_rows;
    for (int64_t i = 0; i < n_; ++i) {
      const double nx = -a[i], ny = -a[n_ + i], a2 = a[2 * n_ + i], g2 = g[2 * n_ + i];
      x_[i] = nx * a2 - ny * g2;
      y_[i] = ny * a2 + nx * g2;
    }
    for (int64_t c = 0; c < cells_; ++c) {
      affine_[c] = end(c) - w_.starts[c] >= s_.min_flows;
    }
  }

  int64_t end(int64_t c) const {return c + 1 < cells_ ? w_.starts[c + 1] : n_;}

  // The per-cell tables for the fit weights (count,): sums of w (a a^T) (x) (q q^T) (36),
  // w m a q^T (9) and w a q^T g (27) with q = (1, p - p_c), and over all flows w g g^T,
  // w g m and w m^2.
  void tables(const double * weight)
  {
    const double * a = w_.a_rows;
    const double * g = w_.g_rows;
    const double * m = w_.m;
    double gg[6] = {0.0}, gm[3] = {0.0}, mm = 0.0;  // local: kept in registers
    for (int64_t c = 0; c < cells_; ++c) {
      double t[36] = {0.0}, u[9] = {0.0}, v[27] = {0.0};
      double sw = 0.0, sx = 0.0, sy = 0.0;
      for (int64_t i = w_.starts[c]; i < end(c); ++i) {
        sw += weight[i];
        sx += weight[i] * x_[i];
        sy += weight[i] * y_[i];
      }
      const bool affine = affine_[c] && sw > 0;
      const double cx = affine ? sx / sw : 0.0, cy = affine ? sy / sw : 0.0;
      for (int64_t i = w_.starts[c]; i < end(c); ++i) {
        const double wi = weight[i];
        const double ai[3] = {a[i], a[n_ + i], a[2 * n_ + i]};
        const double gi[3] = {g[i], g[n_ + i], g[2 * n_ + i]};
        const double aa[6] = {ai[0] * ai[0], ai[1] * ai[1], ai[2] * ai[2], ai[0] * ai[1],
          ai[0] * ai[2], ai[1] * ai[2]};
        const double wa[3] = {wi * ai[0], wi * ai[1], wi * ai[2]};
        if (affine) {
          const double q1 = x_[i] - cx, q2 = y_[i] - cy;
          q1_[i] = q1;
          q2_[i] = q2;
          const double qq[6] = {wi, wi * q1 * q1, wi * q2 * q2, wi * q1, wi * q2, wi * q1 * q2};
          for (int k = 0; k < 6; ++k) {
            for (int l = 0; l < 6; ++l) {
              t[6 * k + l] += aa[k] * qq[l];
            }
          }
          for (int j = 0; j < 3; ++j) {
            const double apq[3] = {wa[j], wa[j] * q1, wa[j] * q2};
            for (int p = 0; p < 3; ++p) {
              u[3 * j + p] += apq[p] * m[i];
              for (int l = 0; l < 3; ++l) {
                v[9 * j + 3 * p + l] += apq[p] * gi[l];
              }
            }
          }
        } else {
          // constant depth: q = (1, 0, 0), only the entries of q_0 are used
          q1_[i] = 0.0;
          q2_[i] = 0.0;
          for (int k = 0; k < 6; ++k) {
            t[6 * k] += aa[k] * wi;
          }
          for (int j = 0; j < 3; ++j) {
            u[3 * j] += wa[j] * m[i];
            for (int l = 0; l < 3; ++l) {
              v[9 * j + l] += wa[j] * gi[l];
            }
          }
        }
        const double wg[3] = {wi * gi[0], wi * gi[1], wi * gi[2]};
        gg[0] += wg[0] * gi[0];
        gg[1] += wg[1] * gi[1];
        gg[2] += wg[2] * gi[2];
        gg[3] += wg[0] * gi[1];
        gg[4] += wg[0] * gi[2];
        gg[5] += wg[1] * gi[2];
        for (int l = 0; l < 3; ++l) {
          gm[l] += wg[l] * m[i];
        }
        mm += wi * m[i] * m[i];
      }
      std::copy(t, t + 36, t_.begin() + 36 * c);
      std::copy(u, u + 9, u_.begin() + 9 * c);
      std::copy(v, v + 27, v_.begin() + 27 * c);
      used_affine_[c] = affine;
    }
    std::copy(gg, gg + 6, gg_.begin());
    std::copy(gm, gm + 3, gm_.begin());
    mm_ = mm;
  }

  // The cost of direction d (3, unit) with omega and the cell depths eliminated, and that
  // omega (3,); NaN when the normal equations of omega are singular.
  double operator()(const Vec3 & d, double omega[3]) const
  {
    const Sym3 dd = pair_products(d);
    Sym3 h = gg_;
    double rhs[3] = {gm_[0], gm_[1], gm_[2]};
    double c0 = mm_;
    for (int64_t c = 0; c < cells_; ++c) {
      Sym3 m;
      double y[3], z[3][3];  // z[p][l]
      if (!cell_terms(c, d, dd, m, y, z)) {
        continue;
      }
      if (!used_affine_[c]) {
        // constant depth: M = m[0], q = (1, 0, 0)
        const double inv = 1.0 / m[0];
        c0 -= y[0] * y[0] * inv;
        for (int l = 0; l < 3; ++l) {
          rhs[l] -= z[0][l] * y[0] * inv;
        }
        h[0] -= z[0][0] * z[0][0] * inv;
        h[1] -= z[0][1] * z[0][1] * inv;
        h[2] -= z[0][2] * z[0][2] * inv;
        h[3] -= z[0][0] * z[0][1] * inv;
        h[4] -= z[0][0] * z[0][2] * inv;
        h[5] -= z[0][1] * z[0][2] * inv;
        continue;
      }
      Sym3 inverse;
      if (!invert3(m, inverse)) {
        continue;
      }
      double xy[3], xz[3][3];
      const double zc[3][3] = {{z[0][0], z[1][0], z[2][0]}, {z[0][1], z[1][1], z[2][1]},
        {z[0][2], z[1][2], z[2][2]}};
      apply3(inverse, y, xy);
      apply3(inverse, zc[0], xz[0]);
      apply3(inverse, zc[1], xz[1]);
      apply3(inverse, zc[2], xz[2]);
      c0 -= y[0] * xy[0] + y[1] * xy[1] + y[2] * xy[2];
      for (int l = 0; l < 3; ++l) {
        rhs[l] -= z[0][l] * xy[0] + z[1][l] * xy[1] + z[2][l] * xy[2];
      }
      const int rows[6] = {0, 1, 2, 0, 0, 1}, cols[6] = {0, 1, 2, 1, 2, 2};
      for (int e = 0; e < 6; ++e) {
        const double * col = xz[cols[e]];
        h[e] -= z[0][rows[e]] * col[0] + z[1][rows[e]] * col[1] + z[2][rows[e]] * col[2];
      }
    }
    const double regular = 1e-12 * (h[0] + h[1] + h[2]);
    h[0] += regular;
    h[1] += regular;
    h[2] += regular;
    Sym3 inverse;
    if (!invert3(h, inverse)) {
      return std::nan("");
    }
    apply3(inverse, rhs, omega);
    return c0 - (rhs[0] * omega[0] + rhs[1] * omega[1] + rhs[2] * omega[2]);
  }

  // The cost of direction d (3, unit) for a known omega (3,) [rad/s], the cell depths
  // eliminated.
  double known(const Vec3 & d, const double omega[3]) const
  {
    const Sym3 dd = pair_products(d);
    const double * w = omega;
    double total = mm_ - 2 * (w[0] * gm_[0] + w[1] * gm_[1] + w[2] * gm_[2]) +
      w[0] * w[0] * gg_[0] + w[1] * w[1] * gg_[1] + w[2] * w[2] * gg_[2] +
      2 * (w[0] * w[1] * gg_[3] + w[0] * w[2] * gg_[4] + w[1] * w[2] * gg_[5]);
    for (int64_t c = 0; c < cells_; ++c) {
      double r[3];
      Sym3 m;
      if (!cell_system(c, d, dd, omega, m, r)) {
        continue;
      }
      if (!used_affine_[c]) {
        total -= r[0] * r[0] / m[0];
        continue;
      }
      Sym3 inverse;
      if (!invert3(m, inverse)) {
        continue;
      }
      double x[3];
      apply3(inverse, r, x);
      total -= r[0] * x[0] + r[1] * x[1] + r[2] * x[2];
    }
    return total;
  }

  // The residuals (count,) of direction d and omega with the cells' fitted depths.
  void residuals(const Vec3 & d, const double omega[3], double * residual) const
  {
    std::vector<double> depths(3 * cells_);
    cell_depths(d, omega, depths.data());
    const double * a = w_.a_rows;
    const double * g = w_.g_rows;
    for (int64_t c = 0; c < cells_; ++c) {
      const double * theta = depths.data() + 3 * c;
      for (int64_t i = w_.starts[c]; i < end(c); ++i) {
        const double b = a[i] * d[0] + a[n_ + i] * d[1] + a[2 * n_ + i] * d[2];
        const double rho = theta[0] + theta[1] * q1_[i] + theta[2] * q2_[i];
        residual[i] = w_.m[i] - (g[i] * omega[0] + g[n_ + i] * omega[1] +
          g[2 * n_ + i] * omega[2]) - rho * b;
      }
    }
  }

private:
  // Each cell's (rho, gamma_x, gamma_y) for d and omega: M^-1 (y - Z omega).
  void cell_depths(const Vec3 & d, const double omega[3], double * depths) const
  {
    const Sym3 dd = pair_products(d);
    for (int64_t c = 0; c < cells_; ++c) {
      double * theta = depths + 3 * c;
      std::fill(theta, theta + 3, 0.0);
      double r[3];
      Sym3 m;
      if (!cell_system(c, d, dd, omega, m, r)) {
        continue;
      }
      if (!used_affine_[c]) {
        theta[0] = r[0] / m[0];
        continue;
      }
      Sym3 inverse;
      if (invert3(m, inverse)) {
        apply3(inverse, r, theta);
      }
    }
  }

  // Cell c's normal equations for direction d (dd = pair_products(d)): M (with
  // the gradient ridge where affine), y and Z (z[p][l]); false where M is empty.
  bool cell_terms(int64_t c, const Vec3 & d, const Sym3 & dd, Sym3 & m, double y[3],
                  double z[3][3]) const
  {
    const double * t = t_.data() + 36 * c;
    const double * u = u_.data() + 9 * c;
    const double * v = v_.data() + 27 * c;
    m.fill(0.0);
    for (int k = 0; k < 6; ++k) {
      for (int l = 0; l < 6; ++l) {
        m[l] += dd[k] * t[6 * k + l];
      }
    }
    if (!(m[0] > 0)) {
      return false;
    }
    for (int p = 0; p < 3; ++p) {
      y[p] = d[0] * u[p] + d[1] * u[3 + p] + d[2] * u[6 + p];
      for (int l = 0; l < 3; ++l) {
        z[p][l] = d[0] * v[3 * p + l] + d[1] * v[9 + 3 * p + l] + d[2] * v[18 + 3 * p + l];
      }
    }
    if (used_affine_[c]) {
      const double ridge = kGradientRidge * (m[1] + m[2]) + 1e-300;
      m[1] += ridge;
      m[2] += ridge;
    }
    return true;
  }

  // cell_terms with omega known: M and y - Z omega.
  bool cell_system(int64_t c, const Vec3 & d, const Sym3 & dd, const double omega[3],
                   Sym3 & m, double r[3]) const
  {
    double z[3][3];
    if (!cell_terms(c, d, dd, m, r, z)) {
      return false;
    }
    for (int p = 0; p < 3; ++p) {
      r[p] -= z[p][0] * omega[0] + z[p][1] * omega[1] + z[p][2] * omega[2];
    }
    return true;
  }

  const Window & w_;
  const AffineSettings & s_;
  int64_t n_, cells_;
  std::vector<double> x_, y_, q1_, q2_;
  std::vector<char> affine_, used_affine_;
  std::vector<double> t_, u_, v_;
  Sym3 gg_{};
  Vec3 gm_{};
  double mm_ = 0.0;
};

// The direction at tangent offsets (s1, s2) [rad] from d.
Vec3 offset(const Vec3 & d, const Vec3 & e1, const Vec3 & e2, double s1, double s2)
{
  return normalized({d[0] + s1 * e1[0] + s2 * e2[0], d[1] + s1 * e1[1] + s2 * e2[1],
    d[2] + s1 * e1[2] + s2 * e2[2]});
}

// A local minimum of cost over directions near d, in coordinates (s1, s2) of the tangent
// plane at the start: Newton steps on the quadratic through six probes (gradient and
// Hessian), then quasi-Newton steps that keep that Hessian and take the gradient from two
// forward probes; a step that does not lower the cost probes the quadratic afresh, closer.
template<class Cost>
bool local_search(const Cost & cost, Vec3 & d, double omega[3], double stop_rad)
{
  const Vec3 start = d;
  Vec3 e1, e2;
  tangent_basis(start, e1, e2);
  double best = cost(d, omega);
  if (!std::isfinite(best)) {
    return false;
  }
  double scratch[3];
  auto at = [&](double a1, double a2) {
      return cost(offset(start, e1, e2, a1, a2), scratch);
    };
  double x1 = 0.0, x2 = 0.0;  // the current point
  double spacing = kFirstProbeRad;
  double hxx = 0.0, hyy = 0.0, hxy = 0.0;
  bool have_hessian = false;
  for (int iteration = 0; iteration < kMaxIterations && spacing > stop_rad; ++iteration) {
    const double h = spacing;
    const double f10 = at(x1 + h, x2), f01 = at(x1, x2 + h);
    double gx, gy;
    if (!have_hessian) {
      const double fm10 = at(x1 - h, x2), f0m1 = at(x1, x2 - h), f11 = at(x1 + h, x2 + h);
      gx = (f10 - fm10) / (2 * h);
      gy = (f01 - f0m1) / (2 * h);
      hxx = (f10 - 2 * best + fm10) / (h * h);
      hyy = (f01 - 2 * best + f0m1) / (h * h);
      hxy = (f11 - f10 - f01 + best) / (h * h);
      have_hessian = hxx > 0 && hxx * hyy - hxy * hxy > 0;
    } else {
      gx = (f10 - best) / h - 0.5 * hxx * h;
      gy = (f01 - best) / h - 0.5 * hyy * h;
    }
    double s1, s2;
    if (have_hessian) {
      const double det = hxx * hyy - hxy * hxy;
      s1 = (hxy * gy - hyy * gx) / det;
      s2 = (hxy * gx - hxx * gy) / det;
    } else {
      // not convex here: a step of the probe spacing downhill
      const double norm = std::hypot(gx, gy);
      s1 = norm > 0 ? -h * gx / norm : 0.0;
      s2 = norm > 0 ? -h * gy / norm : 0.0;
    }
    double length = std::hypot(s1, s2);
    if (!(length > 0) || !std::isfinite(length)) {
      break;
    }
    if (length > kMaxStepRad) {
      s1 *= kMaxStepRad / length;
      s2 *= kMaxStepRad / length;
      length = kMaxStepRad;
    }
    const Vec3 next = offset(start, e1, e2, x1 + s1, x2 + s2);
    double next_omega[3];
    const double value = cost(next, next_omega);
    if (value < best) {
      best = value;
      x1 += s1;
      x2 += s2;
      d = next;
      std::copy(next_omega, next_omega + 3, omega);
      if (length < stop_rad) {
        break;
      }
      spacing = std::clamp(length, stop_rad, kFirstProbeRad);
    } else {
      have_hessian = false;
      spacing = std::min(spacing, length) * 0.25;
    }
  }
  return true;
}

}  // namespace

bool refine_affine_depth(const Window & window, const double * weights, const double * first,
                         const AffineSettings & settings, double direction[3],
                         double omega[3], bool omega_known)
{
  const int64_t n = window.count;
  AffineCost cost(window, settings);
  std::vector<double> fit_weight(first, first + n), robust(n, 1.0), factors(n),
    residual(n), scratch, errors;
  Vec3 d = normalized({direction[0], direction[1], direction[2]});
  double w[3] = {omega[0], omega[1], omega[2]};
  // Whether the fit at (d, w) is accurate (median |residual| below the limit); leaves the
  // residuals in `residual`.
  auto accurate = [&]() {
      cost.residuals(d, w, residual.data());
      scratch.resize(n);
      for (int64_t i = 0; i < n; ++i) {
        scratch[i] = std::abs(residual[i]);
      }
      return median(scratch) < settings.limit;
    };
  for (int round = 0; round <= settings.rounds; ++round) {
    cost.tables(fit_weight.data());
    const double stop = round < settings.rounds ? kIntermediateStopRad : kStopRad;
    const bool found = omega_known ?
      local_search(
        [&](const Vec3 & direction, double out[3]) {
          std::copy(w, w + 3, out);
          return cost.known(direction, w);
        }, d, w, stop) :
      local_search(cost, d, w, stop);
    if (!found || !accurate())
    {
      return false;  // (not accurate after the first search: a later one will not be either)
    }
    if (round < settings.rounds) {
      huber_weights(residual.data(), n, settings.huber_scale, scratch, robust.data());
      cell_weights(residual.data(), weights, window.starts, window.num_cells, n,
        settings.cell_huber_scale, scratch, errors, robust.data(), factors.data());
      for (int64_t i = 0; i < n; ++i) {
        fit_weight[i] = weights[i] * robust[i];
      }
    }
  }
  if (!(std::isfinite(d[0]) && std::isfinite(d[1]) && std::isfinite(d[2]) &&
    std::isfinite(w[0]) && std::isfinite(w[1]) && std::isfinite(w[2])))
  {
    return false;
  }
  std::copy(d.begin(), d.end(), direction);
  std::copy(w, w + 3, omega);
  return true;
}

}  // namespace veckm_egomotion
