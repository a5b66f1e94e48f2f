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
Conversions between ROS messages and the package's values: stamps, images, descriptors.

The flow image goes through cv_bridge where it is importable (a ROS install); the PyPI ROS
wheels have no cv_bridge, and there the image is built field by field (bgr8_image), which
gives the same message.
"""

from builtin_interfaces.msg import Time as TimeMsg
import numpy as np
from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from sensor_msgs.msg import Image

try:
    from cv_bridge import CvBridge
except ImportError:  # no ROS install's cv_bridge: the built-in conversion below
    CvBridge = None

# The bridge image_message() uses; None: the built-in conversion.
CV_BRIDGE = CvBridge() if CvBridge is not None else None


def stamp_from_ns(t_ns: int) -> TimeMsg:
    """builtin_interfaces/Time from integer nanoseconds (>= 0)."""
    t_ns = max(int(t_ns), 0)
    return TimeMsg(sec=t_ns // 1_000_000_000, nanosec=t_ns % 1_000_000_000)


def stamp_to_ns(stamp) -> int:
    """Integer nanoseconds of a builtin_interfaces/Time."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def image_message(bgr: np.ndarray, stamp_ns: int, frame_id: str) -> Image:
    """sensor_msgs/Image bgr8 from an (H, W, 3) uint8 array, stamped stamp_ns [ns]."""
    bgr = np.ascontiguousarray(bgr, dtype=np.uint8)
    if bgr.ndim != 3 or bgr.shape[2] != 3:
        raise ValueError(f'flow image must be (H, W, 3) uint8, got shape {bgr.shape}')
    if CV_BRIDGE is not None:
        msg = CV_BRIDGE.cv2_to_imgmsg(bgr, encoding='bgr8')
    else:
        msg = bgr8_image(bgr)
    msg.header.stamp = stamp_from_ns(stamp_ns)
    msg.header.frame_id = frame_id
    return msg


def bgr8_image(bgr: np.ndarray) -> Image:
    """sensor_msgs/Image bgr8 (no header) from a contiguous (H, W, 3) uint8 array."""
    msg = Image()
    msg.height, msg.width = int(bgr.shape[0]), int(bgr.shape[1])
    msg.encoding = 'bgr8'
    msg.is_bigendian = 0
    msg.step = int(bgr.shape[1]) * 3
    msg.data = bgr.tobytes()
    return msg


def parameter_descriptor(spec) -> ParameterDescriptor:
    """Return the ParameterDescriptor of a ParameterSpec: text, range, read_only."""
    descriptor = ParameterDescriptor(description=spec.description, read_only=spec.read_only)
    if spec.value_range is not None:
        low, high = spec.value_range
        if isinstance(spec.default, float):
            descriptor.floating_point_range = [
                FloatingPointRange(from_value=float(low), to_value=float(high), step=0.0)]
        else:
            descriptor.integer_range = [IntegerRange(from_value=low, to_value=high, step=1)]
    return descriptor
