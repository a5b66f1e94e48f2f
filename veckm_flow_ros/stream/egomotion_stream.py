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
The egomotion node's stream, without ROS: flow clouds in, one estimate per time window out.

    stream = EgomotionStream(config, publish=send, log=print)
    stream.start()
    stream.set_camera(camera)              # core.camera.CameraModel (any thread)
    stream.add_gyro(t_s, omega_rad_s)      # IMU samples, IMU frame (any thread)
    stream.add_flow(stamp_ns, columns, frame_id)   # one ~/flow message (one thread)
    ...
    stream.stop()

publish(estimate, window) receives each window's core.egomotion.EgomotionEstimate on the
estimator thread, in window order; log(level, message) receives throttled problem reports.
An estimate whose translation is undetermined (estimate.undetermined 'rotation_dominated',
'translation_unexplained' or 'signs_disagree': direction, FOE and times to contact NaN) is
published too, its
angular velocity being valid, and counted per reason (UNDETERMINED_COUNTERS);
'too_few_flows' windows and implausible estimates are not published.

- read_flow_cloud() takes the columns of a PointCloud2 by its field table: float32 x, y, t,
  u, v are required, validity or confidence (float32) is used as weight when present; other
  fields are ignored. A wrong layout is a ValueError naming the fields.
- A message of more than max_flows_per_message points is thinned evenly to that many
  (counted); its flows are screened (stream/egomotion_input.py): a t outside
  [-max_flow_age_s, +window_s] of the header stamp, a weight outside 0..1, u, v not finite or
  a position outside the calibration's image are refused and counted.
- FlowWindows cuts the flows into windows of window_s by their sensor time (header stamp +
  t), keeping an even subsample of at most 2 max_flows per window (the stride doubles when
  the window fills, so memory and work per window are bounded at any flow rate). A gap in
  time starts the next window at the next flow (counted); a header stamp more than window_s
  older than the newest seen (a bag loop, a restarted driver) drops the open window and
  starts again (counted as a time reset).
- A closed window goes to a queue of max_queued_windows (the oldest is dropped and counted
  when it is full) and the estimator thread computes it: the gyroscope's mean rate over the
  window when use_imu and the IMU covers it, otherwise the angular velocity is estimated
  from the flow too (the log says why, counted). Gyroscope samples beyond the sensor's full
  scale, from another frame_id, out of order or seconds away from the flow's time are
  refused and counted; a gyroscope that disagrees with the flow's rotation is not used.
- Every refusal is counted and named in one throttled log line (egomotion_input.Refusals).
"""

import collections
import math
import threading
import time
from typing import Callable

import numpy as np

from veckm_flow_ros.core.egomotion import EgomotionEstimator, GyroBuffer
from veckm_flow_ros.core.egomotion_checks import REASONS
from veckm_flow_ros.stream.counters import percentile, PeriodCounters, Throttle
from veckm_flow_ros.stream.egomotion_input import (gyro_sample_problems, GyroMonitor, Refusals,
                                                   SATURATION_SHARE)
from veckm_flow_ros.stream.egomotion_parameters import (EGOMOTION_PARAMETERS,
                                                        rotation_from_quaternion)
from veckm_flow_ros.stream.flow_windows import (  # noqa: F401 - the stream's public names
    FlowColumns, FlowWindow, FlowWindows, read_flow_cloud)

LATENCY_SAMPLES = 2000
# The gyro buffer keeps this much IMU history [s] (windows are computed within ~0.1 s);
# samples further than this from the newest flow time are of no use and refused.
GYRO_HISTORY_S = 2.0
# ~/imu silent for longer than this [s] is not waited for (an IMU delivers every 1-10 ms).
IMU_SILENT_S = 0.1
# While a window waits for ~/imu samples, it asks for them this often [s] (request_gyro).
GYRO_REQUEST_PERIOD_S = 0.002
# A message with more than this share of its flows outside the calibration's image: the
# calibration is of another camera (size); its windows are skipped.
MISMATCH_SHARE = 0.1


# Counters of refused input (docs/egomotion_node.md says why each is refused).
REFUSAL_COUNTERS = ('flow_messages_lost', 'flows_with_bad_times', 'flows_with_bad_values',
                    'flows_with_bad_weights', 'flows_outside_image', 'flows_over_message_cap',
                    'windows_with_camera_mismatch', 'imu_samples_out_of_range',
                    'imu_samples_other_frame', 'imu_samples_off_time',
                    'imu_samples_out_of_order', 'windows_gyro_disagrees')
# Windows without a translation direction, one counter per EgomotionEstimate.undetermined
# reason (core/egomotion_checks.REASONS): undetermined_rotation_dominated, ...
UNDETERMINED_COUNTERS = tuple(f'undetermined_{reason}' for reason in REASONS)
# Undetermined windows that still publish (their angular velocity is valid); the others
# (too_few_flows: no usable flow) publish nothing.
PUBLISHED_UNDETERMINED = ('rotation_dominated', 'translation_unexplained',
                          'signs_disagree')


class Counters(PeriodCounters):
    """Totals and per-period counts shared by the stream's threads (one lock)."""

    NAMES = ('messages', 'flows', 'windows', 'estimates', 'headings', 'implausible_windows',
             'sparse_windows', 'windows_without_camera', 'windows_without_gyro',
             'dropped_windows', 'failed_windows', 'bad_flow_messages', 'bad_camera_infos',
             'bad_imu_messages', 'camera_changes', 'gaps', 'time_resets', 'imu_resets',
             'window_flows_received', 'window_flows_used') + REFUSAL_COUNTERS + (
                 UNDETERMINED_COUNTERS)

    def __init__(self):
        self._compute_ms = collections.deque(maxlen=LATENCY_SAMPLES)
        self._latency_ms = collections.deque(maxlen=LATENCY_SAMPLES)
        self._translation_ratios = collections.deque(maxlen=LATENCY_SAMPLES)
        self._cpu_s = 0.0
        super().__init__()

    def add_window_timing(self, compute_ms: float, latency_ms: float, cpu_s: float,
                          translation_ratio: float = math.nan):
        with self._lock:
            self._compute_ms.append(compute_ms)
            self._latency_ms.append(latency_ms)
            self._cpu_s += cpu_s
            if math.isfinite(translation_ratio):
                self._translation_ratios.append(translation_ratio)

    def _reset_period(self):
        self._compute_ms.clear()
        self._latency_ms.clear()
        self._translation_ratios.clear()
        self._cpu_s = 0.0

    def take_period(self) -> dict:
        """Return rates, timing percentiles and CPU share since the previous call, totals."""
        elapsed_s, period, totals, (compute, latency, ratios, cpu_s) = self._take(lambda: (
            np.array(self._compute_ms, np.float64), np.array(self._latency_ms, np.float64),
            np.array(self._translation_ratios, np.float64), self._cpu_s))
        return {
            'elapsed_s': elapsed_s, 'period': period, 'totals': totals,
            'flows_per_s': period['flows'] / elapsed_s,
            'estimates_per_s': period['estimates'] / elapsed_s,
            'compute_p50_ms': percentile(compute, 50), 'compute_p99_ms': percentile(compute, 99),
            'latency_p50_ms': percentile(latency, 50), 'latency_p99_ms': percentile(latency, 99),
            'estimator_cpu_percent': 100.0 * cpu_s / elapsed_s,
            'translation_ratio_p50': percentile(ratios, 50),
        }


def estimator_config(config: dict):
    """Return the core.egomotion.EgomotionConfig of the stream parameters."""
    from veckm_flow_ros.core.egomotion import EgomotionConfig
    return EgomotionConfig(window_s=float(config['window_s']), min_flows=int(config['min_flows']),
                           max_flows=int(config['max_flows']),
                           min_validity=float(config['min_validity']),
                           min_forward=float(config['min_forward']),
                           ttc_grid=(int(config['ttc_rows']), int(config['ttc_cols'])),
                           ttc_neighbour_weight=float(config['ttc_neighbour_weight']))


def check_egomotion_config(config: dict):
    """Raise ValueError naming the value when the parameters do not fit together."""
    names = {spec.name for spec in EGOMOTION_PARAMETERS}
    unknown = set(config) - names
    if unknown:
        raise ValueError(f'unknown egomotion parameter(s) {sorted(unknown)}')
    rotation_from_quaternion(config['imu_rotation_xyzw'])
    if config['min_flows'] > config['max_flows']:
        raise ValueError(f'min_flows ({config["min_flows"]}) must not exceed max_flows '
                         f'({config["max_flows"]})')


class EgomotionStream:
    """
    Flow windows, calibration, gyroscope and the estimator thread (see the module docstring).

    config: the EGOMOTION_PARAMETERS names (checked with check_egomotion_config); publish,
    log: callbacks; alive: False once the owner shuts down (errors from publish are then
    expected and not logged); time_to_contact: whether the windows' time-to-contact grid is
    wanted now (the node: while its outputs have subscribers); request_gyro: called before a
    window waits for gyroscope samples (the node: its ~/imu receive thread takes what has
    arrived at once instead of at the end of its pause).
    """

    def __init__(self, config: dict, publish: Callable, log: Callable = lambda *args: None,
                 alive: Callable[[], bool] = lambda: True,
                 time_to_contact: Callable[[], bool] = lambda: True,
                 request_gyro: Callable[[], None] = lambda: None):
        check_egomotion_config(config)
        self.config = config
        self._publish = publish
        self._time_to_contact = time_to_contact
        self._request_gyro = request_gyro
        self._log = log
        self._throttled = Throttle(log)
        self.refusals = Refusals(log)
        self._alive = alive
        self.counters = Counters()
        self.windows = FlowWindows(config['window_s'], config['max_flows'],
                                   config['max_flow_age_s'])
        self._estimator_config = estimator_config(config)
        self._gyro_ready = threading.Condition()  # guards the gyro buffer; add_gyro notifies
        self._make_gyro = lambda: GyroBuffer(
            rotation_cam_imu=np.array(rotation_from_quaternion(config['imu_rotation_xyzw'])),
            time_offset_s=float(config['imu_time_offset_s']), max_age_s=GYRO_HISTORY_S)
        self._gyro = self._make_gyro()
        self._newest_imu_s = None   # IMU clock [s]
        self._imu_arrival_s = None  # time.monotonic() of the last accepted sample
        self._imu_frame = config['imu_frame_id'] or None  # locked to the first one seen
        self._imu_stalled_until_s = None  # a wait timed out: no wait before samples reach it
        self._newest_flow_s = None  # header stamp of the newest ~/flow [s]
        self._imu_refusal = (-math.inf, '')  # (time.monotonic(), text) of the last one
        self._last_xy = None        # the last message's flow positions (camera checks)
        self._camera_mismatch = None  # why the windows are skipped, or None
        self.imu_samples = 0
        self.gyro_monitor = GyroMonitor()
        # 'gyro', 'flow' or None (no window yet): where the last window's omega came from;
        # omega_reason: why the flow's when use_imu.
        self.omega_source = None
        self.omega_reason = ''
        # The last computed window's undetermined reason ('' = a heading; None = no window
        # yet) and the gyroscope bias the estimator subtracted ((3,) rad/s, camera frame;
        # None before a gyroscope window).
        self.last_undetermined = None
        self.gyro_bias_rad_s = None
        # (camera, its EgomotionEstimator) or None: one reference, swapped whole, so that the
        # estimator thread never pairs a camera with another camera's estimator.
        self._calibrated = None
        self._accepted_camera = None  # the newest accepted camera (its tables maybe building)
        self._build = threading.Condition()
        self._build_pending = None
        self._builder = None
        self._estimator_generation = 0
        self._queue = collections.deque()
        self._wake = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name='veckm_egomotion_estimate',
                                        daemon=True)

    # -- inputs (any thread; add_flow from one) -----------------------------------------------

    @property
    def camera(self):
        calibrated = self._calibrated
        return None if calibrated is None else calibrated[0]

    def set_camera(self, camera, block: bool = True) -> bool:
        """
        Use this CameraModel from the next window on; return False when it is unchanged.

        Raises ValueError naming the size when it exceeds max_sensor_width_px or
        max_sensor_height_px (the tables' memory is bounded by those, not by a message), or
        when more than MISMATCH_SHARE of the last ~/flow message's flows lie outside it (a
        calibration of another camera or resolution).

        The estimator's per-pixel tables (~50 ms for 640 x 480, seconds at 2048 x 2048) are
        built before the windows use them: here when block, else on a builder thread (the
        node's executor must not stall), the newest pending camera winning. Until they are
        ready, windows keep the previous calibration.
        """
        self.check_size(camera.width, camera.height)
        current = self._accepted_camera
        if current is not None and (
                current.width == camera.width and current.height == camera.height
                and current.distortion_model == camera.distortion_model
                and np.array_equal(current.K, camera.K) and np.array_equal(current.D, camera.D)):
            return False
        last_xy = self._last_xy
        if last_xy is not None and len(last_xy[0]):
            x, y = last_xy
            inside = ((x >= -0.5) & (x < camera.width - 0.5) & (y >= -0.5)
                      & (y < camera.height - 0.5))
            share = 1.0 - np.count_nonzero(inside) / len(x)
            if share > MISMATCH_SHARE:
                raise ValueError(
                    f'camera size {camera.width}x{camera.height} px disagrees with the flows: '
                    f'{100 * share:.0f} % of the last ~/flow message lie outside it (x up to '
                    f'{np.nanmax(x):.0f}, y up to {np.nanmax(y):.0f} px)')
        self._accepted_camera = camera
        if block:
            self._install(camera, EgomotionEstimator(camera, self._estimator_config))
            return True
        with self._build:
            self._build_pending = camera
            if self._builder is None:
                self._builder = threading.Thread(target=self._build_tables, daemon=True,
                                                 name='veckm_egomotion_tables')
                self._builder.start()
            self._build.notify()
        return True

    def check_size(self, width: int, height: int):
        """Raise ValueError when a camera size exceeds max_sensor_width/height_px."""
        max_width, max_height = (self.config['max_sensor_width_px'],
                                 self.config['max_sensor_height_px'])
        if width > max_width or height > max_height:
            raise ValueError(f'camera size {width}x{height} px exceeds max_sensor_width_px x '
                             f'max_sensor_height_px ({max_width}x{max_height} px)')

    def calibration_pending(self) -> bool:
        """Whether an accepted calibration's tables are still being built."""
        return self._accepted_camera is not self.camera

    def _install(self, camera, estimator):
        self._calibrated = (camera, estimator)
        self.counters.add(camera_changes=1)

    def _build_tables(self):
        """Build the newest pending camera's tables, then install them (builder thread)."""
        while True:
            with self._build:
                while self._build_pending is None and not self._stop:
                    self._build.wait()
                if self._stop:
                    return
                camera, self._build_pending = self._build_pending, None
            try:
                estimator = EgomotionEstimator(camera, self._estimator_config)
            except (MemoryError, ValueError) as error:
                self._throttled('error', f'calibration {camera!r} not used: building its '
                                f'tables failed: {type(error).__name__}: {error}')
                continue
            if camera is self._accepted_camera:
                self._install(camera, estimator)
                self._log('info', f'calibration in use: {camera!r}')

    def refused(self, counter: str, count: int, example: str):
        """Add count to the REFUSAL_COUNTERS entry counter; name it in the refusals line."""
        self.counters.add(**{counter: count})
        self.refusals.add(counter, count, example)
        if counter.startswith('imu_'):
            self._imu_refusal = (time.monotonic(), f'~/imu samples refused: {count} '
                                 f'{counter[4:].replace("_", " ")} ({example})')

    def add_gyro(self, t_s, omega_rad_s, frame_ids=None):
        """
        Add IMU samples: t_s (G,) IMU time [s], omega_rad_s (G, 3) in the IMU frame.

        frame_ids: the header frame_id of each sample (or None: not checked). Refused and
        counted: rates at or beyond 0.98 imu_max_rate_rad_s (saturated, deg/s, corrupt) or
        not finite, a frame_id other than imu_frame_id (or the first one seen), times further
        than GYRO_HISTORY_S from the newest ~/flow stamp, times not after the previous sample.
        """
        t_s = np.asarray(t_s, np.float64).reshape(-1)
        omega_rad_s = np.asarray(omega_rad_s, np.float64).reshape(-1, 3)
        keep = self._screen_gyro(t_s, omega_rad_s, frame_ids)
        if keep is not None:
            t_s, omega_rad_s = t_s[keep], omega_rad_s[keep]
        if len(t_s) == 0:
            return
        # (Python's min and max over a batch of a few samples: numpy's cost more. A stamp
        # that is not finite never counts as the newest: the buffer drops it.)
        times = [t for t in t_s.tolist() if math.isfinite(t)]
        oldest, newest = (min(times), max(times)) if times else (math.inf, None)
        with self._gyro_ready:
            if self._newest_imu_s is not None and oldest < self._newest_imu_s - 0.1:
                self._gyro = self._make_gyro()  # IMU time went back (bag loop): start again
                self.counters.add(imu_resets=1)
                self._throttled('warning', f'~/imu stamps went back by '
                                f'{self._newest_imu_s - oldest:.3f} s: gyroscope history '
                                'restarted')
                self._newest_imu_s = None
            dropped = self._gyro.dropped
            self._gyro.add(t_s, omega_rad_s)
            if self._gyro.dropped != dropped:
                self.refused('imu_samples_out_of_order', self._gyro.dropped - dropped,
                             f'stamps not after the previous sample, e.g. t = {t_s[0]:.6f} s')
            if newest is not None:
                self._newest_imu_s = newest if self._newest_imu_s is None else max(
                    self._newest_imu_s, newest)
            stalled = self._imu_stalled_until_s
            if stalled is not None and self._newest_imu_s >= stalled:
                self._imu_stalled_until_s = None
            self._imu_arrival_s = time.monotonic()
            self.imu_samples += len(t_s)
            self._gyro_ready.notify_all()

    def _screen_gyro(self, t_s, omega_rad_s, frame_ids):
        """Return the mask of samples to keep (None: all), counting and naming the others."""
        max_rate = float(self.config['imu_max_rate_rad_s'])
        newest_flow_s = self._newest_flow_s
        offset_s = float(self.config['imu_time_offset_s'])
        # The common case in plain Python (an IMU batch holds 1-10 samples; numpy's calls cost
        # more on so few): all rates finite and within the full scale (NaN compares False),
        # one frame, times near the flow's.
        limit = SATURATION_SHARE * max_rate
        times = t_s.tolist()
        if (all(-limit < rate < limit for rate in omega_rad_s.ravel().tolist())
                and (frame_ids is None or (self._imu_frame is not None and frame_ids.count(
                    self._imu_frame) == len(frame_ids)))
                and (newest_flow_s is None or (
                    abs(min(times) + offset_s - newest_flow_s) <= GYRO_HISTORY_S
                    and abs(max(times) + offset_s - newest_flow_s) <= GYRO_HISTORY_S))):
            return None
        bad = gyro_sample_problems(omega_rad_s, max_rate)
        if bad.any():
            self.refused('imu_samples_out_of_range', int(np.count_nonzero(bad)),
                         f'{omega_rad_s[np.argmax(bad)].tolist()} rad/s, full scale '
                         f'imu_max_rate_rad_s = {max_rate:g}')
        if frame_ids is not None:
            if self._imu_frame is None and not bad.all():
                self._imu_frame = frame_ids[int(np.argmin(bad))]
                self._log('info', f'~/imu: gyroscope of frame {self._imu_frame!r}; samples of '
                          'other frames are refused')
            other = np.fromiter((frame != self._imu_frame for frame in frame_ids), bool,
                                len(frame_ids)) & ~bad
            if other.any():
                self.refused('imu_samples_other_frame', int(np.count_nonzero(other)),
                             f'frame_id {frame_ids[int(np.argmax(other))]!r}, expected '
                             f'{self._imu_frame!r}')
            bad |= other
        if newest_flow_s is not None:
            offset_s = t_s + offset_s - newest_flow_s
            off = ~(np.abs(offset_s) <= GYRO_HISTORY_S) & ~bad
            if off.any():
                self.refused('imu_samples_off_time', int(np.count_nonzero(off)),
                             f'stamp {offset_s[np.argmax(off)]:+.3f} s from the newest '
                             '~/flow stamp (clock, imu_time_offset_s?)')
            bad |= off
        return ~bad if bad.any() else None

    def flow_screen(self):
        """
        (max_before_s, max_after_s, size) that add_flow screens the flows against now.

        The arguments of read_flow_message after max_points: columns it read with them are
        not screened again (size: (width, height) [px] of the accepted calibration or None).
        """
        camera = self._accepted_camera
        windows = self.windows
        return (windows.max_flow_age_s, windows.window_s,
                None if camera is None else (camera.width, camera.height))

    def add_flow(self, stamp_ns: int, columns: FlowColumns, frame_id: str = ''):
        """Add one ~/flow message; queue the windows it closes."""
        windows = self.windows
        gaps, resets = windows.gaps, windows.time_resets
        self._newest_flow_s = stamp_ns * 1e-9
        camera = self._accepted_camera
        received = len(columns) + columns.capped
        if len(columns):
            self._last_xy = (columns.x, columns.y)
        closed = windows.add(stamp_ns, columns, frame_id, size=None if camera is None
                             else (camera.width, camera.height))
        self.counters.add(messages=1, flows=received, gaps=windows.gaps - gaps,
                          time_resets=windows.time_resets - resets)
        if columns.capped:
            self.refused('flows_over_message_cap', columns.capped,
                         f'a cloud of {received} points, max_flows_per_message = '
                         f'{self.config["max_flows_per_message"]}')
        refused = windows.last_refused
        for name, (count, example) in refused.items():
            self.refused(name, count, example)
        outside = refused.get('flows_outside_image', (0,))[0]
        self._camera_mismatch = (
            f'camera size {camera.width}x{camera.height} px disagrees with the flows '
            f'({100 * outside / len(columns):.0f} % outside, e.g. '
            f'{refused["flows_outside_image"][1].split(" in ")[0]})'
            if outside > MISMATCH_SHARE * len(columns) and len(columns) else None)
        if windows.time_resets != resets:
            self._throttled('warning', f'~/flow header stamp went back by more than window_s '
                            f'({self.config["window_s"]:g} s): open window dropped, windows '
                            'restart (bag loop or restarted driver?)')
        for window in closed:
            self._put(window)

    def _put(self, window: FlowWindow):
        with self._wake:
            if len(self._queue) >= self.config['max_queued_windows']:
                self._queue.popleft()
                self.counters.add(dropped_windows=1)
                self._throttled('warning', 'the estimator falls behind: oldest window dropped '
                                f'(queue of {self.config["max_queued_windows"]} windows)')
            self._queue.append(window)
            self._wake.notify()

    # -- estimator thread ---------------------------------------------------------------------

    def start(self):
        self._thread.start()

    def stop(self, timeout_s: float = 5.0):
        """Stop the estimator and builder threads (idempotent); queued windows are dropped."""
        with self._wake:
            self._stop = True
            self._wake.notify()
        with self._gyro_ready:
            self._gyro_ready.notify_all()
        with self._build:
            self._build.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def drain(self, timeout_s: float = 10.0) -> bool:
        """Wait until every queued window is computed (for tests and replays)."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._wake:
                if not self._queue and not self._busy:
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.002)

    _busy = False

    def _run(self):
        while True:
            with self._wake:
                while not self._queue and not self._stop:
                    self._wake.wait()
                if self._stop:
                    return
                window = self._queue.popleft()
                self._busy = True
            try:
                self.compute(window)
            except Exception as error:  # noqa: B902 - one bad window must not stop the node
                self.counters.add(failed_windows=1)
                self._throttled('error', f'egomotion estimate failed for the window at '
                                f'{window.t0_s:.3f} s: {type(error).__name__}: {error}')
            finally:
                with self._wake:
                    self._busy = False

    def compute(self, window: FlowWindow):
        """Estimate one window and publish it (the estimator thread; tests call it directly)."""
        self.counters.add(windows=1)
        calibrated = self._calibrated
        if calibrated is None:
            self.counters.add(windows_without_camera=1)
            self._throttled('warning', 'no camera calibration yet: waiting for a valid '
                            '~/camera_info (or set camera_yaml); windows are skipped')
            return
        mismatch = self._camera_mismatch
        if mismatch is not None:
            self.counters.add(windows_with_camera_mismatch=1)
            self._throttled('error', f'{mismatch}: windows skipped until a matching '
                            '~/camera_info arrives')
            return
        if len(window) < self.config['min_flows']:
            self.counters.add(sparse_windows=1)
            return
        cpu_start_s, start_s = time.thread_time(), time.perf_counter()
        estimator = calibrated[1]
        if window.generation != self._estimator_generation:
            estimator.reset()  # time jumped back: the last direction says nothing
        self._estimator_generation = window.generation
        omega_rad_s, reason = (self._gyro_mean(window) if self.config['use_imu']
                               else (None, 'use_imu false'))
        estimate = None
        monitor = self.gyro_monitor
        if omega_rad_s is not None and (not monitor.trusted or monitor.check_due(omega_rad_s)):
            # The flow's own rotation, to tell a gyroscope in the wrong unit, axes or frame.
            estimate = estimator.estimate(window.x, window.y, window.u, window.v,
                                          weight=window.weight,
                                          t_s=(window.t0_s + window.t1_s) / 2,
                                          time_to_contact=self._time_to_contact())
            if monitor.record(omega_rad_s, estimate.omega_rad_s):
                if monitor.trusted:
                    self._log('info', 'the gyroscope agrees with the flow again: using it')
                else:
                    self._log('error', f'{monitor.reason}: angular velocity from the flow')
            if monitor.trusted:
                estimate = None
            else:
                self.counters.add(windows_gyro_disagrees=1)
                omega_rad_s, reason = None, monitor.reason
        source = 'gyro' if omega_rad_s is not None else 'flow'
        if omega_rad_s is None:
            self.counters.add(windows_without_gyro=1)
        if source != self.omega_source or (source == 'flow' and reason != self.omega_reason):
            # Each change of source (or reason) is logged, at most once a minute (it can
            # flicker at the edge of the IMU's coverage); /diagnostics always says which.
            if source == 'flow' and self.config['use_imu']:
                self._throttled('warning', f'angular velocity estimated from the flow: '
                                f'{reason}', period_s=60.0)
            elif source == 'gyro':
                self._throttled('info', 'angular velocity from the gyroscope of ~/imu',
                                period_s=60.0)
            self.omega_source, self.omega_reason = source, reason
        if estimate is None:
            estimate = estimator.estimate(window.x, window.y, window.u, window.v,
                                          weight=window.weight, omega_rad_s=omega_rad_s,
                                          t_s=(window.t0_s + window.t1_s) / 2,
                                          time_to_contact=self._time_to_contact())
        compute_ms = (time.perf_counter() - start_s) * 1e3
        self.counters.add(window_flows_received=window.received_flows,
                          window_flows_used=int(estimate.num_flows))
        if estimate.omega_from_gyro:
            self.gyro_bias_rad_s = np.array(estimate.gyro_bias_rad_s, np.float64)
        if self._publishable(estimate):
            try:
                self._publish(estimate, window)
            except Exception:  # noqa: B902 - publishing fails once the node shuts down
                if self._alive():
                    raise
                return
            self.counters.add(estimates=1, headings=int(not estimate.undetermined))
        self.counters.add_window_timing(
            compute_ms, (time.monotonic() - window.closed_s) * 1e3,
            time.thread_time() - cpu_start_s, float(estimate.translation_ratio))

    def _publishable(self, estimate) -> bool:
        """
        Count an estimate's outcome; return whether it is published.

        Undetermined for a reason of PUBLISHED_UNDETERMINED: published (direction NaN,
        angular velocity valid). Not published: 'too_few_flows' (no usable flow), and an
        implausible estimate (a direction that is not finite without a reason, an angular
        velocity not finite or beyond imu_max_rate_rad_s, a time to contact of 0 or less).
        """
        reason = estimate.undetermined or ''
        self.last_undetermined = reason
        if reason:
            name = f'undetermined_{reason}'
            self.counters.add(**{name if name in UNDETERMINED_COUNTERS
                                 else 'implausible_windows': 1})
            if reason not in PUBLISHED_UNDETERMINED:
                return False
        omega = np.asarray(estimate.omega_rad_s, np.float64)
        if ((not reason and not all(map(math.isfinite, estimate.direction)))
                or not np.all(np.abs(omega) < self.config['imu_max_rate_rad_s'])
                or estimate.min_ttc_s <= 0):
            self.counters.add(implausible_windows=1)
            return False
        return True

    def _wait_for_gyro(self, covered: Callable[[], bool], wait_s: float) -> bool:
        """
        Wait (holding self._gyro_ready) up to wait_s for covered(); return it.

        Asks for samples (request_gyro) every GYRO_REQUEST_PERIOD_S meanwhile: the receive
        thread may have taken the earlier samples just before the one the window needs came.
        """
        deadline_s = time.monotonic() + wait_s
        while not covered():
            remaining_s = deadline_s - time.monotonic()
            if remaining_s <= 0:
                return False
            self._request_gyro()
            self._gyro_ready.wait(min(remaining_s, GYRO_REQUEST_PERIOD_S))
        return True

    def _gyro_mean(self, window: FlowWindow):
        """
        Return (mean gyroscope rate over the window (camera frame) or None, why not).

        When ~/imu delivers (a sample within IMU_SILENT_S) but its newest sample lies less
        than imu_max_wait_s before the window's end, wait up to imu_max_wait_s for it (IMU
        messages can arrive after the flow). A silent IMU, one whose stamps lie further
        behind, or one whose last wait timed out (until a sample passes that window) is not
        waited for: the window takes the flow's rotation at once.
        """
        offset_s = float(self.config['imu_time_offset_s'])
        wait_s = float(self.config['imu_max_wait_s'])

        def covered():
            return self._stop or self._newest_imu_s + offset_s >= window.t1_s
        with self._gyro_ready:
            if self._newest_imu_s is None:
                return None, (self._imu_refusal[1] or 'no ~/imu samples')
            silent_s = time.monotonic() - self._imu_arrival_s
            lag_s = window.t1_s - (self._newest_imu_s + offset_s)
            if (0 < lag_s <= wait_s and silent_s < IMU_SILENT_S
                    and self._imu_stalled_until_s is None):
                if not self._wait_for_gyro(covered, wait_s):
                    self._imu_stalled_until_s = window.t1_s - offset_s
                lag_s = window.t1_s - (self._newest_imu_s + offset_s)
            mean = self._gyro.mean(window.t0_s, window.t1_s)
        if mean is not None:
            mean = np.asarray(mean, np.float64)
            if mean.shape == (3,) and all(map(math.isfinite, mean)):
                return mean, ''
        refused_s, refusal = self._imu_refusal
        if time.monotonic() - refused_s < 1.0:
            return None, refusal
        if silent_s >= IMU_SILENT_S:
            return None, f'~/imu silent for {silent_s:.2f} s'
        return None, (f'the ~/imu samples end {lag_s:.3f} s before the window' if lag_s > 0
                      else 'the ~/imu samples do not cover the window')
