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
veckm_flow_node: per-event normal flow from an event camera, streamed on ROS 2.

Subscriptions
    ~/events       event_camera_msgs/msg/EventPacket   best effort, keep last 1000, volatile
                   (the drivers' QoS; encodings evt3, mono, libcaer, libcaer_cmp).

Publications (reliable, volatile; keep last 100 for ~/flow, 10 for the others)
    ~/flow         sensor_msgs/msg/PointCloud2   one point per flow, float32 fields
                   x, y [px], t [s, relative to header.stamp, <= 0], u, v [px/s, x right,
                   y down], + confidence [0..1] when publish_confidence (rotation
                   ensemble, ~4x the encoding cost); header.stamp = ROS time (via the smoothed
                   sensor->ROS offset) of the newest flow's event of the block; frame_id
                   copied from the input. One message per block; invalid flows are left out.
    ~/flow_image   sensor_msgs/msg/Image bgr8 at image_rate_hz, only while subscribed:
                   hue = flow direction, brightness = speed, black = no flow, legend wheel.
    /diagnostics   diagnostic_msgs/msg/DiagnosticArray every diagnostics_period_s: input
                   events/s, flows/s, latency p50/p99 [ms] (event time -> publish), seq gaps,
                   dropped packets, decode problems, queue fill.

Parameters (see PARAMETERS below for types, ranges and defaults; config/veckm_flow.yaml;
all read-only except image_max_speed_px_s)
    model [path or shipped name]  device [cpu|cuda]  pixel_radius [px]  tau_ms [ms]
    block_ms [ms]  causal  target_stride [events]  max_flows_per_block [flows]
    max_queued_events [events]  max_queue_delay_ms [ms]  max_buffered_events [events]
    torch_threads  compute_threads
    image_rate_hz [Hz]  image_max_speed_px_s [px/s]  publish_confidence  rotation_mean_flow
    diagnostics_period_s [s]

Threads: a receive thread takes ~/events messages straight from the subscription (raw CDR
bytes, no message object, payload referenced not copied; rclpy's executor would cost ~200 us of
Python per message, more than the node's whole per-packet work, while holding the GIL the
worker needs), parses their header fields and queues them in a bounded queue; a worker
thread decodes them in batches and hands at most MAX_DECODED_BATCHES decoded batches to an
estimate thread, which runs the estimator and publishes (the compiled ops release the GIL, so
decoding the next batch overlaps the estimator). While the node keeps up the estimate thread
computes each block itself, its ops on all cores (lowest latency); when it falls behind (a
decoded batch waiting) it hands blocks to compute_threads pool threads, one block each
(copies of their inputs, at most compute_threads + 1 at once), and publishes them in order:
on 2 cores this keeps both busy through the Python and serial parts of each block. The
executor thread runs the image and
diagnostics timers and the parameter services. Memory is bounded: the packet queue holds at
most max_queued_events estimated events (payload <= 8 bytes x max_queued_events: 80 MB by
default, 20 MB for evt3) and MAX_QUEUED_PACKETS packets; the estimator keeps at most
max_buffered_events events (24 bytes each, in arrays of up to 1.5x that: <= 150 MB by
default); decoded batches waiting for the estimate thread hold at most MAX_DECODED_BATCHES
x MAX_BATCH_EVENTS events (24 MB), blocks being computed a copy of their context each; the
image keeps at most IMAGE_MAX_FLOWS flows (10 MB); DDS keeps at most 1000 received messages.
"""

import collections
import concurrent.futures
import contextlib
from dataclasses import dataclass
import math
import os
import queue
import signal
import struct
import sys
import threading
import time
from typing import Any, List, Optional, Tuple

from builtin_interfaces.msg import Time as TimeMsg
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from event_camera_msgs.msg import EventPacket
import numpy as np
from rcl_interfaces.msg import (FloatingPointRange, IntegerRange, ParameterDescriptor,
                                SetParametersResult)
import rclpy
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.guard_condition import GuardCondition
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image, PointCloud2

from veckm_flow_ros.eventio.events import EventArray
from veckm_flow_ros.eventio.flow_cloud import (block_flow_points, make_flow_points,
                                               pointcloud2_fields)

EXECUTABLE = 'veckm_flow_node'
NODE_NAME = 'veckm_flow'  # ~/flow resolves to /veckm_flow/flow, as in replay bags

# Minimal bytes per event of each encoding: the queue's event estimate is payload bytes / this,
# which over-estimates events for the 8-byte formats' triggers and evt3 time words (safe side).
BYTES_PER_EVENT = {'evt3': 2, 'libcaer_cmp': 2, 'mono': 8, 'libcaer': 8, 'trigger': 8}
MAX_QUEUED_PACKETS = 10000
# The worker takes batches of about BATCH_BUDGET_S of the estimate thread's measured
# processing time (fewer, larger pushes; this bounds the latency a batch adds), between MIN_
# and MAX_BATCH_EVENTS estimated events; at most MAX_DECODED_BATCHES decoded batches wait for
# the estimate thread (the worker decodes the next batch while the estimator runs).
BATCH_BUDGET_S = 0.02
MIN_BATCH_EVENTS = 2_000
MAX_BATCH_EVENTS = 500_000
MAX_DECODED_BATCHES = 2
# Longest wait for the compute threads' warm-up blocks (a busy machine; normally ~50 ms).
WARM_UP_TIMEOUT_S = 2.0
# Sensor size of the made-up warm-up blocks (VGA: Prophesee Gen3, DVXplorer).
WARM_UP_SIZE = (640, 480)
# Sensor time may step back this much between packets without meaning a new stream.
RESTART_TOLERANCE_NS = 100_000_000
IMAGE_MAX_FLOWS = 500_000
LATENCY_SAMPLES = 10000
# The receive thread waits at most this long before looking at the stop flag again, and
# wakes at most once per RECEIVE_PERIOD_S (taking all that arrived meanwhile: fewer wake-ups
# and GIL hand-offs at high message rates, at most this much added latency; DDS keeps 1000).
RECEIVE_WAIT_NS = 100_000_000
RECEIVE_PERIOD_S = 0.002

EVENTS_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1000,
                        reliability=ReliabilityPolicy.BEST_EFFORT,
                        durability=DurabilityPolicy.VOLATILE)
# Reliable; ~/flow keeps 100 messages (0.5 s of 5 ms blocks) because the worker publishes
# the blocks of a batch back to back, images and diagnostics keep 10.
FLOW_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=100,
                      reliability=ReliabilityPolicy.RELIABLE,
                      durability=DurabilityPolicy.VOLATILE)
OUTPUT_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10,
                        reliability=ReliabilityPolicy.RELIABLE,
                        durability=DurabilityPolicy.VOLATILE)


@dataclass(frozen=True)
class ParameterSpec:
    """One ROS parameter: name, default (its type is the parameter's type), range, text."""

    name: str
    default: Any
    description: str
    value_range: Optional[tuple] = None  # (min, max), inclusive
    read_only: bool = False


# The single source of the node's parameters; config/veckm_flow.yaml mirrors the defaults.
PARAMETERS = (
    ParameterSpec('model', '', 'Model: a checkpoint path, a shipped model name, or a published '
                  'VecKM_flow_cpp folder; empty = the default shipped model.', read_only=True),
    ParameterSpec('device', 'cpu', 'Torch device for encoding and MLP: cpu or cuda.',
                  read_only=True),
    ParameterSpec('pixel_radius', 0, 'Expected pixel radius r of the model [px] (window '
                  '2r+1); 0 = take it from the model, otherwise start-up fails unless it '
                  "equals the model's.", (0, 64), read_only=True),
    ParameterSpec('tau_ms', 0.0, 'Expected temporal radius tau of the model [ms] (half the '
                  'context slice); 0 = take it from the model, otherwise start-up fails unless '
                  "it equals the model's.", (0.0, 1000.0), read_only=True),
    ParameterSpec('block_ms', 0.0, 'Length of a target block [ms]: events are encoded and '
                  'published in blocks of this duration (centred: at most 2 tau; latency of a '
                  "block's newest flow ~ tau - block / 2, of its oldest tau + block / 2). 0 = "
                  'automatic: 2 tau of the model centred (each event is encoded once: the '
                  'most events/s), tau causal.', (0.0, 100.0),
                  read_only=True),
    ParameterSpec('causal', False, 'Use only past context (latency ~ block instead of tau + '
                  'block, lower accuracy).', read_only=True),
    ParameterSpec('target_stride', 1, 'Estimate flow for every k-th event [events] (context '
                  'always uses all events).', (1, 1000), read_only=True),
    ParameterSpec('max_flows_per_block', 0, 'Cap on flows per block [flows], targets '
                  'subsampled evenly; 0 = no cap.', (0, 100_000_000), read_only=True),
    ParameterSpec('max_queued_events', 10_000_000, 'Capacity of the input packet queue '
                  '[events, estimated from payload bytes]; when full the oldest whole packets '
                  'are dropped and counted.', (1000, 1_000_000_000), read_only=True),
    ParameterSpec('max_queue_delay_ms', 200.0, 'Longest a received packet may wait for the '
                  'worker [ms]; older whole packets are dropped and counted, so the output '
                  'never falls behind by more than this (plus tau + block); 0 = no limit.',
                  (0.0, 60_000.0), read_only=True),
    ParameterSpec('max_buffered_events', 4_000_000, 'Cap on events the estimator keeps in '
                  'its sliding window [events].', (1000, 1_000_000_000), read_only=True),
    ParameterSpec('torch_threads', 0, 'Torch intra-op threads per block computation; 0 = '
                  'automatic (the CPU cores / compute_threads; all cores for a block computed '
                  'while the node keeps up).', (0, 256), read_only=True),
    ParameterSpec('compute_threads', 0, 'Blocks computed at once on the CPU when the node '
                  'falls behind, each by its own thread; ~/flow keeps block order. 0 = '
                  'automatic (min(CPU cores, 4) on cpu, 1 on cuda); 1 = one block at a time.',
                  (0, 64), read_only=True),
    ParameterSpec('image_rate_hz', 25.0, 'Rate of ~/flow_image [Hz] while subscribed; 0 = '
                  'never publish images.', (0.0, 200.0), read_only=True),
    ParameterSpec('image_max_speed_px_s', 0.0, 'Flow speed shown at full brightness in '
                  '~/flow_image [px/s]; 0 = automatic (a round number above the 95th '
                  'percentile of the shown speeds).', (0.0, 1.0e6)),
    ParameterSpec('publish_confidence', False, 'Add a float32 confidence field [0..1] to '
                  '~/flow (agreement of an ensemble of views: mirrored and time-reversed copies '
                  'for rotation-equivariant models, 4 rotations for others; 2-4x the encoding '
                  'cost).', read_only=True),
    ParameterSpec('rotation_mean_flow', False, "Publish the mean of the ensemble's flows "
                  '(turned back) instead of the plain prediction (held-out %Pos 96.3 vs 95.5 '
                  'for the default model; cost shared with publish_confidence).',
                  read_only=True),
    ParameterSpec('diagnostics_period_s', 1.0, 'Period of /diagnostics and of the status log '
                  'line [s].', (0.1, 60.0), read_only=True),
)


def _descriptor(spec: ParameterSpec) -> ParameterDescriptor:
    descriptor = ParameterDescriptor(description=spec.description, read_only=spec.read_only)
    if spec.value_range is not None:
        low, high = spec.value_range
        if isinstance(spec.default, float):
            descriptor.floating_point_range = [
                FloatingPointRange(from_value=float(low), to_value=float(high), step=0.0)]
        else:
            descriptor.integer_range = [IntegerRange(from_value=low, to_value=high, step=1)]
    return descriptor


class ConfigurationError(ValueError):
    """The node's parameters and model do not fit together (raised at start-up)."""


class OwnThreadCallbackGroup(ReentrantCallbackGroup):
    """
    A callback group that no executor runs: its entities are served by the node's own thread.

    Used for the ~/events subscription and its QoS event handlers. The event handlers matter
    too: with Fast DDS they wake a wait set on every received message without being ready,
    so an executor holding them rebuilt its wait set in Python hundreds of times a second.
    """

    def can_execute(self, entity) -> bool:
        return False

    def beginning_execution(self, entity) -> bool:
        return False


# ------------------------------------------------------------------------------------------
# Bounded packet queue


@dataclass
class DecodedBatch:
    """
    A batch of packets decoded by the worker, for the estimate thread.

    steps: ('push', events, marks), ('reset', reason) or ('size', width, height), in order
    (VecKMFlowNode._decode_batch); packets, events: the batch's packet count and estimated
    events (counted as handled once the steps are done).
    """

    steps: list
    packets: int
    events: int


@dataclass
class QueuedPacket:
    """A received EventPacket, reduced to what the worker needs (payload not copied)."""

    encoding: str
    data: Any  # array('B') or bytes, referenced, not copied
    time_base: int
    width: int
    height: int
    seq: int
    stamp_ns: int
    frame_id: str
    estimated_events: int
    received_s: float = 0.0  # time.monotonic() on arrival


class PacketQueue:
    """
    Thread-safe FIFO of packets bounded by estimated events and by packet count.

    put() drops the oldest whole packets to make room (a packet alone above the capacity is
    dropped itself); the drops are counted in dropped_packets / dropped_events.
    """

    def __init__(self, max_events: int, max_packets: int = MAX_QUEUED_PACKETS):
        self.max_events = int(max_events)
        self.max_packets = int(max_packets)
        self._packets = collections.deque()
        self._events = 0
        self._condition = threading.Condition()
        self.dropped_packets = 0
        self.dropped_events = 0

    def put(self, packet: QueuedPacket) -> int:
        """Enqueue `packet`; return the number of packets dropped to make room."""
        dropped = 0
        with self._condition:
            if packet.estimated_events > self.max_events:
                dropped = 1
                self.dropped_packets += 1
                self.dropped_events += packet.estimated_events
                return dropped
            while self._packets and (self._events + packet.estimated_events > self.max_events
                                     or len(self._packets) >= self.max_packets):
                oldest = self._packets.popleft()
                self._events -= oldest.estimated_events
                self.dropped_packets += 1
                self.dropped_events += oldest.estimated_events
                dropped += 1
            self._packets.append(packet)
            self._events += packet.estimated_events
            self._condition.notify()
        return dropped

    def take(self, timeout_s: float, max_events: Optional[int] = None) -> List[QueuedPacket]:
        """
        Remove and return the oldest packets, waiting up to timeout_s for the first.

        Returns whole packets up to max_events estimated events (at least one packet);
        None = everything queued.
        """
        with self._condition:
            if not self._packets:
                self._condition.wait(timeout_s)
            packets = []
            taken = 0
            while self._packets and (max_events is None or not packets
                                     or taken + self._packets[0].estimated_events
                                     <= max_events):
                packet = self._packets.popleft()
                taken += packet.estimated_events
                packets.append(packet)
            self._events -= taken
        return packets

    def drop_older_than(self, max_age_s: float, now_s: Optional[float] = None) -> int:
        """Drop the packets that arrived more than max_age_s ago; return how many (counted)."""
        now_s = time.monotonic() if now_s is None else now_s
        dropped = 0
        with self._condition:
            while self._packets and now_s - self._packets[0].received_s > max_age_s:
                oldest = self._packets.popleft()
                self._events -= oldest.estimated_events
                self.dropped_packets += 1
                self.dropped_events += oldest.estimated_events
                dropped += 1
        return dropped

    def wake(self):
        with self._condition:
            self._condition.notify_all()

    @property
    def queued_events(self) -> int:
        return self._events

    def __len__(self):
        return len(self._packets)


# ------------------------------------------------------------------------------------------
# Message conversion (no cv_bridge: the Image is five fields)


def _cdr_string(buffer, offset: int):
    """Read a CDR string (uint32 length incl. NUL, bytes) at offset; return (str, end)."""
    offset = (offset + 3) & ~3
    (length,) = struct.unpack_from('<I', buffer, offset)
    start, end = offset + 4, offset + 4 + length
    if length == 0 or end > len(buffer):
        raise ValueError(f'bad CDR string length {length} at byte {offset}')
    return bytes(buffer[start:end - 1]).decode('utf-8', 'replace'), end


def parse_event_packet_cdr(raw: bytes) -> dict:
    """
    Fields of a serialized event_camera_msgs/msg/EventPacket (little-endian XCDR1).

    The executor hands raw bytes (subscription raw=True): no Python message object is built
    and `events` is a zero-copy memoryview into `raw`. Returns a dict with stamp_ns, frame_id,
    height, width, seq, time_base, encoding, events. Raises ValueError for malformed bytes.
    """
    if len(raw) < 4 or raw[1] != 1:
        raise ValueError('not a little-endian CDR message')
    body = memoryview(raw)[4:]  # alignment counts from after the encapsulation header
    try:
        sec, nanosec = struct.unpack_from('<iI', body, 0)
        frame_id, offset = _cdr_string(body, 8)
        offset = (offset + 3) & ~3
        height, width = struct.unpack_from('<II', body, offset)
        offset = (offset + 8 + 7) & ~7
        seq, time_base = struct.unpack_from('<QQ', body, offset)
        encoding, offset = _cdr_string(body, offset + 16)
        offset = ((offset + 1) + 3) & ~3  # is_bigendian (1 byte), then the sequence length
        (size,) = struct.unpack_from('<I', body, offset)
    except struct.error as error:
        raise ValueError(f'truncated EventPacket ({len(raw)} bytes): {error}') from None
    start = offset + 4
    if start + size > len(body):
        raise ValueError(f'EventPacket says {size} event bytes but only {len(body) - start} '
                         'follow')
    return {'stamp_ns': sec * 1_000_000_000 + nanosec, 'frame_id': frame_id,
            'height': height, 'width': width, 'seq': seq, 'time_base': time_base,
            'encoding': encoding, 'events': body[start:start + size]}


def _cdr_string_bytes(text: str, offset: int) -> Tuple[bytes, int]:
    """CDR string at offset (padding to 4 first, uint32 length incl. NUL, bytes, NUL)."""
    data = text.encode('utf-8') + b'\0'
    padding = -offset % 4
    encoded = b'\0' * padding + struct.pack('<I', len(data)) + data
    return encoded, offset + len(encoded)


def pointcloud2_cdr(points: np.ndarray, stamp_ns: int, frame_id: str) -> bytes:
    """
    Serialize the ~/flow PointCloud2 (little-endian XCDR1), ready for publish(bytes).

    The bytes rclpy would make of the PointCloud2 message with these fields, without building
    a Python message that rclpy converts field by field, and with the point data copied once.
    """
    layout = pointcloud2_fields(points)
    t_ns = max(int(stamp_ns), 0)
    parts = [struct.pack('<iI', t_ns // 1_000_000_000, t_ns % 1_000_000_000)]
    offset = 8  # alignment counts from after the 4-byte encapsulation header
    encoded, offset = _cdr_string_bytes(frame_id, offset)
    parts.append(encoded)
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
    return b'\x00\x01\x00\x00' + b''.join(parts)


def stamp_from_ns(t_ns: int) -> TimeMsg:
    """builtin_interfaces/Time from integer nanoseconds (>= 0)."""
    t_ns = max(int(t_ns), 0)
    return TimeMsg(sec=t_ns // 1_000_000_000, nanosec=t_ns % 1_000_000_000)


def stamp_to_ns(stamp) -> int:
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def image_message(bgr: np.ndarray, stamp_ns: int, frame_id: str) -> Image:
    """sensor_msgs/Image bgr8 from an (H, W, 3) uint8 array."""
    bgr = np.ascontiguousarray(bgr, dtype=np.uint8)
    if bgr.ndim != 3 or bgr.shape[2] != 3:
        raise ValueError(f'flow image must be (H, W, 3) uint8, got shape {bgr.shape}')
    msg = Image()
    msg.header.stamp = stamp_from_ns(stamp_ns)
    msg.header.frame_id = frame_id
    msg.height, msg.width = int(bgr.shape[0]), int(bgr.shape[1])
    msg.encoding = 'bgr8'
    msg.is_bigendian = 0
    msg.step = int(bgr.shape[1]) * 3
    msg.data = bgr.tobytes()
    return msg


# ------------------------------------------------------------------------------------------
# Counters for diagnostics


class Statistics:
    """Counters shared by the node's threads (guarded by one lock)."""

    TOTALS = ('packets', 'handled_packets', 'events', 'flows', 'blocks', 'seq_gaps',
              'missed_packets',
              'dropped_packets', 'dropped_events', 'decode_problems', 'bad_packets',
              'failed_blocks', 'estimator_resets', 'images')

    def __init__(self):
        self._lock = threading.Lock()
        self.totals = dict.fromkeys(self.TOTALS, 0)
        self._period = dict.fromkeys(self.TOTALS, 0)
        self._latencies_ms = collections.deque(maxlen=LATENCY_SAMPLES)
        self._period_start = time.monotonic()

    def add(self, **counts):
        with self._lock:
            for name, value in counts.items():
                self.totals[name] += value
                self._period[name] += value

    def add_latency_ms(self, latency_ms: float):
        with self._lock:
            self._latencies_ms.append(latency_ms)

    def take_period(self) -> dict:
        """Return rates and latency percentiles since the previous call, and the totals."""
        with self._lock:
            now = time.monotonic()
            elapsed_s = max(now - self._period_start, 1e-9)
            period = dict(self._period)
            latencies = np.array(self._latencies_ms, dtype=np.float64)
            self._period = dict.fromkeys(self.TOTALS, 0)
            self._latencies_ms.clear()
            self._period_start = now
            totals = dict(self.totals)
        report = {
            'elapsed_s': elapsed_s,
            'events_per_s': period['events'] / elapsed_s,
            'flows_per_s': period['flows'] / elapsed_s,
            'packets_per_s': period['packets'] / elapsed_s,
            'latency_p50_ms': float(np.percentile(latencies, 50)) if len(latencies) else math.nan,
            'latency_p99_ms': float(np.percentile(latencies, 99)) if len(latencies) else math.nan,
            'period': period,
            'totals': totals,
        }
        return report


# ------------------------------------------------------------------------------------------
# The node


class VecKMFlowNode(Node):
    """
    Per-event normal flow node (see the module docstring for topics and parameters).

    Raises ConfigurationError (a ValueError) or the model loader's ModelError at construction
    when parameters and model do not fit; rclpy's ParameterException for out-of-range values.
    """

    def __init__(self, **node_kwargs):
        super().__init__(NODE_NAME, **node_kwargs)
        self._log_times = {}
        self.config = {spec.name: self.declare_parameter(spec.name, spec.default,
                                                         _descriptor(spec)).value
                       for spec in PARAMETERS}
        # The only parameter that may change at run time (rclpy enforces read_only and ranges).
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self._setup_pipeline()
        self.stats = Statistics()
        self.queue = PacketQueue(self.config['max_queued_events'])
        self._frame_id = ''
        self._image_lock = threading.Lock()
        self._image_flows = collections.deque()
        self._image_flow_count = 0
        self._image_wanted = False
        self._newest_stamp_ns = 0

        self.flow_pub = self.create_publisher(PointCloud2, '~/flow', FLOW_QOS)
        self.image_pub = self.create_publisher(Image, '~/flow_image', OUTPUT_QOS)
        self.diagnostics_pub = self.create_publisher(DiagnosticArray, '/diagnostics',
                                                     OUTPUT_QOS)
        # raw: CDR bytes (no message object, no payload copy), taken by the receive thread.
        self.events_sub = self.create_subscription(EventPacket, '~/events', self._on_packet,
                                                   EVENTS_QOS, raw=True,
                                                   callback_group=OwnThreadCallbackGroup())
        image_rate_hz = self.config['image_rate_hz']
        self._image_timer = None
        if image_rate_hz > 0:
            self._image_timer = self.create_timer(1.0 / image_rate_hz, self._on_image_timer)
        self._diagnostics_timer = self.create_timer(self.config['diagnostics_period_s'],
                                                    self._on_diagnostics_timer)
        self._stop = threading.Event()
        self._receive_wake = GuardCondition(None, None, context=self.context)
        # Decoded batches on their way from the worker to the estimate thread.
        self._decoded = queue.Queue(maxsize=MAX_DECODED_BATCHES)
        self._batch_events = MIN_BATCH_EVENTS  # set by the estimate thread from its speed
        # Set by the estimate thread when it failed: the worker restarts its decoding too.
        self._restart_decoding = threading.Event()
        # Blocks being computed by the pool (compute_threads > 1): (future, newest, marks).
        self._in_flight = collections.deque()
        self._compute_pool = None
        self._inline_when_idle = True  # (tests turn it off to exercise the pool)
        # Set by the estimate thread once it and the pool threads computed a made-up block.
        self.warmed_up = threading.Event()
        self.warmed_up_threads = []  # then (thread name, its torch threads) per warmed thread
        self._compute_threads, pool_torch_threads = compute_threads(self.config)
        # Torch threads of a block computed by the estimate thread itself.
        self._inline_threads = self.config['torch_threads'] or _default_torch_threads()
        if self._compute_threads > 1:
            self._compute_pool = concurrent.futures.ThreadPoolExecutor(
                self._compute_threads, thread_name_prefix='veckm_flow_compute',
                initializer=_set_torch_threads, initargs=(pool_torch_threads,))
        self._worker = threading.Thread(target=self._work, name='veckm_flow_worker',
                                        daemon=True)
        self._estimate_thread = threading.Thread(target=self._estimate_loop,
                                                 name='veckm_flow_estimate', daemon=True)
        self._receiver = threading.Thread(target=self._receive, name='veckm_flow_receive',
                                          daemon=True)
        self._worker.start()
        self._estimate_thread.start()
        self._receiver.start()
        model = self.model
        self.get_logger().info(
            f'model {self.model_name!r}: r = {model.pixel_radius} px, '
            f'tau = {model.tau_s * 1e3:g} ms, D = {model.num_features}; '
            f'device {self.config["device"]}, block {self.block_ms:g} ms'
            f'{" (automatic)" if not self.config["block_ms"] else ""}, '
            f'{"causal" if self.config["causal"] else "centred"} context, target stride '
            f'{self.config["target_stride"]}, queue {self.config["max_queued_events"]} events, '
            f'{self._compute_threads} block(s) computed at once')

    def _log_throttled(self, level: str, message: str, period_s: float = 5.0):
        """
        Log at most once per period_s from each call site.

        Cheaper than rclpy's throttle_duration_sec, which looks the caller up (file system
        calls) on every call, also when throttled: under overload the warnings would add load.
        """
        caller = sys._getframe(1)
        key = (caller.f_code, caller.f_lineno)
        now = time.monotonic()
        if now - self._log_times.get(key, -math.inf) < period_s:
            return
        self._log_times[key] = now
        # One call site per severity: rclpy's logger refuses a new severity from a known site.
        logger = self.get_logger()
        if level == 'error':
            logger.error(message)
        elif level == 'warning':
            logger.warning(message)
        else:
            logger.info(message)

    def _on_set_parameters(self, parameters):
        for parameter in parameters:
            if parameter.name in self.config:
                self.config[parameter.name] = parameter.value
        return SetParametersResult(successful=True)

    # -- start-up ---------------------------------------------------------------------------

    def _setup_pipeline(self):
        """Load the model, check it against the parameters, build decoder, sync, estimator."""
        import torch

        from veckm_flow_ros.core.estimator import automatic_block_s
        from veckm_flow_ros.core.model import load_model
        from veckm_flow_ros.eventio.decode import PacketDecoder
        from veckm_flow_ros.eventio.timesync import SeqGapCounter, TimeSync
        config = self.config
        device = config['device']
        if device not in ('cpu', 'cuda'):
            raise ConfigurationError(f'parameter device is {device!r}; use cpu or cuda')
        if device == 'cuda' and not torch.cuda.is_available():
            raise ConfigurationError('parameter device is cuda but torch sees no CUDA device '
                                     f'(torch {torch.__version__}); use device:=cpu')
        self.model_name = config['model'] or '(default shipped model)'
        self.model = load_model(config['model'] or None)
        check_model_fits(self.model, config)
        # block_ms 0: the model's own block (2 tau centred, tau causal).
        self.block_ms = (config['block_ms']
                         or 1e3 * automatic_block_s(self.model.tau_s, config['causal']))
        if device == 'cpu':
            # Decide the MLP form at start-up (numeric checks, ~30 ms), not on the first block.
            _ = self.model.c4_fourier_blocks
        self.decoder = PacketDecoder()
        self.timesync = TimeSync()
        # Counted on arrival, so that the node's own queue drops are not mistaken for losses.
        self.seq_gaps = SeqGapCounter()
        self._last_stamp_ns = None
        self._last_seq = None
        self._last_sensor_t_ns = None
        # Built on the first packet, when the sensor size is known (rebuilt if it changes).
        self.estimator = None
        self.sensor_size = (0, 0)
        self._decoded_size = None  # the worker's view of the sensor size

    def _estimator_for(self, width: int, height: int):
        from veckm_flow_ros.core.estimator import NormalFlowEstimator
        if self.estimator is not None and self.sensor_size == (width, height):
            return self.estimator
        if self.estimator is not None:
            self.get_logger().warning(
                f'sensor size changed from {self.sensor_size[0]}x{self.sensor_size[1]} to '
                f'{width}x{height}: restarting the estimator')
        config = self.config
        self.estimator = NormalFlowEstimator(
            self.model, width, height, device=config['device'],
            block_s=self.block_ms * 1e-3, causal=config['causal'],
            target_stride=config['target_stride'],
            max_flows_per_block=config['max_flows_per_block'],
            max_buffered_events=config['max_buffered_events'],
            confidence=config['publish_confidence'],
            rotation_mean=config['rotation_mean_flow'])
        self.sensor_size = (width, height)
        return self.estimator

    def _warm_up(self):
        """
        Compute a made-up block in this thread and in each compute pool thread (estimate thread).

        The first block a thread computes costs it one to two times a later one (its OpenMP
        team, per-thread tables and scratch pages): at 1x that was the worst latency of a run.
        Done when the estimate thread starts, before input usually arrives, for a sensor of
        WARM_UP_SIZE (the first packet's size gets its own phasor tables, ~1 ms).

        The order matters. torch.set_num_threads sets the calling thread's OpenMP count and
        a process-wide default, and each library (libtorch, this package's ops) gives a
        thread that default the first time the thread runs one of its parallel loops. When a
        pool thread (1 thread per block) started before the estimate thread's first block,
        the estimate thread's blocks ran on one core for the rest of the run (1x synthetic:
        14-18 ms per block instead of 9-10). So this thread computes its block first, with
        its own count, then the pool threads theirs; then it sets its count again.
        """
        import torch

        from veckm_flow_ros.core.estimator import NormalFlowEstimator
        start = time.perf_counter()
        config = self.config
        estimator = NormalFlowEstimator(
            self.model, *WARM_UP_SIZE, device=config['device'], block_s=self.block_ms * 1e-3,
            causal=config['causal'], confidence=config['publish_confidence'],
            rotation_mean=config['rotation_mean_flow'])
        futures = []
        try:
            estimator.warm_up()  # this thread first
            if self._compute_pool is not None:
                # One made-up block per pool thread: each waits for the others before it
                # returns, so that no thread takes two.
                barrier = threading.Barrier(self._compute_threads)

                def warm_pool_thread():
                    estimator.warm_up()
                    try:
                        barrier.wait(timeout=WARM_UP_TIMEOUT_S)
                    except threading.BrokenBarrierError:
                        pass
                    return threading.current_thread().name, torch.get_num_threads()
                futures = [self._compute_pool.submit(warm_pool_thread)
                           for _ in range(self._compute_threads)]
                concurrent.futures.wait(futures, timeout=WARM_UP_TIMEOUT_S)
        finally:
            # Again: the pool threads' initializer changed the process-wide default.
            torch.set_num_threads(self._inline_threads)
        warmed = [(threading.current_thread().name, torch.get_num_threads())]
        warmed += [future.result() for future in futures if future.done()]  # raises errors
        self.warmed_up_threads = warmed
        self.warmed_up.set()
        self.get_logger().info(
            f'warmed up {len(warmed)} compute thread(s) in '
            f'{(time.perf_counter() - start) * 1e3:.0f} ms')

    # -- receive thread -----------------------------------------------------------------------

    def _receive(self):
        """
        Take ~/events messages as they arrive (all that are there at each wake-up).

        Also runs the subscription's QoS event callbacks (incompatible QoS or type warnings),
        which rclpy would otherwise run on the executor.
        """
        from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
        subscription, wake = self.events_sub, self._receive_wake
        handlers = list(subscription.event_handlers)
        try:
            wait_set = _rclpy.WaitSet(1, 1, 0, 0, 0, len(handlers), self.context.handle)
            while not self._stop.is_set() and self.context.ok():
                with contextlib.ExitStack() as in_use:
                    for entity in (subscription.handle, wake.handle, *handlers):
                        in_use.enter_context(entity)
                    wait_set.clear_entities()
                    wait_set.add_subscription(subscription.handle)
                    wait_set.add_guard_condition(wake.handle)
                    for handler in handlers:
                        handler.add_to_wait_set(wait_set)
                    wait_set.wait(RECEIVE_WAIT_NS)
                    woke_s = time.monotonic()
                    for handler in handlers:
                        if handler.is_ready(wait_set):
                            event = handler.take_data()
                            if event and handler.callback is not None:
                                handler.callback(event)
                    while not self._stop.is_set():
                        taken = subscription.handle.take_message(EventPacket, True)
                        if taken is None:
                            break
                        self._on_packet(taken[0])
                pause_s = RECEIVE_PERIOD_S - (time.monotonic() - woke_s)
                if pause_s > 0:
                    self._stop.wait(pause_s)
        except Exception as error:  # noqa: B902 - say why input stopped, unless shutting down
            if not self._stop.is_set() and self.context.ok():
                self.get_logger().error(f'receiving ~/events failed, no more input: '
                                        f'{type(error).__name__}: {error}')

    def _on_packet(self, raw: bytes):
        """Enqueue the packet (serialized EventPacket; no decoding here); count seq gaps/drops."""
        try:
            fields = parse_event_packet_cdr(raw)
        except ValueError as error:
            self.stats.add(packets=1, bad_packets=1, handled_packets=1)
            self._log_throttled(
                'warning', f'dropping a malformed EventPacket: {error}')
            return
        encoding = fields['encoding']
        size = len(fields['events'])
        packet = QueuedPacket(
            encoding=encoding, data=fields['events'], time_base=fields['time_base'],
            width=fields['width'], height=fields['height'], seq=fields['seq'],
            stamp_ns=fields['stamp_ns'], frame_id=fields['frame_id'],
            estimated_events=max(size // BYTES_PER_EVENT.get(encoding, 2), 1),
            received_s=time.monotonic())
        missed = self.seq_gaps.update(packet.seq)
        dropped = self.queue.put(packet)
        self.stats.add(packets=1, missed_packets=missed, seq_gaps=int(missed > 0),
                       dropped_packets=dropped)
        if missed:
            self._log_throttled(
                'warning',
                f'sequence gap on ~/events: seq {packet.seq} after {packet.seq - missed - 1}, '
                f'{missed} packet(s) lost upstream (total gaps '
                f'{self.stats.totals["seq_gaps"]})')
        if dropped:
            self._log_throttled(
                'warning', f'input queue over capacity ({self.queue.max_events} events): dropped '
                f'{dropped} oldest packet(s), {self.stats.totals["dropped_packets"]} in total; '
                'the estimator is slower than the input (raise target_stride or lower the '
                'event rate)')

    # -- worker thread: decode; estimate thread: estimate and publish -------------------------

    def _work(self):
        """Take packets in batches, decode them and hand them to the estimate thread."""
        max_delay_s = self.config['max_queue_delay_ms'] * 1e-3
        while not self._stop.is_set():
            if max_delay_s > 0:
                self._drop_late_packets(max_delay_s)
            if self._restart_decoding.is_set():  # the estimate thread failed: start afresh
                self._restart_decoding.clear()
                self._reset_decoding()
            packets = self.queue.take(timeout_s=0.05, max_events=self._batch_events)
            if not packets:
                continue
            steps = []
            try:
                self._decode_batch(packets, steps)
            except Exception as error:  # noqa: B902 - the worker must survive and say why
                if self._stop.is_set() or not self.context.ok():
                    return
                self.stats.add(bad_packets=len(packets))
                self._log_throttled(
                    'error',
                    f'failed to decode {len(packets)} packet(s): {type(error).__name__}: '
                    f'{error}')
                self._reset_stream(f'{type(error).__name__} while decoding', steps)
            batch = DecodedBatch(steps, len(packets), sum(p.estimated_events for p in packets))
            while not self._stop.is_set():
                try:
                    self._decoded.put(batch, timeout=0.05)
                    break
                except queue.Full:
                    continue

    def _estimate_loop(self):
        """Run the estimator on decoded batches and publish their blocks."""
        import torch
        # Per thread: OpenMP thread counts are a property of the calling thread (see _warm_up
        # for why this thread sets its own count, and when).
        torch.set_num_threads(self._inline_threads)
        try:
            self._warm_up()
        except Exception as error:  # noqa: B902 - the first blocks are only slower
            if self._stop.is_set() or not self.context.ok():
                return
            self.get_logger().warning(f'warming up the compute threads failed (the first '
                                      f'blocks will be slower): {type(error).__name__}: {error}')
        recent_events, recent_s = 0.0, 0.0  # exponentially forgotten sums over batches
        while not self._stop.is_set():
            try:
                if self._in_flight:
                    try:
                        batch = self._decoded.get_nowait()
                    except queue.Empty:
                        # Nothing new: publish the oldest block as soon as it is done.
                        self._publish_computed(wait_s=0.002)
                        continue
                else:
                    batch = self._decoded.get(timeout=0.05)
            except queue.Empty:
                continue
            except Exception as error:  # noqa: B902 - a block computation failed
                if self._stop.is_set() or not self.context.ok():
                    return
                self._estimate_failed(error, packets=0)
                continue
            start = time.perf_counter()
            try:
                self._estimate(batch.steps)
                self._publish_computed(wait_s=0.0, everything=True)  # blocks done meanwhile
            except Exception as error:  # noqa: B902 - the thread must survive and say why
                if self._stop.is_set() or not self.context.ok():
                    return  # shutting down: publishing on a shut-down context fails
                self._estimate_failed(error, batch.packets)
            finally:
                self.stats.add(handled_packets=batch.packets)
            # Events per second of estimate time (smoothed: a batch without a ready block is
            # cheap) -> the size of the batches the worker takes.
            recent_events = 0.9 * recent_events + batch.events
            recent_s = 0.9 * recent_s + (time.perf_counter() - start)
            rate = recent_events / max(recent_s, 1e-6)
            self._batch_events = int(min(max(rate * BATCH_BUDGET_S, MIN_BATCH_EVENTS),
                                         MAX_BATCH_EVENTS))

    def _estimate_failed(self, error: Exception, packets: int):
        """Count and log a failure of the estimator; restart the stream (estimate thread)."""
        self.stats.add(bad_packets=packets, failed_blocks=1, estimator_resets=1)
        self._log_throttled(
            'error', f'computing flow failed ({packets} packet(s) in the batch being '
            f'handled): {type(error).__name__}: {error}; resetting the stream')
        self._discard_computing()
        if self.estimator is not None:
            self.estimator.reset()
        self._restart_decoding.set()

    def _drop_late_packets(self, max_delay_s: float):
        """Overload: drop whole packets queued longer than max_delay_s, oldest first."""
        dropped = self.queue.drop_older_than(max_delay_s)
        if not dropped:
            return
        self.stats.add(dropped_packets=dropped)
        self._log_throttled(
            'warning', f'input waited longer than max_queue_delay_ms = '
            f'{self.config["max_queue_delay_ms"]:g} ms: dropped {dropped} oldest packet(s), '
            f'{self.stats.totals["dropped_packets"]} in total; the estimator is slower than '
            'the input (raise target_stride or lower the event rate)')

    def _process(self, packets: List[QueuedPacket]):
        """Decode, estimate and publish packets in the calling thread (what the threads do)."""
        steps = []
        self._decode_batch(packets, steps)
        self._estimate(steps)
        self._publish_computed(wait_s=None, everything=True)

    def _decode_batch(self, packets: List[QueuedPacket], steps: list):
        """
        Decode the packets one by one into estimator steps (appended to `steps`).

        Steps: ('push', events, marks) -- one per batch instead of one per packet
        (per-push overhead, fewer GIL hand-offs), with the same result as pushing packet by
        packet, as replay does: the time sync is updated per packet, and each block is stamped
        with the sync as it was after the packet that completed the block's context (the first
        whose newest event reached the block's ready_ns; marks per packet: newest sensor time
        so far, sensor->ROS offset, frame id); ('reset', reason) after a stream restart;
        ('size', width, height) when the sensor size is first known or changes. A restart or
        size change pushes what came before it first.
        """
        pending = []  # decoded events of this batch, not pushed yet
        marks = []

        def flush():
            if pending:
                events = pending[0] if len(pending) == 1 else EventArray.concatenate(pending)
                steps.append(('push', events, list(marks)))
                pending.clear()
                marks.clear()

        for packet in packets:
            if self._stop.is_set():
                return
            if self._went_back(packet):
                # Before decoding: a stateful decoder (evt3) would read the new stream's first
                # packet with the old stream's time state.
                flush()
                self._reset_stream('the stream restarted (header stamp or seq went back)',
                                   steps)
            if self._last_seq is not None and packet.seq > self._last_seq + 1:
                self.decoder.resync()  # lost upstream or dropped here: evt3 time is stale
            self._last_stamp_ns = packet.stamp_ns
            self._last_seq = packet.seq
            events = self._decode(packet)
            if events is None or len(events) == 0:
                continue
            if (self._last_sensor_t_ns is not None
                    and int(events.t_ns[0]) < self._last_sensor_t_ns - RESTART_TOLERANCE_NS):
                flush()
                self._reset_stream('the stream restarted (sensor time went back)', steps)
                self._last_stamp_ns, self._last_seq = packet.stamp_ns, packet.seq
            if self._decoded_size != (packet.width, packet.height):
                flush()
                self._decoded_size = (packet.width, packet.height)
                steps.append(('size', packet.width, packet.height))
            self.timesync.update(packet.stamp_ns, events)
            self._last_sensor_t_ns = int(events.t_ns[-1])
            newest = int(events.t_ns.max())
            if marks:
                newest = max(newest, marks[-1][0])
            pending.append(events)
            marks.append((newest, self.timesync.to_ros_ns(0), packet.frame_id))
        flush()

    def _estimate(self, steps: list):
        """Run decoded steps through the estimator and publish the blocks (estimate thread)."""
        for step in steps:
            if self._stop.is_set():
                return
            if step[0] in ('size', 'reset'):
                # The blocks being computed belong to the stream before: publish them first.
                self._publish_computed(wait_s=None, everything=True)
            if step[0] == 'size':
                self._estimator_for(step[1], step[2])
            elif step[0] == 'reset':
                if self.estimator is not None:
                    self.estimator.reset()
            else:
                self._push_and_publish(step[1], step[2])

    def _push_and_publish(self, events: EventArray, marks: list):
        """Push the events at once; publish the blocks as they are computed, in order."""
        newest = np.array([mark[0] for mark in marks], dtype=np.int64)
        if self._compute_pool is None:
            for block in self.estimator.push_iter(events):
                if self._stop.is_set():
                    return
                self._publish_marked(block, newest, marks)
            return
        # Blocks computed by the pool, at most compute_threads at once (each job holds a
        # copy of its context: memory stays bounded), published in order. While the node
        # keeps up (nothing computing, no decoded batch waiting) a block is computed here,
        # its ops spread over this thread's torch threads: the lowest latency. (Waiting until
        # input has queued for a block's time before using the pool kept the node in this
        # mode too long: 0.74-0.85 M flows/s at 1 M events/s input instead of 1.0.)
        for job in self.estimator.push_jobs(events):
            if self._stop.is_set():
                return
            if self._inline_when_idle and not self._in_flight and self._decoded.empty():
                self._publish_marked(job(), newest, marks)
                continue
            self._in_flight.append((self._compute_pool.submit(job), newest, marks))
            while len(self._in_flight) > self._compute_threads:
                self._publish_computed(wait_s=None)
            self._publish_computed(wait_s=0.0, everything=True)

    def _publish_computed(self, wait_s: Optional[float], everything: bool = False):
        """
        Publish computed blocks in order, stopping at the first one not done.

        The oldest block is waited for up to wait_s (None: until done); with everything=True
        the ones after it that are done are published too.
        """
        while self._in_flight:
            future, newest, marks = self._in_flight[0]
            if not future.done():
                if wait_s is not None and wait_s <= 0.0:
                    return
                concurrent.futures.wait([future], timeout=wait_s)
                if not future.done():
                    return
            self._in_flight.popleft()
            self._publish_marked(future.result(), newest, marks)  # raises a job's error
            if not everything:
                return

    def _discard_computing(self):
        """Forget the blocks being computed (after a failure); waits for their threads."""
        futures = [future for future, _, _ in self._in_flight]
        self._in_flight.clear()
        concurrent.futures.wait(futures)

    def _publish_marked(self, block, newest: np.ndarray, marks: list):
        """Publish a block stamped by the packet that completed it (the last if none did)."""
        k = min(int(np.searchsorted(newest, block.ready_ns)), len(marks) - 1)
        _, offset_ns, self._frame_id = marks[k]
        self._publish_block(block, offset_ns)

    def _went_back(self, packet: QueuedPacket) -> bool:
        """Header stamp or seq going back means a new stream (bag loop, driver restart)."""
        return ((self._last_stamp_ns is not None and packet.stamp_ns < self._last_stamp_ns)
                or (self._last_seq is not None and packet.seq < self._last_seq))

    def _decode(self, packet: QueuedPacket):
        """Return the packet's EventArray, or None when it cannot be decoded (counted)."""
        from veckm_flow_ros.eventio.decode import DecodeError
        try:
            result = self.decoder.decode(packet.encoding, packet.data, packet.time_base,
                                         packet.width, packet.height)
        except DecodeError as error:
            self.stats.add(bad_packets=1)
            self._log_throttled(
                'warning',
                f'dropping packet seq {packet.seq}: {error} ({self.stats.totals["bad_packets"]} '
                'bad packets so far)')
            return None
        if result.problems:
            self.stats.add(decode_problems=len(result.problems))
            self._log_throttled(
                'warning',
                f'packet seq {packet.seq} ({packet.encoding}): {"; ".join(result.problems)} '
                f'({self.stats.totals["decode_problems"]} decode problems so far)')
        self.stats.add(events=len(result.events))
        return result.events

    def _publish_block(self, block, offset_ns: int):
        """
        Publish one FlowBlock as ~/flow; stamp = ROS time of its newest flow's event.

        offset_ns: ROS time - sensor time, as the time sync had it when the block completed.
        """
        points, t_stamp_ns = block_flow_points(block, self.config['publish_confidence'])
        if t_stamp_ns is None:
            return
        stamp_ns = t_stamp_ns + offset_ns
        self.flow_pub.publish(pointcloud2_cdr(points, stamp_ns, self._frame_id))
        now_ns = self.get_clock().now().nanoseconds
        self.stats.add(flows=len(points), blocks=1)
        self.stats.add_latency_ms((now_ns - stamp_ns) * 1e-6)
        self._newest_stamp_ns = stamp_ns
        if self._image_wanted:
            self._keep_for_image(points)

    def _reset_decoding(self):
        """Forget the decoder's and the time sync's state (worker thread)."""
        from veckm_flow_ros.eventio.decode import PacketDecoder
        from veckm_flow_ros.eventio.timesync import TimeSync
        self.decoder = PacketDecoder()
        self.timesync = TimeSync()
        self._last_stamp_ns = None
        self._last_seq = None
        self._last_sensor_t_ns = None

    def _reset_stream(self, reason: str, steps: list):
        """Forget decoder and time sync now, the estimator's state in step; counted, logged."""
        self._reset_decoding()
        steps.append(('reset', reason))
        self.stats.add(estimator_resets=1)
        self._log_throttled(
            'info', f'resetting decoder, time sync and estimator: {reason}', period_s=1.0)

    # -- flow image ---------------------------------------------------------------------------

    def _keep_for_image(self, points):
        with self._image_lock:
            self._image_flows.append(points)
            self._image_flow_count += len(points)
            while self._image_flow_count > IMAGE_MAX_FLOWS and len(self._image_flows) > 1:
                self._image_flow_count -= len(self._image_flows.popleft())

    def _on_image_timer(self):
        if self.image_pub.get_subscription_count() == 0:
            if self._image_wanted:
                self._image_wanted = False
                with self._image_lock:
                    self._image_flows.clear()
                    self._image_flow_count = 0
            return
        self._image_wanted = True
        with self._image_lock:
            chunks = list(self._image_flows)
            self._image_flows.clear()
            self._image_flow_count = 0
        width, height = self.sensor_size
        if width == 0 or height == 0:
            return  # no packet decoded yet: the sensor size is unknown
        from veckm_flow_ros.offline.visualize import render_flow_image
        points = np.concatenate(chunks) if chunks else make_flow_points([], [], [], [], [])
        max_speed_px_s = self.config['image_max_speed_px_s'] or None
        bgr = render_flow_image(points['x'], points['y'], points['u'], points['v'], width,
                                height, max_speed_px_s=max_speed_px_s)
        self.image_pub.publish(image_message(bgr, self._newest_stamp_ns, self._frame_id))
        self.stats.add(images=1)

    # -- diagnostics --------------------------------------------------------------------------

    def _on_diagnostics_timer(self):
        report = self.stats.take_period()
        totals = report['totals']
        period = report['period']
        level = DiagnosticStatus.OK
        message = 'ok'
        if period['dropped_packets'] or period['bad_packets'] or period['failed_blocks']:
            level, message = DiagnosticStatus.WARN, 'dropping input (over capacity or bad)'
        elif period['missed_packets']:
            level, message = DiagnosticStatus.WARN, 'sequence gaps in the input'
        elif period['packets'] == 0:
            level, message = DiagnosticStatus.OK, 'no input'
        values = {
            'input events/s': f'{report["events_per_s"]:.0f}',
            'input packets/s': f'{report["packets_per_s"]:.1f}',
            'flows/s': f'{report["flows_per_s"]:.0f}',
            'latency p50 [ms]': f'{report["latency_p50_ms"]:.1f}',
            'latency p99 [ms]': f'{report["latency_p99_ms"]:.1f}',
            'queued events': str(self.queue.queued_events),
            'seq gaps (total)': str(totals['seq_gaps']),
            'packets lost upstream (total)': str(totals['missed_packets']),
            'dropped packets (total)': str(totals['dropped_packets']),
            'bad packets (total)': str(totals['bad_packets']),
            'failed block computations (total)': str(totals['failed_blocks']),
            'decode problems (total)': str(totals['decode_problems']),
            'stream resets (total)': str(totals['estimator_resets']),
            'estimator dropped events (total)': str(self._estimator_drops()),
            'flows (total)': str(totals['flows']),
        }
        status = DiagnosticStatus(level=level, name=f'{self.get_name()}: normal flow',
                                  message=message, hardware_id=self._frame_id,
                                  values=[KeyValue(key=k, value=v) for k, v in values.items()])
        array = DiagnosticArray(status=[status])
        array.header.stamp = self.get_clock().now().to_msg()
        self.diagnostics_pub.publish(array)
        if period['packets'] == 0:
            return  # idle: /diagnostics says so, the log stays quiet
        self._log_throttled(
            'info', f'{report["events_per_s"] / 1e6:.2f} M events/s in, '
            f'{report["flows_per_s"] / 1e6:.2f} M flows/s out, latency p50 '
            f'{report["latency_p50_ms"]:.1f} ms p99 {report["latency_p99_ms"]:.1f} ms; '
            f'seq gaps {totals["seq_gaps"]}, dropped packets {totals["dropped_packets"]}, '
            f'decode problems {totals["decode_problems"]}')

    def _estimator_drops(self) -> int:
        estimator = self.estimator
        return sum(getattr(estimator, 'events_dropped', {}).values()) if estimator else 0

    # -- shutdown -----------------------------------------------------------------------------

    def stop_worker(self, timeout_s: float = 5.0):
        """Stop the receive and worker threads (idempotent); call before destroy_node."""
        worker = getattr(self, '_worker', None)
        if worker is None:
            return  # construction failed before the threads existed (rclpy may still clean up)
        self._stop.set()
        self.queue.wake()
        try:
            self._receive_wake.trigger()
        except Exception:  # noqa: B902 - context already shut down: the thread sees it anyway
            pass
        for thread in (self._receiver, worker, self._estimate_thread):
            if thread.is_alive():
                thread.join(timeout_s)
        if self._compute_pool is not None:
            self._compute_pool.shutdown(wait=True, cancel_futures=True)

    def destroy_node(self):
        self.stop_worker()
        wake = getattr(self, '_receive_wake', None)
        if wake is not None:
            wake.destroy()
        return super().destroy_node()


def compute_threads(config: dict) -> Tuple[int, int]:
    """
    Return (blocks computed at once, torch threads of each) for the node's parameters.

    Automatic (0): on the CPU min(cores, 4) blocks at once, the cores shared out among them
    (on 2 cores: two blocks, one thread each -- no idle core while one thread is in Python or
    in a serial part of an op); on CUDA one (the GPU runs the ops).
    """
    cores = os.cpu_count() or 1
    count = config['compute_threads']
    if config['device'] != 'cpu':
        count = 1
    elif count == 0:
        count = min(cores, 4)
    threads = config['torch_threads'] or max(1, cores // count)
    return count, threads


def _default_torch_threads() -> int:
    """Torch's own default thread count (read in a thread that never set its count)."""
    import torch
    return torch.get_num_threads()


def _set_torch_threads(count: int):
    """Thread initializer of the compute pool: torch threads of the calling thread."""
    import torch
    torch.set_num_threads(count)


def check_model_fits(model, config: dict):
    """Raise ConfigurationError when the model contradicts the parameters (names values)."""
    radius = config['pixel_radius']
    if radius and radius != model.pixel_radius:
        raise ConfigurationError(
            f'parameter pixel_radius is {radius} px but model {config["model"] or "(default)"} '
            f'was trained with r = {model.pixel_radius} px; set pixel_radius to 0 or '
            f'{model.pixel_radius}, or choose a model with r = {radius}')
    tau_ms = config['tau_ms']
    model_tau_ms = model.tau_s * 1e3
    if tau_ms and abs(tau_ms - model_tau_ms) > 1e-6 * max(tau_ms, 1.0):
        raise ConfigurationError(
            f'parameter tau_ms is {tau_ms:g} ms but model {config["model"] or "(default)"} '
            f'was trained with tau = {model_tau_ms:g} ms; set tau_ms to 0 or {model_tau_ms:g}')
    block_ms = config['block_ms']
    if not config['causal'] and block_ms > 2 * model_tau_ms:
        raise ConfigurationError(
            f'parameter block_ms is {block_ms:g} ms, longer than the context slice of the model '
            f'2 tau = {2 * model_tau_ms:g} ms; use block_ms <= {2 * model_tau_ms:g}')


def main(args=None):
    """Console script veckm_flow_node: run the node until shutdown; returns the exit status."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        # Ctrl-C takes SIGTERM's path: rclpy's handler (chained before this no-op) shuts the
        # context down and the executor returns, instead of a KeyboardInterrupt landing at any
        # bytecode (inside rclpy's executor it leaves half-built Tasks behind).
        signal.signal(signal.SIGINT, lambda signum, frame: None)
    rclpy.init(args=args)
    node = None
    try:
        node = VecKMFlowNode()
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass  # Ctrl-C / SIGTERM, also while the model loads: a normal stop
    except (ValueError, FileNotFoundError, rclpy.exceptions.ParameterException) as error:
        # Start-up problems (parameters, model): one line, no traceback.
        print(f'{EXECUTABLE}: error: {error}', file=sys.stderr)
        return 1
    except Exception:  # noqa: B902 - only to tell a stop during start-up from a failure
        if rclpy.ok():
            raise
        # Ctrl-C / SIGTERM while the model loaded: rclpy's signal handler shut the context
        # down, so creating the publishers failed (RCLError 'context is invalid'): a normal
        # stop.
    finally:
        if node is not None:
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    return 0


if __name__ == '__main__':
    sys.exit(main())
