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

"""The 3D simulator: exact per-event flow and depth, FOE, time to contact, gyro, files, CLI."""

import math

import numpy as np
import pytest

from veckm_flow_ros.core.camera import CameraModel
from veckm_flow_ros.learning import simulate, simulate3d
from veckm_flow_ros.learning.simulate3d import Trajectory

WIDTH, HEIGHT = 64, 48


def _sequence(trajectory, seed=1, duration_s=0.04, **kwargs):
    scene = simulate3d.make_scene3d(trajectory, seed=seed, width=WIDTH, height=HEIGHT, **kwargs)
    return scene, simulate3d.simulate3d(scene, duration_s, seed=seed)


def _signal(sequence):
    """Events that are not noise and that see a surface (not the sky)."""
    return ~sequence.is_noise & np.isfinite(sequence.depth_m)


def test_same_seed_same_sequence_and_other_seed_differs():
    _, first = _sequence('accelerating', seed=4, duration_s=0.02)
    _, second = _sequence('accelerating', seed=4, duration_s=0.02)
    _, other = _sequence('accelerating', seed=5, duration_s=0.02)
    assert len(first) > 100
    for name in ('t_ns', 'x', 'y', 'p'):
        np.testing.assert_array_equal(getattr(first.events, name), getattr(second.events, name))
    for name in ('flow_px_s', 'depth_m', 'is_noise', 'at_occlusion', 'gyro_rad_s', 'gt_v_m_s'):
        np.testing.assert_array_equal(getattr(first, name), getattr(second, name))
    assert len(other) != len(first) or not np.array_equal(other.events.x, first.events.x)


@pytest.mark.parametrize('trajectory, distortion', [
    ('constant', 'none'), ('accelerating', 'none'), ('turning', 'plumb_bob'),
    ('approach', 'equidistant')])
def test_event_flow_is_the_derivative_of_the_projected_surface_point(trajectory, distortion):
    # Independent of the motion-field formula: the 3D point that the event's pixel sees is
    # projected at t -+ h with the integrated camera pose and the camera model (distortion).
    scene, sequence = _sequence(trajectory, distortion=distortion)
    signal = _signal(sequence)
    assert signal.sum() > 100
    t_s = sequence.events.t_ns[signal] * 1e-9
    index = sequence.events.y[signal].astype(np.int64) * WIDTH + sequence.events.x[signal]
    depth, surface = scene.cast(t_s, index)
    assert (surface >= 0).all()
    # Depth at the (rounded) event time equals the stored one.
    np.testing.assert_allclose(sequence.depth_m[signal], depth, rtol=1e-4)
    point = scene.point(t_s, index, depth)
    np.testing.assert_allclose(scene.project(t_s, point), np.stack(
        [sequence.events.x[signal], sequence.events.y[signal]], 1), atol=1e-6)
    h = 1e-5
    finite_difference = (scene.project(t_s + h, point) - scene.project(t_s - h, point)) / (2 * h)
    flow = sequence.flow_px_s[signal].astype(np.float64)
    error = np.abs(finite_difference - flow)
    assert error.max() < 1e-3 + 1e-5 * np.abs(flow).max(), error.max()
    assert np.median(np.hypot(*flow.T)) > 5.0  # the camera moves


def test_motion_field_signs_match_the_contract():
    # Forward motion expands the image away from the centre; a rotation about +y moves the
    # image centre towards -x; sideways motion moves near points the other way.
    dx, dy = simulate3d.motion_field(np.array([0.2]), np.array([-0.1]), np.array([0.5]),
                                     [0, 0, 1.0], [0, 0, 0])
    np.testing.assert_allclose([dx[0], dy[0]], [0.1, -0.05])
    dx, dy = simulate3d.motion_field(np.array([0.0]), np.array([0.0]), np.array([0.0]),
                                     [0, 0, 0], [0, 1.0, 0])
    np.testing.assert_allclose([dx[0], dy[0]], [-1.0, 0.0])
    dx, dy = simulate3d.motion_field(np.array([0.0]), np.array([0.0]), np.array([1.0]),
                                     [1.0, 2.0, 0], [0, 0, 0])
    np.testing.assert_allclose([dx[0], dy[0]], [-1.0, -2.0])


def test_approach_flow_vanishes_at_the_foe_and_is_radial():
    scene = simulate3d.make_scene3d('approach', seed=2, width=WIDTH, height=HEIGHT,
                                    noise_hz=0.0)
    v = scene.trajectory.v0_m_s
    scene.trajectory = Trajectory('approach', v, np.zeros(3), np.zeros(3), np.zeros(3))
    sequence = simulate3d.simulate3d(scene, 0.05, seed=2)
    foe = sequence.foe_at([0.0, 0.05])
    np.testing.assert_allclose(foe[0], foe[1])
    np.testing.assert_allclose(foe[0], scene.camera.project(v[0] / v[2], v[1] / v[2]))
    assert 0 <= foe[0, 0] < WIDTH and 0 <= foe[0, 1] < HEIGHT
    signal = _signal(sequence)
    x = sequence.events.x[signal].astype(np.float64)
    y = sequence.events.y[signal].astype(np.float64)
    flow = sequence.flow_px_s[signal].astype(np.float64)
    # Pure translation: flow = (p - FOE) v_z / Z (pinhole, pixels), zero at the FOE.
    depth = sequence.depth_m[signal].astype(np.float64)
    expected = np.stack([x - foe[0, 0], y - foe[0, 1]], 1) * (v[2] / depth)[:, None]
    np.testing.assert_allclose(flow, expected, rtol=1e-4, atol=1e-3)
    # The motion field of the whole image is smallest next to the FOE.
    _, depth_image, _ = scene.render(0.0)
    speed = np.hypot(*np.moveaxis(scene.pixel_flow(depth_image, 0.0), 2, 0))
    row, column = np.unravel_index(np.argmin(speed), speed.shape)
    assert math.hypot(column - foe[0, 0], row - foe[0, 1]) < 1.5


def test_approach_time_to_contact_decreases_with_time():
    scene = simulate3d.make_scene3d('approach', seed=3, width=WIDTH, height=HEIGHT)
    ttc_start = scene.ttc_image_s(0.0)
    ttc_later = scene.ttc_image_s(0.2)
    wall = scene.render(0.0)[2] == 1  # the front wall, which the camera approaches
    assert wall.mean() > 0.3
    assert 0.5 < np.nanmedian(ttc_start[wall]) < 3.5
    np.testing.assert_allclose(np.nanmedian((ttc_start - ttc_later)[wall]), 0.2, atol=0.03)
    sequence = simulate3d.simulate3d(scene, 0.02, seed=3)
    signal = _signal(sequence)
    v_z = sequence.twist_at(sequence.events.t_ns[signal] * 1e-9)[0][:, 2]
    np.testing.assert_allclose(sequence.ttc_s[signal], sequence.depth_m[signal] / v_z,
                               rtol=1e-5)
    assert np.isnan(sequence.ttc_s[sequence.is_noise]).all()


@pytest.mark.parametrize('trajectory', simulate3d.TRAJECTORIES)
def test_full_size_image_speeds_are_in_the_documented_range(trajectory):
    scene = simulate3d.make_scene3d(trajectory, seed=7)
    assert scene.camera.width == 346 and abs(scene.camera.K[0, 0] - 250) < 1e-9
    for t_s in (0.0, 0.5):
        _, depth, surface = scene.render(t_s)
        assert (surface >= 0).mean() > 0.5
        assert np.nanmin(depth) > 0.3
        speed = np.hypot(*np.moveaxis(scene.pixel_flow(depth, t_s), 2, 0))
        summary = (t_s, np.median(speed), speed.max())
        assert 50 <= np.median(speed) and speed.max() <= 2000, summary
    v, omega = scene.trajectory.twist([0.0, 0.5])
    if trajectory == 'turning':
        assert np.abs(omega[:, 1]).min() >= 1.5
    if trajectory == 'accelerating':
        assert np.linalg.norm(v[1]) > 2 * np.linalg.norm(v[0])


def test_event_count_noise_and_ground_truth_columns():
    noise_hz = 2.0
    scene, sequence = _sequence('turning', seed=6, duration_s=0.05, noise_hz=noise_hz)
    n_noise = int(sequence.is_noise.sum())
    expected = noise_hz * WIDTH * HEIGHT * 0.05
    assert abs(n_noise - expected) < 5 * math.sqrt(expected)
    assert len(sequence) > 3 * n_noise
    assert np.isnan(sequence.flow_px_s[sequence.is_noise]).all()
    assert np.isnan(sequence.depth_m[sequence.is_noise]).all()
    assert np.isfinite(sequence.flow_px_s[~sequence.is_noise]).all()
    depth = sequence.depth_m[~sequence.is_noise]
    assert (depth > 0).all()
    assert 0.0 < sequence.at_occlusion.mean() < 0.5
    assert not sequence.at_occlusion[sequence.is_noise].any()
    assert np.all(np.diff(sequence.events.t_ns) >= 0)
    assert (sequence.events.t_ns % 1000 == 0).all()
    assert sequence.events.x.max() < WIDTH and sequence.events.y.max() < HEIGHT
    # Ground-truth twist at 1 kHz over the whole sequence.
    assert len(sequence.gt_t_s) == 51
    v, omega = scene.trajectory.twist(sequence.gt_t_s)
    np.testing.assert_array_equal(sequence.gt_v_m_s, v)
    np.testing.assert_array_equal(sequence.gt_omega_rad_s, omega)


def test_gyro_has_the_documented_bias_and_noise():
    gyro = simulate3d.GyroConfig(rate_hz=10000.0, noise_density_rad_s_sqrt_hz=1e-3,
                                 bias_sigma_rad_s=0.02)
    scene = simulate3d.make_scene3d('turning', seed=8, width=32, height=24, gyro=gyro)
    sequence = simulate3d.simulate3d(scene, 0.1, seed=8)
    assert len(sequence.gyro_t_s) == 1001
    np.testing.assert_allclose(np.diff(sequence.gyro_t_s), 1e-4)
    np.testing.assert_array_equal(sequence.gyro_t_s, sequence.gt_t_s)
    error = sequence.gyro_rad_s - sequence.gt_omega_rad_s
    bias = np.array(sequence.description['gyro_bias_rad_s'])
    sigma = 1e-3 * math.sqrt(10000.0)
    assert sequence.description['gyro_noise_sigma_rad_s'] == pytest.approx(sigma)
    np.testing.assert_allclose(error.mean(0), bias, atol=4 * sigma / math.sqrt(1001))
    np.testing.assert_allclose(error.std(0), sigma, rtol=0.15)
    assert np.abs(bias).max() > 1e-4


def test_gyro_in_a_rotated_imu_frame_on_a_shifted_clock():
    # 90 degrees about the camera's z: IMU x = camera y, IMU y = -camera x.
    rotation = (0.0, -1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0)
    gyro = simulate3d.GyroConfig(noise_density_rad_s_sqrt_hz=0.0, bias_sigma_rad_s=0.0,
                                 rotation_cam_imu=rotation, time_offset_s=0.002)
    scene = simulate3d.make_scene3d('turning', seed=8, width=16, height=12, gyro=gyro)
    sequence = simulate3d.simulate3d(scene, 0.02, seed=8)
    np.testing.assert_allclose(sequence.gyro_t_s, sequence.gt_t_s - 0.002)
    omega = sequence.gt_omega_rad_s
    np.testing.assert_allclose(sequence.gyro_rad_s[:, 0], omega[:, 1])
    np.testing.assert_allclose(sequence.gyro_rad_s[:, 1], -omega[:, 0])
    np.testing.assert_allclose(sequence.gyro_rad_s[:, 2], omega[:, 2])
    np.testing.assert_allclose(sequence.gyro_rad_s @ np.reshape(rotation, (3, 3)).T, omega,
                               atol=1e-15)
    with pytest.raises(ValueError, match='rotation_cam_imu must be a 3x3 rotation'):
        simulate3d.GyroConfig(rotation_cam_imu=(1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, -1.0))


def test_distortion_changes_the_image_not_the_world():
    pinhole, _ = _sequence('turning', seed=9, duration_s=0.005)
    distorted = simulate3d.make_scene3d('turning', seed=9, width=WIDTH, height=HEIGHT,
                                        distortion='plumb_bob')
    assert distorted.camera.has_distortion and not pinhole.camera.has_distortion
    # Same world and trajectory; a pixel of the distorted camera sees what the pinhole camera
    # sees along the same ray.
    x, y = distorted.camera.normalize(np.array([5.0, 40.0]), np.array([7.0, 30.0]))
    u, v = pinhole.camera.project(x, y)
    assert np.abs(u - np.round(u)).max() > 1e-3  # different pixels: distortion acts
    ray = np.stack([x, y, np.ones(2)], 1)
    depth_pinhole = simulate3d.intersect(pinhole.planes, np.zeros(3), ray)[0]
    depth_distorted = distorted.cast(np.zeros(2), np.array([7 * WIDTH + 5, 30 * WIDTH + 40]))[0]
    np.testing.assert_allclose(depth_distorted, depth_pinhole, rtol=1e-12)


def test_npz_round_trip_and_2d_reader(tmp_path):
    _, sequence = _sequence('approach', seed=10, duration_s=0.02, distortion='equidistant')
    path = tmp_path / 'seq.npz'
    simulate3d.save_npz3d(sequence, path)
    loaded = simulate3d.load_npz3d(path)
    for name in ('t_ns', 'x', 'y', 'p'):
        np.testing.assert_array_equal(getattr(loaded.events, name),
                                      getattr(sequence.events, name))
    for name in ('flow_px_s', 'is_noise', 'depth_m', 'at_occlusion', 'gt_t_s', 'gt_v_m_s',
                 'gt_omega_rad_s', 'gyro_t_s', 'gyro_rad_s'):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(sequence, name))
    assert loaded.camera.distortion_model == 'equidistant'
    np.testing.assert_array_equal(loaded.camera.K, sequence.camera.K)
    np.testing.assert_array_equal(loaded.camera.D, sequence.camera.D)
    assert loaded.description['trajectory']['kind'] == 'approach'
    np.testing.assert_allclose(loaded.foe_at([0.01]), sequence.foe_at([0.01]))
    # `veckm-flow evaluate` reads it as a 2D simulated sequence.
    flat = simulate.load_npz(path)
    np.testing.assert_array_equal(flat.flow_px_s, sequence.flow_px_s)
    # Slicing keeps the per-event columns together.
    part = loaded[10:20]
    assert len(part) == 10 and len(part.depth_m) == 10 and len(part.gt_t_s) == len(
        loaded.gt_t_s)
    gyro_path = tmp_path / 'gyro.npz'
    simulate3d.save_gyro_npz(sequence, gyro_path)
    with np.load(gyro_path) as gyro:
        np.testing.assert_array_equal(gyro['t'], sequence.gyro_t_s)
        np.testing.assert_array_equal(gyro['wy'], sequence.gyro_rad_s[:, 1])
    with pytest.raises(ValueError, match='not a 3D simulated sequence'):
        simulate.save_npz(simulate.SimulatedSequence(
            sequence.events, sequence.flow_px_s, sequence.is_noise, WIDTH, HEIGHT), path)
        simulate3d.load_npz3d(path)


def test_bad_arguments_name_the_value():
    with pytest.raises(ValueError, match="unknown trajectory 'spiral'"):
        simulate3d.make_scene3d('spiral')
    with pytest.raises(ValueError, match="unknown distortion 'fisheye'"):
        simulate3d.make_scene3d('constant', distortion='fisheye')
    with pytest.raises(ValueError, match='-1'):
        simulate3d.make_scene3d('constant', noise_hz=-1.0)
    scene = simulate3d.make_scene3d('constant', width=16, height=12)
    with pytest.raises(ValueError, match='duration must be positive'):
        simulate3d.simulate3d(scene, 0.0)
    # The approach reaches the wall after its time to contact (at most 3 s).
    scene = simulate3d.make_scene3d('approach', width=16, height=12)
    with pytest.raises(ValueError, match='camera reaches a wall'):
        simulate3d.simulate3d(scene, 4.0)


def test_heldout_specs_are_distinct_and_cover_the_trajectories():
    specs = simulate3d.heldout_3d_specs(8)
    assert len({spec['seed'] for spec in specs}) == 8
    assert {spec['trajectory'] for spec in specs} == set(simulate3d.TRAJECTORIES)
    assert min(spec['seed'] for spec in specs) >= simulate3d.HELDOUT_3D_SEED
    # A subset (approaches only) takes other seeds: none of the mixed set's scenes again.
    approaches = simulate3d.heldout_3d_specs(12, ['approach'])
    assert {spec['trajectory'] for spec in approaches} == {'approach'}
    assert len({spec['seed'] for spec in approaches}) == 12
    assert not {spec['seed'] for spec in approaches} & {
        spec['seed'] for spec in simulate3d.heldout_3d_specs(400)}
    assert simulate3d.heldout_3d_specs(8, reversed(simulate3d.TRAJECTORIES)) == specs
    with pytest.raises(ValueError, match="some of constant.*got 'walking'"):
        simulate3d.heldout_3d_specs(2, ['approach', 'walking'])
    with pytest.raises(ValueError, match='got none'):
        simulate3d.heldout_3d_specs(2, [])


def test_cli_writes_events_gyro_and_camera(tmp_path, capsys):
    from veckm_flow_ros.cli import main
    out = tmp_path / 'approach.npz'
    assert main(['simulate', '--scene', '3d', '--trajectory', 'approach', '--out', str(out),
                 '--width', '64', '--height', '48', '--duration-s', '0.03', '--seed', '3',
                 '--distortion', 'plumb_bob', '--gyro-rate-hz', '500']) == 0
    sequence = simulate3d.load_npz3d(out)
    assert len(sequence) > 50 and sequence.width == 64
    assert sequence.description['trajectory']['kind'] == 'approach'
    camera = CameraModel.from_yaml(tmp_path / 'approach_camera.yaml')
    np.testing.assert_array_equal(camera.K, sequence.camera.K)
    assert camera.distortion_model == 'plumb_bob' and camera.has_distortion
    with np.load(tmp_path / 'approach_gyro.npz') as gyro:
        assert len(gyro['t']) == 16 and set(gyro.files) >= {'t', 'wx', 'wy', 'wz'}
    named = tmp_path / 'g.npz'
    assert main(['simulate', '--scene', '3d', '--out', str(tmp_path / 'b.npz'), '--width',
                 '32', '--height', '24', '--duration-s', '0.01', '--gyro-out', str(named),
                 '--camera-out', str(tmp_path / 'cam.yaml'), '--bag',
                 str(tmp_path / 'bag')]) == 0
    assert named.exists() and (tmp_path / 'cam.yaml').exists()
    from veckm_flow_ros.eventio.bag import EventBag
    with EventBag(tmp_path / 'bag') as bag:
        topics = bag.topics()
    assert topics['/imu/data'].msgtype == 'sensor_msgs/msg/Imu'
    assert topics['/imu/data'].message_count == 11
    assert topics['/event_camera/camera_info'].message_count == 1
    assert topics['/event_camera/events'].message_count >= 1
    capsys.readouterr()


@pytest.mark.parametrize('argv, message', [
    (['--scene', 'translation', '--trajectory', 'approach'], '--trajectory applies to --scene 3d'),
    (['--scene', '3d', '--speed-px-s', '100'], '--speed-px-s applies to 2D scenes'),
    (['--scene', '3d', '--noise-hz', '-2'], '--noise-hz must be in 0..1000'),
    (['--scene', '3d', '--gyro-rate-hz', '1'], '--gyro-rate-hz must be in 10..100000'),
])
def test_cli_bad_options_give_a_message(tmp_path, capsys, argv, message):
    from veckm_flow_ros.cli import main
    assert main(['simulate', '--out', str(tmp_path / 'x.npz')] + argv) == 1
    assert message in capsys.readouterr().err
    assert not (tmp_path / 'x.npz').exists()


def test_motion_suite_windows_are_exact_normal_flows_with_their_ratio():
    """The motion suite: normal flows are the exact flow projected on the gradient."""
    from veckm_flow_ros.learning import motion_suite
    for kind, low, high in (('panning', 0.0, 0.1), ('sideways', 0.25, math.inf)):
        scene = motion_suite.make_motion_scene(kind, 1)  # odd seeds: 346 x 260
        assert (scene.width, scene.height) == (346, 260)
        windows = {}
        for flow in ('normal', 'full'):
            windows[flow] = motion_suite.window_flows(scene, 0.03, 0.06, np.random.default_rng(3),
                                                      count=500, flow=flow)
        normal, full = windows['normal'], windows['full']
        np.testing.assert_array_equal(normal.x_px, full.x_px)
        # (n . u) n: its dot product with the full flow u is its own squared length.
        np.testing.assert_allclose(np.sum(normal.flow_px_s * full.flow_px_s, axis=1),
                                   np.sum(normal.flow_px_s ** 2, axis=1), rtol=1e-9,
                                   atol=1e-9)
        assert low <= normal.ratio < high, (kind, normal.ratio)
        v, omega = scene.trajectory.twist(0.045)
        np.testing.assert_allclose(normal.v_m_s, v[0], atol=1e-9)
        np.testing.assert_allclose(normal.omega_rad_s, omega[0], atol=1e-9)
    t_s, rates, bias = motion_suite.gyro_samples(scene.trajectory, 0.1, 1)
    np.testing.assert_allclose(np.abs(bias), motion_suite.GYRO_BIAS_RAD_S)
    assert len(t_s) == 101 and rates.shape == (101, 3)
    assert abs(np.mean(rates - scene.trajectory.twist(t_s)[1], axis=0) - bias).max() < 0.002
    with pytest.raises(ValueError, match="unknown motion kind 'hover'"):
        motion_suite.make_motion_scene('hover', 0)
