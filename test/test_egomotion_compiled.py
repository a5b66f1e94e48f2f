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
The compiled egomotion stages (veckm_flow_ros._egomotion) against the numpy reference.

The input stage gives bit-identical windows; the time to contact the same grids (measured:
1552 regions of 60 windows, all identical). For the gyroscope solve, both solve the same
prepared windows from the same state (previous direction, warm-window count): analytic
windows with noise and outliers on random cameras (pinhole, plumb_bob, equidistant), random
settings (cell sizes from 8 px to one cell of 256 px, fewer search and Huber rounds, the sign
start off), tiny windows, warm-started sequences. They differ by rounding only: the sign
vote's float32 sums run in another order, so its start moves by ~1e-5 rad and the least
squares end within ~0.002 deg of each other (measured on 142 windows:
max 0.0019 deg, fit 1.4e-5, Huber weights 4.5e-4).

The solve without a gyroscope likewise, on analytic windows with noise and outliers (the
least-squares branch), windows of biased magnitudes (the rotation start), random cameras and
settings (the rotation start forced or off, fewer rounds), tiny and degenerate windows: its
coarse grid and sign vote are float32 as in the reference, the rest float64 (measured on 145
random windows, sign_flows 100-1000: max 0.0023 deg, omega 6.8e-6 rad/s, fit 1.1e-5, Huber
weights 1.3e-4; no basin flip). A sign vote over very few flows (sign_flows 10) ties within
float32 rounding: there 7 of 104 windows ended in another basin (1.4-17 deg apart), so the
tests use 100 or more.
"""

import math

import numpy as np
import pytest

from test_egomotion import (analytic_window, angle_deg, biased_window, FISHEYE, PINHOLE,
                            PLUMB_BOB, random_motion)
from veckm_flow_ros import _egomotion
from veckm_flow_ros.core.camera import CameraModel
from veckm_flow_ros.core.egomotion import EgomotionConfig, EgomotionEstimator

# Bounds of the comparisons (about 25x the largest differences measured, see the module doc).
ANGLE_DEG = 0.05
FIT = 1e-3
ROBUST = 1e-2
OMEGA_RAD_S = 1e-4
# A direction further apart than this is a different basin: an argmin tie that rounding
# flips (none measured); at most one such window is tolerated per test.
BASIN_DEG = 1.0


def random_camera(rng):
    width, height = int(rng.integers(120, 360)), int(rng.integers(100, 260))
    focal = rng.uniform(0.6, 1.2) * width
    kind = rng.integers(3)
    if kind == 0:
        return CameraModel.pinhole(width, height, focal)
    if kind == 1:
        return CameraModel.pinhole(width, height, focal, 'plumb_bob',
                                   (rng.uniform(-0.35, 0.1), rng.uniform(-0.05, 0.15), 1e-3,
                                    -1e-3, 0.0))
    return CameraModel.pinhole(width, height, focal, 'equidistant',
                               (rng.uniform(-0.05, 0.08), rng.uniform(-0.03, 0.03), 0.0, 0.0))


def random_case(rng, trial, make_config, make_window):
    """
    One random case: (numpy and compiled estimators, omega, window inputs, previous direction).

    The camera is one of the three fixed ones or a random one; make_config(rng) and
    make_window(camera, v, omega) draw the rest, in that order (the draws fix the cases).
    """
    camera = (PINHOLE, PLUMB_BOB, FISHEYE)[trial % 3] if trial % 2 else random_camera(rng)
    config = make_config(rng)
    estimators = [EgomotionEstimator(camera, config, compiled=compiled)
                  for compiled in (False, True)]
    v, omega = random_motion(rng)
    inputs = make_window(camera, v, omega)
    previous = None
    if rng.random() < 0.5:
        previous = v + rng.normal(scale=0.1, size=3)
        previous /= np.linalg.norm(previous)
    return estimators, omega, inputs, previous


def solve_both(estimators, inputs, omega, previous, warm_windows):
    """(direction, fit, robust, warm count) of the numpy and the compiled solve, or None."""
    results = []
    for estimator in estimators:
        estimator._previous = None if previous is None else previous.copy()
        estimator._warm_windows = warm_windows
        window = estimator._prepare(*inputs)
        if window is None or len(window) < estimator.config.min_flows:
            return None
        direction, omega_out, fit = estimator._solve_gyro(window, omega)
        np.testing.assert_array_equal(omega_out, omega)
        results.append((direction, fit, window.robust.copy(), estimator._warm_windows))
    return results


def assert_close(d, d_numpy, fit, fit_numpy, robust, robust_numpy, flips):
    """Assert that a solve agrees with the numpy one; False (counted in flips): other basin."""
    assert abs(np.linalg.norm(d) - 1.0) < 1e-12
    angle = angle_deg(d, d_numpy)
    if angle > BASIN_DEG:
        flips.append(angle)
        return False
    assert angle < ANGLE_DEG
    assert abs(fit - fit_numpy) < FIT
    assert robust.shape == robust_numpy.shape
    assert np.max(np.abs(robust - robust_numpy)) < ROBUST
    assert np.all((robust > 0) & (robust <= 1.0))
    return True


def assert_same(results, flips):
    (d_numpy, fit_numpy, robust_numpy, warm_numpy), (d, fit, robust, warm) = results
    assert warm == warm_numpy
    assert_close(d, d_numpy, fit, fit_numpy, robust, robust_numpy, flips)


def test_compiled_solve_matches_numpy_on_random_windows():
    """Random cameras, settings, window sizes, noise, outliers and warm states."""
    rng = np.random.default_rng(7)
    flips, compared = [], 0

    def make_config(rng):
        return EgomotionConfig(cell_px=int(rng.choice([8, 16, 32, 64, 256])), min_flows=10,
                               refine_steps=int(rng.choice([0, 1, 3, 5, 5, 5])),
                               robust_iterations=int(rng.choice([0, 1, 2, 2, 3])),
                               sign_start=bool(rng.random() < 0.85),
                               sign_flows=int(rng.choice([10, 300, 1000])))

    def make_window(camera, v, omega):
        count = int(rng.choice([40, 300, 3000, 6000]))
        return analytic_window(camera, v, omega, count=count, noise=rng.uniform(0, 0.3),
                               outliers=rng.uniform(0, 0.2),
                               seed=int(rng.integers(1 << 30)))[:4] + (None,)

    for trial in range(36):
        estimators, omega, inputs, previous = random_case(rng, trial, make_config, make_window)
        warm_windows = 0 if previous is None else int(rng.integers(0, 12))
        results = solve_both(estimators, inputs, omega, previous, warm_windows)
        if results is not None:
            compared += 1
            assert_same(results, flips)
    assert compared >= 25
    assert len(flips) <= 1, flips


def test_compiled_solve_matches_numpy_on_degenerate_windows():
    """Tiny windows, one cell, cells of exactly min_cell_flows, zero and tiny weights."""
    rng = np.random.default_rng(3)
    flips = []
    config = EgomotionConfig(min_flows=10, min_cell_flows=3)
    estimators = [EgomotionEstimator(PLUMB_BOB, config, compiled=compiled)
                  for compiled in (False, True)]
    v, omega = np.array([0.1, 0.2, 1.0]) / math.sqrt(1.05), np.array([0.2, -0.1, 0.3])
    # 12 flows in 4 cells of exactly 3 flows (the smallest fit the estimator runs)
    x, y, u, w, _ = analytic_window(PLUMB_BOB, v, omega, count=4000, seed=1)
    cells = (x // 32) * 100 + y // 32
    pick = np.concatenate([np.flatnonzero(cells == cell)[:3] for cell in np.unique(cells)[:4]])
    assert len(pick) == 12
    cases = [(x[pick], y[pick], u[pick], w[pick], None)]
    # every flow in one depth cell
    inside = (x < 30) & (y < 30)
    cases.append((x[inside], y[inside], u[inside], w[inside], None))
    # weights: zeros (dropped), tiny and large
    weight = rng.choice([0.0, 1e-9, 1.0, 50.0], size=len(x))
    cases.append((x, y, u, w, weight))
    # flows of exactly zero derotated magnitude (sign 0 in the vote)
    x2, y2, u2, w2, _ = analytic_window(PLUMB_BOB, np.zeros(3), omega, count=500, noise=0.0,
                                        outliers=0.0, seed=2)
    cases.append((x2, y2, u2, w2, None))
    for inputs in cases:
        for previous, warm_windows in ((None, 0), (v, 0), (-v, 5)):
            results = solve_both(estimators, inputs, omega, previous, warm_windows)
            assert results is not None
            assert_same(results, flips)
    assert len(flips) <= 1, flips


def solve_free_both(estimators, inputs, previous):
    """(direction, omega, fit, robust) of the numpy and the compiled solve, or None."""
    results = []
    for estimator in estimators:
        estimator._previous = None if previous is None else previous.copy()
        window = estimator._prepare(*inputs)
        if window is None or len(window) < estimator.config.min_flows:
            return None
        direction, omega, fit = estimator._solve_free(window)
        results.append((direction, omega, fit, window.robust.copy()))
    return results


def assert_same_free(results, flips):
    (d_numpy, omega_numpy, fit_numpy, robust_numpy), (d, omega, fit, robust) = results
    if assert_close(d, d_numpy, fit, fit_numpy, robust, robust_numpy, flips):
        assert np.max(np.abs(omega - omega_numpy)) < OMEGA_RAD_S


def test_compiled_free_solve_matches_numpy_on_random_windows():
    """Without gyro: random cameras, settings, noise, outliers, biased magnitudes, starts."""
    rng = np.random.default_rng(11)
    flips, compared = [], 0

    def make_config(rng):
        return EgomotionConfig(cell_px=int(rng.choice([8, 16, 32, 64, 256])), min_flows=10,
                               refine_steps=int(rng.choice([0, 1, 3, 5, 5, 5])),
                               robust_iterations=int(rng.choice([0, 1, 2, 2, 3])),
                               rotation_start=bool(rng.random() < 0.85),
                               rotation_start_residual=float(rng.choice([0.0, 0.07, 0.07])),
                               rotation_prior_weight=float(rng.choice([0.0, 300.0, 300.0])),
                               sign_flows=int(rng.choice([100, 300, 1000])))

    for trial in range(36):
        def make_window(camera, v, omega):
            seed = int(rng.integers(1 << 30))
            if trial % 3 == 0:
                return tuple(biased_window(camera, v, omega, seed)) + (None,)
            return analytic_window(camera, v, omega,
                                   count=int(rng.choice([40, 300, 3000, 6000])),
                                   noise=rng.uniform(0, 0.3), outliers=rng.uniform(0, 0.2),
                                   seed=seed)[:4] + (None,)

        estimators, omega, inputs, previous = random_case(rng, trial, make_config, make_window)
        results = solve_free_both(estimators, inputs, previous)
        if results is not None:
            compared += 1
            assert_same_free(results, flips)
    assert compared >= 25
    assert len(flips) <= 1, flips


def test_compiled_free_solve_takes_the_same_branch_as_numpy():
    """Biased windows take the rotation start, accurate ones keep the least squares: both."""
    rng = np.random.default_rng(0)
    flips = []
    for seed in range(6):
        d = np.array([rng.normal(0, 0.3), rng.normal(0, 0.2), 1.0])
        v, omega = 0.8 * d / np.linalg.norm(d), rng.normal(size=3) * 0.3
        biased = biased_window(PINHOLE, v, omega, seed)
        accurate = analytic_window(PINHOLE, v, omega, seed=seed)[:4]
        for inputs, rotation_started in ((biased, True), (accurate, False)):
            results = {}
            for start in (True, False):
                config = EgomotionConfig(rotation_start=start)
                estimators = [EgomotionEstimator(PINHOLE, config, compiled=compiled)
                              for compiled in (False, True)]
                results[start] = solve_free_both(estimators, inputs + (None,), None)
                assert_same_free(results[start], flips)
            # the compiled solve with the rotation start differs from the plain least
            # squares exactly where it took the rotation start
            with_start, plain = results[True][1], results[False][1]
            assert (angle_deg(with_start[0], plain[0]) > 0) == rotation_started
    assert not flips, flips


def test_compiled_free_solve_matches_numpy_on_degenerate_windows():
    """Without gyro: tiny windows, one cell, zero and tiny weights, a pure rotation."""
    rng = np.random.default_rng(5)
    flips = []
    v, omega = np.array([0.1, 0.2, 1.0]) / math.sqrt(1.05), np.array([0.2, -0.1, 0.3])
    x, y, u, w, _ = analytic_window(PLUMB_BOB, v, omega, count=4000, seed=1)
    cells = (x // 32) * 100 + y // 32
    pick = np.concatenate([np.flatnonzero(cells == cell)[:3] for cell in np.unique(cells)[:4]])
    cases = [(x[pick], y[pick], u[pick], w[pick], None)]
    inside = (x < 30) & (y < 30)
    cases.append((x[inside], y[inside], u[inside], w[inside], None))
    cases.append((x, y, u, w, rng.choice([0.0, 1e-9, 1.0, 50.0], size=len(x))))
    for start in (True, False):
        estimators = [EgomotionEstimator(PLUMB_BOB, EgomotionConfig(
            min_flows=10, min_cell_flows=3, rotation_start=start), compiled=compiled)
            for compiled in (False, True)]
        for inputs in cases:
            for previous in (None, v):
                results = solve_free_both(estimators, inputs, previous)
                assert results is not None
                assert_same_free(results, flips)
        # A pure rotation of exact flows: the same omega; the direction is undetermined (all
        # residuals ~1e-16, the direction search's costs are rounding noise).
        x2, y2, u2, w2, _ = analytic_window(PLUMB_BOB, np.zeros(3), omega, count=500,
                                            noise=0.0, outliers=0.0, seed=2)
        (_, omega_numpy, _, _), (_, omega_compiled, _, _) = solve_free_both(
            estimators, (x2, y2, u2, w2, None), None)
        assert np.max(np.abs(omega_compiled - omega_numpy)) < OMEGA_RAD_S
        np.testing.assert_allclose(omega_compiled, omega, atol=1e-6)
    assert len(flips) <= 1, flips


def test_compiled_estimates_match_numpy_over_a_warm_started_sequence():
    """Two estimators, each with its own state, over a turning heading (warm starts)."""
    config = EgomotionConfig(warm_start_windows=3)
    numpy_path, compiled = (EgomotionEstimator(PLUMB_BOB, config, compiled=flag)
                            for flag in (False, True))
    v, omega = np.array([0.3, -0.1, 1.0]), np.array([0.1, -0.2, 0.05])
    for seed in range(12):
        v = v + 0.05 * np.array([1.0, 0.5, 0.0])
        x, y, u, w, _ = analytic_window(PLUMB_BOB, v, omega, seed=seed)
        a, b = (estimator.estimate(x, y, u, w, omega_rad_s=omega, t_s=0.03 * seed)
                for estimator in (numpy_path, compiled))
        assert angle_deg(a.direction, b.direction) < ANGLE_DEG
        assert abs(a.translation_fit - b.translation_fit) < FIT
        assert abs(a.inlier_fraction - b.inlier_fraction) < 0.01
        assert a.foe_valid == b.foe_valid
        np.testing.assert_allclose(a.foe_px, b.foe_px, atol=0.5)
        # the time to contact: medians of the same flows (a flow near a median may swap)
        np.testing.assert_allclose(b.ttc_grid_s, a.ttc_grid_s, rtol=0.05)
        assert numpy_path._warm_windows == compiled._warm_windows


def input_cases(rng):
    """Windows of random settings, sizes and dtypes (uint16, int32, float32, strided, NaN)."""
    for trial in range(30):
        camera = (PINHOLE, PLUMB_BOB, FISHEYE)[trial % 3]
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


def test_compiled_input_stage_gives_the_same_windows():
    rng = np.random.default_rng(0)
    prepared = 0
    for camera, config, inputs in input_cases(rng):
        reference, window = (EgomotionEstimator(camera, config, compiled=flag)._prepare(*inputs)
                             for flag in (False, True))
        if reference is None:
            assert window is None
            continue
        prepared += 1
        for name in ('a_rows', 'g_rows', 'm', 'weight', 'validity', 'slow', 'cell', 'starts',
                     'region', 'input_order', 'aa_rows'):
            expected, value = getattr(reference, name), getattr(window, name)
            assert value.dtype == expected.dtype, name
            np.testing.assert_array_equal(value, expected, err_msg=name)
    assert prepared >= 15


def test_compiled_time_to_contact_matches_numpy():
    rng = np.random.default_rng(1)
    regions = 0
    for trial in range(20):
        camera = (PINHOLE, PLUMB_BOB, FISHEYE)[trial % 3]
        config = EgomotionConfig(ttc_grid=tuple(int(v) for v in rng.integers(1, 12, 2)),
                                 ttc_neighbour_weight=float(rng.choice([0, 0.25, 1])),
                                 min_ttc_flows=int(rng.choice([1, 10, 50])))
        reference, compiled = (EgomotionEstimator(camera, config, compiled=flag)
                               for flag in (False, True))
        v, omega = random_motion(rng)
        x, y, u, w, _ = analytic_window(camera, v, omega, count=int(rng.choice([100, 3000])),
                                        seed=trial)
        window = compiled._prepare(x, y, u, w, None)
        direction, _, _ = compiled._solve_gyro(window, omega)
        direction = direction if direction[2] > 0 else -direction
        expected = reference._ttc(window, direction, omega)
        grid = compiled._ttc(window, direction, omega)
        assert grid.dtype == np.float32 and grid.shape == config.ttc_grid
        # (rounding may swap a flow next to a median: none measured)
        np.testing.assert_allclose(grid, expected, rtol=1e-6)
        regions += np.count_nonzero(~np.isnan(grid))
    assert regions > 200


def prepare_arguments(count=20):
    """Return valid arguments of _egomotion.prepare (a pinhole camera's map)."""
    estimator = EgomotionEstimator(PINHOLE)
    rng = np.random.default_rng(0)
    return [rng.integers(0, 346, count), rng.integers(0, 260, count), rng.normal(size=count),
            rng.normal(size=count), None, estimator._pixel_map, np.empty(10 * count),
            np.empty(3 * count, np.int64), np.empty(estimator._num_cells, np.int64),
            (346, 260, 4000, 0.0, 50.0, 100.0, estimator._num_cells, 3)]


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
            None, False, np.empty(count), (5, 2, 2.0, True, 1000, 0.2, 0.3, 0.3, 2.0)]


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
    (12, (5, 2, 2.0, True, 0, 0.2, 0.3, 0.3, 2.0), 'settings out of range'),
    (12, (5, 2, 2.0, True, 10, 0.2, 0.3, 0.0, 2.0), 'settings out of range'),
    (12, (5, 2, 2.0, True, 10, 0.2, 0.3, 0.3, -1.0), 'settings out of range'),
    (2, [1.0, 2.0], "m must be a C-contiguous float64 array, got <class 'list'>"),
], ids=['nan', 'inf', 'omega-nan', 'float32', 'int-dtype', 'shape', 'sphere-shape',
        'previous-shape', 'strided', 'read-only', 'starts-order', 'starts-first', 'starts-end',
        'order-repeat', 'order-negative', 'sign-flows', 'step', 'cell-scale', 'list'])
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
    return [a_rows, g_rows, m, weight, starts, order, sphere, None, robust,
            (5, 2, 2.0, 1000, 0.3, True, 0.07, 300.0, 0.3, 2.0)]


def test_compiled_free_solve_runs_on_valid_arguments():
    args = free_arguments()
    direction, omega, fit = _egomotion.solve_free(*args)
    assert abs(np.linalg.norm(direction) - 1.0) < 1e-12
    assert all(math.isfinite(value) for value in omega) and math.isfinite(fit)
    assert np.all((args[8] > 0) & (args[8] <= 1))
    # a previous direction is one more start of the coarse search
    args[7] = np.array(direction)
    assert all(math.isfinite(value) for value in _egomotion.solve_free(*args)[0])


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
    (8, np.frombuffer(bytes(400)), 'solve_free: robust_out must be a writable C-contiguous'),
    (9, (5, 2, 2.0, 0, 0.3, True, 0.07, 300.0, 0.3, 2.0), 'solve_free: settings out of range'),
    (9, (5, 2, 2.0, 1000, 0.3, True, 0.07, -1.0, 0.3, 2.0), 'solve_free: settings out of range'),
    (9, (5, 2, 2.0, 1000, 0.3, True, np.nan, 300.0, 0.3, 2.0),
     'solve_free: settings out of range'),
    (9, (5, 2, 2.0, 1000, 0.3, True, 0.07, 300.0, 0.3, np.nan),
     'solve_free: settings out of range'),
], ids=['nan', 'float32', 'shape', 'starts-order', 'order-repeat', 'previous-inf', 'read-only',
        'sign-flows', 'prior-weight', 'residual-nan', 'cell-scale'])
def test_compiled_free_solve_names_bad_arguments(index, value, message):
    args = free_arguments()
    args[index] = value
    with pytest.raises(ValueError) as error:
        _egomotion.solve_free(*args)
    assert message in str(error.value)


def test_missing_extension_says_how_to_build_it(monkeypatch):
    import sys
    import veckm_flow_ros
    monkeypatch.delattr(veckm_flow_ros, '_egomotion')
    monkeypatch.setitem(sys.modules, 'veckm_flow_ros._egomotion', None)
    with pytest.raises(ImportError, match=r'build it with `python3 setup.py build_ext '
                       r'--inplace` \(or scripts/setup.sh\), or pass compiled=False'):
        EgomotionEstimator(PINHOLE)
    # the numpy reference needs no extension
    assert EgomotionEstimator(PINHOLE, compiled=False)._extension is None
