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

// The common case of a ~/flow message (see flow_message.cpp): read and screened in one call.

#ifndef VECKM_FLOW_ROS_EGOMOTION_FLOW_MESSAGE_H_
#define VECKM_FLOW_ROS_EGOMOTION_FLOW_MESSAGE_H_

#include <cstddef>
#include <cstdint>

namespace veckm_egomotion {

// What a flow must satisfy to be kept (FlowWindows' screen): t [s] from the header stamp in
// t_min_s..t_max_s, u, v finite, a weight in 0..1 and, where width, height > 0 [px], x, y
// rounding to a pixel of the image.
struct FlowScreen
{
  double t_min_s, t_max_s;
  int64_t width, height;
};

struct FlowMessage
{
  int64_t stamp_ns = 0;
  const char * frame_id = nullptr;  // into the message, frame_id_length bytes (UTF-8)
  size_t frame_id_length = 0;
  int64_t count = 0;      // flows written
  int64_t capped = 0;     // flows left out by max_points
  bool has_weight = false;
  bool in_order = true;   // t non-decreasing
};

// Reads the serialized PointCloud2 raw (size bytes, with its 4-byte encapsulation). Writes the
// flows' x, y, t, u, v and weight as float32 rows of `capacity` values each into out (6 x
// capacity) and returns true; returns false (out partly written) for anything that is not
// the common case: a malformed or big-endian message, a required field (x, y, t, u, v) or
// the weight (validity, else confidence) missing or not float32 x 1 inside point_step, more
// flows than capacity after thinning to max_points (>= 1; else no limit), or any flow that
// fails the screen. A NaN weight (no score) is 1, a column of NaN none (has_weight false).
bool read_flow_message(
  const char * raw, size_t size, int64_t max_points, const FlowScreen & screen,
  float * out, int64_t capacity, FlowMessage * message);

#ifdef Py_PYTHON_H
// The module function read_flow_message (its arguments and result: kReadFlowMessageDoc).
PyObject * read_flow_message_py(PyObject * self, PyObject * args);
extern const char kReadFlowMessageDoc[];
#endif

}  // namespace veckm_egomotion

#endif  // VECKM_FLOW_ROS_EGOMOTION_FLOW_MESSAGE_H_
