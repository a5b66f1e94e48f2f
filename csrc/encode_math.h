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

// The per-event and per-pixel arithmetic of the VecKM encoding, written once for the CPU and
// the CUDA kernels (both include this header, so the CPU tests exercise the GPU's math).
//
// The encoding of a target n (docs/algorithm.md) is rewritten as
//
//   f_n[k] = sqrt(D) / C_n * exp(-i phase_n[k]) * sum_{pixels p in window(n)} Q_p[k]
//   Q_p[k] = sum_{events j at p} exp(i phase_j[k])
//   phase_j[k] = t_j / tau * T[k] + x_j / r * X[k] + y_j / r * Y[k]   (absolute, then wrapped)
//
// so that the window sum is a plain (unmodulated) box sum of Q over (2r+1)^2 pixels, which
// is separable and computed with running sums whose cost does not depend on r. Phases are
// formed in float64 and wrapped to [-pi, pi] before the float32 sine/cosine, so absolute
// pixel coordinates and times (relative to a reference event, in int64 ns) lose no precision.

#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define VECKM_HOST_DEVICE __host__ __device__
#else
#define VECKM_HOST_DEVICE
#endif

namespace veckm_flow {

constexpr double kTwoPi = 6.283185307179586476925286766559;
constexpr double kInvTwoPi = 0.159154943091895335768883763372;
// Adding then subtracting 1.5 * 2^52 rounds a double to the nearest integer (|v| < 2^51)
// without a libm call, so the loops vectorise on the CPU and stay identical on the GPU.
constexpr double kRoundDouble = 6755399441055744.0;
// Same trick for float (|v| < 2^22).
constexpr float kRoundFloat = 12582912.0f;

// Wraps a phase (radians) into [-pi, pi].
VECKM_HOST_DEVICE inline double wrap_phase(double phase) {
  const double turns = (phase * kInvTwoPi + kRoundDouble) - kRoundDouble;
  return phase - turns * kTwoPi;
}

// cos and sin of a float phase of moderate size (|phase| < 1e4; ours are in [-3 pi, 3 pi]).
// Cody-Waite reduction by pi/2 in three parts, then minimax polynomials on [-pi/4, pi/4]
// (max error about 1e-7). Branch-free so that it vectorises.
VECKM_HOST_DEVICE inline void unit_phasor(float phase, float* cos_out, float* sin_out) {
  const float quarter_turns = (phase * 0.636619772367581343f + kRoundFloat) - kRoundFloat;
  float reduced = phase - quarter_turns * 1.5703125f;
  reduced = reduced - quarter_turns * 4.837512969970703125e-4f;
  reduced = reduced - quarter_turns * 7.54978995489188216e-8f;
  const float r2 = reduced * reduced;
  const float sin_r =
      reduced + reduced * r2 * (-1.6666654611e-1f + r2 * (8.3321608736e-3f + r2 * -1.9515295891e-4f));
  const float cos_r =
      1.0f - 0.5f * r2 +
      r2 * r2 * (4.166664568298827e-2f + r2 * (-1.388731625493765e-3f + r2 * 2.443315711809948e-5f));
  const int quadrant = static_cast<int>(quarter_turns);
  const bool swap = (quadrant & 1) != 0;
  const float sin_base = swap ? cos_r : sin_r;
  const float cos_base = swap ? sin_r : cos_r;
  *sin_out = (quadrant & 2) ? -sin_base : sin_base;
  *cos_out = ((quadrant + 1) & 2) ? -cos_base : cos_base;
}

// exp(i delta) for a small angle |delta| <= 0.25 (Taylor series; error < 2e-8 there): the
// fine factor of a phasor split into a tabulated coarse phasor times a small remainder.
VECKM_HOST_DEVICE inline void small_angle_phasor(float delta, float* cos_out, float* sin_out) {
  const float d2 = delta * delta;
  *sin_out = delta * (1.0f + d2 * (-1.6666667e-1f + d2 * (8.3333333e-3f + d2 * -1.9841270e-4f)));
  *cos_out = 1.0f + d2 * (-0.5f + d2 * (4.1666667e-2f + d2 * -1.3888889e-3f));
}

// Time of an event in units of tau, relative to a reference event: the int64 subtraction is
// exact, and the result is small, so float64 keeps sub-nanosecond resolution.
VECKM_HOST_DEVICE inline double relative_time_units(int64_t t_ns, int64_t t_ref_ns,
                                                    double inv_tau_ns) {
  return static_cast<double>(t_ns - t_ref_ns) * inv_tau_ns;
}

// Wrapped time phase t / tau * T[k] of one event for channel k.
VECKM_HOST_DEVICE inline float time_phase(double time_units, float freq_t) {
  return static_cast<float>(wrap_phase(time_units * static_cast<double>(freq_t)));
}

// Wrapped spatial phase (x X[k] + y Y[k]) / r of a pixel for channel k.
VECKM_HOST_DEVICE inline float pixel_phase(int32_t x, int32_t y, float freq_x, float freq_y,
                                           double inv_radius) {
  return static_cast<float>(wrap_phase(
      (static_cast<double>(x) * static_cast<double>(freq_x) +
       static_cast<double>(y) * static_cast<double>(freq_y)) * inv_radius));
}

// (a_re + i a_im) * (b_re + i b_im), in place on a.
template <typename T, typename U>
VECKM_HOST_DEVICE inline void complex_multiply(T* a_re, T* a_im, U b_re, U b_im) {
  const T re = *a_re * static_cast<T>(b_re) - *a_im * static_cast<T>(b_im);
  const T im = *a_re * static_cast<T>(b_im) + *a_im * static_cast<T>(b_re);
  *a_re = re;
  *a_im = im;
}

// Normalised window sum of one target pixel for channel k:
//   box_sum * exp(-i pixel_phase) * sqrt(D) / count.
// Everything but the target's own time phase; count > 0 always holds here because the target
// pixel holds at least the target event.
VECKM_HOST_DEVICE inline void normalise_pooled(double box_re, double box_im, float pixel_phase_k,
                                               double scale, float* out_re, float* out_im) {
  float cos_p, sin_p;
  unit_phasor(pixel_phase_k, &cos_p, &sin_p);
  double re = box_re, im = box_im;
  complex_multiply(&re, &im, cos_p, -sin_p);
  *out_re = static_cast<float>(re * scale);
  *out_im = static_cast<float>(im * scale);
}


// ---- Per-event and per-target steps shared by every kernel ----------------------------------

// exp(i t_j / tau T[k]) of one event (time in tau units) added to (re, im).
VECKM_HOST_DEVICE inline void add_time_phasor(double time_units, float freq_t_k, float* re,
                                              float* im) {
  float cos_t, sin_t;
  unit_phasor(time_phase(time_units, freq_t_k), &cos_t, &sin_t);
  *re += cos_t;
  *im += sin_t;
}

// (re, im) times exp(i pixel phase) of pixel (x, y): a pixel's time-phasor sum becomes its Q.
VECKM_HOST_DEVICE inline void apply_pixel_phasor(int32_t x, int32_t y, float freq_x_k,
                                                 float freq_y_k, double inv_radius, float* re,
                                                 float* im) {
  float cos_p, sin_p;
  unit_phasor(pixel_phase(x, y, freq_x_k, freq_y_k, inv_radius), &cos_p, &sin_p);
  complex_multiply(re, im, cos_p, sin_p);
}

// (re, im) times exp(-i t_n / tau T[k]): a target's pooled window becomes its feature.
VECKM_HOST_DEVICE inline void apply_target_time_phase(double time_units, float freq_t_k,
                                                      float* re, float* im) {
  float cos_t, sin_t;
  unit_phasor(time_phase(time_units, freq_t_k), &cos_t, &sin_t);
  complex_multiply(re, im, cos_t, -sin_t);
}

// The window [*low, *high] of a centre coordinate, clamped to [0, extent).
VECKM_HOST_DEVICE inline void window_span(int64_t centre, int64_t radius, int64_t extent,
                                          int64_t* low, int64_t* high) {
  *low = centre - radius < 0 ? 0 : centre - radius;
  *high = centre + radius > extent - 1 ? extent - 1 : centre + radius;
}

// ---- The per-target (sparse) path of encode ------------------------------------------------
//
// With few targets, the box sums over whole image rows cost more than reading each target's
// window directly: the sparse path embeds Q only for the pixels inside some target's window
// and sums each target's (2r+1)^2 window pixel by pixel through a pixel -> slot map (float64
// sums of the same float32 Q as the dense path: the same values to float32 rounding).

// visit(slot) for every pixel with events (slot_map [H * W]: its slot, or -1) in the
// (2r+1)^2 window of pixel (x, y), clamped to the image, row by row: the one order in which
// both backends' sparse paths sum a window.
template <typename Visit>
VECKM_HOST_DEVICE inline void for_each_window_slot(const int32_t* slot_map, int32_t x,
                                                   int32_t y, int64_t width, int64_t height,
                                                   int64_t radius, Visit&& visit) {
  int64_t low_x, high_x, low_y, high_y;
  window_span(x, radius, width, &low_x, &high_x);
  window_span(y, radius, height, &low_y, &high_y);
  for (int64_t row = low_y; row <= high_y; ++row) {
    const int32_t* map_row = slot_map + row * width;
    for (int64_t column = low_x; column <= high_x; ++column) {
      if (map_row[column] >= 0) visit(static_cast<int64_t>(map_row[column]));
    }
  }
}

// Window sum of Q for target pixel (x, y), channel k, in float64: slot_embed [slots][2D]
// re | im, slot_count [slots]. Returns the count C (events in the window).
template <typename CountT>
struct WindowChannelSum {
  const float* slot_embed;
  const CountT* slot_count;
  int64_t d, k;
  double re = 0.0, im = 0.0;
  int64_t count = 0;
  VECKM_HOST_DEVICE void operator()(int64_t slot) {
    re += static_cast<double>(slot_embed[slot * 2 * d + k]);
    im += static_cast<double>(slot_embed[slot * 2 * d + d + k]);
    count += slot_count[slot];
  }
};

template <typename CountT>
VECKM_HOST_DEVICE inline int64_t gather_window_channel(
    const int32_t* slot_map, const float* slot_embed, const CountT* slot_count, int32_t x,
    int32_t y, int64_t width, int64_t height, int64_t radius, int64_t d, int64_t k, double* re,
    double* im) {
  WindowChannelSum<CountT> sum{slot_embed, slot_count, d, k};
  for_each_window_slot(slot_map, x, y, width, height, radius, sum);
  *re = sum.re;
  *im = sum.im;
  return sum.count;
}

// Work of the two paths, in units the backends' constants convert to time: the sparse path
// reads (2r+1)^2 pixels per target, the dense one sums whole image rows. The sparse path is
// chosen when targets * (2r+1)^2 < sparse_factor * width * height; sparse_factor is the
// backend's measured break-even (encode.cpp).
inline bool sparse_encode_pays(int64_t targets, int64_t width, int64_t height, int64_t radius,
                               double sparse_factor) {
  const double window = static_cast<double>(2 * radius + 1) * static_cast<double>(2 * radius + 1);
  return static_cast<double>(targets) * window <
         sparse_factor * static_cast<double>(width) * static_cast<double>(height);
}

// ---- The paper's Algorithm 1 as written (encode_naive: the baseline of the kernels above) ---
//
// PixelEmbed[p][k] = sum over the events at pixel p of exp(i t_j / tau T[k]), and PixelCount
// (both backends scatter them); then, per target n at pixel (x, y) and channel k, the window
// read pixel by pixel:
//   f_n[k] = sqrt(D) / C_n * exp(-i t_n / tau T[k])
//            * sum_{|dx|, |dy| <= r} exp(i (dx X[k] + dy Y[k]) / r) PixelEmbed[(x+dx, y+dy)][k]
// pixel_embed [H * W][2D] and window_phasor [(2r+1)^2][2D] (row (dy + r)(2r + 1) + dx + r) are
// re | im; float32 sums like the paper's complex64. Returns C_n (>= 1: the target's own pixel
// holds the target).
VECKM_HOST_DEVICE inline int32_t encode_naive_channel(
    const float* pixel_embed, const int32_t* pixel_count, const float* window_phasor, int32_t x,
    int32_t y, int64_t width, int64_t height, int64_t radius, int64_t d, int64_t k,
    double time_units, float freq_t_k, float* out_re, float* out_im) {
  const int64_t channels = 2 * d;
  float re = 0.0f, im = 0.0f;
  int32_t count = 0;
  int64_t window = 0;
  for (int64_t dy = -radius; dy <= radius; ++dy) {
    for (int64_t dx = -radius; dx <= radius; ++dx, ++window) {
      const int64_t pixel_x = x + dx, pixel_y = y + dy;
      if (pixel_x < 0 || pixel_x >= width || pixel_y < 0 || pixel_y >= height) continue;
      const int64_t pixel = pixel_y * width + pixel_x;
      float embed_re = pixel_embed[pixel * channels + k];
      float embed_im = pixel_embed[pixel * channels + d + k];
      complex_multiply(&embed_re, &embed_im, window_phasor[window * channels + k],
                       window_phasor[window * channels + d + k]);
      re += embed_re;
      im += embed_im;
      count += pixel_count[pixel];
    }
  }
  apply_target_time_phase(time_units, freq_t_k, &re, &im);
  const double scale = sqrt(static_cast<double>(d)) / static_cast<double>(count);
  *out_re = static_cast<float>(re * scale);
  *out_im = static_cast<float>(im * scale);
  return count;
}

}  // namespace veckm_flow
