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
The egomotion node's stream without ROS: flow cloud layout, windows, subsampling, resets.

The estimator itself (core/egomotion.py) has its own tests; here it runs on exact normal
flows of a rigid scene so that the plumbing (pixels, units, gyroscope frame and time) is
checked end to end.
"""

import math
import threading
import time

import numpy as np
import pytest

from veckm_flow_ros.core.camera import CameraModel
from veckm_flow_ros.eventio.flow_cloud import make_flow_points, pointcloud2_fields
from veckm_flow_ros.stream.egomotion_parameters import (default_egomotion_config,
                                                        EGOMOTION_PARAMETERS,
                                                        rotation_from_quaternion)
from veckm_flow_ros.stream.egomotion_stream import (check_egomotion_config, EgomotionStream,
                                                    FlowColumns, FlowWindows, read_flow_cloud)

CAMERA = CameraModel.pinhole(346, 260, 250.0)


def rigid_scene_flows(camera, velocity, omega_rad_s, count, seed=0):
    """Pixel positions and exact normal flows [px/s] of random points (depth 2-6 m)."""
    rng = np.random.default_rng(seed)
    x_px = rng.uniform(0, camera.width - 1, count)
    y_px = rng.uniform(0, camera.height - 1, count)
    x, y = camera.normalize(x_px, y_px)
    inverse_depth = 1.0 / rng.uniform(2.0, 6.0, count)
    vx, vy, vz = velocity
    wx, wy, wz = omega_rad_s
    dx = (x * vz - vx) * inverse_depth + x * y * wx - (1 + x * x) * wy + y * wz
    dy = (y * vz - vy) * inverse_depth + (1 + y * y) * wx - x * y * wy - x * wz
    u_px_s, v_px_s = camera.velocity_to_pixels(x, y, dx, dy)
    # Normal flow: the component along a random edge normal.
    angle = rng.uniform(0, np.pi, count)
    nx, ny = np.cos(angle), np.sin(angle)
    magnitude = u_px_s * nx + v_px_s * ny
    return x_px, y_px, magnitude * nx, magnitude * ny


def columns_of(x, y, t, u, v, weight=None):
    as32 = (lambda a: np.asarray(a, np.float32))
    return FlowColumns(as32(x), as32(y), as32(t), as32(u), as32(v),
                       None if weight is None else as32(weight))


def angle_deg(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.degrees(np.arccos(np.clip(a @ b / np.linalg.norm(a) / np.linalg.norm(b),
                                              -1, 1))))


# ---- parameters -----------------------------------------------------------------------------


def test_every_parameter_has_a_unit_or_range_and_a_sound_default():
    for spec in EGOMOTION_PARAMETERS:
        assert len(spec.description) > 20, spec.name
        if isinstance(spec.default, (int, float)) and not isinstance(spec.default, bool):
            assert spec.value_range is not None, spec.name
            assert spec.value_range[0] <= spec.default <= spec.value_range[1], spec.name
    check_egomotion_config(default_egomotion_config())


def test_config_yaml_mirrors_the_parameters(project_root):
    import yaml
    config = yaml.safe_load((project_root / 'config' / 'veckm_egomotion.yaml').read_text())
    values = config['/**']['ros__parameters']
    assert list(values) == [spec.name for spec in EGOMOTION_PARAMETERS]
    for spec in EGOMOTION_PARAMETERS:
        assert type(values[spec.name]) is type(spec.default), spec.name
        assert values[spec.name] == spec.default, spec.name


def test_bad_parameter_combinations_name_the_value():
    with pytest.raises(ValueError, match='imu_rotation_xyzw has zero length'):
        check_egomotion_config(default_egomotion_config(imu_rotation_xyzw=[0.0] * 4))
    with pytest.raises(ValueError, match=r'4 finite numbers.*\[0\.0, 1\.0\]'):
        check_egomotion_config(default_egomotion_config(imu_rotation_xyzw=[0.0, 1.0]))
    with pytest.raises(ValueError, match=r'min_flows \(5000\) must not exceed max_flows'):
        check_egomotion_config(default_egomotion_config(min_flows=5000))


def test_quaternion_rotation():
    # 90 degrees about z: x -> y.
    half = np.sqrt(0.5)
    rotation = np.array(rotation_from_quaternion([0.0, 0.0, half, half]))
    assert np.allclose(rotation @ [1, 0, 0], [0, 1, 0])
    assert np.allclose(rotation_from_quaternion([0, 0, 0, 2.0]), np.eye(3))  # normalised


# ---- the flow cloud -------------------------------------------------------------------------


def _cloud(points):
    layout = pointcloud2_fields(points)
    return layout['fields'], layout['point_step'], layout['data']


def test_reads_the_flow_nodes_layouts():
    points = make_flow_points([1, 2], [3, 4], [-0.002, 0.0], [10, 20], [-5, 5])
    columns = read_flow_cloud(*_cloud(points), width=2)
    assert columns.weight is None
    for name in ('x', 'y', 't', 'u', 'v'):
        assert np.array_equal(getattr(columns, name), points[name])
    points = make_flow_points([1, 2], [3, 4], [0.0, 0.0], [10, 10], [-5, -5],
                              validity=[0.75, np.nan])
    assert read_flow_cloud(*_cloud(points)).weight.tolist() == [0.75, 1.0]


def test_validity_field_weights_before_confidence():
    dtype = np.dtype([(name, '<f4') for name in ('x', 'y', 't', 'u', 'v', 'confidence',
                                                 'validity')])
    points = np.zeros(3, dtype)
    points['confidence'], points['validity'] = 0.9, [0.0, 0.5, 1.0]
    assert read_flow_cloud(*_cloud(points)).weight.tolist() == [0.0, 0.5, 1.0]


@pytest.mark.parametrize('names, formats, message', [
    (('x', 'y', 'u', 'v'), ['<f4'] * 4, r"without field\(s\) t: fields \('x', 'y', 'u', 'v'\)"),
    (('x', 'y', 't', 'u', 'v'), ['<f4', '<f4', '<f8', '<f4', '<f4'],
     "field 't' has datatype 8 x 1, expected float32"),
])
def test_wrong_fields_are_named(names, formats, message):
    points = np.zeros(2, np.dtype(list(zip(names, formats))))
    fields = [(name, points.dtype.fields[name][1], 8 if fmt == '<f8' else 7, 1)
              for name, fmt in zip(names, formats)]
    with pytest.raises(ValueError, match=message):
        read_flow_cloud(fields, points.dtype.itemsize, points.tobytes())


def test_inconsistent_sizes_are_named():
    fields, step, data = _cloud(make_flow_points([1, 2], [3, 4], [0, 0], [1, 1], [1, 1]))
    with pytest.raises(ValueError, match='says 3x1 points but its data holds 2'):
        read_flow_cloud(fields, step, data, width=3)
    with pytest.raises(ValueError, match=f'not a multiple of point_step {step}'):
        read_flow_cloud(fields, step, data[:-1])
    with pytest.raises(ValueError, match='big-endian'):
        read_flow_cloud(fields, step, data, is_bigendian=True)
    with pytest.raises(ValueError, match="field 'v' at byte 16 lies outside point_step 16"):
        read_flow_cloud(fields, 16, data[:32])


# ---- windows --------------------------------------------------------------------------------


def _stream_messages(rate_flows_s, duration_s, message_s=0.005, t0_ns=1_700_000_000_000_000_000,
                     seed=0):
    """Messages as the flow node publishes them: stamp = newest flow, t <= 0 (sorted)."""
    rng = np.random.default_rng(seed)
    per_message = int(rate_flows_s * message_s)
    for index in range(int(round(duration_s / message_s))):
        stamp_ns = t0_ns + int((index + 1) * message_s * 1e9)
        t = np.sort(rng.uniform(-message_s, 0, per_message))
        t[-1] = 0.0
        yield stamp_ns, columns_of(np.arange(per_message) % 300, np.zeros(per_message), t,
                                   np.ones(per_message), np.zeros(per_message))


def test_windows_cover_the_stream_and_subsample_evenly():
    windows = FlowWindows(window_s=0.03, max_flows=1000)
    closed = []
    total = 0
    for stamp_ns, columns in _stream_messages(1_000_000, 0.5):
        closed += windows.add(stamp_ns, columns, 'cam')
        total += len(columns)
    assert len(closed) == 16  # 0.5 s minus the open window
    starts = np.array([w.t0_s for w in closed])
    assert np.allclose(np.diff(starts), 0.03, atol=1e-6)
    assert all(abs(w.t1_s - w.t0_s - 0.03) < 1e-6 for w in closed)
    assert all(abs(w.stamp_ns * 1e-9 - (w.t0_s + 0.015)) < 1e-6 for w in closed)
    for window in closed:
        assert window.received_flows == pytest.approx(30_000, rel=0.01)
        assert 1000 <= len(window) <= 2000  # at most 2 max_flows kept, at least max_flows
        assert window.frame_id == 'cam'
    assert windows.gaps == 0 and windows.time_resets == 0
    # The kept flows are an even subsample: their pixel indices step by a constant stride.
    steps = np.diff(closed[5].x)
    assert len(set(np.round(steps[steps > 0]).tolist())) == 1


def test_slow_stream_keeps_every_flow():
    windows = FlowWindows(window_s=0.03, max_flows=4000)
    closed = []
    for stamp_ns, columns in _stream_messages(20_000, 0.2):
        closed += windows.add(stamp_ns, columns)
    assert closed and all(len(w) == w.received_flows for w in closed)


def test_gap_starts_the_next_window_at_the_next_flow():
    windows = FlowWindows(window_s=0.03, max_flows=1000)
    messages = list(_stream_messages(100_000, 0.1))
    for stamp_ns, columns in messages:
        windows.add(stamp_ns, columns)
    later_ns = messages[-1][0] + 2_000_000_000
    closed = windows.add(later_ns, columns_of([1], [1], [0.0], [1], [1]))
    closed += windows.add(later_ns + 40_000_000, columns_of([1], [1], [0.0], [1], [1]))
    assert windows.gaps == 1
    assert len(closed) == 2
    assert closed[1].t0_s == pytest.approx(later_ns * 1e-9, abs=1e-6)


def test_time_going_back_restarts_the_windows():
    windows = FlowWindows(window_s=0.03, max_flows=1000)
    messages = list(_stream_messages(100_000, 0.1))
    for stamp_ns, columns in messages:
        windows.add(stamp_ns, columns)
    for stamp_ns, columns in messages[:3]:  # a bag loop: the same stamps again
        assert windows.add(stamp_ns, columns) == []
    assert windows.time_resets == 1 and windows.dropped_flows > 0
    closed = []
    for stamp_ns, columns in messages[3:]:
        closed += windows.add(stamp_ns, columns)
    assert closed and closed[0].t0_s == pytest.approx(messages[0][0] * 1e-9 - 0.005, abs=1e-4)


# ---- the stream -----------------------------------------------------------------------------


class Recorder:

    def __init__(self):
        self.estimates = []
        self.logs = []

    def publish(self, estimate, window):
        self.estimates.append((estimate, window))

    def log(self, level, message):
        self.logs.append((level, message))


def _window_messages(camera, velocity, omega, t0_ns=5_000_000_000, windows=3, window_s=0.03,
                     count=3000):
    """Messages of `windows` windows of exact rigid-scene normal flow (one per 10 ms)."""
    messages = []
    for index in range(int(windows * window_s / 0.01) + 1):
        x, y, u, v = rigid_scene_flows(camera, velocity, omega, count // 3, seed=index)
        t = np.linspace(-0.01, 0, len(x))
        messages.append((t0_ns + int((index + 1) * 0.01 * 1e9), columns_of(x, y, t, u, v)))
    return messages


def test_stream_estimates_with_and_without_gyroscope():
    recorder = Recorder()
    # The IMU frame: z of the camera is x of the IMU (a quaternion of -90 deg about y).
    half = np.sqrt(0.5)
    config = default_egomotion_config(imu_rotation_xyzw=[0.0, -half, 0.0, half],
                                      imu_time_offset_s=0.5)
    rotation = np.array(rotation_from_quaternion(config['imu_rotation_xyzw']))
    stream = EgomotionStream(config, recorder.publish, recorder.log)
    velocity, omega = np.array([0.3, -0.1, 1.0]), np.array([0.2, -0.3, 0.1])
    messages = _window_messages(CAMERA, velocity, omega)
    for stamp_ns, columns in messages:
        stream.add_flow(stamp_ns, columns, 'cam')
    assert stream.counters.totals['windows'] == 0  # computed on the thread, not started
    window = stream._queue.popleft()
    stream.compute(window)
    assert stream.counters.totals['windows_without_camera'] == 1 and not recorder.estimates
    stream.set_camera(CAMERA)
    stream.compute(window)
    (estimate, published), = recorder.estimates
    assert published is window and not estimate.omega_from_gyro
    assert stream.counters.totals['windows_without_gyro'] == 1
    assert angle_deg(estimate.direction, velocity) < 10.0  # plumbing, not the estimator
    assert any('estimated from the flow' in message for _, message in recorder.logs)
    # Gyroscope samples in the IMU frame and clock (camera time = IMU time + 0.5 s).
    imu_t_s = np.arange(window.t0_s - 0.6, window.t1_s - 0.4, 0.005)
    stream.add_gyro(imu_t_s, np.tile(rotation.T @ omega, (len(imu_t_s), 1)))
    stream.compute(window)
    estimate = recorder.estimates[-1][0]
    assert estimate.omega_from_gyro and np.allclose(estimate.omega_rad_s, omega)
    assert angle_deg(estimate.direction, velocity) < 2.0
    # IMU time going back (bag loop) starts the gyroscope history again.
    stream.add_gyro(imu_t_s[:5] - 1.0, np.zeros((5, 3)))
    assert stream.counters.totals['imu_resets'] == 1
    stream.compute(window)
    assert not recorder.estimates[-1][0].omega_from_gyro


def test_stream_thread_drops_the_oldest_window_when_behind():
    recorder = Recorder()
    stream = EgomotionStream(default_egomotion_config(max_queued_windows=1), recorder.publish,
                             recorder.log)
    stream.set_camera(CAMERA)
    for stamp_ns, columns in _window_messages(CAMERA, (0, 0, 1.0), (0, 0, 0), windows=4):
        stream.add_flow(stamp_ns, columns)  # not started: windows wait in the queue
    assert stream.counters.totals['dropped_windows'] == 3
    stream.start()
    try:
        assert stream.drain(30.0)
    finally:
        stream.stop()
    assert stream.counters.totals['windows'] == 1 and len(recorder.estimates) == 1
    assert any('falls behind' in message for _, message in recorder.logs)


def test_set_camera_builds_the_estimator_so_windows_do_not_wait_for_it(monkeypatch):
    # Building the per-pixel tables on the estimator thread's first window held up the windows
    # behind it (the queue dropped them at every start): set_camera builds them, once per
    # calibration.
    from veckm_flow_ros.stream import egomotion_stream
    built = []
    real = egomotion_stream.EgomotionEstimator

    def counting(camera, config):
        built.append(camera.width)
        return real(camera, config)
    monkeypatch.setattr(egomotion_stream, 'EgomotionEstimator', counting)
    recorder = Recorder()
    stream = EgomotionStream(default_egomotion_config(), recorder.publish, recorder.log)
    assert stream.set_camera(CAMERA) and built == [346]
    assert not stream.set_camera(CameraModel.pinhole(346, 260, 250.0)) and built == [346]
    for stamp_ns, columns in _window_messages(CAMERA, (0.3, -0.1, 1.0), (0, 0, 0), windows=2):
        stream.add_flow(stamp_ns, columns)
    while stream._queue:
        stream.compute(stream._queue.popleft())
    assert built == [346] and len(recorder.estimates) == 2
    wider = CameraModel.pinhole(640, 480, 400.0)
    assert stream.set_camera(wider) and built == [346, 640] and stream.camera is wider


def test_sparse_window_publishes_nothing():
    recorder = Recorder()
    stream = EgomotionStream(default_egomotion_config(min_flows=200), recorder.publish,
                             recorder.log)
    stream.set_camera(CAMERA)
    # 50 flows per 10 ms message: 150 per 30 ms window.
    messages = _window_messages(CAMERA, (0, 0, 1.0), (0, 0, 0), count=150)
    for stamp_ns, columns in messages:
        stream.add_flow(stamp_ns, columns)
    stream.compute(stream._queue.popleft())
    assert stream.counters.totals['sparse_windows'] == 1 and not recorder.estimates


def test_estimator_waits_briefly_for_late_imu_samples():
    recorder = Recorder()
    config = default_egomotion_config(imu_max_wait_s=0.5, max_queued_windows=10)
    stream = EgomotionStream(config, recorder.publish, recorder.log)
    stream.set_camera(CAMERA)
    velocity, omega = np.array([0.3, -0.1, 1.0]), np.array([0.2, -0.3, 0.1])
    for stamp_ns, columns in _window_messages(CAMERA, velocity, omega, windows=4):
        stream.add_flow(stamp_ns, columns)
    window = stream._queue.popleft()
    stream.add_gyro(window.t0_s - 0.2 + 0.005 * np.arange(40), np.tile(omega, (40, 1)))
    # The rest of the window's samples arrive 50 ms after the estimate started.
    late_t_s = window.t0_s + 0.005 * np.arange(7)
    sender = threading.Timer(0.05, stream.add_gyro, (late_t_s, np.tile(omega, (7, 1))))
    start_s = time.monotonic()
    sender.start()
    stream.compute(window)
    sender.join()
    assert recorder.estimates[-1][0].omega_from_gyro
    assert 0.04 < time.monotonic() - start_s
    # A silent IMU (no sample for over a second) is not waited for: the third window lies
    # 60 ms past the last sample, beyond what the gyro buffer interpolates.
    stream._imu_arrival_s -= 2.0
    stream._queue.popleft()
    start_s = time.monotonic()
    stream.compute(stream._queue.popleft())
    assert time.monotonic() - start_s < 0.4
    assert not recorder.estimates[-1][0].omega_from_gyro
    assert stream.counters.totals['windows_without_gyro'] == 1


def test_a_waiting_window_asks_for_gyroscope_samples_until_they_come():
    """request_gyro is called again while the window waits (the node pokes its IMU thread)."""
    recorder, requests = Recorder(), []
    config = default_egomotion_config(imu_max_wait_s=0.5, max_queued_windows=10)
    velocity, omega = np.array([0.3, -0.1, 1.0]), np.array([0.2, -0.3, 0.1])

    def deliver_on_the_third_request():
        # The receive thread found nothing the first two times (the samples were late).
        requests.append(time.monotonic())
        if len(requests) == 3:
            stream.add_gyro(window.t0_s + 0.005 * np.arange(7), np.tile(omega, (7, 1)))
    stream = EgomotionStream(config, recorder.publish, recorder.log,
                             request_gyro=deliver_on_the_third_request)
    stream.set_camera(CAMERA)
    for stamp_ns, columns in _window_messages(CAMERA, velocity, omega, windows=4):
        stream.add_flow(stamp_ns, columns)
    window = stream._queue.popleft()
    stream.add_gyro(window.t0_s - 0.2 + 0.005 * np.arange(40), np.tile(omega, (40, 1)))
    start_s = time.monotonic()
    stream.compute(window)
    assert recorder.estimates[-1][0].omega_from_gyro
    assert len(requests) == 3 and time.monotonic() - start_s < 0.4, requests
    # Covered: no request.
    stream.add_gyro(window.t1_s + 0.005 * np.arange(20), np.tile(omega, (20, 1)))
    stream.compute(stream._queue.popleft())
    assert len(requests) == 3 and recorder.estimates[-1][0].omega_from_gyro


def test_corrupt_flow_times_are_dropped_not_waited_for():
    windows = FlowWindows(window_s=0.03, max_flows=1000)
    messages = list(_stream_messages(100_000, 0.1))
    closed = []
    for index, (stamp_ns, columns) in enumerate(messages):
        if index == 2:
            columns.t[:3] = [np.nan, 1e30, -np.inf]
        closed += windows.add(stamp_ns, columns)
    assert windows.bad_times == 3 and len(closed) == 3 and windows.gaps == 0
    # A header stamp going back counts one reset, also when its message is empty.
    assert windows.add(messages[0][0], columns_of([], [], [], [], [])) == []
    windows.add(messages[1][0], messages[1][1])
    assert windows.time_resets == 1


def test_time_reset_makes_the_estimator_forget_the_previous_window():
    recorder = Recorder()
    stream = EgomotionStream(default_egomotion_config(max_queued_windows=10), recorder.publish,
                             recorder.log)
    stream.set_camera(CAMERA)
    messages = _window_messages(CAMERA, (0.3, -0.1, 1.0), (0.2, -0.3, 0.1), windows=2)
    for stamp_ns, columns in messages + messages:  # the second pass: a bag loop
        stream.add_flow(stamp_ns, columns)
    generations = [window.generation for window in stream._queue]
    assert generations == [0, 0, 1, 1]
    stream.compute(stream._queue.popleft())
    resets = []
    estimator = stream._calibrated[1]
    original_reset = estimator.reset
    estimator.reset = lambda: (resets.append(len(recorder.estimates)), original_reset())
    while stream._queue:
        stream.compute(stream._queue.popleft())
    assert resets == [2] and len(recorder.estimates) == 4  # before the first after the loop


def test_cli_summary_counts_the_undetermined_reasons():
    """`veckm-flow egomotion` prints why windows have no direction (the npz keeps each)."""
    from veckm_flow_ros.cli.egomotion import summary
    from veckm_flow_ros.core.egomotion import EgomotionEstimate
    from veckm_flow_ros.offline.egomotion import estimates_to_arrays

    def estimate(reason):
        direction = np.full(3, np.nan) if reason else np.array([0.0, 0.0, 1.0])
        return EgomotionEstimate(0.0, 500, np.zeros(3), False, direction, np.full(2, np.nan),
                                 False, np.full((6, 8), np.nan, np.float32), math.nan, 1.0,
                                 undetermined=reason)
    arrays = estimates_to_arrays([estimate(reason) for reason in (
        '', 'rotation_dominated', 'rotation_dominated', 'too_few_flows')])
    assert list(arrays['undetermined']) == ['', 'rotation_dominated', 'rotation_dominated',
                                            'too_few_flows']
    text = summary(arrays, 2000)
    assert '4 (1 with a direction' in text
    assert '2 rotation_dominated, 1 too_few_flows' in text
    lines = summary(estimates_to_arrays([estimate('')]), 500).splitlines()
    assert [line.split()[1:] for line in lines if line.startswith('undetermined')] == [['none']]
