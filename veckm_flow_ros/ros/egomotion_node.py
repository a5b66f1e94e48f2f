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
veckm_egomotion_node: camera egomotion and time to contact from the normal flow of ~/flow.

Subscriptions
    ~/flow          sensor_msgs/msg/PointCloud2   reliable, keep last 10: veckm_flow_node's
                    output (float32 fields x, y [px], t [s, relative to header.stamp], u, v
                    [px/s]; validity, or else confidence, [0..1] weights the flows when
                    present). Any cloud with these float32 fields is accepted. Taken as raw
                    CDR by a receive thread (rclpy's executor cost ~1 ms of CPU per message).
                    Refused and counted (docs/egomotion_node.md): flows with a t outside
                    -max_flow_age_s..+window_s of the stamp, a weight outside 0..1, u, v
                    not finite, a position outside the calibration; clouds beyond
                    max_flows_per_message are thinned; messages lost before they were
                    taken (publication sequence gaps) are counted.
    ~/camera_info   sensor_msgs/msg/CameraInfo    best effort, keep last 1 (matches any
                    publisher): K, D with distortion_model plumb_bob or equidistant. The last
                    valid message is used; a bad one (zero or implausible focal length,
                    wrong D length, a size the flows do not fit, ...) is logged, counted and
                    ignored. camera_yaml gives one before it arrives. The per-pixel tables
                    of a new calibration are built on a thread of their own.
    ~/imu           sensor_msgs/msg/Imu           best effort, keep last 200 (only when
                    use_imu): angular_velocity [rad/s] in the IMU frame, turned into the
                    camera optical frame with imu_rotation_xyzw and shifted in time by
                    imu_time_offset_s (parameters: tf2 has no wheel for the PyPI ROS that
                    this package is tested on). Taken as raw CDR by a receive thread, all
                    waiting messages every IMU_RECEIVE_PERIOD_S and whenever a window waits
                    for them (an IMU at 200-1000 Hz through the executor cost more than the
                    flow). Without samples covering a
                    window the angular velocity is estimated from the flow. Samples beyond
                    imu_max_rate_rad_s, of another frame_id than imu_frame_id or stamped
                    seconds away from the flow are refused and counted; a gyroscope that
                    disagrees with the flow's rotation is not used.

Publications (reliable, volatile, keep last 10; published as serialized CDR, ros/cdr.py),
one message each per window of window_s, header.stamp = the window centre (flow time),
frame_id = the ~/flow frame_id (the camera optical frame: x right, y down, z forward):
    ~/twist                 geometry_msgs/msg/TwistStamped: angular = angular velocity of
                            the camera [rad/s]; linear = the UNIT translation direction of the
                            camera (|linear| = 1: monocular flow gives no scale, not m/s), or
                            NaN, NaN, NaN where the window's translation is undetermined
                            (rotation_dominated, translation_unexplained, signs_disagree):
                            angular is then still valid. `math.isfinite(linear.x)` tells a
                            heading.
    ~/foe                   geometry_msgs/msg/PointStamped: focus of expansion [px] (x, y in
                            the distorted image); z = 1 valid, z = 0 invalid (translation
                            nearly parallel to the image plane, |direction z| < min_forward,
                            moving backwards, or undetermined) and then x, y are NaN.
    ~/time_to_contact       sensor_msgs/msg/Image 32FC1, ttc_rows x ttc_cols cells over the
                            image: time to contact [s] of the scene in each cell, NaN where
                            unknown (everywhere in an undetermined window).
    ~/min_time_to_contact   std_msgs/msg/Float32: the smallest cell [s], NaN when none or
                            undetermined (a comparison `data < threshold` is then false);
                            never 0 or negative.
    /diagnostics            diagnostic_msgs/msg/DiagnosticArray every diagnostics_period_s:
                            flows/s in, estimates/s, headings/s, share of flows used,
                            per-window compute time and latency p50/p99 [ms], estimator CPU
                            [% of a core], the angular velocity's source, the gyroscope bias
                            estimate [rad/s per axis], the translation ratio, the last
                            window's heading state, the calibration, counters of undetermined
                            windows per reason and of bad and dropped input.
    Windows without an estimate (too few flows, no calibration, an implausible estimate)
    publish nothing and are counted. ~/foe, ~/time_to_contact and ~/min_time_to_contact
    are published (and the time-to-contact grid computed) only while a subscription is
    matched to them: a volatile topic delivers nothing to one that is not matched yet.

Parameters: stream/egomotion_parameters.py (EGOMOTION_PARAMETERS: names, types, ranges,
units, defaults; config/veckm_egomotion.yaml mirrors them); all read-only.

This module is the rclpy glue around stream.egomotion_stream.EgomotionStream, which cuts the
flows into windows and computes them on its own thread (bounded queue); a receive thread
takes ~/flow and cuts the windows, another ~/imu; the executor thread runs ~/camera_info,
the diagnostics timer and the parameter services. main() limits numpy's BLAS to one thread
(runtime.limit_blas_threads).
"""

import math
import sys
import time

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from geometry_msgs.msg import PointStamped, TwistStamped
import numpy as np
from rclpy.event_handler import PublisherEventCallbacks, UnsupportedEventTypeError
from rclpy.node import Node
from sensor_msgs.msg import CameraInfo, Image, Imu, PointCloud2
from std_msgs.msg import Float32

from veckm_flow_ros.core.camera import CameraModel
from veckm_flow_ros.ros import rclpy_compat
from veckm_flow_ros.ros.cdr import (float32_cdr, image_cdr, parse_imu_angular_velocity_cdr,
                                    parse_pointcloud2_cdr, point_stamped_cdr,
                                    twist_stamped_cdr)
from veckm_flow_ros.ros.node_setup import (declare_parameters, log_line, publish_diagnostics,
                                           qos)
from veckm_flow_ros.ros.receiver import SerializedReceiver
from veckm_flow_ros.ros.spin import run_node
from veckm_flow_ros.runtime import limit_blas_threads
from veckm_flow_ros.stream.counters import Throttle
from veckm_flow_ros.stream.egomotion_parameters import EGOMOTION_PARAMETERS
from veckm_flow_ros.stream.egomotion_stream import (EgomotionStream, read_flow_cloud,
                                                    REFUSAL_COUNTERS, UNDETERMINED_COUNTERS)
from veckm_flow_ros.stream.flow_windows import read_flow_message

EXECUTABLE = 'veckm_egomotion_node'
NODE_NAME = 'veckm_egomotion'

FLOW_QOS = qos(10)
# Best effort + volatile matches every publisher (reliable or not, latched or not).
CAMERA_INFO_QOS = qos(1, reliable=False)
# IMUs publish at 100-1000 Hz, often in bursts: room for 0.2-2 s of samples.
IMU_QOS = qos(200, reliable=False)
OUTPUT_QOS = qos(10)
# The IMU receive thread (ros/receiver.py) takes what arrived once per period (at 1 kHz: 40
# messages of the 200 that IMU_QOS keeps), and at once when a window waits for samples (the
# estimator pokes it). 10 ms without the poke: 1.8x the CPU of the idle node at a 200 Hz IMU
# for the same latency (benchmarks/RESULTS.md). Below IMU_SILENT_S.
IMU_RECEIVE_PERIOD_S = 0.04
# The ~/flow receive thread: at most one wake-up per period (the flow node publishes every
# 12-32 ms; a message after a quiet period is taken at once).
FLOW_RECEIVE_PERIOD_S = 0.005
# Counters whose increase in a diagnostics period makes the status WARN.
WARNING_COUNTERS = ('bad_flow_messages', 'bad_camera_infos', 'bad_imu_messages',
                    'dropped_windows', 'failed_windows', 'time_resets') + REFUSAL_COUNTERS
# Why windows of a period gave no estimate, in the order /diagnostics names them.
NO_ESTIMATE_REASONS = (('windows_with_camera_mismatch', 'calibration disagrees with the flows'),
                       ('windows_without_camera', 'no camera calibration'),
                       ('sparse_windows', 'windows with fewer than min_flows usable flows'),
                       ('undetermined_too_few_flows',
                        'windows with too few usable flows (too_few_flows)'),
                       ('implausible_windows', 'implausible estimates'),
                       ('failed_windows', 'failed windows'),
                       ('dropped_windows', 'dropped windows'))


def ttc_image_cdr(grid_s: np.ndarray, stamp_ns: int, frame_id: str) -> bytes:
    """Serialize a sensor_msgs/Image 32FC1 of a (rows, cols) time-to-contact grid [s]."""
    grid = np.ascontiguousarray(grid_s, dtype='<f4')
    rows, cols = grid.shape
    return image_cdr(stamp_ns, frame_id, rows, cols, '32FC1', cols * 4, grid.tobytes())


class EgomotionNode(Node):
    """
    Egomotion node (see the module docstring for topics and parameters).

    Raises ValueError at construction when parameters do not fit together or camera_yaml
    cannot be read; rclpy's ParameterException for out-of-range values.
    """

    def __init__(self, **node_kwargs):
        super().__init__(NODE_NAME, **node_kwargs)
        self.config = declare_parameters(self, EGOMOTION_PARAMETERS)
        self.config['imu_rotation_xyzw'] = list(self.config['imu_rotation_xyzw'])
        self._throttled = Throttle(self._log)
        self.stream = EgomotionStream(
            self.config, publish=self._publish, log=self._log, alive=self.context.ok,
            time_to_contact=lambda: (self.subscribed('~/time_to_contact')
                                     or self.subscribed('~/min_time_to_contact')),
            request_gyro=self._poke_imu_receiver)
        self._imu_receiver = None  # the ~/imu receive thread (use_imu)
        if self.config['camera_yaml']:
            camera = CameraModel.from_yaml(self.config['camera_yaml'])
            try:
                self.stream.set_camera(camera)
            except ValueError as error:
                raise ValueError(f'{self.config["camera_yaml"]}: {error}') from None
        self._cpu_start_s = time.process_time()

        self.twist_pub = self.create_publisher(TwistStamped, '~/twist', OUTPUT_QOS)
        # Subscriptions matched to each optional output, from its matched events (None: the
        # rmw does not report them, so it is always published). Read by the estimator thread.
        self._matched = {}
        self.foe_pub = self._optional_publisher(PointStamped, '~/foe')
        self.ttc_pub = self._optional_publisher(Image, '~/time_to_contact')
        self.min_ttc_pub = self._optional_publisher(Float32, '~/min_time_to_contact')
        self.diagnostics_pub = self.create_publisher(DiagnosticArray, '/diagnostics',
                                                     OUTPUT_QOS)
        self.flow_sub = self.create_subscription(
            PointCloud2, '~/flow', self._on_flow_raw, FLOW_QOS, raw=True,
            callback_group=rclpy_compat.OwnThreadCallbackGroup())
        self._flow_receiver = SerializedReceiver(
            self, self.flow_sub, PointCloud2, self._on_flow_raw, FLOW_RECEIVE_PERIOD_S,
            '~/flow', 'no more estimates', name='veckm_egomotion_flow', with_info=True)
        self._flow_sequence = {}  # publisher gid -> its last publication sequence number
        self.camera_info_sub = self.create_subscription(CameraInfo, '~/camera_info',
                                                        self._on_camera_info, CAMERA_INFO_QOS)
        self._imu_batch = []
        self.imu_sub = None
        if self.config['use_imu']:
            self.imu_sub = self.create_subscription(
                Imu, '~/imu', self._on_imu_raw, IMU_QOS, raw=True,
                callback_group=rclpy_compat.OwnThreadCallbackGroup())
            self._imu_receiver = SerializedReceiver(
                self, self.imu_sub, Imu, self._imu_batch.append, IMU_RECEIVE_PERIOD_S,
                '~/imu', 'no more gyroscope', on_wake_end=self._flush_imu_batch,
                name='veckm_egomotion_imu')
        self._diagnostics_timer = self.create_timer(self.config['diagnostics_period_s'],
                                                    self._on_diagnostics_timer)
        self.stream.start()
        self._flow_receiver.start()
        if self._imu_receiver is not None:
            self._imu_receiver.start()
        config = self.config
        omega_source = ('from ~/imu when it covers the window' if config['use_imu']
                        else 'from the flow (use_imu false)')
        calibration = self.stream.camera or 'waiting for ~/camera_info'
        self.get_logger().info(
            f'window {config["window_s"] * 1e3:g} ms, {config["min_flows"]}..'
            f'{config["max_flows"]} flows per window, angular velocity {omega_source}; '
            f'calibration: {calibration}')

    def _optional_publisher(self, msg_type, topic: str):
        """Create a publisher of OUTPUT_QOS; its matched events keep self._matched[topic]."""
        def on_matched(info):
            self._matched[topic] = info.current_count
        self._matched[topic] = 0
        try:
            return self.create_publisher(msg_type, topic, OUTPUT_QOS, event_callbacks=(
                PublisherEventCallbacks(matched=on_matched)))
        except UnsupportedEventTypeError:
            self._matched[topic] = None
            return self.create_publisher(msg_type, topic, OUTPUT_QOS)

    def _poke_imu_receiver(self):
        receiver = self._imu_receiver
        if receiver is not None:
            receiver.poke()

    def subscribed(self, topic: str) -> bool:
        """Whether the optional output topic ('~/foe', ...) has a matched subscription."""
        count = self._matched[topic]
        return count is None or count > 0

    def _log(self, level: str, message: str):
        """Log one line."""
        log_line(self, level, message)

    # -- ~/flow receive thread ---------------------------------------------------------------

    def _on_flow_raw(self, raw: bytes, info=None):
        """Add one serialized ~/flow PointCloud2 to the stream (malformed: counted, logged)."""
        if info is not None:
            self._count_lost_flow_messages(info)
        try:
            # The common case in one compiled call; else the parse that names what is wrong.
            message = read_flow_message(raw, self.config['max_flows_per_message'],
                                        *self.stream.flow_screen())
            if message is None:
                cloud = parse_pointcloud2_cdr(raw)
                message = (cloud['stamp_ns'], cloud['frame_id'], read_flow_cloud(
                    cloud['fields'], cloud['point_step'], cloud['data'],
                    cloud['is_bigendian'], cloud['width'], cloud['height'],
                    self.config['max_flows_per_message']))
        except ValueError as error:
            self.stream.counters.add(bad_flow_messages=1)
            self._throttled('error', f'~/flow message ignored: {error}')
            return
        stamp_ns, frame_id, columns = message
        self.stream.add_flow(stamp_ns, columns, frame_id)

    def _count_lost_flow_messages(self, info: dict):
        """
        Count the ~/flow messages dropped before the receive thread took them.

        A gap in a publisher's publication sequence numbers: messages its reliable writer
        sent but this subscription's history (keep last 10) replaced before they were taken
        (e.g. 10 kHz of small clouds between two wake-ups of the receive thread).
        """
        sequence = info.get('publication_sequence_number')
        if not sequence:  # 0 or missing: an rmw that does not tell
            return
        gid = info.get('publisher_gid')
        data = gid.get('data') if isinstance(gid, dict) else None
        # The gid's bytes where the rmw gives bytes (a repr of the dict costs ~15 us).
        key = data if isinstance(data, bytes) else repr(gid)
        last = self._flow_sequence.get(key)
        self._flow_sequence[key] = sequence
        if last is not None and sequence > last + 1:
            self.stream.refused('flow_messages_lost', sequence - last - 1,
                                f'publication sequence {last} -> {sequence} (~/flow history of '
                                f'{FLOW_QOS.depth} full between two takes)')

    # -- inputs (executor thread) -------------------------------------------------------------

    def _on_camera_info(self, msg: CameraInfo):
        try:
            self.stream.check_size(msg.width, msg.height)  # before any per-pixel work
            camera = CameraModel.from_camera_info(msg.width, msg.height, msg.k, msg.d,
                                                  msg.distortion_model)
            changed = self.stream.set_camera(camera, block=False)  # tables: builder thread
        except ValueError as error:
            self.stream.counters.add(bad_camera_infos=1)
            keeping = ('keeping the previous calibration' if self.stream.camera is not None
                       else 'no calibration yet, windows are skipped')
            self._throttled('error', f'~/camera_info ignored: {error}; {keeping}')
            return
        if changed:
            self.get_logger().info(f'calibration from ~/camera_info: {camera!r} (building its '
                                   'tables)')

    # -- IMU receive thread ------------------------------------------------------------------

    def _flush_imu_batch(self):
        """Hand the Imu messages of one receive wake-up to _on_imu_raw (receive thread)."""
        if self._imu_batch:
            batch = self._imu_batch[:]
            self._imu_batch.clear()
            self._on_imu_raw(batch)

    def _on_imu_raw(self, batch):
        """Add the gyroscope samples of serialized Imu messages (a list) to the stream."""
        if not isinstance(batch, list):
            batch = [batch]
        t_s, omega, frame_ids = [], [], []
        for raw in batch:
            try:
                stamp_ns, rate, covariance0, frame_id = parse_imu_angular_velocity_cdr(raw)
            except ValueError as error:
                rate, covariance0, problem = None, math.nan, str(error)
            else:
                problem = None
                if covariance0 == -1.0 or not all(map(math.isfinite, rate)):
                    # REP 145: covariance[0] = -1 means the IMU has no angular velocity.
                    problem = (f'no usable angular velocity ({rate} rad/s, covariance[0] = '
                               f'{covariance0:g})')
            if problem:
                self.stream.counters.add(bad_imu_messages=1)
                self._throttled('warning', f'~/imu message ignored: {problem}')
                continue
            t_s.append(stamp_ns * 1e-9)
            omega.append(rate)
            frame_ids.append(frame_id)
        if t_s:
            self.stream.add_gyro(np.array(t_s), np.array(omega), frame_ids)

    # -- outputs (estimator thread) -----------------------------------------------------------

    def _publish(self, estimate, window):
        # Serialized here (ros/cdr.py): rclpy's message objects and their conversion cost
        # more than the bytes.
        stamp_ns, frame_id = window.stamp_ns, window.frame_id
        # Undetermined: linear NaN (no heading), angular valid; FOE, TTC NaN (the solver's).
        direction = (math.nan,) * 3 if estimate.undetermined else estimate.direction
        self.twist_pub.publish(twist_stamped_cdr(stamp_ns, frame_id, direction,
                                                 estimate.omega_rad_s))
        if self.subscribed('~/foe'):
            foe_x, foe_y = (float(value) for value in estimate.foe_px)
            if (estimate.foe_valid and not estimate.undetermined and math.isfinite(foe_x)
                    and math.isfinite(foe_y)):
                foe = point_stamped_cdr(stamp_ns, frame_id, foe_x, foe_y, 1.0)
            else:
                foe = point_stamped_cdr(stamp_ns, frame_id, math.nan, math.nan, 0.0)
            self.foe_pub.publish(foe)
        if self.subscribed('~/time_to_contact'):
            self.ttc_pub.publish(ttc_image_cdr(estimate.ttc_grid_s, stamp_ns, frame_id))
        if self.subscribed('~/min_time_to_contact'):
            self.min_ttc_pub.publish(float32_cdr(estimate.min_ttc_s))

    # -- diagnostics --------------------------------------------------------------------------

    def omega_source_text(self) -> str:
        """Where the angular velocity comes from, as /diagnostics says it."""
        if not self.config['use_imu']:
            return 'estimated from the flow (use_imu false)'
        source = self.stream.omega_source
        if source == 'gyro':
            return 'gyroscope (~/imu)'
        if source == 'flow':
            return f'estimated from the flow ({self.stream.omega_reason})'
        return 'no window yet'

    def heading_text(self) -> str:
        """Return the last window's heading state: 'determined', 'undetermined (<reason>)'."""
        reason = self.stream.last_undetermined
        if reason is None:
            return 'no window yet'
        return f'undetermined ({reason})' if reason else 'determined'

    def _on_diagnostics_timer(self):
        report = self.stream.counters.take_period()
        totals, period = report['totals'], report['period']
        cpu_now_s = time.process_time()
        process_cpu_percent = 100.0 * (cpu_now_s - self._cpu_start_s) / report['elapsed_s']
        self._cpu_start_s = cpu_now_s
        self.stream.refusals.flush()
        level, message = self._status(period)
        received = period['window_flows_received']
        used_percent = (100.0 * period['window_flows_used'] / received if received
                        else math.nan)
        bias = self.stream.gyro_bias_rad_s
        values = {
            'flows/s in': f'{report["flows_per_s"]:.0f}',
            'estimates/s': f'{report["estimates_per_s"]:.1f}',
            'headings/s': f'{period["headings"] / report["elapsed_s"]:.1f}',
            'heading (last window)': self.heading_text(),
            'translation ratio p50': f'{report["translation_ratio_p50"]:.3f}',
            **{f'gyroscope bias {axis} [rad/s]': 'none' if bias is None else f'{value:.5f}'
               for axis, value in zip('xyz', (None,) * 3 if bias is None else bias)},
            'flows used [% of received]': f'{used_percent:.1f}',
            'window compute p50 [ms]': f'{report["compute_p50_ms"]:.2f}',
            'window compute p99 [ms]': f'{report["compute_p99_ms"]:.2f}',
            'window latency p50 [ms]': f'{report["latency_p50_ms"]:.2f}',
            'window latency p99 [ms]': f'{report["latency_p99_ms"]:.2f}',
            'estimator CPU [% of a core]': f'{report["estimator_cpu_percent"]:.1f}',
            'process CPU [% of a core]': f'{process_cpu_percent:.1f}',
            'angular velocity': self.omega_source_text(),
            'calibration': repr(self.stream.camera) if self.stream.camera else 'none',
            **{f'{name.replace("_", " ")} (total)': str(totals[name])
               for name in ('windows', 'estimates', 'headings', 'implausible_windows',
                            'sparse_windows',
                            'windows_without_camera', 'windows_without_gyro',
                            'dropped_windows', 'failed_windows', 'bad_flow_messages',
                            'bad_camera_infos', 'bad_imu_messages', 'camera_changes', 'gaps',
                            'time_resets', 'imu_resets') + REFUSAL_COUNTERS},
            # Named with the reason as core/egomotion_checks.REASONS spells it.
            **{f'undetermined {name[len("undetermined_"):]} (total)': str(totals[name])
               for name in UNDETERMINED_COUNTERS},
        }
        publish_diagnostics(self, self.diagnostics_pub, 'egomotion', level, message, values)
        if period['messages']:
            self._throttled(
                'info', f'{report["flows_per_s"] / 1e3:.0f} k flows/s in, '
                f'{report["estimates_per_s"]:.1f} estimates/s, window compute p50 '
                f'{report["compute_p50_ms"]:.1f} ms p99 {report["compute_p99_ms"]:.1f} ms, '
                f'{message}', period_s=10.0)

    def _status(self, period):
        """
        Return the diagnostics (level, message) of a period.

        WARN while input is refused or dropped, while flows arrive but no estimate comes out
        (saying why: too_few_flows windows publish nothing), or while the gyroscope is not
        used for a reason other than its absence. Estimates without a heading (undetermined,
        angular velocity published) leave the level OK; the message counts them by reason.
        """
        problems = [name for name in WARNING_COUNTERS if period[name]]
        refused = sum(period[name] for name in REFUSAL_COUNTERS if name.startswith('flows'))
        reasons = [text for name, text in NO_ESTIMATE_REASONS if period[name]]
        if refused >= period['flows'] > 0:
            reasons.append('every flow refused')
        # A window closed near the end of a period is still with the estimator: without a
        # reason the period's missing estimate is only late, not a fault.
        if not period['estimates'] and reasons:
            return DiagnosticStatus.WARN, 'no estimates: ' + ', '.join(reasons + [
                name.replace('_', ' ') for name in problems if period[name]
                and name not in dict(NO_ESTIMATE_REASONS)])
        if problems:
            return DiagnosticStatus.WARN, 'problems: ' + ', '.join(
                name.replace('_', ' ') for name in problems)
        if self.stream.camera is None:
            return DiagnosticStatus.WARN, 'no camera calibration (~/camera_info)'
        if period['messages'] == 0:
            return DiagnosticStatus.OK, 'no input'
        # Windows without a heading that still publish their angular velocity are no fault:
        # panning (rotation_dominated) or standing still / pure rotation
        # (translation_unexplained) leave the translation undetermined. The message says so.
        heading = ''
        if period['estimates'] > period['headings']:
            reasons = [name[len('undetermined_'):] for name in UNDETERMINED_COUNTERS
                       if period[name]]
            heading = (f'; {period["estimates"] - period["headings"]} of '
                       f'{period["estimates"]} estimates without heading '
                       f'({", ".join(reasons)})')
        if self.config['use_imu'] and self.stream.omega_source == 'flow':
            if self.stream.imu_samples == 0 and not self.stream.gyro_monitor.reason:
                return DiagnosticStatus.OK, ('ok, no IMU: angular velocity from the flow'
                                             + heading)
            return DiagnosticStatus.WARN, (f'gyroscope not used: {self.stream.omega_reason}; '
                                           'angular velocity from the flow' + heading)
        return DiagnosticStatus.OK, 'ok' + heading

    # -- shutdown -----------------------------------------------------------------------------

    def stop_worker(self, timeout_s: float = 5.0):
        """Stop the receive threads and the estimator thread (idempotent)."""
        for name in ('_flow_receiver', '_imu_receiver'):
            receiver = getattr(self, name, None)
            if receiver is not None:
                receiver.stop(timeout_s)
        stream = getattr(self, 'stream', None)
        if stream is not None:
            stream.stop(timeout_s)

    def destroy_node(self):
        self.stop_worker()
        for name in ('_flow_receiver', '_imu_receiver'):
            receiver = getattr(self, name, None)
            if receiver is not None:
                receiver.destroy()
        return super().destroy_node()


def main(args=None):
    """Run the node until shutdown (numpy's BLAS on one thread); return the exit status."""
    limit_blas_threads(1)
    return run_node(EgomotionNode, EXECUTABLE, args)


if __name__ == '__main__':
    sys.exit(main())
