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
The egomotion estimator's stages against a short reference of its equations.

Also the extension's argument checks.

test/egomotion_reference.py writes docs/egomotion.md's equations directly: the window
preparation flow by flow from the camera model, the Huber weights, the cost (2) with omega
known and with omega eliminated, and their minimum by brute force over a dense direction
grid. Without Huber rounds after the first fit (robust_iterations 0) the solve's final
weights are those of its cost, so its direction must be that cost's minimum and its
explained share and omega the reference's at that direction; on exact flows of depths
constant per cell both solves must give the true motion.
"""

import math
import mmap
import pathlib
import re

import egomotion_reference as reference
import numpy as np
import pytest
from test_egomotion import (analytic_window, angle_deg, FISHEYE, PINHOLE, PLUMB_BOB,
                            random_motion)
from veckm_flow_ros import _egomotion
from veckm_flow_ros.core.camera import CameraModel
from veckm_flow_ros.core.egomotion import EgomotionConfig, EgomotionEstimator
from veckm_flow_ros.core.pixel_map import HUGE_PAGE_BYTES, huge_page_empty

# A calibration with skew (K[0, 1] != 0): pixel velocities are K2 J u, K2 not diagonal.
SKEWED = CameraModel.from_camera_info(346, 260, [250.0, 20.0, 173.0, 0.0, 250.0, 130.0, 0.0,
                                                 0.0, 1.0], [-0.3, 0.1, 1e-3, -1e-3, 0.0],
                                      'plumb_bob')
CAMERAS = (PINHOLE, PLUMB_BOB, FISHEYE, SKEWED)
# Exact flows, depth constant per cell: measured at most 0.0005 deg and 1.2e-6 rad/s (the
# search's last quadratic step); the bounds are 20x and 80x that.
MAX_EXACT_DEG = 0.01
MAX_EXACT_RAD_S = 1e-4
# The solves' directions against the brute-force minimum (its last grid spacing 0.026 deg):
# measured at most 0.018 deg, the cost never above the minimum's. The sign start refines its
# start only locally: measured up to 0.2 deg away, the cost 3.4e-6 of the total above.
MINIMUM_DEG = {False: 0.1, True: 0.5}
MINIMUM_SHARE = {False: 1e-8, True: 3e-5}


def input_cases(rng):
    """Windows of random settings, sizes and dtypes (uint16, int32, float32, strided, NaN)."""
    for trial in range(30):
        camera = CAMERAS[trial % 4]
        config = EgomotionConfig(max_flows=int(rng.choice([10, 999, 4000])),
                                 min_validity=float(rng.choice([0, 0.3])),
                                 flow_floor_px_s=float(rng.choice([0, 50])),
                                 slow_flow_px_s=float(rng.choice([0, 100])),
                                 cell_px=int(rng.choice([8, 32, 256])))
        v, omega = random_motion(rng)
        count = int(rng.choice([5, 300, 3001, 9999]))
        x, y, u, w, _ = analytic_window(camera, v, omega, count=count, seed=trial)
        weight = None
        if trial % 2:
            weight = rng.choice([0.0, 0.2, 1.0, np.nan, np.inf], size=count).astype(
                rng.choice([np.float32, np.float64]))
        if trial % 4 == 1:
            x, y, u = x.astype(np.uint16), y.astype(np.float32), u.astype(np.float32)
            u[0], x[1] = np.nan, 5000
        if trial % 4 == 3:
            x = x.astype(np.int32)
            uv = np.stack([u, w], axis=1)  # strided columns
            u, w = uv[:, 0], uv[:, 1]
        if trial % 6 == 5:
            x = x > 100  # bool: converted to float64 first
        yield camera, config, (x, y, u, w, weight)


def test_window_preparation_matches_the_reference():
    """Random settings, sizes, dtypes, NaN and off-sensor flows: the same flows, same order."""
    rng = np.random.default_rng(0)
    prepared = 0
    for camera, config, inputs in input_cases(rng):
        window = EgomotionEstimator(camera, config)._input.prepare(*inputs)
        expected = reference.prepare(camera, config, *inputs)
        if window is None:
            assert len(expected['m']) == 0
            continue
        prepared += 1
        for name in ('region', 'input_order'):
            np.testing.assert_array_equal(getattr(window, name), expected[name], err_msg=name)
        # the cells: sorted, starts where the reference's cell changes, numbered 0..C-1
        changes = np.flatnonzero(np.diff(expected['cell'])) + 1
        np.testing.assert_array_equal(window.starts, np.concatenate([[0], changes]))
        np.testing.assert_array_equal(window.cell,
                                      np.unique(expected['cell'], return_inverse=True)[1])
        for name in ('weight', 'validity', 'slow'):
            np.testing.assert_allclose(getattr(window, name), expected[name], rtol=1e-12,
                                       err_msg=name)
        # (the per-pixel map holds the coordinates and M^T in float32)
        for name, value in (('a', window.a), ('g', window.g), ('m', window.m)):
            scale = np.abs(expected[name]).max()
            np.testing.assert_allclose(value, expected[name], rtol=1e-5, atol=1e-6 * scale,
                                       err_msg=name)
    assert prepared >= 15


def noisy_windows(count):
    """(camera, omega, window inputs) of analytic windows with noise and outliers."""
    rng = np.random.default_rng(21)
    for trial in range(count):
        camera = CAMERAS[trial % 3]
        v, omega = random_motion(rng)
        inputs = analytic_window(camera, v, omega, count=int(rng.choice([1500, 3000])),
                                 noise=0.1, outliers=0.05, seed=trial)[:4] + (None,)
        yield camera, omega, inputs


def window_arrays(window):
    return window.a, window.g, window.m, window.cell


@pytest.mark.parametrize('sign_start', [False, True], ids=['sphere', 'sign-start'])
def test_gyro_solve_finds_the_minimum_of_the_reference_cost(sign_start):
    """Omega known: the direction of least cost (2), its explained share, the Huber weights."""
    config = EgomotionConfig(robust_iterations=0, sign_start=sign_start, min_flows=10)
    for camera, omega, inputs in noisy_windows(6):
        estimator = EgomotionEstimator(camera, config)
        window = estimator._input.prepare(*inputs)
        direction, fit = estimator._solver.solve_gyro(window, omega, None, False)
        a, g, m, cell = window_arrays(window)
        r = m - g @ omega
        np.testing.assert_allclose(window.robust, reference.huber(r, config.huber_scale),
                                   rtol=1e-12)
        w = window.weight * window.slow * window.robust

        def cost(dirs):
            return reference.cost_known(a, r, w, cell, dirs)
        total = np.sum(w * r * r)
        assert abs(fit - (1 - cost(direction[None])[0] / total)) < 1e-9
        best = reference.minimum(cost)
        # as good as the brute force (within its grid), and in the same place
        gap = cost(direction[None])[0] - cost(best[None])[0]
        assert gap <= MINIMUM_SHARE[sign_start] * total, gap / total
        assert angle_deg(direction, best) < MINIMUM_DEG[sign_start], (direction, best)


def test_free_solve_finds_the_minimum_of_the_reference_cost():
    """Omega estimated (least squares): the direction of least cost, omega and share there."""
    config = EgomotionConfig(robust_iterations=0, rotation_start=False, min_flows=10,
                             affine_depth=False)
    for camera, _, inputs in noisy_windows(6):
        estimator = EgomotionEstimator(camera, config)
        window = estimator._input.prepare(*inputs)
        direction, omega, fit, _ = estimator._solver.solve_free(window, None)
        a, g, m, cell = window_arrays(window)
        np.testing.assert_allclose(window.robust, reference.huber(m, config.huber_scale),
                                   rtol=1e-12)
        w = window.weight * window.robust

        def cost(dirs):
            return reference.cost_free(a, g, m, w, cell, dirs)[0]
        values, omegas = reference.cost_free(a, g, m, w, cell, direction[None])
        value, omega_there = values[0], omegas[0]
        np.testing.assert_allclose(omega, omega_there, rtol=1e-7, atol=1e-9)
        r = m - g @ omega
        assert abs(fit - (1 - value / np.sum(w * r * r))) < 1e-9
        best = reference.minimum(cost)
        assert value <= cost(best[None])[0] + MINIMUM_SHARE[False] * np.sum(w * m * m)
        assert angle_deg(direction, best) < MINIMUM_DEG[False], (direction, best)


def test_without_gyro_windows_after_inaccurate_ones_leave_the_check_out_then_check_again():
    """warm_start_windows: after inaccurate flows the accuracy check's fit is left out."""
    rng = np.random.default_rng(8)
    camera = PINHOLE
    v, omega = random_motion(rng)
    noisy = [analytic_window(camera, v, omega, noise=0.3, seed=seed)[:4] for seed in (1, 2)]
    exact = [analytic_window(camera, v, omega, noise=0.0, outliers=0.0, seed=seed)[:4]
             for seed in (3, 4, 5)]
    estimator = EgomotionEstimator(camera, EgomotionConfig(warm_start_windows=2))
    always = EgomotionEstimator(camera, EgomotionConfig(warm_start_windows=0))
    results = []
    for index, inputs in enumerate(noisy + exact):
        previous = estimator._previous
        window = estimator._input.prepare(*inputs, None)
        cold, rotation_start = (estimator._solver.solve_free(window, previous, skip_check=skip)
                                for skip in (False, True))
        result = estimator.estimate(*inputs)
        results.append(result)
        # the first window checks; the next two leave the check out (the second's flows
        # are exact: it takes the rotation start all the same); the fourth checks again
        expected = rotation_start if index in (1, 2) else cold
        np.testing.assert_array_equal(result.omega_rad_s, expected[1])
        assert cold[3] == (index >= 2), index
    # where the check fails anyway, leaving it out changes nothing
    for inputs, result in zip(noisy, results):
        np.testing.assert_array_equal(always.estimate(*inputs).omega_rad_s, result.omega_rad_s)
    for result in results[3:]:
        assert angle_deg(result.direction, v) < MAX_EXACT_DEG
        assert np.linalg.norm(result.omega_rad_s - omega) < MAX_EXACT_RAD_S


def test_solves_without_gyro_in_between_leave_the_gyro_modes_warm_count_alone():
    """The node's gyroscope check solves single windows without it between gyro windows."""
    rng = np.random.default_rng(9)
    v, omega = random_motion(rng)
    windows = [analytic_window(PINHOLE, v, omega, seed=seed)[:4] for seed in range(14)]
    counts = {}
    for interleaved in (False, True):
        estimator = EgomotionEstimator(PINHOLE, EgomotionConfig(warm_start_windows=4))
        counts[interleaved] = []
        for index, inputs in enumerate(windows):
            if interleaved and index % 2:
                estimator.estimate(*inputs)  # without the gyroscope
            estimator.estimate(*inputs, omega_rad_s=omega)
            counts[interleaved].append(estimator._warm_windows)
    # every fifth window searched in full, with or without the solves in between
    assert counts[False] == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3]
    assert counts[True] == counts[False]


@pytest.mark.parametrize('gyro', [True, False], ids=['gyro', 'free'])
def test_checks_match_the_reference(gyro):
    """The translation ratio, sign disagreement and accuracy check after a solve."""
    config = EgomotionConfig(min_flows=10)
    shares, accurate = [], []
    for trial, (camera, omega, inputs) in enumerate(noisy_windows(8)):
        if trial % 4 == 3:  # noise-free flows: the accuracy check passes
            v, omega = random_motion(np.random.default_rng(trial))
            inputs = analytic_window(camera, v, omega, count=2000, noise=0.0, outliers=0.0,
                                     seed=trial)[:4] + (None,)
        estimator = EgomotionEstimator(camera, config)
        window = estimator._input.prepare(*inputs)
        if gyro:
            direction, _ = estimator._solver.solve_gyro(window, omega, None, False)
        else:
            direction, omega, _, _ = estimator._solver.solve_free(window, None)
        a, g, m, cell = window_arrays(window)
        w = window.weight * window.robust
        for d in (direction, -direction, np.array([0.6, 0.0, 0.8])):
            ratio, share, passed = estimator._solver.checks(window, d, omega, gyro,
                                                            accuracy=True)
            expected = reference.translation_ratio(a, g, m, w, cell, d, omega)
            assert abs(ratio - expected) <= 1e-12 * expected, (ratio, expected)
            if gyro:
                expected = reference.sign_disagreement(
                    a, g, m, window.weight, window.slow, d, omega, config.huber_scale,
                    config.rotation_error)
                assert abs(share - expected) < 1e-12, (share, expected)
                shares.append(share)
            else:
                assert share == 0.0
            assert passed == reference.accurate(a, g, m, w, cell, d, omega,
                                                config.rotation_start_residual)
            accurate.append(passed)
            assert estimator._solver.checks(window, d, omega, gyro)[2] is False
    # the cases cover both answers of the accuracy check and a range of shares
    assert any(accurate) and not all(accurate)
    assert not gyro or (min(shares) < 0.05 and max(shares) > 0.5)


def test_checks_of_undefined_motions():
    """A non-finite omega or direction: the ratio is inf or NaN, as np.median would give."""
    config = EgomotionConfig(min_flows=10)
    camera, omega, inputs = next(noisy_windows(1))
    estimator = EgomotionEstimator(camera, config)
    window = estimator._input.prepare(*inputs)
    direction, _ = estimator._solver.solve_gyro(window, omega, None, False)
    nan3 = np.full(3, np.nan)
    assert estimator._solver.checks(window, direction, nan3, True)[0] == math.inf
    assert math.isnan(estimator._solver.checks(window, nan3, omega, True)[0])
    assert estimator._solver.checks(window, direction, np.zeros(3), True)[0] == math.inf
    assert estimator._solver.checks(window, nan3, omega, True, accuracy=True)[2] is False


def test_reference_omega_is_the_least_squares_of_all_unknowns():
    """The reference's eliminated omega equals a plain least squares of omega and rho_c."""
    rng = np.random.default_rng(2)
    a, g = rng.normal(size=(300, 3)), rng.normal(size=(300, 3))
    m, w, cell = rng.normal(size=300), rng.uniform(0.2, 1.0, 300), rng.integers(0, 7, 300)
    d = np.array([0.3, -0.2, 0.93])
    design = np.concatenate([g, (a @ d)[:, None] * (cell[:, None] == np.arange(7))], axis=1)
    root = np.sqrt(w)
    solution = np.linalg.lstsq(design * root[:, None], m * root, rcond=None)[0]
    _, omega = reference.cost_free(a, g, m, w, cell, d[None])
    np.testing.assert_allclose(omega[0], solution[:3], rtol=1e-9)


def cell_depth_window(camera, v, omega, count=3000, seed=0):
    """Exact normal flows [px/s] of a scene whose depth is constant per 32 px cell (2-8 m)."""
    from veckm_flow_ros.learning.simulate3d import motion_field
    rng = np.random.default_rng(seed)
    x_px, y_px = rng.integers(0, camera.width, count), rng.integers(0, camera.height, count)
    depth = rng.uniform(2.0, 8.0, 1000)[(y_px // 32) * 20 + x_px // 32]
    x, y = camera.normalize(x_px, y_px)
    dx, dy = motion_field(x, y, 1.0 / depth, v, omega)
    u_px, v_px = camera.velocity_to_pixels(x, y, dx, dy)
    angle = rng.uniform(0, 2 * np.pi, count)
    magnitude = np.cos(angle) * u_px + np.sin(angle) * v_px
    return x_px, y_px, magnitude * np.cos(angle), magnitude * np.sin(angle)


def test_exact_flows_give_the_true_motion():
    """Depth constant per cell, exact flows: both solves at the truth (default settings)."""
    # (SKEWED: with M^T taken as J^T K2 instead of J^T K2^T, measured 3.8-14 deg off)
    rng = np.random.default_rng(5)
    errors, omega_errors = [], []
    for trial in range(8):
        camera = CAMERAS[trial % 4]
        v, omega = random_motion(rng)
        inputs = cell_depth_window(camera, v, omega, seed=trial)
        estimator = EgomotionEstimator(camera)
        with_gyro = estimator.estimate(*inputs, omega_rad_s=omega)
        free = EgomotionEstimator(camera).estimate(*inputs)
        errors += [angle_deg(with_gyro.direction, v), angle_deg(free.direction, v)]
        omega_errors.append(np.linalg.norm(free.omega_rad_s - omega))
    assert max(errors) < MAX_EXACT_DEG, errors
    assert max(omega_errors) < MAX_EXACT_RAD_S, omega_errors


def prepare_arguments(count=20):
    """Return valid arguments of _egomotion.prepare (a pinhole camera's map)."""
    stage = EgomotionEstimator(PINHOLE)._input
    rng = np.random.default_rng(0)
    return [rng.integers(0, 346, count), rng.integers(0, 260, count), rng.normal(size=count),
            rng.normal(size=count), None, stage.pixel_map, np.empty(10 * count),
            np.empty(3 * count, np.int64), np.empty(stage.num_cells, np.int64),
            (346, 260, 4000, 0.0, 50.0, 100.0, stage.num_cells, 3)]


@pytest.mark.parametrize('index, value, message', [
    (1, np.zeros(19), 'the columns differ in length: x_px 20, y_px 19'),
    (4, np.ones(21), 'weight 21'),
    (0, np.zeros((4, 5)), 'x_px must be a 1-D array of a native integer or float32/64 type, '
     "got buffer format 'd' with 2 dimension(s)"),
    (2, np.zeros(20, np.complex128), 'u_px_s must be a 1-D array of a native integer or '
     "float32/64 type, got buffer format 'Zd'"),
    (3, 'abc', "v_px_s must be a 1-D numeric array, got <class 'str'>"),
    (5, np.zeros((10, 8), np.float32), 'pixel_map must have shape (89960, 8), got (10, 8)'),
    (5, np.zeros((89960, 8)), "pixel_map must be float32, got buffer format 'd'"),
    (6, np.empty(10), 'floats_out, ints_out and starts_out must hold >= 200, 60'),
    (9, (346, 260, 1, 0.0, 50.0, 100.0, 99, 3), 'prepare: settings out of range'),
    (9, (346, 260, 4000, 0.0, -1.0, 100.0, 99, 3), 'prepare: settings out of range'),
], ids=['length', 'weight-length', '2-d', 'complex', 'str', 'map-shape', 'map-dtype',
        'outputs', 'max-flows', 'floor'])
def test_compiled_input_stage_names_bad_arguments(index, value, message):
    args = prepare_arguments()
    args[index] = value
    with pytest.raises(ValueError) as error:
        _egomotion.prepare(*args)
    assert message in str(error.value)


def mapping_flags(address: int) -> list:
    """Return the VmFlags of the memory mapping of this process holding `address` (/proc)."""
    inside = False
    for line in pathlib.Path('/proc/self/smaps').read_text().splitlines():
        if re.match(r'^[0-9a-f]+-[0-9a-f]+ ', line):
            start, end = (int(part, 16) for part in line.split()[0].split('-'))
            inside = start <= address < end
        elif inside and line.startswith('VmFlags:'):
            return line.split()[1:]
    raise AssertionError(f'no mapping holds address {address:#x}')


def test_the_pixel_map_lies_on_huge_page_aligned_memory_and_small_arrays_stay_plain():
    """core/pixel_map.py: the table's rows (huge_page_empty) and what it falls back to."""
    table = EgomotionEstimator(PINHOLE)._input.pixel_map  # 346 x 260 x 32 bytes: 2.9 MB
    assert table.shape == (346 * 260, 8) and table.dtype == np.float32
    assert table.flags.c_contiguous and table.flags.writeable
    if hasattr(mmap, 'MADV_HUGEPAGE'):  # Linux
        assert table.ctypes.data % HUGE_PAGE_BYTES == 0
        base = table
        while isinstance(base, np.ndarray):
            base = base.base
        assert isinstance(getattr(base, 'obj', base), mmap.mmap)
        # The kernel's flags of the mapping: advised huge pages ('hg'), private memory (a
        # shared anonymous mapping, 'sh', is shmem: its huge pages are a separate setting).
        flags = mapping_flags(table.ctypes.data)
        assert 'hg' in flags and 'sh' not in flags, flags
    small = huge_page_empty((1000, 8), np.float32)
    assert small.shape == (1000, 8) and small.base is None  # a plain np.empty
    odd = huge_page_empty((3, 1 << 20), np.float64)
    odd[...] = 1.5
    assert odd.shape == (3, 1 << 20) and float(odd.sum()) == 1.5 * 3 * (1 << 20)


def test_compiled_input_stage_rejects_a_map_with_bad_cells():
    args = prepare_arguments()
    args[5] = args[5].copy()
    args[5][:, 6] = 1e6
    with pytest.raises(ValueError, match=r'pixel_map row \d+ has a cell index outside 0..99'):
        _egomotion.prepare(*args)


@pytest.mark.parametrize('index, value, message', [
    (5, np.full(50, 48, np.int64), 'region must be in 0..47, got 48 at index 0'),
    (5, np.zeros(50, np.int32), "region must be int64, got buffer format 'i'"),
    (8, np.empty((6, 8)), "grid_out must be float32, got buffer format 'd'"),
    (8, np.empty((8, 6), np.float32), 'grid_out must have shape (6, 8), got (8, 6)'),
    (6, np.zeros(2), 'direction must have shape (3,), got (2,)'),
    (9, (6, 8, 10, 2.0), 'time_to_contact: settings out of range'),
], ids=['region-range', 'region-dtype', 'grid-dtype', 'grid-shape', 'direction', 'weight'])
def test_compiled_time_to_contact_names_bad_arguments(index, value, message):
    rng = np.random.default_rng(0)
    args = [rng.normal(size=(3, 50)), rng.normal(size=(3, 50)), rng.normal(size=50),
            np.ones(50), np.ones(50), rng.integers(0, 48, 50), np.array([0.0, 0.0, 1.0]),
            np.zeros(3), np.empty((6, 8), np.float32), (6, 8, 10, 0.25)]
    _egomotion.time_to_contact(*args)
    args[index] = value
    with pytest.raises(ValueError) as error:
        _egomotion.time_to_contact(*args)
    assert message in str(error.value)


def arguments(count=50, cells=5):
    """Return valid arguments of _egomotion.solve_gyro for a small random window."""
    rng = np.random.default_rng(0)
    a_rows = rng.normal(size=(3, count))
    g_rows = rng.normal(size=(3, count))
    starts = np.arange(cells, dtype=np.int64) * (count // cells)
    sphere = rng.normal(size=(40, 3))
    sphere[:, 2] = np.abs(sphere[:, 2])
    sphere /= np.linalg.norm(sphere, axis=1)[:, None]
    return [a_rows, g_rows, rng.normal(size=count), np.ones(count), np.ones(count), starts,
            rng.permutation(count).astype(np.int64), np.array([0.1, 0.2, 0.3]), sphere,
            None, False, np.empty(count),
            (5, 2, 2.0, True, 1000, 0.2, 0.3, 0.3, 2.0, True, 0.07)]


def test_compiled_solve_runs_on_valid_arguments():
    args = arguments()
    direction, fit = _egomotion.solve_gyro(*args)
    assert abs(np.linalg.norm(direction) - 1.0) < 1e-12 and math.isfinite(fit)
    assert np.all((args[11] > 0) & (args[11] <= 1))


@pytest.mark.parametrize('index, value, message', [
    (2, np.array([np.nan] + [0.0] * 49), 'm must be finite, got nan at flat index 0'),
    (0, np.full((3, 50), np.inf), 'a_rows must be finite, got inf'),
    (7, np.array([0.0, np.nan, 0.0]), 'omega must be finite'),
    (0, np.zeros((3, 50), np.float32), "a_rows must be float64, got buffer format 'f'"),
    (5, np.array([0, 10, 20], np.int32), "starts must be int64, got buffer format 'i'"),
    (1, np.zeros((3, 49)), 'g_rows must have shape (3, 50), got (3, 49)'),
    (8, np.zeros(3), 'half_sphere must have shape (K, 3), got (3,)'),
    (9, np.zeros(2), 'previous must have shape (3,), got (2,)'),
    (3, np.ones(100)[::2], 'weight must be a C-contiguous float64 array'),
    (11, np.frombuffer(bytes(400)), 'robust_out must be a writable C-contiguous'),
    (5, np.array([0, 20, 10], np.int64), 'starts must begin at 0 and increase below N = 50, '
     'got 10 at index 2'),
    (5, np.array([5, 20], np.int64), 'got 5 at index 0'),
    (5, np.array([0, 50], np.int64), 'got 50 at index 1'),
    (6, np.arange(50, dtype=np.int64) % 49, 'input_order must hold distinct non-negative '
     'positions, got 0 twice'),
    (6, np.arange(50, dtype=np.int64) - 1, 'got -1 (negative)'),
    (12, (5, 2, 2.0, True, 0, 0.2, 0.3, 0.3, 2.0, True, 0.07), 'settings out of range'),
    (12, (5, 2, 2.0, True, 10, 0.2, 0.3, 0.0, 2.0, True, 0.07), 'settings out of range'),
    (12, (5, 2, 2.0, True, 10, 0.2, 0.3, 0.3, -1.0, True, 0.07), 'settings out of range'),
    (12, (5, 2, 2.0, True, 10, 0.2, 0.3, 0.3, 2.0, True, np.nan), 'settings out of range'),
    (2, [1.0, 2.0], "m must be a C-contiguous float64 array, got <class 'list'>"),
], ids=['nan', 'inf', 'omega-nan', 'float32', 'int-dtype', 'shape', 'sphere-shape',
        'previous-shape', 'strided', 'read-only', 'starts-order', 'starts-first', 'starts-end',
        'order-repeat', 'order-negative', 'sign-flows', 'step', 'cell-scale', 'accuracy-nan',
        'list'])
def test_compiled_solve_names_bad_arguments(index, value, message):
    args = arguments()
    args[index] = value
    with pytest.raises(ValueError) as error:
        _egomotion.solve_gyro(*args)
    assert message in str(error.value)


def test_compiled_solve_rejects_empty_windows_and_sparse_positions_work():
    args = arguments()
    args[2] = np.zeros(0)
    with pytest.raises(ValueError, match='m must hold at least 1 flow, got 0'):
        _egomotion.solve_gyro(*args)
    args = arguments()
    args[10] = True
    with pytest.raises(ValueError, match='warm needs the previous direction, got previous None'):
        _egomotion.solve_gyro(*args)
    # positions far apart (a sorted copy instead of a table) give the same solve
    args = arguments()
    dense = _egomotion.solve_gyro(*args)
    args[6] = args[6] * 1000003
    assert _egomotion.solve_gyro(*args) == dense


def free_arguments():
    """Return valid arguments of _egomotion.solve_free (the window of arguments())."""
    a_rows, g_rows, m, weight, _, starts, order, _, sphere, _, _, robust, _ = arguments()
    return [a_rows, g_rows, m, weight, starts, order, sphere, None, False, robust,
            (5, 2, 2.0, 1000, 0.3, True, 0.07, 300.0, 0.3, 2.0, True)]


def test_compiled_free_solve_runs_on_valid_arguments():
    args = free_arguments()
    direction, omega, fit, accurate = _egomotion.solve_free(*args)
    assert abs(np.linalg.norm(direction) - 1.0) < 1e-12
    assert all(math.isfinite(value) for value in omega) and math.isfinite(fit)
    assert isinstance(accurate, bool)
    assert np.all((args[9] > 0) & (args[9] <= 1))
    # a previous direction is one more start of the coarse search
    args[7] = np.array(direction)
    assert all(math.isfinite(value) for value in _egomotion.solve_free(*args)[0])
    args[8] = True  # the rotation start without the accuracy check's fit
    assert _egomotion.solve_free(*args)[3] is False


@pytest.mark.parametrize('index, value, message', [
    (2, np.array([np.nan] + [0.0] * 49), 'solve_free: m must be finite, got nan at flat index'),
    (0, np.zeros((3, 50), np.float32), 'solve_free: a_rows must be float64, got buffer '
     "format 'f'"),
    (3, np.ones(49), 'solve_free: weight must have shape (50,), got (49,)'),
    (4, np.array([0, 20, 10], np.int64), 'solve_free: starts must begin at 0 and increase '
     'below N = 50, got 10 at index 2'),
    (5, np.arange(50, dtype=np.int64) % 49, 'solve_free: input_order must hold distinct '
     'non-negative positions, got 0 twice'),
    (7, np.array([0.0, np.inf, 1.0]), 'solve_free: previous must be finite, got inf'),
    (9, np.frombuffer(bytes(400)), 'solve_free: robust_out must be a writable C-contiguous'),
    (10, (5, 2, 2.0, 0, 0.3, True, 0.07, 300.0, 0.3, 2.0, True),
     'solve_free: settings out of range'),
    (10, (5, 2, 2.0, 1000, 0.3, True, 0.07, -1.0, 0.3, 2.0, True),
     'solve_free: settings out of range'),
    (10, (5, 2, 2.0, 1000, 0.3, True, np.nan, 300.0, 0.3, 2.0, True),
     'solve_free: settings out of range'),
    (10, (5, 2, 2.0, 1000, 0.3, True, 0.07, 300.0, 0.3, np.nan, True),
     'solve_free: settings out of range'),
], ids=['nan', 'float32', 'shape', 'starts-order', 'order-repeat', 'previous-inf', 'read-only',
        'sign-flows', 'prior-weight', 'residual-nan', 'cell-scale'])
def test_compiled_free_solve_names_bad_arguments(index, value, message):
    args = free_arguments()
    args[index] = value
    with pytest.raises(ValueError) as error:
        _egomotion.solve_free(*args)
    assert message in str(error.value)


def checks_arguments():
    """Return valid arguments of _egomotion.checks (the window of arguments())."""
    a_rows, g_rows, m, weight, slow, starts, _, omega, _, _, _, robust, _ = arguments()
    robust[:] = 1.0
    return [a_rows, g_rows, m, weight, slow, starts, robust, np.array([0.0, 0.0, 1.0]), omega,
            (2.0, 0.3, 0.07)]


def test_compiled_checks_run_on_valid_arguments():
    ratio, share, passed = _egomotion.checks(*checks_arguments())
    assert ratio >= 0 and 0 <= share <= 1 and isinstance(passed, bool)


@pytest.mark.parametrize('index, value, message', [
    (2, np.array([np.nan] + [0.0] * 49), 'checks: m must be finite, got nan at flat index 0'),
    (4, np.ones(49), 'checks: slow must have shape (50,), got (49,)'),
    (5, np.array([0, 20, 10], np.int64), 'checks: starts must begin at 0 and increase '
     'below N = 50, got 10 at index 2'),
    (6, np.full(50, np.inf), 'checks: robust must be finite, got inf'),
    (7, np.zeros(2), 'checks: direction must have shape (3,), got (2,)'),
    (8, np.zeros(3, np.float32), "checks: omega must be float64, got buffer format 'f'"),
    (9, (0.0, 0.3, 0.07), 'checks: settings out of range'),
    (9, (2.0, 0.3, np.nan), 'checks: settings out of range'),
], ids=['nan', 'slow-shape', 'starts', 'robust-inf', 'direction-shape', 'omega-dtype',
        'huber', 'share-nan'])
def test_compiled_checks_name_bad_arguments(index, value, message):
    args = checks_arguments()
    args[index] = value
    with pytest.raises(ValueError) as error:
        _egomotion.checks(*args)
    assert message in str(error.value)


def test_missing_extension_says_how_to_build_it(monkeypatch):
    import sys
    import veckm_flow_ros
    monkeypatch.delattr(veckm_flow_ros, '_egomotion')
    monkeypatch.setitem(sys.modules, 'veckm_flow_ros._egomotion', None)
    with pytest.raises(ImportError, match=r'build it with `python3 setup.py build_ext '
                       r'--inplace` \(or scripts/setup.sh\)'):
        EgomotionEstimator(PINHOLE)
