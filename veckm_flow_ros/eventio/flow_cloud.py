# Copyright 2026 The veckm_flow_ros Authors
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""
The `~/flow` PointCloud2 layout, as plain numpy (no rclpy, no rosbags).

One point per flow, little-endian float32 fields, in this order:

    x, y        pixel coordinates of the event (x right, y down)
    t           seconds, relative to header.stamp (so <= 0 for the events of a block)
    u, v        normal flow in px/s along x and y
    validity    always, in [0, 1] (higher = more moving structure around the event;
                core/validity.py), NaN where unknown (blocks built by hand)
    confidence  optional, in [0, 1] (higher = more reliable)

point_step is 24 bytes, 28 with confidence; validity is always at offset 20.

Both the node (rclpy messages) and the replay command (rosbags messages) build their
PointCloud2 from `pointcloud2_fields()`; a downstream node reads it back with
`points_from_pointcloud2()` or `np.frombuffer(msg.data, dtype=flow_point_dtype(...))`.
"""

import numpy as np

# sensor_msgs/msg/PointField datatype code for float32.
POINTFIELD_FLOAT32 = 7
BASE_FIELD_NAMES = ('x', 'y', 't', 'u', 'v', 'validity')


def flow_point_dtype(with_confidence: bool) -> np.dtype:
    """Return the packed little-endian structured dtype of one flow point."""
    names = BASE_FIELD_NAMES + (('confidence',) if with_confidence else ())
    return np.dtype([(name, '<f4') for name in names])


def block_flow_points(block, with_confidence: bool = False):
    """
    Return (points, t_stamp_ns): the flows of a FlowBlock and the block's stamp time.

    t_stamp_ns: sensor time [ns, int] of the newest flow's event (None when the block is
    empty); the message's header.stamp is its ROS time and each point's t is
    relative to it [s, <= 0]. The one definition of the ~/flow stamp, for node and replay.
    with_confidence: add the confidence field (NaN where the block carries none). The
    validity field is the block's validity (NaN where it carries none).
    """
    t_ns = np.asarray(block.t_ns, dtype=np.int64)
    confidence = None
    if with_confidence:
        confidence = (np.full(len(t_ns), np.nan, np.float32) if block.confidence is None
                      else np.asarray(block.confidence, np.float32))
    validity = getattr(block, 'validity', None)
    if len(t_ns) == 0:
        return make_flow_points([], [], [], [], [], confidence), None
    t_stamp_ns = int(t_ns.max())
    points = make_flow_points(block.x, block.y, (t_ns - t_stamp_ns) * 1e-9, block.u_px_s,
                              block.v_px_s, confidence, validity)
    return points, t_stamp_ns


def make_flow_points(x, y, t_rel_s, u_px_s, v_px_s, confidence=None,
                     validity=None) -> np.ndarray:
    """
    Pack per-flow columns (length M each) into a structured array of flow points.

    validity None: NaN (unknown); confidence None: no confidence field.
    """
    points = np.empty(len(x), dtype=flow_point_dtype(confidence is not None))
    points['x'] = x
    points['y'] = y
    points['t'] = t_rel_s
    points['u'] = u_px_s
    points['v'] = v_px_s
    points['validity'] = np.nan if validity is None else validity
    if confidence is not None:
        points['confidence'] = confidence
    return points


def pointcloud2_fields(points: np.ndarray) -> dict:
    """
    Return the PointCloud2 fields (all but header) for `points` as plain Python values.

    `fields` is a list of (name, offset_bytes, datatype, count) tuples; the caller turns them
    into its own PointField messages. `data` is bytes (fast to assign to a uint8[] field).
    """
    dtype = points.dtype
    fields = [(name, dtype.fields[name][1], POINTFIELD_FLOAT32, 1) for name in dtype.names]
    return {
        'height': 1,
        'width': len(points),
        'fields': fields,
        'is_bigendian': False,
        'point_step': dtype.itemsize,
        'row_step': dtype.itemsize * len(points),
        'data': points.tobytes(),
        'is_dense': True,
    }


def points_from_pointcloud2(field_names, point_step: int, data) -> np.ndarray:
    """
    Decode PointCloud2 data written by this package back into flow points.

    field_names: the names of msg.fields in order; raises ValueError when the layout is not
    the one this package publishes.
    """
    names = tuple(field_names)
    if names not in (BASE_FIELD_NAMES, BASE_FIELD_NAMES + ('confidence',)):
        raise ValueError(f'not a veckm_flow_ros flow cloud: fields {names}, expected '
                         f'{BASE_FIELD_NAMES} (+ confidence)')
    dtype = flow_point_dtype('confidence' in names)
    if point_step != dtype.itemsize:
        raise ValueError(f'flow cloud point_step is {point_step} bytes, expected {dtype.itemsize}')
    buffer = memoryview(data).cast('B') if not isinstance(data, np.ndarray) else data
    return np.frombuffer(buffer, dtype=dtype)
