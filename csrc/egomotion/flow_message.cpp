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

// The egomotion node's ~/flow messages in one call: a serialized sensor_msgs/msg/PointCloud2
// (little-endian XCDR1) to the columns x, y, t, u, v (and the weight) of its flows, checked
// as FlowWindows screens them (veckm_flow_ros/stream/flow_windows.py: read_flow_message).
// It serves only the common case, a message to take as it is; for anything else (a malformed
// message, a layout the Python reader would refuse or convert, a flow to refuse) it returns
// None and the caller reads the message in Python, which names what is wrong. A paced message
// took ~0.45 ms of cold Python and numpy calls for the parse, the layout and the checks.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "flow_message.h"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace {

// sensor_msgs/msg/PointField datatype code for float32.
constexpr uint8_t kFloat32 = 7;

// A bounds-checked little-endian reader of a CDR body (alignment counts from its start).
class Reader
{
public:
  Reader(const char * data, size_t size)
  : data_(data), size_(size) {}

  bool ok() const {return ok_;}
  size_t offset() const {return offset_;}
  void align4() {offset_ = (offset_ + 3) & ~static_cast<size_t>(3);}

  uint32_t u32()
  {
    uint32_t value = 0;
    read(&value, 4);
    return value;
  }

  uint8_t u8()
  {
    uint8_t value = 0;
    read(&value, 1);
    return value;
  }

  // A CDR string: its bytes without the terminating NUL (length 0 is malformed).
  const char * string(size_t * length)
  {
    align4();
    const uint32_t with_nul = u32();
    if (!ok_ || with_nul == 0 || offset_ > size_ || with_nul > size_ - offset_) {
      ok_ = false;
      return nullptr;
    }
    const char * start = data_ + offset_;
    offset_ += with_nul;
    *length = with_nul - 1;
    return start;
  }

  const char * skip(size_t size)
  {
    // (align4 may have moved the offset past the end)
    if (!ok_ || offset_ > size_ || size > size_ - offset_) {
      ok_ = false;
      return nullptr;
    }
    const char * start = data_ + offset_;
    offset_ += size;
    return start;
  }

private:
  void read(void * value, size_t size)
  {
    if (const char * start = skip(size)) {
      std::memcpy(value, start, size);
    }
  }

  const char * data_;
  size_t size_;
  size_t offset_ = 0;
  bool ok_ = true;
};

struct Field
{
  int64_t offset = -1;  // -1: absent
  uint8_t datatype = 0;
  uint32_t count = 0;
};

bool named(const char * name, size_t length, const char * expected)
{
  return length == std::strlen(expected) && std::memcmp(name, expected, length) == 0;
}

// Whether a field can be read as this package's readers do: float32 x 1 inside the point.
bool usable(const Field & field, uint32_t point_step)
{
  return field.offset >= 0 && field.datatype == kFloat32 && field.count == 1 &&
         field.offset + 4 <= static_cast<int64_t>(point_step);
}

float load(const char * point, int64_t offset)
{
  float value;
  std::memcpy(&value, point + offset, 4);
  return value;
}

bool little_endian_host()
{
  const uint16_t probe = 1;
  unsigned char first;
  std::memcpy(&first, &probe, 1);
  return first == 1;
}

}  // namespace

namespace veckm_egomotion {

bool read_flow_message(
  const char * raw, size_t size, int64_t max_points, const FlowScreen & screen,
  float * out, int64_t capacity, FlowMessage * message)
{
  if (size < 4 || static_cast<unsigned char>(raw[1]) != 1 || !little_endian_host()) {
    return false;
  }
  Reader body(raw + 4, size - 4);
  const int32_t sec = static_cast<int32_t>(body.u32());
  const uint32_t nanosec = body.u32();
  message->stamp_ns = static_cast<int64_t>(sec) * 1000000000 + nanosec;
  message->frame_id = body.string(&message->frame_id_length);
  body.align4();
  const uint32_t height = body.u32(), width = body.u32(), num_fields = body.u32();
  if (!body.ok() || num_fields > (size - 4) / 16) {
    return false;
  }
  // x, y, t, u, v, then the weight: validity, else confidence. A name given twice counts
  // with its last field, as in the Python reader's table.
  Field fields[7];
  static const char * const kNames[7] = {"x", "y", "t", "u", "v", "validity", "confidence"};
  for (uint32_t f = 0; f < num_fields; ++f) {
    size_t length = 0;
    const char * name = body.string(&length);
    body.align4();
    Field field;
    field.offset = body.u32();
    field.datatype = body.u8();
    body.align4();
    field.count = body.u32();
    if (!body.ok()) {
      return false;
    }
    for (int k = 0; k < 7; ++k) {
      if (named(name, length, kNames[k])) {
        fields[k] = field;
      }
    }
  }
  const bool is_bigendian = body.u8() != 0;
  body.align4();
  const uint32_t point_step = body.u32();
  body.u32();  // row_step
  const uint32_t data_size = body.u32();
  const char * data = body.skip(data_size);
  if (!body.ok() || is_bigendian || point_step == 0 || point_step > 0x7fffffff ||
    data_size % point_step)
  {
    return false;
  }
  const int weight_field = fields[5].offset >= 0 ? 5 : (fields[6].offset >= 0 ? 6 : -1);
  for (int k = 0; k < 5; ++k) {
    if (!usable(fields[k], point_step)) {
      return false;
    }
  }
  if (weight_field >= 0 && !usable(fields[weight_field], point_step)) {
    return false;
  }
  const int64_t count = data_size / point_step;
  if (static_cast<uint64_t>(width) * height != static_cast<uint64_t>(count)) {
    return false;
  }
  // A larger cloud is thinned evenly: every step-th point from the first.
  const int64_t step = (max_points >= 1 && count > max_points) ?
    (count + max_points - 1) / max_points : 1;
  const int64_t kept = (count + step - 1) / step;
  if (kept > capacity) {
    return false;
  }
  const bool sized = screen.width > 0 && screen.height > 0;
  const double x_end = static_cast<double>(screen.width) - 0.5;
  const double y_end = static_cast<double>(screen.height) - 0.5;
  float * columns[6];
  for (int row = 0; row < 6; ++row) {
    columns[row] = out + row * capacity;
  }
  bool in_order = true;
  float previous_t = 0.0f;
  int64_t unknown_weights = 0;
  for (int64_t j = 0; j < kept; ++j) {
    const char * point = data + j * step * point_step;
    const float x = load(point, fields[0].offset), y = load(point, fields[1].offset);
    const float t = load(point, fields[2].offset);
    const float u = load(point, fields[3].offset), v = load(point, fields[4].offset);
    // Comparisons are false for NaN.
    bool good = t >= screen.t_min_s && t <= screen.t_max_s && std::isfinite(u) &&
      std::isfinite(v) && (!sized || (x >= -0.5 && x < x_end && y >= -0.5 && y < y_end));
    if (weight_field >= 0) {
      // NaN: not computed (a flow node that writes the field without a score): such a flow
      // counts as fully valid, and a column without any score as no weight.
      const float w = load(point, fields[weight_field].offset);
      const bool unknown = std::isnan(w);
      unknown_weights += unknown;
      good = good && (unknown || (w >= 0.0f && w <= 1.0f));
      columns[5][j] = unknown ? 1.0f : w;
    }
    if (!good) {
      return false;
    }
    in_order = in_order && (j == 0 || t >= previous_t);
    previous_t = t;
    columns[0][j] = x;
    columns[1][j] = y;
    columns[2][j] = t;
    columns[3][j] = u;
    columns[4][j] = v;
  }
  message->count = kept;
  message->capped = count - kept;
  message->has_weight = weight_field >= 0 && !(unknown_weights > 0 && unknown_weights == kept);
  message->in_order = in_order;
  return true;
}

const char kReadFlowMessageDoc[] =
  "read_flow_message(raw, out, max_points, t_min_s, t_max_s, width, height)\n"
  "raw: a serialized sensor_msgs/msg/PointCloud2 (bytes-like, little-endian XCDR1); out: a\n"
  "writable C-contiguous float32 array of 6 x capacity values; max_points: thin a larger cloud\n"
  "evenly (< 1: no limit); a flow is kept when t_min_s <= t <= t_max_s [s], u, v are finite,\n"
  "its weight lies in 0..1 and, with width, height > 0 [px], x, y round to a pixel. Returns\n"
  "(stamp_ns, frame_id, count, capped, has_weight, in_order) with the rows x, y, t, u, v,\n"
  "weight of out (each capacity long) holding count flows, or None where the message is not\n"
  "the common case (the caller reads it in Python, which names what is wrong).";

PyObject * read_flow_message_py(PyObject *, PyObject * args)
{
  PyObject * raw_object, * out_object;
  long long max_points, width, height;
  double t_min_s, t_max_s;
  if (!PyArg_ParseTuple(
      args, "OOLddLL:read_flow_message", &raw_object, &out_object, &max_points, &t_min_s,
      &t_max_s, &width, &height))
  {
    return nullptr;
  }
  Py_buffer raw, out;
  if (PyObject_GetBuffer(raw_object, &raw, PyBUF_SIMPLE) != 0) {
    return nullptr;
  }
  if (PyObject_GetBuffer(out_object, &out, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE)
    != 0)
  {
    PyBuffer_Release(&raw);
    return nullptr;
  }
  const bool float32 = out.itemsize == 4 && out.format != nullptr &&
    (std::strcmp(out.format, "f") == 0 || std::strcmp(out.format, "<f") == 0 ||
    std::strcmp(out.format, "=f") == 0);
  if (!float32 || out.len % (6 * 4) != 0) {
    PyBuffer_Release(&raw);
    PyBuffer_Release(&out);
    PyErr_Format(
      PyExc_ValueError, "read_flow_message: out must be float32 with a multiple of 6 values, "
      "got buffer format '%s' of %zd bytes", out.format ? out.format : "B", out.len);
    return nullptr;
  }
  FlowMessage message;
  const bool read = read_flow_message(
    static_cast<const char *>(raw.buf), static_cast<size_t>(raw.len), max_points,
    FlowScreen{t_min_s, t_max_s, width, height}, static_cast<float *>(out.buf),
    out.len / (6 * 4), &message);
  PyObject * result = nullptr;
  if (!read) {
    result = Py_NewRef(Py_None);
  } else {
    PyObject * frame_id = PyUnicode_DecodeUTF8(
      message.frame_id, static_cast<Py_ssize_t>(message.frame_id_length), "replace");
    if (frame_id != nullptr) {
      result = Py_BuildValue(
        "(LNLLOO)", static_cast<long long>(message.stamp_ns), frame_id,
        static_cast<long long>(message.count), static_cast<long long>(message.capped),
        message.has_weight ? Py_True : Py_False, message.in_order ? Py_True : Py_False);
    }
  }
  PyBuffer_Release(&raw);
  PyBuffer_Release(&out);
  return result;
}

}  // namespace veckm_egomotion
