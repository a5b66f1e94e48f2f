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

// What EgomotionEstimator checks around a solve (checks.h; docs/egomotion.md).

#include "checks.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "search.h"

namespace veckm_egomotion {
namespace {

// The accuracy check also passes when the flows with the smallest |a . d| (this share of them)
// leave a median |residual| below kDepthFreeLimit times the limit. Measured (median |residual|
// of that tenth / median |flow|): the flow model's held-out windows 0.056-0.54 (2 % below
// 0.068), exact flows of random per-flow depths 0.013-0.027, analytic windows with 5 % noise
// and outliers up to 0.048.
constexpr double kDepthFreeShare = 0.1;
constexpr double kDepthFreeLimit = 0.5;

bool finite3(const double v[3])
{
  return std::isfinite(v[0]) && std::isfinite(v[1]) && std::isfinite(v[2]);
}

// np.quantile(values, share) with linear interpolation (reorders values).
double quantile(std::vector<double> & values, double share)
{
  const int64_t n = static_cast<int64_t>(values.size());
  const double virtual_index = static_cast<double>(n - 1) * share;
  const int64_t below = static_cast<int64_t>(std::floor(virtual_index));
  const int64_t above = std::min(below + 1, n - 1);
  std::nth_element(values.begin(), values.begin() + below, values.end());
  const double low = values[below];
  const double high = above > below ?
    *std::min_element(values.begin() + below + 1, values.end()) : low;
  const double gamma = virtual_index - static_cast<double>(below);
  const double diff = high - low;
  return gamma >= 0.5 ? high - diff * (1.0 - gamma) : low + diff * gamma;
}

}  // namespace

bool accurate_fit(
  const Window & window, const double * fit_weight, const double direction[3],
  const double omega[3], double limit)
{
  const int64_t n = window.count;
  const double * g = window.g_rows;
  std::vector<double> r(n), residual(n), b(n);
  for (int64_t i = 0; i < n; ++i) {
    r[i] = window.m[i] - (g[i] * omega[0] + g[n + i] * omega[1] + g[2 * n + i] * omega[2]);
  }
  const Flows flows{window.a_rows, window.starts, window.num_cells, n};
  CellStats sums;
  known_cell_stats(flows, r.data(), fit_weight, sums);
  const Vec3 d{direction[0], direction[1], direction[2]};
  cell_residual(flows, sums.aa.data(), sums.ar.data(), r.data(), d, residual.data(), b.data());
  std::vector<double> size(n);
  for (int64_t i = 0; i < n; ++i) {
    size[i] = std::abs(residual[i]);
  }
  if (median(size) < limit) {
    return true;
  }
  std::vector<double> flat(n);
  for (int64_t i = 0; i < n; ++i) {
    flat[i] = std::abs(b[i]);
  }
  const double threshold = quantile(flat, kDepthFreeShare);
  std::vector<double> picked;
  for (int64_t i = 0; i < n; ++i) {
    if (std::abs(b[i]) <= threshold) {
      picked.push_back(std::abs(residual[i]));
    }
  }
  return median(picked) < kDepthFreeLimit * limit;
}

Checks window_checks(
  const Window & window, const double * robust, const double direction[3],
  const double omega[3], double huber_scale, double rotation_error, double accuracy_share)
{
  const int64_t n = window.count;
  const double * g = window.g_rows;
  const double * a = window.a_rows;
  Checks checks{std::numeric_limits<double>::infinity(), 0.0, false};
  std::vector<double> weight(n);
  for (int64_t i = 0; i < n; ++i) {
    weight[i] = window.weight[i] * robust[i];
  }
  if (accuracy_share >= 0 && finite3(direction) && finite3(omega)) {
    std::vector<double> magnitude(n);
    for (int64_t i = 0; i < n; ++i) {
      magnitude[i] = std::abs(window.m[i]);
    }
    checks.accurate = accurate_fit(
      window, weight.data(), direction, omega, accuracy_share * median(magnitude));
  }
  if (!finite3(omega)) {
    return checks;
  }
  std::vector<double> h(n), r(n), size(n);
  for (int64_t i = 0; i < n; ++i) {
    h[i] = g[i] * omega[0] + g[n + i] * omega[1] + g[2 * n + i] * omega[2];
    r[i] = window.m[i] - h[i];
    size[i] = std::abs(h[i]);
  }
  const double rotational = n ? median(size) : 0.0;
  if (!finite3(direction)) {
    checks.translation_ratio = rotational > 0 ? std::numeric_limits<double>::quiet_NaN() :
      checks.translation_ratio;
    return checks;
  }
  // Translation ratio: each cell's inverse depth fitted to the derotated flows, clipped at 0.
  std::vector<double> b(n);
  for (int64_t i = 0; i < n; ++i) {
    b[i] = a[i] * direction[0] + a[n + i] * direction[1] + a[2 * n + i] * direction[2];
  }
  if (rotational > 0) {
    const Flows flows{window.a_rows, window.starts, window.num_cells, n};
    std::vector<double> translational(n);
    for (int64_t c = 0; c < window.num_cells; ++c) {
      double s_br = 0.0, s_bb = 0.0;
      for (int64_t i = window.starts[c]; i < flows.end(c); ++i) {
        s_br += weight[i] * b[i] * r[i];
        s_bb += weight[i] * b[i] * b[i];
      }
      const double rho = std::max(s_br / std::max(s_bb, 1e-300), 0.0);
      for (int64_t i = window.starts[c]; i < flows.end(c); ++i) {
        translational[i] = std::abs(rho * b[i]);
      }
    }
    checks.translation_ratio = median(translational) / rotational;
  }
  // Sign disagreement: the sign start's weights, Huber weights of r itself (before any fit).
  if (window.slow != nullptr) {
    std::vector<double> huber(n), vote;
    huber_weights(r.data(), n, huber_scale, size, huber.data());
    for (int64_t i = 0; i < n; ++i) {
      huber[i] *= window.weight[i] * window.slow[i];
    }
    sign_weights(r.data(), h.data(), huber.data(), n, rotation_error, vote);
    double total = 0.0, against = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const double sign_b = b[i] > 0 ? 1.0 : (b[i] < 0 ? -1.0 : 0.0);
      const double sign_r = r[i] > 0 ? 1.0 : (r[i] < 0 ? -1.0 : 0.0);
      total += std::abs(vote[i]);
      against += sign_b != sign_r ? std::abs(vote[i]) : 0.0;
    }
    checks.sign_disagreement = total > 0 ? against / total : 0.0;
  }
  return checks;
}

}  // namespace veckm_egomotion
