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
The egomotion stream (no ROS) against lying flows, gyroscopes and calibrations.

Each case feeds valid windows of exact rigid-scene flow around the bad input: outputs keep
coming, nothing derived from refused input is published, every refusal is counted and named
in the log, and memory stays bounded by the parameters.
"""

import re
import time
import tracemalloc

import numpy as np
import pytest

from test_egomotion_stream import angle_deg, CAMERA, columns_of, Recorder, rigid_scene_flows
from veckm_flow_ros.core.camera import CameraModel
from veckm_flow_ros.core.egomotion import EgomotionEstimator
from veckm_flow_ros.eventio.flow_cloud import make_flow_points, pointcloud2_fields
from veckm_flow_ros.stream.egomotion_parameters import default_egomotion_config
from veckm_flow_ros.stream.egomotion_stream import EgomotionStream, read_flow_cloud

VELOCITY, OMEGA = np.array([0.3, -0.1, 1.0]), np.array([0.2, -0.3, 0.1])
T0_NS = 5_000_000_000
MESSAGE_S = 0.01


def message(index, count=1000, camera=CAMERA, velocity=VELOCITY, omega=OMEGA):
    """(stamp_ns, columns): message `index` of exact flow, t in -10..0 ms of the stamp."""
    x, y, u, v = rigid_scene_flows(camera, velocity, omega, count, seed=index)
    return T0_NS + int((index + 1) * MESSAGE_S * 1e9), columns_of(
        x, y, np.linspace(-MESSAGE_S, 0, count), u, v, np.ones(count))


def make_stream(camera=CAMERA, **parameters):
    parameters.setdefault('max_queued_windows', 100)
    recorder = Recorder()
    stream = EgomotionStream(default_egomotion_config(**parameters), recorder.publish,
                             recorder.log)
    if camera is not None:
        stream.set_camera(camera)
    return stream, recorder


def compute_all(stream):
    while stream._queue:
        stream.compute(stream._queue.popleft())


def logged(recorder, text):
    return [line for _, line in recorder.logs if text in line]


def refusal_lines(stream, recorder):
    """Return the 'refused input' lines: the first at once, the rest in one (flushed here)."""
    stream.refusals.flush(force=True)
    return logged(recorder, 'refused input')


def reference_directions(indices=range(10)):
    """Return the directions of the same windows without bad input (no gyroscope)."""
    stream, recorder = make_stream()
    for index in indices:
        stream.add_flow(*message(index))
    compute_all(stream)
    return [estimate.direction for estimate, _ in recorder.estimates]


# ---- 1. flow times ---------------------------------------------------------------------------


def test_one_flow_seconds_ahead_neither_moves_the_window_nor_silences_outputs():
    stream, recorder = make_stream()
    for index in range(30):  # 0.3 s: ten windows
        stamp_ns, columns = message(index)
        if index == 5:
            columns.t[500] = 9.9      # one flow of 1000 claims to be 9.9 s later
        if index == 12:
            columns.t[:] = np.linspace(-10.0, 10.0, len(columns))  # times spread over +-10 s
        stream.add_flow(stamp_ns, columns)
    compute_all(stream)
    totals = stream.counters.totals
    # Every window closed on time (the last one stays open) and gave an estimate whose stamp
    # lies within the flows' time.
    assert totals['windows'] == 9 and totals['estimates'] == 9, totals
    stamps = [window.stamp_ns for _, window in recorder.estimates]
    assert max(stamps) < T0_NS + 0.31e9 and np.allclose(np.diff(stamps), 30e6, atol=1e3)
    # Refused: t outside -max_flow_age_s (0.2 s) .. +window_s (0.03 s) of the stamp.
    spread = np.linspace(-10.0, 10.0, 1000)
    expected = 1 + int(np.count_nonzero((spread < -0.2) | (spread > 0.03)))
    assert totals['flows_with_bad_times'] == expected
    first, rest = refusal_lines(stream, recorder)
    assert first.endswith('1 flows with bad times (t = 9.9 s from the header stamp, allowed '
                          '-0.2..0.03 s)')
    assert rest.startswith(f'refused input: {expected - 1} flows with bad times (t = -10 s')


# ---- 2. weights ------------------------------------------------------------------------------


def test_a_weight_beyond_its_documented_range_is_refused():
    stream, recorder = make_stream()
    rng = np.random.default_rng(1)
    for index in range(10):
        stamp_ns, columns = message(index)
        wrong = rng.choice(len(columns), 10, replace=False)  # 1 %: wrong flows, weight 3e38
        columns.u[wrong], columns.v[wrong] = 5000.0, -5000.0
        columns.weight[wrong] = 3e38
        columns.weight[wrong[0]] = -1.0
        stream.add_flow(stamp_ns, columns)
    compute_all(stream)
    assert len(recorder.estimates) == 3
    # (With them the median error was 99.9 deg.)
    for (estimate, _), reference in zip(recorder.estimates, reference_directions()):
        assert angle_deg(estimate.direction, reference) < 1.0
    assert stream.counters.totals['flows_with_bad_weights'] == 100
    assert 'flows with bad weights (weight 3e+38, documented 0..1)' in refusal_lines(
        stream, recorder)[0]


# ---- 3. the gyroscope ------------------------------------------------------------------------


def _gyro(stream, omega, start_s=4.9, stop_s=5.4, frame_ids=None):
    t_s = np.arange(start_s, stop_s, 0.005)
    if frame_ids is None:
        stream.add_gyro(t_s, np.tile(omega, (len(t_s), 1)))
    else:
        stream.add_gyro(t_s, np.tile(omega, (len(t_s), 1)), [frame_ids] * len(t_s))


def test_an_absurd_gyroscope_is_refused_and_never_fires_the_stop_trigger():
    stream, recorder = make_stream()
    stream.add_flow(*message(0))  # the flow's time, that IMU stamps are checked against
    for rate in (1e300, 34.9, -40.0):  # corrupt, saturated at 2000 deg/s, beyond it
        _gyro(stream, [0.0, rate, 0.0])
    for index in range(1, 10):
        stream.add_flow(*message(index))
    compute_all(stream)
    assert len(recorder.estimates) == 3
    for estimate, _ in recorder.estimates:
        assert not estimate.min_ttc_s <= 0  # NaN or positive
        assert not estimate.omega_from_gyro and np.all(np.abs(estimate.omega_rad_s) < 2.0)
    totals = stream.counters.totals
    assert totals['imu_samples_out_of_range'] == 300 and stream.imu_samples == 0
    assert stream.omega_reason.startswith('~/imu samples refused: 100 samples out of range')
    assert logged(recorder, 'angular velocity estimated from the flow: ~/imu samples refused')


def test_samples_of_another_frame_are_refused():
    stream, recorder = make_stream(imu_frame_id='imu_link')
    stream.add_flow(*message(0))
    _gyro(stream, OMEGA, frame_ids='imu_link')
    _gyro(stream, -5 * OMEGA, start_s=4.9025, frame_ids='other_imu')  # interleaved
    for index in range(1, 10):
        stream.add_flow(*message(index))
    compute_all(stream)
    assert stream.counters.totals['imu_samples_other_frame'] == 100
    for estimate, _ in recorder.estimates:
        # the gyroscope less its bias estimate (at most 0.025 rad/s per axis)
        assert estimate.omega_from_gyro and np.allclose(estimate.omega_rad_s, OMEGA, atol=0.026)


def test_a_gyroscope_in_deg_s_disagrees_with_the_flow_and_is_not_used():
    stream, recorder = make_stream()
    stream.add_flow(*message(0))
    _gyro(stream, np.degrees(OMEGA))  # 11-17 "rad/s": within the full scale, 57x off
    for index in range(1, 30):
        stream.add_flow(*message(index))
    compute_all(stream)
    # The first window's check disagrees; the second confirms: from then on the flow.
    estimates = [estimate for estimate, _ in recorder.estimates]
    assert len(estimates) == 9
    assert all(not estimate.omega_from_gyro for estimate in estimates[1:])
    references = reference_directions(range(30))
    for estimate, reference in zip(estimates[2:], references[2:]):
        assert angle_deg(estimate.direction, reference) < 1.0
    assert stream.counters.totals['windows_gyro_disagrees'] >= 8
    assert not stream.gyro_monitor.trusted
    (line,) = [line for level, line in recorder.logs if level == 'error']
    assert "disagrees with the flow's rotation" in line and 'rates in deg/s' in line
    assert line.endswith('angular velocity from the flow')
    # A correct gyroscope agrees and is used from the first window on.
    stream, recorder = make_stream()
    stream.add_flow(*message(0))
    _gyro(stream, OMEGA)
    for index in range(1, 30):
        stream.add_flow(*message(index))
    compute_all(stream)
    assert all(estimate.omega_from_gyro for estimate, _ in recorder.estimates)
    assert stream.counters.totals['windows_gyro_disagrees'] == 0


def test_a_gyroscope_switching_to_deg_s_mid_stream_is_caught_within_two_windows():
    stream, recorder = make_stream()
    stream.add_flow(*message(0))
    _gyro(stream, OMEGA, stop_s=5.9)            # 30 windows of a correct gyroscope,
    _gyro(stream, np.degrees(OMEGA), start_s=5.9, stop_s=6.5)  # then deg/s
    for index in range(1, 150):
        stream.add_flow(*message(index))
        compute_all(stream)
    from_gyro = [estimate.omega_from_gyro for estimate, _ in recorder.estimates]
    switch = next(i for i, (_, window) in enumerate(recorder.estimates) if window.t1_s > 5.9)
    assert all(from_gyro[:switch])
    assert not any(from_gyro[switch + 2:]), from_gyro[switch:]  # two windows to be sure


# ---- 4. an IMU outage ------------------------------------------------------------------------


@pytest.mark.parametrize('case', ['silent', 'a day off'])
def test_a_dead_imu_is_not_waited_for(case):
    stream, recorder = make_stream(imu_max_wait_s=0.5)
    stream.add_flow(*message(0))
    if case == 'a day off':
        _gyro(stream, OMEGA, start_s=4.9 - 86400, stop_s=4.98 - 86400)
    else:
        _gyro(stream, OMEGA, stop_s=4.94)  # then ~/imu stops
        time.sleep(0.15)
    for index in range(1, 10):
        stream.add_flow(*message(index))
    start_s = time.monotonic()
    compute_all(stream)
    # Three windows, none waiting for samples that will not come (0.5 s each before).
    assert time.monotonic() - start_s < 0.4
    assert len(recorder.estimates) == 3
    assert not any(estimate.omega_from_gyro for estimate, _ in recorder.estimates)
    if case == 'a day off':
        assert stream.counters.totals['imu_samples_off_time'] == len(
            np.arange(4.9, 4.98, 0.005))
        assert 'imu samples off time (stamp -86400.110 s from the newest ~/flow stamp' in (
            refusal_lines(stream, recorder)[0])
    else:
        assert stream.omega_reason.startswith('~/imu silent for')


# ---- 5. calibrations that do not fit -----------------------------------------------------------


def test_a_calibration_of_another_size_than_the_flows_is_refused():
    big = CameraModel.pinhole(640, 480, 450.0)
    small = CameraModel.pinhole(320, 240, 225.0)
    stream, recorder = make_stream(camera=big)
    stream.add_flow(*message(0, camera=big))
    with pytest.raises(ValueError, match=r'camera size 320x240 px disagrees with the flows: '
                                         r'7\d % of the last ~/flow message lie outside it'):
        stream.set_camera(small)
    assert stream.camera is big
    # Flows that do not fit the calibration in use: their windows are skipped and counted.
    stream, recorder = make_stream(camera=small)
    for index in range(10):
        stream.add_flow(*message(index, camera=big))
    compute_all(stream)
    totals = stream.counters.totals
    assert not recorder.estimates and totals['windows_with_camera_mismatch'] == 3
    assert totals['flows_outside_image'] > 0.7 * 10_000
    assert logged(recorder, 'camera size 320x240 px disagrees with the flows')


@pytest.mark.parametrize('k, d, message_text', [
    ([1e-300, 0, 320, 0, 1e-300, 240, 0, 0, 1], [], r'focal length fx=1e-300 px is no lens'),
    ([1e300, 0, 320, 0, 1e300, 240, 0, 0, 1], [], r'focal length fx=1e\+300 px is no lens'),
    ([450, 0, 320, 0, 450, 240, 0, 0, 1], [1e6, 0, 0, 0, 0], r'beyond \+-1000'),
    ([450, 0, 320, 0, 450, 240, 0, 0, 1], [-900, 0, 0, 0, 0], r'without undistorted'),
    ([1350, 0, 320, 0, 300, 240, 0, 0, 1], [], r'fx / fy = 4.5 is no pixel aspect ratio'),
    ([450, 0, 9000, 0, 450, 240, 0, 0, 1], [], r'principal point cx=9000'),
])
def test_implausible_intrinsics_are_refused(k, d, message_text):
    with pytest.raises(ValueError, match=message_text):
        CameraModel.from_camera_info(640, 480, k, d, 'plumb_bob')


# ---- 6. the calibration's tables ---------------------------------------------------------------


def test_the_tables_are_built_in_bounded_memory_and_off_the_callers_thread():
    camera = CameraModel.pinhole(1024, 512, 500.0)  # eight blocks of rows
    tracemalloc.start()
    try:
        table = EgomotionEstimator(camera)._input.pixel_map
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    pixels = camera.width * camera.height
    # 32 bytes per pixel held, plus the temporaries of one block of rows (~16 MB); built at
    # once they took ~210 bytes per pixel (110 MB here).
    assert table.nbytes == 32 * pixels and peak < 32 * pixels + 24e6, peak / pixels
    stream, recorder = make_stream(camera=None)
    wide = CameraModel.pinhole(1024, 768, 500.0, d=[-0.2, 0.05, 0.0, 0.0, 0.0])
    start_s = time.monotonic()
    assert stream.set_camera(wide, block=False)
    returned_s = time.monotonic() - start_s
    assert stream.calibration_pending() and stream.camera is None
    deadline = time.monotonic() + 60
    while stream.calibration_pending() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert stream.camera is wide and time.monotonic() - start_s > 5 * returned_s
    assert logged(recorder, 'calibration in use: CameraModel(1024x768 px')
    stream.stop()


# ---- 7. huge clouds ----------------------------------------------------------------------------


def test_a_huge_cloud_is_thinned_to_the_cap_and_counted():
    count = 1_000_000
    x, y, u, v = rigid_scene_flows(CAMERA, VELOCITY, OMEGA, count, seed=3)
    points = make_flow_points(x, y, np.linspace(-0.01, 0, count), u, v)
    layout = pointcloud2_fields(points)
    columns = read_flow_cloud(layout['fields'], layout['point_step'], layout['data'],
                              width=count, max_points=100_000)
    assert len(columns) == 100_000 and columns.capped == 900_000
    # Copies: the message's buffer is not held by the window that keeps them.
    assert not np.shares_memory(columns.x, np.frombuffer(layout['data'], np.uint8))
    assert np.array_equal(columns.x, points['x'][::10])
    stream, recorder = make_stream(max_flows_per_message=100_000)
    stream.add_flow(T0_NS, columns)
    totals = stream.counters.totals
    assert totals['flows_over_message_cap'] == 900_000 and totals['flows'] == count


# ---- 8. silent stops -------------------------------------------------------------------------


def test_all_nan_flows_are_counted_and_named():
    stream, recorder = make_stream()
    for index in range(10):
        stamp_ns, columns = message(index)
        columns.u[:] = np.nan
        stream.add_flow(stamp_ns, columns)
    compute_all(stream)
    assert stream.counters.totals['flows_with_bad_values'] == 10_000
    assert not recorder.estimates
    first, rest = refusal_lines(stream, recorder)
    assert '1000 flows with bad values (u, v = nan, ' in first
    assert rest.startswith('refused input: 9000 flows with bad values')


def test_backwards_imu_stamps_are_named():
    stream, recorder = make_stream()
    stream.add_flow(*message(0))
    t_s = 5.0 - 0.001 * np.arange(50)  # running backwards, 1 ms a sample
    stream.add_gyro(t_s, np.tile(OMEGA, (50, 1)))
    assert stream.counters.totals['imu_samples_out_of_order'] == 49
    assert 'imu samples out of order (stamps not after the previous sample' in (
        refusal_lines(stream, recorder)[0])


@pytest.mark.parametrize('rates, message_text', [
    (np.nan, r'211 of 211 gyroscope samples are not finite or beyond \+-34.202 rad/s'),
    (np.degrees(0.7), r'211 of 211 .* first at t = -0.010000 s: \[40.1\d+, 0.0, 0.0\]'),
])
def test_the_cli_refuses_an_unusable_gyroscope_file(tmp_path, capsys, rates, message_text):
    from veckm_flow_ros.cli import main
    rng = np.random.default_rng(0)
    np.savez(tmp_path / 'events.npz', t=np.sort(rng.uniform(0.0, 0.12, 1000)),
             x=rng.integers(0, 346, 1000).astype(np.uint16),
             y=rng.integers(0, 260, 1000).astype(np.uint16),
             p=rng.integers(0, 2, 1000).astype(np.uint8), width=346, height=260)
    CAMERA.to_yaml(tmp_path / 'camera.yaml')
    t = np.arange(-0.01, 0.2, 0.001)
    np.savez(tmp_path / 'gyro.npz', t=t, wx=np.full_like(t, rates), wy=np.zeros_like(t),
             wz=np.zeros_like(t))
    assert main(['egomotion', '--events', str(tmp_path / 'events.npz'), '--camera-info',
                 str(tmp_path / 'camera.yaml'), '--gyro', str(tmp_path / 'gyro.npz'),
                 '--out', str(tmp_path / 'ego.npz'), '--quiet']) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith('veckm-flow egomotion: error: '), lines
    assert re.search(message_text, lines[0]), lines[0]
    assert not (tmp_path / 'ego.npz').exists()
