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

"""Camera intrinsics: distortion round trips, flow Jacobians, calibration YAML, bad values."""

import numpy as np
import pytest

from veckm_flow_ros.core.camera import CameraModel

CAMERAS = {
    'pinhole': CameraModel.pinhole(346, 260, 250.0),
    'plumb_bob': CameraModel.from_camera_info(
        640, 480, [420.0, 0.5, 318.0, 0.0, 418.0, 243.0, 0.0, 0.0, 1.0],
        [-0.28, 0.09, 0.001, -0.0005, -0.01], 'plumb_bob'),
    'equidistant': CameraModel.from_camera_info(
        640, 480, [300.0, 0.0, 320.0, 0.0, 300.0, 240.0, 0.0, 0.0, 1.0],
        [0.02, -0.01, 0.003, -0.001], 'equidistant'),
}


@pytest.mark.parametrize('name', sorted(CAMERAS))
def test_pixels_round_trip_through_normalized_coordinates(name):
    camera = CAMERAS[name]
    rng = np.random.default_rng(0)
    u = rng.uniform(0, camera.width - 1, 2000)
    v = rng.uniform(0, camera.height - 1, 2000)
    x, y = camera.normalize(u, v)
    assert np.all(np.isfinite(x)) and np.all(np.isfinite(y))
    u2, v2 = camera.project(x, y)
    np.testing.assert_allclose(u2, u, atol=1e-6)
    np.testing.assert_allclose(v2, v, atol=1e-6)


@pytest.mark.parametrize('name', sorted(CAMERAS))
def test_one_point_projects_as_an_array_does(name):
    """project_point (Python floats, one FOE per window) gives project()'s pixels."""
    camera = CAMERAS[name]
    rng = np.random.default_rng(2)
    for x, y in rng.uniform(-1.5, 1.5, (50, 2)):
        u, v = camera.project(np.array([x]), np.array([y]))
        point = camera.project_point(x, y)
        assert all(isinstance(value, float) for value in point)
        np.testing.assert_allclose(point, (u[0], v[0]), rtol=1e-14, atol=1e-9)


@pytest.mark.parametrize('name', sorted(CAMERAS))
def test_flow_vectors_follow_the_projection(name):
    # A normalized point moving at (dx, dy) for a short time dt moves its pixel by flow * dt.
    camera = CAMERAS[name]
    rng = np.random.default_rng(1)
    x = rng.uniform(-0.5, 0.5, 500)
    y = rng.uniform(-0.4, 0.4, 500)
    dx, dy = rng.normal(0, 1, 500), rng.normal(0, 1, 500)
    dt = 1e-6
    u0, v0 = camera.project(x, y)
    u1, v1 = camera.project(x + dx * dt, y + dy * dt)
    du, dv = camera.velocity_to_pixels(x, y, dx, dy)
    np.testing.assert_allclose(du, (u1 - u0) / dt, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(dv, (v1 - v0) / dt, rtol=1e-4, atol=1e-3)
    x2, y2, dx2, dy2 = camera.normalize_flow(u0, v0, du, dv)
    np.testing.assert_allclose(x2, x, atol=1e-9)
    np.testing.assert_allclose(dx2, dx, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(dy2, dy, rtol=1e-6, atol=1e-8)


def test_distortion_changes_the_rays():
    x, y = CAMERAS['plumb_bob'].normalize(np.array([5.0]), np.array([5.0]))
    x0, y0 = CAMERAS['plumb_bob'].pixel_to_distorted(np.array([5.0]), np.array([5.0]))
    # Barrel distortion (k1 < 0): a corner pixel sees further out than its distorted position.
    assert abs(x[0]) > abs(x0[0]) * 1.1 and abs(y[0]) > abs(y0[0]) * 1.1


@pytest.mark.parametrize('name', sorted(CAMERAS))
def test_calibration_yaml_round_trip(name, tmp_path):
    camera = CAMERAS[name]
    camera.to_yaml(tmp_path / 'camera.yaml')
    loaded = CameraModel.from_yaml(tmp_path / 'camera.yaml')
    assert (loaded.width, loaded.height) == (camera.width, camera.height)
    assert loaded.distortion_model == camera.distortion_model
    np.testing.assert_array_equal(loaded.K, camera.K)
    np.testing.assert_array_equal(loaded.D, camera.D)


K_OK = [300.0, 0.0, 160.0, 0.0, 300.0, 120.0, 0.0, 0.0, 1.0]


@pytest.mark.parametrize('args, message', [
    ((0, 240, K_OK, [], 'plumb_bob'), 'camera size must be positive, got 0x240'),
    ((320, 240, [0.0] * 9, [], 'plumb_bob'), 'focal lengths must be > 0 px, got fx=0'),
    ((320, 240, K_OK[:8], [], 'plumb_bob'), 'K needs 9 values, got 8'),
    ((320, 240, K_OK, [0.1, 0.2], 'plumb_bob'), 'plumb_bob needs 5 coefficients D, got 2'),
    ((320, 240, K_OK, [0.1] * 5, 'equidistant'), 'equidistant needs 4 coefficients D, got 5'),
    ((320, 240, K_OK, [], 'rational_polynomial'), 'unknown distortion model'),
    ((320, 240, K_OK[:8] + [2.0], [], 'plumb_bob'), 'must be [[fx, s, cx]'),
    ((320, 240, K_OK, [float('nan')] * 5, 'plumb_bob'), 'D are not finite'),
])
def test_bad_intrinsics_are_refused_with_the_value(args, message):
    with pytest.raises(ValueError) as error:
        CameraModel.from_camera_info(*args)
    assert message in str(error.value)


def test_bad_calibration_files_name_the_file(tmp_path):
    path = tmp_path / 'broken.yaml'
    path.write_text('image_width: 320\nimage_height: 240\n')
    with pytest.raises(ValueError, match='broken.yaml: camera calibration without '
                                         'camera_matrix'):
        CameraModel.from_yaml(path)
    path.write_text('image_width: 320\nimage_height: 240\ncamera_matrix: {data: [1, 2]}\n')
    with pytest.raises(ValueError, match='broken.yaml: camera matrix K needs 9 values'):
        CameraModel.from_yaml(path)
