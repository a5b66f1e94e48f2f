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

// veckm_flow_ros._egomotion: a plain CPython extension (no torch, no numpy headers: arrays
// arrive through the buffer protocol) around prepare.cpp, solve_gyro.cpp, solve_free.cpp,
// ttc.cpp and checks.cpp (and flow_message.cpp, which holds its own function), so that the
// egomotion node keeps not importing torch. Every
// argument is checked here (dtype, shape, contiguity, finite values, the cell starts and
// input order) with a ValueError that names it. The calls keep the GIL: each takes about a millisecond or less,
// while a thread that releases it may wait a whole switch interval (5 ms) to get it back from
// the node's receive threads.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "checks.h"
#include "flow_message.h"
#include "prepare.h"
#include "solve_free.h"
#include "solve_gyro.h"
#include "ttc.h"

namespace {

constexpr Py_ssize_t kFree = -1;

// A C-contiguous float64, float32 or int64 buffer of a given shape, released on scope exit.
class Array
{
public:
  Array() = default;
  Array(const Array &) = delete;
  Array & operator=(const Array &) = delete;
  ~Array()
  {
    if (held_) {
      PyBuffer_Release(&view_);
    }
  }

  // kind 'd' (float64), 'f' (float32) or 'i' (int64); shape (size) with ndim 1, (size,
  // columns) with ndim 2; kFree: any size. Returns false with a ValueError set.
  bool get(
    PyObject * object, const char * name, char kind, int ndim, Py_ssize_t size,
    Py_ssize_t columns = kFree, bool writable = false, const char * function = "solve_gyro")
  {
    const char * dtype = kind == 'd' ? "float64" : (kind == 'f' ? "float32" : "int64");
    const int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(object, &view_, flags) != 0) {
      PyErr_Clear();
      PyErr_Format(
        PyExc_ValueError, "%s: %s must be a %sC-contiguous %s array, got %R", function, name,
        writable ? "writable " : "", dtype, reinterpret_cast<PyObject *>(Py_TYPE(object)));
      return false;
    }
    held_ = true;
    const std::string format = view_.format ? view_.format : "B";
    const char code = format.empty() ? '?' : format.back();
    const bool dtype_ok = view_.itemsize == 8 && (format.size() == 1 || format[0] == '@' ||
      format[0] == '=' || format[0] == '<') &&
      (kind == 'd' ? code == 'd' : (code == 'l' || code == 'q'));
    const bool float32_ok = kind == 'f' && view_.itemsize == 4 && code == 'f' &&
      (format.size() == 1 || format[0] == '@' || format[0] == '=' || format[0] == '<');
    if (!(dtype_ok || float32_ok)) {
      PyErr_Format(
        PyExc_ValueError, "%s: %s must be %s, got buffer format '%s' (%zd bytes)",
        function, name, dtype, format.c_str(), view_.itemsize);
      return false;
    }
    const Py_ssize_t first = view_.ndim >= 1 ? view_.shape[0] : -1;
    const Py_ssize_t second = view_.ndim >= 2 ? view_.shape[1] : -1;
    const bool shape_ok = view_.ndim == ndim && (size == kFree || first == size) &&
      (ndim == 1 || columns == kFree || second == columns);
    if (!shape_ok) {
      std::string shape = "(";
      for (int d = 0; d < view_.ndim; ++d) {
        shape += std::to_string(view_.shape[d]) + (d + 1 < view_.ndim ? ", " : "");
      }
      shape += view_.ndim == 1 ? ",)" : ")";
      auto text = [](Py_ssize_t value) {
          return value == kFree ? std::string("K") : std::to_string(value);
        };
      const std::string want = ndim == 1 ? "(" + text(size) + ",)" :
        "(" + text(size) + ", " + text(columns) + ")";
      PyErr_Format(
        PyExc_ValueError, "%s: %s must have shape %s, got %s", function, name, want.c_str(),
        shape.c_str());
      return false;
    }
    return true;
  }

  Py_ssize_t size(int dim) const {return view_.shape[dim];}
  Py_ssize_t count() const {return view_.len / view_.itemsize;}
  const double * f64() const {return static_cast<const double *>(view_.buf);}
  double * f64_mut() const {return static_cast<double *>(view_.buf);}
  const int64_t * i64() const {return static_cast<const int64_t *>(view_.buf);}
  int64_t * i64_mut() const {return static_cast<int64_t *>(view_.buf);}
  const float * f32() const {return static_cast<const float *>(view_.buf);}
  float * f32_mut() const {return static_cast<float *>(view_.buf);}

private:
  Py_buffer view_{};
  bool held_ = false;
};

bool finite(const Array & array, const char * name, const char * function = "solve_gyro")
{
  const double * values = array.f64();
  for (Py_ssize_t i = 0; i < array.count(); ++i) {
    if (!std::isfinite(values[i])) {
      char value[32];
      std::snprintf(value, sizeof(value), "%g", values[i]);
      PyErr_Format(
        PyExc_ValueError, "%s: %s must be finite, got %s at flat index %zd", function,
        name, value, i);
      return false;
    }
  }
  return true;
}

// input_order: distinct non-negative positions (a table of seen positions; a sorted copy
// where the positions are sparse).
bool distinct_positions(const int64_t * order, Py_ssize_t count, const char * function)
{
  const int64_t smallest = *std::min_element(order, order + count);
  const int64_t largest = *std::max_element(order, order + count);
  int64_t repeated = -1;
  if (smallest >= 0 && largest < 8 * static_cast<int64_t>(count) + 64) {
    std::vector<char> seen(largest + 1, 0);
    for (Py_ssize_t i = 0; i < count && repeated < 0; ++i) {
      repeated = seen[order[i]] ? order[i] : -1;
      seen[order[i]] = 1;
    }
  } else if (smallest >= 0) {
    std::vector<int64_t> sorted(order, order + count);
    std::sort(sorted.begin(), sorted.end());
    for (Py_ssize_t i = 1; i < count && repeated < 0; ++i) {
      repeated = sorted[i] == sorted[i - 1] ? sorted[i] : -1;
    }
  }
  if (smallest < 0 || repeated >= 0) {
    PyErr_Format(
      PyExc_ValueError, "%s: input_order must hold distinct non-negative positions, got "
      "%lld %s", function, static_cast<long long>(smallest < 0 ? smallest : repeated),  // NOLINT
      smallest < 0 ? "(negative)" : "twice");
    return false;
  }
  return true;
}

// starts: the first flow of each cell of a window of count flows sorted by cell (at least
// one cell, 0 first, increasing, below count).
bool valid_starts(const Array & starts, Py_ssize_t count, const char * function)
{
  const int64_t * cell_start = starts.i64();
  const Py_ssize_t num_cells = starts.size(0);
  if (num_cells == 0) {
    PyErr_Format(PyExc_ValueError, "%s: starts must hold >= 1 cell, got 0", function);
    return false;
  }
  for (Py_ssize_t c = 0; c < num_cells; ++c) {
    const bool ok = c == 0 ? cell_start[0] == 0 : (cell_start[c] > cell_start[c - 1] &&
      cell_start[c] < count);
    if (!ok) {
      PyErr_Format(
        PyExc_ValueError, "%s: starts must begin at 0 and increase below N = %zd, got %lld "
        "at index %zd", function, count, static_cast<long long>(cell_start[c]),  // NOLINT
        c);
      return false;
    }
  }
  return true;
}

// The arrays of one window sorted by depth cell that both solves read, checked: dtype,
// shape, contiguity, finite values, the cell starts and the input order.
struct WindowArrays
{
  Array a_rows, g_rows, m, weight, starts, input_order, half_sphere, previous, robust;
  Py_ssize_t count = 0;
  bool has_previous = false;

  // objects: a_rows, g_rows, m, weight, starts, input_order, half_sphere, previous (or
  // None), robust_out. Returns false with a ValueError set.
  bool get(PyObject * const objects[9], const char * function)
  {
    if (!m.get(objects[2], "m", 'd', 1, kFree, kFree, false, function)) {
      return false;
    }
    count = m.size(0);
    if (count < 1) {
      PyErr_Format(PyExc_ValueError, "%s: m must hold at least 1 flow, got 0", function);
      return false;
    }
    has_previous = objects[7] != Py_None;
    if (!a_rows.get(objects[0], "a_rows", 'd', 2, 3, count, false, function) ||
      !g_rows.get(objects[1], "g_rows", 'd', 2, 3, count, false, function) ||
      !weight.get(objects[3], "weight", 'd', 1, count, kFree, false, function) ||
      !starts.get(objects[4], "starts", 'i', 1, kFree, kFree, false, function) ||
      !input_order.get(objects[5], "input_order", 'i', 1, count, kFree, false, function) ||
      !half_sphere.get(objects[6], "half_sphere", 'd', 2, kFree, 3, false, function) ||
      (has_previous && !previous.get(objects[7], "previous", 'd', 1, 3, kFree, false,
      function)) ||
      !robust.get(objects[8], "robust_out", 'd', 1, count, kFree, true, function))
    {
      return false;
    }
    if (!finite(a_rows, "a_rows", function) || !finite(g_rows, "g_rows", function) ||
      !finite(m, "m", function) || !finite(weight, "weight", function) ||
      !finite(half_sphere, "half_sphere", function) ||
      (has_previous && !finite(previous, "previous", function)))
    {
      return false;
    }
    if (half_sphere.size(0) < 1) {
      PyErr_Format(PyExc_ValueError, "%s: half_sphere must hold >= 1 direction", function);
      return false;
    }
    if (!valid_starts(starts, count, function)) {
      return false;
    }
    return distinct_positions(input_order.i64(), count, function);
  }

  const double * previous_or_null() const {return has_previous ? previous.f64() : nullptr;}
};

const char kSolveGyroDoc[] =
  "solve_gyro(a_rows, g_rows, m, weight, slow, starts, input_order, omega, half_sphere,\n"
  "           previous, warm, robust_out, settings) -> (direction (3 floats), fit)\n\n"
  "The gyroscope path's solve of EgomotionEstimator (egomotion_solve.py) for one\n"
  "window sorted by depth cell. a_rows, g_rows (3, N) float64; m, weight, slow (N,) float64;\n"
  "starts (C,) int64, the first flow of each cell (0, increasing, < N); input_order (N,) int64\n"
  "distinct positions in the input; omega (3,) rad/s; half_sphere (H, 3) the coarse grid;\n"
  "previous (3,) or None; warm: bool; robust_out (N,) float64, written with the final Huber\n"
  "weights; settings: (refine_steps, robust_iterations, huber_scale, sign_start, sign_flows,\n"
  "sign_tolerance, rotation_error, coarse_step_rad, cell_huber_scale, affine_depth,\n"
  "rotation_start_residual). Raises ValueError naming a bad argument.";

PyObject * solve_gyro(PyObject *, PyObject * args)
{
  PyObject * objects[12];
  veckm_egomotion::GyroSettings settings{};
  int sign_start = 0, warm = 0, affine_depth = 0;
  long long sign_flows = 0;  // NOLINT(runtime/int): the "L" format's type
  if (!PyArg_ParseTuple(
      args, "OOOOOOOOOOpO(iidpLddddpd):solve_gyro", &objects[0], &objects[1], &objects[2],
      &objects[3], &objects[4], &objects[5], &objects[6], &objects[7], &objects[8],
      &objects[9], &warm, &objects[11], &settings.refine_steps, &settings.robust_iterations,
      &settings.huber_scale, &sign_start, &sign_flows, &settings.sign_tolerance,
      &settings.rotation_error, &settings.coarse_step_rad, &settings.cell_huber_scale,
      &affine_depth, &settings.accuracy_share))
  {
    return nullptr;
  }
  settings.sign_start = sign_start != 0;
  settings.affine_depth = affine_depth != 0;
  settings.sign_flows = sign_flows;
  if (!(settings.refine_steps >= 0 && settings.refine_steps <= 20 &&
    settings.robust_iterations >= 0 && settings.robust_iterations <= 10 &&
    settings.huber_scale > 0 && settings.sign_flows >= 1 && settings.sign_tolerance >= 0 &&
    std::isfinite(settings.sign_tolerance) && std::isfinite(settings.rotation_error) &&
    settings.coarse_step_rad > 0 && std::isfinite(settings.coarse_step_rad) &&
    settings.cell_huber_scale >= 0 && std::isfinite(settings.cell_huber_scale) &&
    settings.accuracy_share >= 0 && std::isfinite(settings.accuracy_share)))
  {
    PyErr_Format(
      PyExc_ValueError, "solve_gyro: settings out of range (refine_steps 0..20, "
      "robust_iterations 0..10, huber_scale > 0, sign_flows >= 1, finite sign_tolerance >= 0 "
      "and rotation_error, coarse_step_rad > 0, finite cell_huber_scale >= 0, finite "
      "rotation_start_residual >= 0), got %R", PyTuple_GET_ITEM(args, 12));
    return nullptr;
  }
  PyObject * const window_objects[9] = {objects[0], objects[1], objects[2], objects[3],
    objects[5], objects[6], objects[8], objects[9], objects[11]};
  WindowArrays arrays;
  Array slow, omega;
  if (!arrays.get(window_objects, "solve_gyro") ||
    !slow.get(objects[4], "slow", 'd', 1, arrays.count) ||
    !omega.get(objects[7], "omega", 'd', 1, 3) || !finite(slow, "slow") ||
    !finite(omega, "omega"))
  {
    return nullptr;
  }
  if (warm && !arrays.has_previous) {
    PyErr_SetString(
      PyExc_ValueError, "solve_gyro: warm needs the previous direction, got previous None");
    return nullptr;
  }
  veckm_egomotion::Window window{
    arrays.a_rows.f64(), arrays.g_rows.f64(), arrays.m.f64(), arrays.weight.f64(), slow.f64(),
    arrays.starts.i64(), arrays.starts.size(0), arrays.input_order.i64(), arrays.count};
  double direction[3];
  double fit = 0.0;
  veckm_egomotion::solve_gyro(
    window, omega.f64(), arrays.half_sphere.f64(), arrays.half_sphere.size(0),
    arrays.previous_or_null(), warm != 0, settings, direction, &fit, arrays.robust.f64_mut());
  return Py_BuildValue("(ddd)d", direction[0], direction[1], direction[2], fit);
}

const char kSolveFreeDoc[] =
  "solve_free(a_rows, g_rows, m, weight, starts, input_order, half_sphere, previous,\n"
  "           skip_check, robust_out, settings)\n"
  "  -> (direction (3 floats), omega (3 floats), fit, accurate)\n\n"
  "The solve without a gyroscope of EgomotionEstimator (egomotion_solve.py) for one\n"
  "window sorted by depth cell; the arrays as for solve_gyro, omega in rad/s; skip_check:\n"
  "with the rotation start, leave the accuracy check's fit out; accurate: the joint least\n"
  "squares passed the check; settings:\n"
  "(refine_steps, robust_iterations, huber_scale, sign_flows, rotation_error, rotation_start,\n"
  "rotation_start_residual, rotation_prior_weight, coarse_step_rad, cell_huber_scale,\n"
  "affine_depth). Raises ValueError naming a bad argument.";

PyObject * solve_free(PyObject *, PyObject * args)
{
  PyObject * objects[9];
  veckm_egomotion::FreeSettings settings{};
  int rotation_start = 0, affine_depth = 0, skip_check = 0;
  long long sign_flows = 0;  // NOLINT(runtime/int): the "L" format's type
  if (!PyArg_ParseTuple(
      args, "OOOOOOOOpO(iidLdpddddp):solve_free", &objects[0], &objects[1], &objects[2],
      &objects[3], &objects[4], &objects[5], &objects[6], &objects[7], &skip_check,
      &objects[8],
      &settings.refine_steps, &settings.robust_iterations, &settings.huber_scale, &sign_flows,
      &settings.rotation_error, &rotation_start, &settings.rotation_start_residual,
      &settings.rotation_prior_weight, &settings.coarse_step_rad, &settings.cell_huber_scale,
      &affine_depth))
  {
    return nullptr;
  }
  settings.rotation_start = rotation_start != 0;
  settings.affine_depth = affine_depth != 0;
  settings.sign_flows = sign_flows;
  if (!(settings.refine_steps >= 0 && settings.refine_steps <= 20 &&
    settings.robust_iterations >= 0 && settings.robust_iterations <= 10 &&
    settings.huber_scale > 0 && settings.sign_flows >= 1 &&
    std::isfinite(settings.rotation_error) && settings.rotation_start_residual >= 0 &&
    std::isfinite(settings.rotation_start_residual) && settings.rotation_prior_weight >= 0 &&
    std::isfinite(settings.rotation_prior_weight) && settings.coarse_step_rad > 0 &&
    std::isfinite(settings.coarse_step_rad) && settings.cell_huber_scale >= 0 &&
    std::isfinite(settings.cell_huber_scale)))
  {
    PyErr_Format(
      PyExc_ValueError, "solve_free: settings out of range (refine_steps 0..20, "
      "robust_iterations 0..10, huber_scale > 0, sign_flows >= 1, finite rotation_error, "
      "finite rotation_start_residual and rotation_prior_weight >= 0, coarse_step_rad > 0, "
      "finite cell_huber_scale >= 0), got %R", PyTuple_GET_ITEM(args, 10));
    return nullptr;
  }
  WindowArrays arrays;
  if (!arrays.get(objects, "solve_free")) {
    return nullptr;
  }
  veckm_egomotion::Window window{
    arrays.a_rows.f64(), arrays.g_rows.f64(), arrays.m.f64(), arrays.weight.f64(), nullptr,
    arrays.starts.i64(), arrays.starts.size(0), arrays.input_order.i64(), arrays.count};
  double direction[3], omega[3];
  double fit = 0.0;
  const bool accurate = veckm_egomotion::solve_free(
    window, arrays.half_sphere.f64(), arrays.half_sphere.size(0), arrays.previous_or_null(),
    skip_check != 0, settings, direction, omega, &fit, arrays.robust.f64_mut());
  return Py_BuildValue(
    "(ddd)(ddd)dO", direction[0], direction[1], direction[2], omega[0], omega[1], omega[2],
    fit, accurate ? Py_True : Py_False);
}

// One 1-D input column of any numeric dtype (strided views too), held while in use.
class InputColumn
{
public:
  InputColumn() = default;
  InputColumn(const InputColumn &) = delete;
  InputColumn & operator=(const InputColumn &) = delete;
  ~InputColumn()
  {
    if (held_) {
      PyBuffer_Release(&view_);
    }
  }

  bool get(PyObject * object, const char * name)
  {
    if (PyObject_GetBuffer(object, &view_, PyBUF_STRIDES | PyBUF_FORMAT) != 0) {
      PyErr_Clear();
      PyErr_Format(
        PyExc_ValueError, "prepare: %s must be a 1-D numeric array, got %R", name,
        reinterpret_cast<PyObject *>(Py_TYPE(object)));
      return false;
    }
    held_ = true;
    const std::string format = view_.format ? view_.format : "B";
    const char code = format.empty() ? '?' : format.back();
    const std::string sizes = "bBhHiIlLqQfd";
    const int expected[] = {1, 1, 2, 2, 4, 4, 8, 8, 8, 8, 4, 8};
    const size_t kind = sizes.find(code);
    const bool native = format.size() == 1 || format[0] == '@' || format[0] == '=' ||
      format[0] == '<';
    if (kind == std::string::npos || !native || view_.itemsize != expected[kind] ||
      view_.ndim != 1)
    {
      PyErr_Format(
        PyExc_ValueError, "prepare: %s must be a 1-D array of a native integer or float32/64 "
        "type, got buffer format '%s' with %d dimension(s)", name, format.c_str(), view_.ndim);
      return false;
    }
    column_ = {static_cast<const char *>(view_.buf),
      view_.strides ? view_.strides[0] : view_.itemsize, code, view_.itemsize};
    return true;
  }

  Py_ssize_t size() const {return view_.shape[0];}
  const veckm_egomotion::Column & column() const {return column_;}

private:
  Py_buffer view_{};
  bool held_ = false;
  veckm_egomotion::Column column_{};
};

const char kPrepareDoc[] =
  "prepare(x_px, y_px, u_px_s, v_px_s, weight, pixel_map, floats_out, ints_out, starts_out,\n"
  "        settings) -> (N, C)\n\n"
  "EgomotionEstimator's input stage (egomotion_window.py) for one window: columns (K,) of\n"
  "any native integer or float32/64 dtype (weight None: all 1); pixel_map (W H, 8) float32;\n"
  "floats_out (>= 10 min(K, max_flows),) float64 gets the rows a (3), g (3), m, weight,\n"
  "validity, slow of N flows as a (10, N) block; ints_out (>= 3 min(K, max_flows),) int64\n"
  "the rows cell, region, input_order; starts_out (>= num_cells,) int64 the C cells' first\n"
  "flows. settings: (width, height, max_flows, min_validity, flow_floor_px_s,\n"
  "slow_flow_px_s, num_cells, min_cell_flows). N = 0: no usable flow.";

PyObject * prepare(PyObject *, PyObject * args)
{
  PyObject * objects[9];
  veckm_egomotion::PrepareSettings settings{};
  long long values[5];  // NOLINT(runtime/int): the "L" format's type
  if (!PyArg_ParseTuple(
      args, "OOOOOOOOO(LLLdddLL):prepare", &objects[0], &objects[1], &objects[2],
      &objects[3], &objects[4], &objects[5], &objects[6], &objects[7], &objects[8],
      &values[0], &values[1], &values[2], &settings.min_validity, &settings.flow_floor_px_s,
      &settings.slow_flow_px_s, &values[3], &values[4]))
  {
    return nullptr;
  }
  settings.width = values[0];
  settings.height = values[1];
  settings.max_flows = values[2];
  settings.num_cells = values[3];
  settings.min_cell_flows = values[4];
  if (!(settings.width > 0 && settings.height > 0 && settings.max_flows >= 2 &&
    settings.num_cells >= 1 && settings.min_cell_flows >= 1 &&
    std::isfinite(settings.min_validity) && settings.flow_floor_px_s >= 0 &&
    std::isfinite(settings.flow_floor_px_s) && settings.slow_flow_px_s >= 0 &&
    std::isfinite(settings.slow_flow_px_s)))
  {
    PyErr_Format(
      PyExc_ValueError, "prepare: settings out of range (width, height > 0 px, max_flows >= "
      "2, num_cells >= 1, min_cell_flows >= 1, finite min_validity, flow_floor_px_s >= 0 and "
      "slow_flow_px_s >= 0), got %R", PyTuple_GET_ITEM(args, 9));
    return nullptr;
  }
  InputColumn x_px, y_px, u_px_s, v_px_s, weight;
  if (!x_px.get(objects[0], "x_px") || !y_px.get(objects[1], "y_px") ||
    !u_px_s.get(objects[2], "u_px_s") || !v_px_s.get(objects[3], "v_px_s") ||
    (objects[4] != Py_None && !weight.get(objects[4], "weight")))
  {
    return nullptr;
  }
  const Py_ssize_t count = x_px.size();
  if (y_px.size() != count || u_px_s.size() != count || v_px_s.size() != count ||
    (objects[4] != Py_None && weight.size() != count))
  {
    PyErr_Format(
      PyExc_ValueError, "prepare: the columns differ in length: x_px %zd, y_px %zd, u_px_s "
      "%zd, v_px_s %zd, weight %zd", count, y_px.size(), u_px_s.size(), v_px_s.size(),
      objects[4] != Py_None ? weight.size() : count);
    return nullptr;
  }
  const Py_ssize_t used = count < settings.max_flows ? count : settings.max_flows;
  Array pixel_map, floats, ints, starts;
  if (!pixel_map.get(
      objects[5], "pixel_map", 'f', 2, settings.width * settings.height, 8, false,
      "prepare") ||
    !floats.get(objects[6], "floats_out", 'd', 1, kFree, kFree, true, "prepare") ||
    !ints.get(objects[7], "ints_out", 'i', 1, kFree, kFree, true, "prepare") ||
    !starts.get(objects[8], "starts_out", 'i', 1, kFree, kFree, true, "prepare"))
  {
    return nullptr;
  }
  if (floats.size(0) < 10 * used || ints.size(0) < 3 * used ||
    starts.size(0) < settings.num_cells)
  {
    PyErr_Format(
      PyExc_ValueError, "prepare: floats_out, ints_out and starts_out must hold >= %zd, %zd "
      "and %lld values, got %zd, %zd and %zd", 10 * used, 3 * used,
      static_cast<long long>(settings.num_cells), floats.size(0), ints.size(0),  // NOLINT
      starts.size(0));
    return nullptr;
  }
  int64_t num_cells = 0, n = 0;
  n = veckm_egomotion::prepare(
    x_px.column(), y_px.column(), u_px_s.column(), v_px_s.column(),
    objects[4] != Py_None ? &weight.column() : nullptr, count, pixel_map.f32(), settings,
    floats.f64_mut(), ints.i64_mut(), starts.i64_mut(), &num_cells);
  if (n < 0) {
    PyErr_Format(
      PyExc_ValueError, "prepare: pixel_map row %lld has a cell index outside 0..%lld",
      static_cast<long long>(-n - 1), static_cast<long long>(settings.num_cells));  // NOLINT
    return nullptr;
  }
  return Py_BuildValue(
    "(LL)", static_cast<long long>(n), static_cast<long long>(num_cells));  // NOLINT
}

const char kTimeToContactDoc[] =
  "time_to_contact(a_rows, g_rows, m, validity, robust, region, direction, omega, grid_out,\n"
  "                settings) -> None\n\n"
  "EgomotionEstimator's time to contact (egomotion_solve.py): per region the weighted\n"
  "median of the flows' inverse time to contact over its pool. a_rows, g_rows (3, N)\n"
  "float64; m, validity, robust (N,) float64; region (N,) int64 in 0..rows cols - 1;\n"
  "direction (3,) unit, z > 0; omega (3,) rad/s; grid_out (rows, cols) float32 [s], written\n"
  "(NaN: undetermined); settings: (rows, cols, min_ttc_flows, neighbour_weight).";

PyObject * time_to_contact(PyObject *, PyObject * args)
{
  PyObject * objects[9];
  veckm_egomotion::TtcSettings settings{};
  long long values[3];  // NOLINT(runtime/int): the "L" format's type
  if (!PyArg_ParseTuple(
      args, "OOOOOOOOO(LLLd):time_to_contact", &objects[0], &objects[1], &objects[2],
      &objects[3], &objects[4], &objects[5], &objects[6], &objects[7], &objects[8], &values[0],
      &values[1], &values[2], &settings.neighbour_weight))
  {
    return nullptr;
  }
  settings.rows = values[0];
  settings.cols = values[1];
  settings.min_ttc_flows = values[2];
  if (!(settings.rows >= 1 && settings.rows <= 64 && settings.cols >= 1 &&
    settings.cols <= 64 && settings.neighbour_weight >= 0 && settings.neighbour_weight <= 1))
  {
    PyErr_Format(
      PyExc_ValueError, "time_to_contact: settings out of range (rows and cols 1..64, "
      "neighbour_weight in [0, 1]), got %R", PyTuple_GET_ITEM(args, 9));
    return nullptr;
  }
  const char * function = "time_to_contact";
  Array m, a_rows, g_rows, validity, robust, region, direction, omega, grid;
  if (!m.get(objects[2], "m", 'd', 1, kFree, kFree, false, function)) {
    return nullptr;
  }
  const Py_ssize_t count = m.size(0);
  if (!a_rows.get(objects[0], "a_rows", 'd', 2, 3, count, false, function) ||
    !g_rows.get(objects[1], "g_rows", 'd', 2, 3, count, false, function) ||
    !validity.get(objects[3], "validity", 'd', 1, count, kFree, false, function) ||
    !robust.get(objects[4], "robust", 'd', 1, count, kFree, false, function) ||
    !region.get(objects[5], "region", 'i', 1, count, kFree, false, function) ||
    !direction.get(objects[6], "direction", 'd', 1, 3, kFree, false, function) ||
    !omega.get(objects[7], "omega", 'd', 1, 3, kFree, false, function) ||
    !grid.get(objects[8], "grid_out", 'f', 2, settings.rows, settings.cols, true, function))
  {
    return nullptr;
  }
  if (count >= (Py_ssize_t{1} << 31)) {
    PyErr_Format(PyExc_ValueError, "time_to_contact: at most 2^31 - 1 flows, got %zd", count);
    return nullptr;
  }
  const int64_t regions = settings.rows * settings.cols;
  for (Py_ssize_t i = 0; i < count; ++i) {
    const int64_t value = region.i64()[i];
    if (value < 0 || value >= regions) {
      PyErr_Format(
        PyExc_ValueError, "time_to_contact: region must be in 0..%lld, got %lld at index %zd",
        static_cast<long long>(regions - 1), static_cast<long long>(value), i);  // NOLINT
      return nullptr;
    }
  }
  veckm_egomotion::time_to_contact(
    a_rows.f64(), g_rows.f64(), m.f64(), validity.f64(), robust.f64(), region.i64(), count,
    direction.f64(), omega.f64(), settings,
    grid.f32_mut());
  Py_RETURN_NONE;
}

const char kChecksDoc[] =
  "checks(a_rows, g_rows, m, weight, slow, starts, robust, direction, omega, settings)\n"
  "    -> (translation_ratio, sign_disagreement, accurate)\n\n"
  "What EgomotionEstimator checks after a solve (checks.h): a_rows, g_rows (3, N) float64;\n"
  "m, weight, robust (N,) float64 (robust: the solve's Huber weights); slow (N,) float64\n"
  "with a gyroscope, None without (sign_disagreement 0); starts (C,) int64 as for\n"
  "solve_gyro; direction (3,) and omega (3,) [rad/s] float64 (NaN allowed); settings:\n"
  "(huber_scale, rotation_error, accuracy_share: the accuracy check's limit as a share of\n"
  "the median |m| (rotation_start_residual); negative: accurate not computed).";

PyObject * checks(PyObject *, PyObject * args)
{
  PyObject * objects[9];
  double huber_scale = 0.0, rotation_error = 0.0, accuracy_share = 0.0;
  if (!PyArg_ParseTuple(
      args, "OOOOOOOOO(ddd):checks", &objects[0], &objects[1], &objects[2], &objects[3],
      &objects[4], &objects[5], &objects[6], &objects[7], &objects[8], &huber_scale,
      &rotation_error, &accuracy_share))
  {
    return nullptr;
  }
  if (!(huber_scale > 0 && std::isfinite(huber_scale) && std::isfinite(rotation_error) &&
    !std::isnan(accuracy_share)))
  {
    PyErr_Format(
      PyExc_ValueError, "checks: settings out of range (finite huber_scale > 0, finite "
      "rotation_error, accuracy_share not NaN), got %R", PyTuple_GET_ITEM(args, 9));
    return nullptr;
  }
  const char * function = "checks";
  Array a_rows, g_rows, m, weight, slow, starts, robust, direction, omega;
  if (!m.get(objects[2], "m", 'd', 1, kFree, kFree, false, function)) {
    return nullptr;
  }
  const Py_ssize_t count = m.size(0);
  const bool has_slow = objects[4] != Py_None;
  if (count < 1) {
    PyErr_Format(PyExc_ValueError, "checks: m must hold at least 1 flow, got 0");
    return nullptr;
  }
  if (!a_rows.get(objects[0], "a_rows", 'd', 2, 3, count, false, function) ||
    !g_rows.get(objects[1], "g_rows", 'd', 2, 3, count, false, function) ||
    !weight.get(objects[3], "weight", 'd', 1, count, kFree, false, function) ||
    (has_slow && !slow.get(objects[4], "slow", 'd', 1, count, kFree, false, function)) ||
    !starts.get(objects[5], "starts", 'i', 1, kFree, kFree, false, function) ||
    !robust.get(objects[6], "robust", 'd', 1, count, kFree, false, function) ||
    !direction.get(objects[7], "direction", 'd', 1, 3, kFree, false, function) ||
    !omega.get(objects[8], "omega", 'd', 1, 3, kFree, false, function) ||
    !finite(a_rows, "a_rows", function) || !finite(g_rows, "g_rows", function) ||
    !finite(m, "m", function) || !finite(weight, "weight", function) ||
    (has_slow && !finite(slow, "slow", function)) || !finite(robust, "robust", function) ||
    !valid_starts(starts, count, function))
  {
    return nullptr;
  }
  const veckm_egomotion::Window window{
    a_rows.f64(), g_rows.f64(), m.f64(), weight.f64(), has_slow ? slow.f64() : nullptr,
    starts.i64(), starts.size(0), nullptr, count};
  const veckm_egomotion::Checks result = veckm_egomotion::window_checks(
    window, robust.f64(), direction.f64(), omega.f64(), huber_scale, rotation_error,
    accuracy_share);
  return Py_BuildValue(
    "ddO", result.translation_ratio, result.sign_disagreement,
    result.accurate ? Py_True : Py_False);
}

PyMethodDef kMethods[] = {
  {"solve_gyro", solve_gyro, METH_VARARGS, kSolveGyroDoc},
  {"solve_free", solve_free, METH_VARARGS, kSolveFreeDoc},
  {"prepare", prepare, METH_VARARGS, kPrepareDoc},
  {"time_to_contact", time_to_contact, METH_VARARGS, kTimeToContactDoc},
  {"checks", checks, METH_VARARGS, kChecksDoc},
  {"read_flow_message", veckm_egomotion::read_flow_message_py, METH_VARARGS,
    veckm_egomotion::kReadFlowMessageDoc},
  {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {
  PyModuleDef_HEAD_INIT, "_egomotion",
  "The egomotion estimator's compiled solve (csrc/egomotion/); "
  "veckm_flow_ros.core.egomotion_window and egomotion_solve are its callers.",
  -1, kMethods, nullptr, nullptr, nullptr, nullptr,
};

}  // namespace

PyMODINIT_FUNC PyInit__egomotion(void)
{
  return PyModule_Create(&kModule);
}
