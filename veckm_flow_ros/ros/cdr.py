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
EventPacket in and PointCloud2 out as raw CDR bytes (little-endian XCDR1), without rclpy.

The node takes ~/events as serialized bytes and publishes ~/flow as serialized bytes: no
Python message objects are built, the event payload is a zero-copy view and the flow points
are copied once (docs/raw_cdr.md says why: rclpy's conversions cost more per message than
the node's whole per-packet work). The egomotion node takes ~/flow (PointCloud2) and ~/imu
the same way and publishes its outputs (TwistStamped, PointStamped, Image, Float32) as bytes.
"""

import struct
from typing import Tuple

import numpy as np

from veckm_flow_ros.eventio.flow_cloud import pointcloud2_fields

# Encapsulation header of little-endian XCDR1 (CDR_LE, no options).
CDR_LE = b'\x00\x01\x00\x00'


def _cdr_string(buffer, offset: int):
    """Read a CDR string (uint32 length incl. NUL, bytes) at offset; return (str, end)."""
    offset = (offset + 3) & ~3
    (length,) = struct.unpack_from('<I', buffer, offset)
    start, end = offset + 4, offset + 4 + length
    if length == 0 or end > len(buffer):
        raise ValueError(f'bad CDR string length {length} at byte {offset}')
    return bytes(buffer[start:end - 1]).decode('utf-8', 'replace'), end


def _cdr_header(raw: bytes):
    """
    Check the encapsulation of a little-endian XCDR1 message and read its std_msgs/Header.

    Returns (body, stamp_ns, frame_id, offset after the header); body is a memoryview of the
    message after the 4-byte encapsulation (alignment counts from there). Raises ValueError
    for another encapsulation, struct.error when the bytes end inside the header.
    """
    if len(raw) < 4 or raw[1] != 1:
        raise ValueError('not a little-endian CDR message')
    body = memoryview(raw)[4:]
    sec, nanosec = struct.unpack_from('<iI', body, 0)
    frame_id, offset = _cdr_string(body, 8)
    return body, sec * 1_000_000_000 + nanosec, frame_id, offset


def parse_event_packet_cdr(raw: bytes) -> dict:
    """
    Fields of a serialized event_camera_msgs/msg/EventPacket (little-endian XCDR1).

    The executor hands raw bytes (subscription raw=True): no Python message object is built
    and `events` is a zero-copy memoryview into `raw`. Returns a dict with stamp_ns, frame_id,
    height, width, seq, time_base, encoding, events. Raises ValueError for malformed bytes.
    """
    try:
        body, stamp_ns, frame_id, offset = _cdr_header(raw)
        offset = (offset + 3) & ~3
        height, width = struct.unpack_from('<II', body, offset)
        offset = (offset + 8 + 7) & ~7
        seq, time_base = struct.unpack_from('<QQ', body, offset)
        encoding, offset = _cdr_string(body, offset + 16)
        offset = ((offset + 1) + 3) & ~3  # is_bigendian (1 byte), then the sequence length
        (size,) = struct.unpack_from('<I', body, offset)
    except struct.error as error:
        raise ValueError(f'truncated EventPacket ({len(raw)} bytes): {error}') from None
    return {'stamp_ns': stamp_ns, 'frame_id': frame_id,
            'height': height, 'width': width, 'seq': seq, 'time_base': time_base,
            'encoding': encoding,
            'events': _byte_sequence(body, offset + 4, size, 'EventPacket', 'event bytes')}


def _byte_sequence(body, start: int, size: int, message: str, what: str):
    """Return the `size` bytes of a uint8[] field at `start`; ValueError when fewer follow."""
    if start + size > len(body):
        raise ValueError(f'{message} says {size} {what} but only {len(body) - start} follow')
    return body[start:start + size]


def _cdr_string_bytes(text: str, offset: int) -> Tuple[bytes, int]:
    """CDR string at offset (padding to 4 first, uint32 length incl. NUL, bytes, NUL)."""
    data = text.encode('utf-8') + b'\0'
    padding = -offset % 4
    encoded = b'\0' * padding + struct.pack('<I', len(data)) + data
    return encoded, offset + len(encoded)


def _header_cdr(stamp_ns: int, frame_id: str):
    """Return a std_msgs/Header as CDR parts (stamp clamped to >= 0) and its end offset."""
    t_ns = max(int(stamp_ns), 0)
    # Alignment counts from after the 4-byte encapsulation header.
    encoded, offset = _cdr_string_bytes(frame_id, 8)
    return [struct.pack('<iI', t_ns // 1_000_000_000, t_ns % 1_000_000_000), encoded], offset


def pointcloud2_cdr(points: np.ndarray, stamp_ns: int, frame_id: str) -> bytes:
    """
    Serialize the ~/flow PointCloud2 (little-endian XCDR1), ready for publish(bytes).

    The bytes rclpy would make of the PointCloud2 message with these fields, without building
    a Python message that rclpy converts field by field, and with the point data copied once.
    """
    layout = pointcloud2_fields(points)
    parts, offset = _header_cdr(stamp_ns, frame_id)
    pad = -offset % 4
    parts.append(b'\0' * pad + struct.pack(
        '<III', layout['height'], layout['width'], len(layout['fields'])))
    offset += pad + 12
    for name, field_offset, datatype, count in layout['fields']:
        encoded, offset = _cdr_string_bytes(name, offset)
        pad = -offset % 4
        parts.append(encoded + b'\0' * pad + struct.pack('<IB', field_offset, datatype))
        offset += pad + 5
        pad = -offset % 4
        parts.append(b'\0' * pad + struct.pack('<I', count))
        offset += pad + 4
    parts.append(struct.pack('<?', layout['is_bigendian']))
    offset += 1
    pad = -offset % 4
    data = memoryview(np.ascontiguousarray(points)).cast('B')  # joined below: one copy
    parts.append(b'\0' * pad + struct.pack(
        '<III', layout['point_step'], layout['row_step'], len(data)))
    parts.append(data)
    parts.append(struct.pack('<?', layout['is_dense']))
    return CDR_LE + b''.join(parts)


def parse_pointcloud2_cdr(raw: bytes) -> dict:
    """
    Fields of a serialized sensor_msgs/msg/PointCloud2 (little-endian XCDR1).

    Returns a dict with stamp_ns, frame_id, height, width, fields (a list of (name, offset,
    datatype, count) per PointField), is_bigendian, point_step, row_step and data, a zero-copy
    memoryview into `raw` (what read_flow_cloud of stream/egomotion_stream.py takes). Raises
    ValueError for malformed bytes.
    """
    try:
        body, stamp_ns, frame_id, offset = _cdr_header(raw)
        offset = (offset + 3) & ~3
        height, width, num_fields = struct.unpack_from('<III', body, offset)
        offset += 12
        if num_fields > len(body) // 16:  # a PointField takes at least 16 bytes
            raise ValueError(f'PointCloud2 says {num_fields} fields in {len(raw)} bytes')
        fields = []
        for _ in range(num_fields):
            name, offset = _cdr_string(body, offset)
            offset = (offset + 3) & ~3
            field_offset, datatype = struct.unpack_from('<IB', body, offset)
            offset = (offset + 5 + 3) & ~3
            (count,) = struct.unpack_from('<I', body, offset)
            offset += 4
            fields.append((name, field_offset, datatype, count))
        (is_bigendian,) = struct.unpack_from('<?', body, offset)
        offset = (offset + 1 + 3) & ~3
        point_step, row_step, size = struct.unpack_from('<III', body, offset)
    except struct.error as error:
        raise ValueError(f'truncated PointCloud2 ({len(raw)} bytes): {error}') from None
    return {'stamp_ns': stamp_ns, 'frame_id': frame_id,
            'height': height, 'width': width, 'fields': fields,
            'is_bigendian': is_bigendian, 'point_step': point_step, 'row_step': row_step,
            'data': _byte_sequence(body, offset + 12, size, 'PointCloud2', 'data bytes')}


def parse_imu_angular_velocity_cdr(raw: bytes):
    """
    Stamp and angular velocity of a serialized sensor_msgs/msg/Imu (little-endian XCDR1).

    Returns (stamp_ns, (wx, wy, wz) [rad/s], angular_velocity_covariance[0], frame_id); the
    other fields are skipped unread. Raises ValueError for malformed bytes.
    """
    try:
        body, stamp_ns, frame_id, offset = _cdr_header(raw)
        # orientation (4 doubles) and orientation_covariance (9): 8-aligned doubles follow.
        offset = ((offset + 7) & ~7) + 8 * (4 + 9)
        wx, wy, wz, covariance0 = struct.unpack_from('<4d', body, offset)
    except struct.error as error:
        raise ValueError(f'truncated Imu ({len(raw)} bytes): {error}') from None
    return stamp_ns, (wx, wy, wz), covariance0, frame_id


# The egomotion node's outputs (ready for publish(bytes); the bytes rclpy makes of the same
# messages, without building Python messages that rclpy converts field by field).

def twist_stamped_cdr(stamp_ns: int, frame_id: str, linear, angular) -> bytes:
    """Serialize a geometry_msgs/TwistStamped: linear, angular (3 floats each)."""
    parts, offset = _header_cdr(stamp_ns, frame_id)
    parts.append(b'\0' * (-offset % 8) + struct.pack('<6d', *linear, *angular))
    return CDR_LE + b''.join(parts)


def point_stamped_cdr(stamp_ns: int, frame_id: str, x: float, y: float, z: float) -> bytes:
    """Serialize a geometry_msgs/PointStamped."""
    parts, offset = _header_cdr(stamp_ns, frame_id)
    parts.append(b'\0' * (-offset % 8) + struct.pack('<3d', x, y, z))
    return CDR_LE + b''.join(parts)


def image_cdr(stamp_ns: int, frame_id: str, height: int, width: int, encoding: str,
              step: int, data: bytes) -> bytes:
    """Serialize a little-endian sensor_msgs/Image (data: height x step bytes)."""
    parts, offset = _header_cdr(stamp_ns, frame_id)
    parts.append(b'\0' * (-offset % 4) + struct.pack('<II', height, width))
    offset += -offset % 4 + 8
    encoded, offset = _cdr_string_bytes(encoding, offset)
    parts.append(encoded + b'\0')  # is_bigendian
    offset += 1
    parts.append(b'\0' * (-offset % 4) + struct.pack('<II', step, len(data)))
    parts.append(data)
    return CDR_LE + b''.join(parts)


def float32_cdr(value: float) -> bytes:
    """Serialize a std_msgs/Float32."""
    return CDR_LE + struct.pack('<f', value)
