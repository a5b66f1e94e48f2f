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
                   y down], validity [0..1], + confidence [0..1] when publish_confidence;
                   header.stamp = ROS time of the newest flow's event of the block;
                   frame_id copied from the input. One message per block; invalid flows
                   (NaN/Inf) and flows of validity below min_validity are left out.
    ~/flow_image   sensor_msgs/msg/Image bgr8 at image_rate_hz, only while subscribed:
                   hue = flow direction, brightness = speed, black = no flow, legend wheel.
    /diagnostics   diagnostic_msgs/msg/DiagnosticArray every diagnostics_period_s: input
                   events/s, flows/s, latency p50/p99 [ms] (event time -> publish), seq gaps,
                   dropped packets, decode problems, stream resets, time sync jumps, queue
                   fill, flows left out for low validity, flows estimated again with the
                   long context (long_context_below_px_s), blocks that skipped it while the
                   node was behind.

Parameters: stream/parameters.py (PARAMETERS: names, types, ranges, units, defaults;
config/veckm_flow.yaml mirrors the defaults). All are read-only except image_max_speed_px_s.

This module is the rclpy glue around stream.pipeline.FlowPipeline, which owns the packet
queue, the decode and estimate threads and the compute pool (docs/threading.md): a receive
thread here takes ~/events as raw CDR bytes straight from the subscription (no message
object, payload not copied; docs/raw_cdr.md) and puts them into the pipeline, whose blocks
come back to _publish_flow as serialized PointCloud2 bytes. The executor thread runs the
image and diagnostics timers and the parameter services.
"""

import collections
import sys
import threading
import time

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from event_camera_msgs.msg import EventPacket
import numpy as np
from rcl_interfaces.msg import SetParametersResult
from rclpy.node import Node
from sensor_msgs.msg import Image, PointCloud2

from veckm_flow_ros.eventio.flow_cloud import make_flow_points
from veckm_flow_ros.ros.cdr import parse_event_packet_cdr, pointcloud2_cdr
from veckm_flow_ros.ros.messages import image_message
from veckm_flow_ros.ros.node_setup import (declare_parameters, log_line, publish_diagnostics,
                                           qos)
from veckm_flow_ros.ros.rclpy_compat import OwnThreadCallbackGroup
from veckm_flow_ros.ros.receiver import SerializedReceiver
from veckm_flow_ros.ros.spin import run_node
from veckm_flow_ros.stream.frontend import InputPacket
from veckm_flow_ros.stream.parameters import PARAMETERS
from veckm_flow_ros.stream.pipeline import (ConfigurationError,  # noqa: F401 - raised here
                                            estimated_events, FlowPipeline, Throttle)

EXECUTABLE = 'veckm_flow_node'
NODE_NAME = 'veckm_flow'  # ~/flow resolves to /veckm_flow/flow, as in replay bags
IMAGE_MAX_FLOWS = 500_000
# The receive thread wakes at most once per RECEIVE_PERIOD_S, taking all that arrived
# meanwhile (ros/receiver.py; at most this much added latency; DDS keeps 1000 packets).
RECEIVE_PERIOD_S = 0.002

EVENTS_QOS = qos(1000, reliable=False)
# Reliable; ~/flow keeps 100 messages (0.5 s of 5 ms blocks) because the pipeline publishes
# the blocks of a batch back to back, images and diagnostics keep 10.
FLOW_QOS = qos(100)
OUTPUT_QOS = qos(10)


class VecKMFlowNode(Node):
    """
    Per-event normal flow node (see the module docstring for topics and parameters).

    Raises ConfigurationError (a ValueError) or the model loader's ModelError at construction
    when parameters and model do not fit; rclpy's ParameterException for out-of-range values.
    """

    def __init__(self, **node_kwargs):
        super().__init__(NODE_NAME, **node_kwargs)
        from veckm_flow_ros.core.model import load_model
        self.config = declare_parameters(self, PARAMETERS)
        # The only parameter that may change at run time (rclpy enforces read_only and ranges).
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self._throttled = Throttle(self._log)
        self.model_name = self.config['model'] or '(default shipped model)'
        self.model = load_model(self.config['model'] or None)
        self.pipeline = FlowPipeline(self.model, self.config, publish=self._publish_flow,
                                     log=self._log,
                                     clock_ns=lambda: self.get_clock().now().nanoseconds,
                                     alive=self.context.ok)
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
        self._receiver = SerializedReceiver(
            self, self.events_sub, EventPacket, self._on_packet, RECEIVE_PERIOD_S, '~/events',
            'no more input', name='veckm_flow_receive')
        self.pipeline.start()
        self._receiver.start()
        model, config = self.model, self.config
        self.get_logger().info(
            f'model {self.model_name!r}: r = {model.pixel_radius} px, '
            f'tau = {model.tau_s * 1e3:g} ms, D = {model.num_features}; '
            f'device {config["device"]}, block {self.pipeline.block_ms:g} ms'
            f'{" (automatic)" if not config["block_ms"] else ""}, '
            f'{"causal" if config["causal"] else "centred"} context, target stride '
            f'{config["target_stride"]}, queue {config["max_queued_events"]} events, '
            f'{self.pipeline.compute_threads} block(s) computed at once')

    def _log(self, level: str, message: str):
        """Log one line (the pipeline throttles its own)."""
        log_line(self, level, message)

    def _on_set_parameters(self, parameters):
        for parameter in parameters:
            if parameter.name in self.config:
                self.config[parameter.name] = parameter.value
        return SetParametersResult(successful=True)

    # -- input (receive thread) ----------------------------------------------------------

    def _on_packet(self, raw: bytes):
        """Hand a serialized EventPacket to the pipeline (header fields parsed, no decoding)."""
        try:
            fields = parse_event_packet_cdr(raw)
        except ValueError as error:
            self.pipeline.count_bad_packet(str(error))
            return
        payload = fields['events']
        self.pipeline.put(InputPacket(
            encoding=fields['encoding'], data=payload, time_base=fields['time_base'],
            width=fields['width'], height=fields['height'], seq=fields['seq'],
            stamp_ns=fields['stamp_ns'], frame_id=fields['frame_id'],
            estimated_events=estimated_events(fields['encoding'], len(payload)),
            received_s=time.monotonic()))

    # -- output -------------------------------------------------------------------------------

    def _publish_flow(self, points: np.ndarray, stamp_ns: int, frame_id: str):
        """Publish one block's flows as ~/flow (pipeline callback, estimate thread)."""
        self.flow_pub.publish(pointcloud2_cdr(points, stamp_ns, frame_id))
        self._frame_id = frame_id
        self._newest_stamp_ns = stamp_ns
        if self._image_wanted:
            self._keep_for_image(points)

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
        width, height = self.pipeline.sensor_size
        if width == 0 or height == 0:
            return  # no packet decoded yet: the sensor size is unknown
        if (width > self.config['max_sensor_width_px']
                or height > self.config['max_sensor_height_px']):
            return  # never: the front end drops larger packets (memory bound of the image)
        from veckm_flow_ros.core.flow_image import render_flow_image
        points = np.concatenate(chunks) if chunks else make_flow_points([], [], [], [], [])
        max_speed_px_s = self.config['image_max_speed_px_s'] or None
        bgr = render_flow_image(points['x'], points['y'], points['u'], points['v'], width,
                                height, max_speed_px_s=max_speed_px_s)
        self.image_pub.publish(image_message(bgr, self._newest_stamp_ns, self._frame_id))
        self.pipeline.stats.add(images=1)

    # -- diagnostics --------------------------------------------------------------------------

    def _on_diagnostics_timer(self):
        report = self.pipeline.stats.take_period()
        totals = report['totals']
        period = report['period']
        level = DiagnosticStatus.OK
        message = 'ok'
        if period['dropped_packets'] or period['bad_packets'] or period['failed_blocks']:
            level, message = DiagnosticStatus.WARN, 'dropping input (over capacity or bad)'
        elif period['time_sync_jumps'] or period['implausible_stamps']:
            level, message = DiagnosticStatus.WARN, 'sensor clock jumped (re-synchronised)'
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
            'queued events': str(self.pipeline.queue.queued_events),
            'seq gaps (total)': str(totals['seq_gaps']),
            'packets lost upstream (total)': str(totals['missed_packets']),
            'dropped packets (total)': str(totals['dropped_packets']),
            'bad packets (total)': str(totals['bad_packets']),
            'failed block computations (total)': str(totals['failed_blocks']),
            'decode problems (total)': str(totals['decode_problems']),
            'stream resets (total)': str(totals['estimator_resets']),
            'time sync jumps (total)': str(totals['time_sync_jumps']),
            'blocks not published, stamp outside the input (total)':
                str(totals['implausible_stamps']),
            'estimator dropped events (total)': str(self.pipeline.estimator_drops()),
            'flows (total)': str(totals['flows']),
            'flows left out, validity below min_validity (total)':
                str(totals['low_validity_flows']),
            'flows estimated again with the long context, slower than '
            'long_context_below_px_s (total)': str(totals['long_context_flows']),
            'blocks computed without the long context while the node was behind (total)':
                str(totals['long_context_skipped_blocks']),
        }
        publish_diagnostics(self, self.diagnostics_pub, 'normal flow', level, message, values,
                            hardware_id=self._frame_id)
        if period['packets'] == 0:
            return  # idle: /diagnostics says so, the log stays quiet
        self._throttled(
            'info', f'{report["events_per_s"] / 1e6:.2f} M events/s in, '
            f'{report["flows_per_s"] / 1e6:.2f} M flows/s out, latency p50 '
            f'{report["latency_p50_ms"]:.1f} ms p99 {report["latency_p99_ms"]:.1f} ms; '
            f'seq gaps {totals["seq_gaps"]}, dropped packets {totals["dropped_packets"]}, '
            f'decode problems {totals["decode_problems"]}')

    # -- shutdown -----------------------------------------------------------------------------

    def stop_worker(self, timeout_s: float = 5.0):
        """Stop the receive thread and the pipeline (idempotent); call before destroy_node."""
        receiver = getattr(self, '_receiver', None)
        if receiver is None:
            return  # construction failed before the threads existed (rclpy may still clean up)
        receiver.stop(timeout_s)
        self.pipeline.stop(timeout_s)

    def destroy_node(self):
        self.stop_worker()
        receiver = getattr(self, '_receiver', None)
        if receiver is not None:
            receiver.destroy()
        return super().destroy_node()


def main(args=None):
    """Run the node until shutdown; return the exit status (veckm_flow_ros.ros.main wraps it)."""
    return run_node(VecKMFlowNode, EXECUTABLE, args)


if __name__ == '__main__':
    sys.exit(main())
