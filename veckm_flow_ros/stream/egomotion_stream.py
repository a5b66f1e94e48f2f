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

- read_flow_cloud() takes the columns of a PointCloud2 by its field table: float32 x, y, t,
  u, v are required, validity or confidence (float32) is used as weight when present; other
  fields are ignored. A wrong layout is a ValueError naming the fields.
- FlowWindows cuts the flows into windows of window_s by their sensor time (header stamp +
  t), keeping an even subsample of at most 2 max_flows per window (the stride doubles when
  the window fills, so memory and work per window are bounded at any flow rate). A gap in
  time starts the next window at the next flow (counted); a header stamp more than window_s
  older than the newest seen (a bag loop, a restarted driver) drops the open window and
  starts again (counted as a time reset).
- A closed window goes to a queue of max_queued_windows (the oldest is dropped and counted
  when it is full) and the estimator thread computes it: the gyroscope's mean rate over the
  window when use_imu and the IMU covers it, otherwise the angular velocity is estimated
  from the flow too (said once in the log, counted).
"""

import collections
from dataclasses import dataclass
import functools
import math
import threading
import time
from typing import Callable, List, Optional

import numpy as np

from veckm_flow_ros.core.egomotion import EgomotionEstimator, GyroBuffer
from veckm_flow_ros.stream.counters import percentile, PeriodCounters, Throttle
from veckm_flow_ros.stream.egomotion_parameters import (EGOMOTION_PARAMETERS,
                                                        rotation_from_quaternion)

# sensor_msgs/msg/PointField datatype code for float32.
POINTFIELD_FLOAT32 = 7
REQUIRED_FIELDS = ('x', 'y', 't', 'u', 'v')
WEIGHT_FIELDS = ('validity', 'confidence')  # the first present weights the flows
LATENCY_SAMPLES = 2000
# The gyro buffer keeps this much IMU history [s] (windows are computed within ~0.1 s).
GYRO_HISTORY_S = 2.0
# Flows whose t lies further than this from their header stamp [s] (or is not finite) are
# dropped and counted: the flow node's lie within tau + block (tens of ms) before it, and one
# corrupt time must not hold a window open.
MAX_FLOW_T_S = 10.0


@dataclass
class FlowColumns:
    """Columns of one ~/flow message: float32 arrays (views into the message data)."""

    x: np.ndarray
    y: np.ndarray
    t: np.ndarray        # [s] relative to header.stamp
    u: np.ndarray        # [px/s]
    v: np.ndarray        # [px/s]
    weight: Optional[np.ndarray] = None   # validity or confidence [0..1], None without

    def __len__(self):
        return len(self.x)


def read_flow_cloud(fields, point_step: int, data, is_bigendian: bool = False,
                    width: Optional[int] = None, height: int = 1) -> FlowColumns:
    """
    Return the flow columns of a PointCloud2 (the ~/flow layout, see eventio/flow_cloud.py).

    fields: (name, offset_bytes, datatype, count) per PointField. Raises ValueError naming
    what is wrong: a missing or non-float32 required field, a field outside point_step,
    big-endian data, a data length that is not width x height points.
    """
    dtype = _flow_dtype(tuple(tuple(field) for field in fields), point_step, bool(is_bigendian))
    buffer = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
    if len(buffer) % point_step:
        raise ValueError(f'flow cloud data has {len(buffer)} bytes, not a multiple of '
                         f'point_step {point_step}')
    count = len(buffer) // point_step
    if width is not None and int(width) * int(height) != count:
        raise ValueError(f'flow cloud says {width}x{height} points but its data holds {count}')
    points = np.frombuffer(buffer, dtype=dtype, count=count)
    weight = points[dtype.names[5]] if len(dtype.names) > 5 else None
    if weight is not None:
        unknown = np.isnan(weight)
        if unknown.any():
            # NaN = not computed (a flow node or bag that writes the field without a score):
            # such flows count as fully valid, and a column with no score at all as no weight.
            weight = None if unknown.all() else np.where(unknown, 1.0, weight).astype(
                np.float32)
    return FlowColumns(points['x'], points['y'], points['t'], points['u'], points['v'], weight)


@functools.lru_cache(maxsize=16)
def _flow_dtype(fields: tuple, point_step: int, is_bigendian: bool) -> np.dtype:
    """
    Check a flow cloud's layout; return the structured dtype of its used fields.

    The fields x, y, t, u, v, then the weight field when there is one. Cached: a stream's
    messages share one layout.
    """
    table = {name: (offset, datatype, count) for name, offset, datatype, count in fields}
    names = tuple(name for name, *_ in fields)
    missing = [name for name in REQUIRED_FIELDS if name not in table]
    if missing:
        raise ValueError(f'flow cloud without field(s) {", ".join(missing)}: fields {names}, '
                         f'expected float32 {", ".join(REQUIRED_FIELDS)} (+ validity or '
                         'confidence), as veckm_flow_node publishes')
    if is_bigendian:
        raise ValueError('flow cloud is big-endian; only little-endian clouds are read')
    if point_step <= 0:
        raise ValueError(f'flow cloud point_step is {point_step} bytes')
    used = list(REQUIRED_FIELDS) + [name for name in WEIGHT_FIELDS if name in table][:1]
    formats = {}
    for name in used:
        offset, datatype, count = table[name]
        if datatype != POINTFIELD_FLOAT32 or count != 1:
            raise ValueError(f'flow cloud field {name!r} has datatype {datatype} x {count}, '
                             f'expected float32 ({POINTFIELD_FLOAT32}) x 1')
        if offset < 0 or offset + 4 > point_step:
            raise ValueError(f'flow cloud field {name!r} at byte {offset} lies outside '
                             f'point_step {point_step}')
        formats[name] = offset
    return np.dtype({'names': list(formats), 'formats': ['<f4'] * len(formats),
                     'offsets': list(formats.values()), 'itemsize': point_step})


@dataclass
class FlowWindow:
    """
    The (subsampled) flows of one window and its times.

    t0_s, t1_s: start and end [s] (flow sensor time, as ROS time: header.stamp + t);
    stamp_ns: the window centre [ns] (stamp of the outputs); x, y [px], u, v [px/s]:
    float32 arrays; weight: float32 [0..1] or None; received_flows: flows that fell into the
    window before subsampling; closed_s: time.monotonic() when the message that closed it
    arrived (the start of the latency measurement); generation: the number of time resets
    before it (the estimator forgets its previous window when this changes).
    """

    t0_s: float
    t1_s: float
    stamp_ns: int
    x: np.ndarray
    y: np.ndarray
    u: np.ndarray
    v: np.ndarray
    weight: Optional[np.ndarray]
    received_flows: int
    frame_id: str
    closed_s: float
    generation: int = 0

    def __len__(self):
        return len(self.x)


class FlowWindows:
    """
    Cut flow messages into windows of window_s of sensor time (see the module docstring).

    add() returns the windows the message closed (zero, one or several); counters: gaps,
    time_resets, dropped_flows (of a window dropped by a reset), bad_times (flows dropped for
    a t beyond MAX_FLOW_T_S or not finite).
    """

    def __init__(self, window_s: float, max_flows: int):
        if not window_s > 0 or max_flows < 1:
            raise ValueError(f'window_s must be > 0 s and max_flows >= 1, got {window_s} s, '
                             f'{max_flows}')
        self.window_s = float(window_s)
        self.keep_flows = 2 * int(max_flows)  # kept per window before the stride doubles
        self.gaps = 0
        self.time_resets = 0
        self.dropped_flows = 0
        self.bad_times = 0
        self._origin_ns = None      # times are float64 seconds relative to this stamp
        self._newest_stamp_ns = None
        self._start_s = 0.0
        self._stride = 1
        self._clear()

    def _clear(self):
        self._chunks = []           # lists of (x, y, u, v, weight) arrays, already strided
        self._kept = 0
        self._received = 0

    def add(self, stamp_ns: int, columns: FlowColumns, frame_id: str = '',
            now_s: Optional[float] = None) -> List[FlowWindow]:
        """Add one message's flows (header stamp [ns], columns); return the closed windows."""
        now_s = time.monotonic() if now_s is None else now_s
        stamp_ns = int(stamp_ns)
        window_ns = int(self.window_s * 1e9)
        if self._newest_stamp_ns is not None and stamp_ns < self._newest_stamp_ns - window_ns:
            self.time_resets += 1
            self.dropped_flows += self._received
            self._origin_ns = None
            self._newest_stamp_ns = stamp_ns
        good = np.abs(columns.t) <= MAX_FLOW_T_S  # False for NaN
        if not good.all():
            self.bad_times += int(len(good) - np.count_nonzero(good))
            columns = FlowColumns(*(None if a is None else a[good] for a in (
                columns.x, columns.y, columns.t, columns.u, columns.v, columns.weight)))
        if len(columns) == 0:
            if self._origin_ns is not None:
                self._newest_stamp_ns = max(self._newest_stamp_ns, stamp_ns)
            return []
        t_s = (columns.t.astype(np.float64)
               + (stamp_ns - (stamp_ns if self._origin_ns is None else self._origin_ns)) * 1e-9)
        if self._origin_ns is None:
            self._origin_ns = stamp_ns
            self._newest_stamp_ns = stamp_ns
            self._start_s = float(t_s.min())
            self._stride = 1
            self._clear()
        self._newest_stamp_ns = max(self._newest_stamp_ns, stamp_ns)
        closed = []
        values = (columns.x, columns.y, columns.u, columns.v, columns.weight)
        # The flow node's messages are in time order: then a window ends at one index
        # (slices, no copies).
        in_order = len(t_s) < 2 or bool((t_s[1:] >= t_s[:-1]).all())
        while True:
            end_s = self._start_s + self.window_s
            if in_order:
                split = int(t_s.searchsorted(end_s))
                if split == len(t_s):
                    self._append(values)
                    return closed
                self._append(tuple(None if a is None else a[:split] for a in values))
                t_s = t_s[split:]
                values = tuple(None if a is None else a[split:] for a in values)
                first_s = float(t_s[0])
            else:
                inside = t_s < end_s
                if inside.all():
                    self._append(values)
                    return closed
                self._append(tuple(None if a is None else a[inside] for a in values))
                later = ~inside
                t_s = t_s[later]
                values = tuple(None if a is None else a[later] for a in values)
                first_s = float(t_s.min())
            closed.append(self._close(end_s, frame_id, now_s))
            if first_s >= end_s + self.window_s:
                self.gaps += 1
                self._start_s = first_s  # no empty windows across a gap
            else:
                self._start_s = end_s

    def _append(self, values):
        count = len(values[0])
        if count == 0:
            return
        phase = -self._received % self._stride
        self._received += count
        chunk = tuple(None if a is None else a[phase::self._stride] for a in values)
        self._chunks.append(chunk)
        self._kept += len(chunk[0])
        if self._kept > self.keep_flows:
            # Every other kept flow: the same even subsample as a doubled stride from the start.
            merged = self._merged()
            self._chunks = [tuple(None if a is None else a[::2] for a in merged)]
            self._kept = len(self._chunks[0][0])
            self._stride *= 2

    def _merged(self):
        columns = []
        for index in range(5):
            parts = [chunk[index] for chunk in self._chunks]
            if any(part is None for part in parts):
                columns.append(None)
            else:
                columns.append(np.concatenate(parts) if parts else np.empty(0, np.float32))
        return columns

    def _close(self, end_s: float, frame_id: str, now_s: float) -> FlowWindow:
        x, y, u, v, weight = self._merged()
        centre_s = self._start_s + self.window_s / 2
        window = FlowWindow(
            t0_s=self._origin_ns * 1e-9 + self._start_s, t1_s=self._origin_ns * 1e-9 + end_s,
            stamp_ns=self._origin_ns + int(round(centre_s * 1e9)), x=x, y=y, u=u, v=v,
            weight=weight, received_flows=self._received, frame_id=frame_id,
            closed_s=now_s, generation=self.time_resets)
        # The next window starts with half the stride: it adapts down when the rate drops.
        self._stride = max(1, self._stride // 2)
        self._clear()
        return window


class Counters(PeriodCounters):
    """Totals and per-period counts shared by the stream's threads (one lock)."""

    NAMES = ('messages', 'flows', 'windows', 'estimates', 'undetermined_windows',
             'sparse_windows', 'windows_without_camera', 'windows_without_gyro',
             'dropped_windows', 'failed_windows', 'bad_flow_messages', 'bad_camera_infos',
             'bad_imu_messages', 'camera_changes', 'gaps', 'time_resets', 'imu_resets',
             'window_flows_received', 'window_flows_used', 'flows_with_bad_times')

    def __init__(self):
        self._compute_ms = collections.deque(maxlen=LATENCY_SAMPLES)
        self._latency_ms = collections.deque(maxlen=LATENCY_SAMPLES)
        self._cpu_s = 0.0
        super().__init__()

    def add_window_timing(self, compute_ms: float, latency_ms: float, cpu_s: float):
        with self._lock:
            self._compute_ms.append(compute_ms)
            self._latency_ms.append(latency_ms)
            self._cpu_s += cpu_s

    def _reset_period(self):
        self._compute_ms.clear()
        self._latency_ms.clear()
        self._cpu_s = 0.0

    def take_period(self) -> dict:
        """Return rates, timing percentiles and CPU share since the previous call, totals."""
        elapsed_s, period, totals, (compute, latency, cpu_s) = self._take(lambda: (
            np.array(self._compute_ms, np.float64), np.array(self._latency_ms, np.float64),
            self._cpu_s))
        return {
            'elapsed_s': elapsed_s, 'period': period, 'totals': totals,
            'flows_per_s': period['flows'] / elapsed_s,
            'estimates_per_s': period['estimates'] / elapsed_s,
            'compute_p50_ms': percentile(compute, 50), 'compute_p99_ms': percentile(compute, 99),
            'latency_p50_ms': percentile(latency, 50), 'latency_p99_ms': percentile(latency, 99),
            'estimator_cpu_percent': 100.0 * cpu_s / elapsed_s,
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
    expected and not logged).
    """

    def __init__(self, config: dict, publish: Callable, log: Callable = lambda *args: None,
                 alive: Callable[[], bool] = lambda: True):
        check_egomotion_config(config)
        self.config = config
        self._publish = publish
        self._log = log
        self._throttled = Throttle(log)
        self._alive = alive
        self.counters = Counters()
        self.windows = FlowWindows(config['window_s'], config['max_flows'])
        self._estimator_config = estimator_config(config)
        self._gyro_ready = threading.Condition()  # guards the gyro buffer; add_gyro notifies
        self._make_gyro = lambda: GyroBuffer(
            rotation_cam_imu=np.array(rotation_from_quaternion(config['imu_rotation_xyzw'])),
            time_offset_s=float(config['imu_time_offset_s']), max_age_s=GYRO_HISTORY_S)
        self._gyro = self._make_gyro()
        self._newest_imu_s = None   # IMU clock [s]
        self._imu_arrival_s = None  # time.monotonic() of the last add_gyro
        self.imu_samples = 0
        # 'gyro', 'flow' or None (no window yet): where the last window's omega came from.
        self.omega_source = None
        # (camera, its EgomotionEstimator) or None: one reference, swapped whole, so that the
        # estimator thread never pairs a camera with another camera's estimator.
        self._calibrated = None
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

    def set_camera(self, camera) -> bool:
        """
        Use this CameraModel from the next window on; return False when it is unchanged.

        Raises ValueError naming the size when it exceeds max_sensor_width_px or
        max_sensor_height_px (the tables' memory is bounded by those, not by a message).

        The estimator's per-pixel tables are built here, on the caller's thread (~20 ms for
        346 x 260 pixels, ~50 ms for 640 x 480), not by the estimator thread on its next
        window, where they held up the windows behind it until the queue dropped some. Until
        they are ready, windows keep the previous calibration.
        """
        max_width, max_height = (self.config['max_sensor_width_px'],
                                 self.config['max_sensor_height_px'])
        if camera.width > max_width or camera.height > max_height:
            raise ValueError(f'camera size {camera.width}x{camera.height} px exceeds '
                             f'max_sensor_width_px x max_sensor_height_px ({max_width}x'
                             f'{max_height} px)')
        current = self.camera
        if current is not None and (
                current.width == camera.width and current.height == camera.height
                and current.distortion_model == camera.distortion_model
                and np.array_equal(current.K, camera.K) and np.array_equal(current.D, camera.D)):
            return False
        self._calibrated = (camera, EgomotionEstimator(camera, self._estimator_config))
        self.counters.add(camera_changes=1)
        return True

    def add_gyro(self, t_s, omega_rad_s):
        """Add IMU samples: t_s (G,) IMU time [s], omega_rad_s (G, 3) in the IMU frame."""
        t_s = np.atleast_1d(np.asarray(t_s, np.float64))
        omega_rad_s = np.asarray(omega_rad_s, np.float64).reshape(-1, 3)
        with self._gyro_ready:
            if self._newest_imu_s is not None and t_s.min() < self._newest_imu_s - 0.1:
                self._gyro = self._make_gyro()  # IMU time went back (bag loop): start again
                self.counters.add(imu_resets=1)
                self._newest_imu_s = None
            self._gyro.add(t_s, omega_rad_s)
            newest = float(t_s.max())
            self._newest_imu_s = newest if self._newest_imu_s is None else max(
                self._newest_imu_s, newest)
            self._imu_arrival_s = time.monotonic()
            self.imu_samples += len(t_s)
            self._gyro_ready.notify_all()

    def add_flow(self, stamp_ns: int, columns: FlowColumns, frame_id: str = ''):
        """Add one ~/flow message; queue the windows it closes."""
        windows = self.windows
        gaps, resets, bad_times = windows.gaps, windows.time_resets, windows.bad_times
        closed = windows.add(stamp_ns, columns, frame_id)
        self.counters.add(messages=1, flows=len(columns), gaps=windows.gaps - gaps,
                          time_resets=windows.time_resets - resets,
                          flows_with_bad_times=windows.bad_times - bad_times)
        if windows.bad_times != bad_times:
            self._throttled('warning', f'~/flow message with {windows.bad_times - bad_times} '
                            f'flow(s) whose t is not finite or beyond {MAX_FLOW_T_S:g} s of the '
                            'header stamp: dropped')
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
        """Stop the estimator thread (idempotent); queued windows are dropped."""
        with self._wake:
            self._stop = True
            self._wake.notify()
        with self._gyro_ready:
            self._gyro_ready.notify_all()
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
        if len(window) < self.config['min_flows']:
            self.counters.add(sparse_windows=1)
            return
        cpu_start_s, start_s = time.thread_time(), time.perf_counter()
        estimator = calibrated[1]
        if window.generation != self._estimator_generation:
            estimator.reset()  # time jumped back: the last direction says nothing
        self._estimator_generation = window.generation
        omega_rad_s = self._gyro_mean(window) if self.config['use_imu'] else None
        source = 'gyro' if omega_rad_s is not None else 'flow'
        if omega_rad_s is None:
            self.counters.add(windows_without_gyro=1)
        if source != self.omega_source:
            # Each change of source is logged, at most once a minute (it can flicker at the
            # edge of the IMU's coverage); /diagnostics always says which is used.
            if source == 'flow' and self.config['use_imu']:
                self._throttled('warning', 'no ~/imu samples cover the flow window: the '
                                'angular velocity is estimated from the flow', period_s=60.0)
            elif source == 'gyro':
                self._throttled('info', 'angular velocity from the gyroscope of ~/imu',
                                period_s=60.0)
            self.omega_source = source
        estimate = estimator.estimate(window.x, window.y, window.u, window.v,
                                      weight=window.weight, omega_rad_s=omega_rad_s,
                                      t_s=(window.t0_s + window.t1_s) / 2)
        compute_ms = (time.perf_counter() - start_s) * 1e3
        self.counters.add(window_flows_received=window.received_flows,
                          window_flows_used=int(estimate.num_flows))
        if not all(map(math.isfinite, estimate.direction)):
            self.counters.add(undetermined_windows=1)
        else:
            try:
                self._publish(estimate, window)
            except Exception:  # noqa: B902 - publishing fails once the node shuts down
                if self._alive():
                    raise
                return
            self.counters.add(estimates=1)
        self.counters.add_window_timing(
            compute_ms, (time.monotonic() - window.closed_s) * 1e3,
            time.thread_time() - cpu_start_s)

    def _gyro_mean(self, window: FlowWindow):
        """
        Mean gyroscope rate over the window (camera frame), or None.

        While ~/imu delivers (a sample within the last second) but not yet past the window's
        end, wait up to imu_max_wait_s for it: IMU messages can arrive after the flow.
        """
        offset_s = float(self.config['imu_time_offset_s'])

        def covered():
            return self._stop or (self._newest_imu_s is not None
                                  and self._newest_imu_s + offset_s >= window.t1_s)
        with self._gyro_ready:
            live = (self._imu_arrival_s is not None
                    and time.monotonic() - self._imu_arrival_s < 1.0)
            if live and not covered():
                self._gyro_ready.wait_for(covered, timeout=self.config['imu_max_wait_s'])
            mean = self._gyro.mean(window.t0_s, window.t1_s)
        if mean is None:
            return None
        mean = np.asarray(mean, np.float64)
        return mean if mean.shape == (3,) and all(map(math.isfinite, mean)) else None
