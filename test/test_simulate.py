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

"""The simulator's ground truth is exact and its events follow the motion."""

import math

import numpy as np
import pytest

from veckm_flow_ros.learning import simulate
from veckm_flow_ros.learning.simulate import Layer, Motion, Scene, SensorConfig

WIDTH, HEIGHT = 64, 48


def _edge_texture(size, edge_x):
    """Return a vertical step edge at raster column edge_x (log-intensity step of 1.2)."""
    xx = np.arange(size, dtype=np.float64)[None, :].repeat(size, 0)
    return (0.6 * np.tanh((xx - edge_x) / 0.7)).astype(np.float32)


def _edge_scene(velocity, sensor):
    size = 256
    origin = np.array([-96.0, -104.0])  # raster column 116 sits at image x = 20 at t = 0
    layer = Layer(_edge_texture(size, 116), Motion(velocity, np.zeros((2, 2)), [0, 0]), origin)
    return Scene(WIDTH, HEIGHT, [layer], sensor)


QUIET = SensorConfig(threshold=0.2, threshold_sigma=0.0, refractory_s=0.0,
                     noise_rate_hz_per_px=0.0)


def test_translating_edge_has_exact_flow_and_consistent_timing():
    velocity = np.array([300.0, 0.0])
    sequence = simulate.simulate(_edge_scene(velocity, QUIET), duration_s=0.1, seed=0)
    assert len(sequence) > 1000
    assert not sequence.is_noise.any()
    np.testing.assert_array_equal(sequence.flow_px_s, np.tile(velocity, (len(sequence), 1)))
    # The edge sits at x = 20 + 300 t; every event fires as the edge passes its pixel.
    t_s = sequence.events.t_ns * 1e-9
    x = sequence.events.x.astype(np.float64)
    edge_x = 20 + velocity[0] * t_s
    assert np.abs(x - edge_x).max() < 3.0
    for column in range(24, 48, 3):
        mean_t_s = t_s[x == column].mean()
        assert abs(20 + velocity[0] * mean_t_s - column) < 0.6
    # Dark side (left) moves over the pixels: OFF events only.
    assert (sequence.events.p == 0).all()


def test_each_pixel_fires_once_per_threshold_step():
    # The step of 1.2 crosses floor(1.2 / 0.2) = 5 or 6 levels depending on the start offset.
    sequence = simulate.simulate(_edge_scene([300.0, 0.0], QUIET), duration_s=0.1, seed=0)
    inside = (sequence.events.x > 25) & (sequence.events.x < 45)
    index = sequence.events.y[inside].astype(int) * WIDTH + sequence.events.x[inside]
    counts = np.bincount(index, minlength=WIDTH * HEIGHT)
    counts = counts[counts > 0]
    assert counts.min() >= 5 and counts.max() <= 6


def test_rotation_ground_truth_is_the_analytic_motion_field():
    rate = 2.0  # rad/s
    centre = np.array([30.0, 20.0])
    sensor = SensorConfig(threshold=0.2, noise_rate_hz_per_px=0.0, refractory_s=0.0)
    rng = np.random.default_rng(0)
    texture = simulate.make_texture('checker', 128, rng)
    layer = Layer(texture, Motion([0, 0], [[0, -rate], [rate, 0]], centre), [-32.0, -40.0])
    sequence = simulate.simulate(Scene(WIDTH, HEIGHT, [layer], sensor), 0.05, seed=0)
    assert len(sequence) > 500
    x = sequence.events.x.astype(np.float64)
    y = sequence.events.y.astype(np.float64)
    expected = np.stack([-rate * (y - centre[1]), rate * (x - centre[0])], 1)
    np.testing.assert_allclose(sequence.flow_px_s, expected, rtol=1e-5, atol=1e-4)


def test_occluding_object_owns_its_boundary_events():
    # Static background: every signal event comes from the moving object, including its
    # trailing boundary where the background reappears.
    rng = np.random.default_rng(1)
    still = Motion([0, 0], np.zeros((2, 2)), [0, 0])
    background = Layer(simulate.make_texture('noise', 128, rng), still, [-32, -40])
    size = 24
    alpha = np.zeros((size, size), np.float32)
    alpha[4:20, 4:20] = 1.0
    velocity = np.array([150.0, -80.0])
    obj = Layer(np.full((size, size), 1.5, np.float32), Motion(velocity, np.zeros((2, 2)),
                                                               [20, 30]), [8, 18], alpha)
    sensor = SensorConfig(threshold=0.2, noise_rate_hz_per_px=0.0, refractory_s=0.0)
    sequence = simulate.simulate(Scene(WIDTH, HEIGHT, [background, obj], sensor), 0.1, seed=0)
    assert len(sequence) > 200
    np.testing.assert_array_equal(sequence.flow_px_s, np.tile(velocity, (len(sequence), 1)))


def test_noise_events_are_marked_and_have_no_ground_truth():
    sensor = SensorConfig(threshold=0.2, noise_rate_hz_per_px=5.0, refractory_s=0.0)
    sequence = simulate.simulate(_edge_scene([300.0, 0.0], sensor), 0.1, seed=3)
    noise = sequence.is_noise
    expected = 5.0 * WIDTH * HEIGHT * 0.1
    assert abs(noise.sum() - expected) < 5 * math.sqrt(expected)
    assert np.isnan(sequence.flow_px_s[noise]).all()
    assert np.isfinite(sequence.flow_px_s[~noise]).all()
    assert (np.diff(sequence.events.t_ns) >= 0).all()


def test_refractory_period_is_respected():
    sensor = SensorConfig(threshold=0.05, threshold_sigma=0.0, refractory_s=1e-3,
                          noise_rate_hz_per_px=0.0)
    sequence = simulate.simulate(_edge_scene([300.0, 0.0], sensor), 0.1, seed=0)
    index = sequence.events.y.astype(np.int64) * WIDTH + sequence.events.x
    order = np.lexsort((sequence.events.t_ns, index))
    same_pixel = np.diff(index[order]) == 0
    gaps_ns = np.diff(sequence.events.t_ns[order])[same_pixel]
    assert len(gaps_ns) > 100
    assert gaps_ns.min() >= 1e6 - 1000  # 1 ms, up to the 1 us timestamp rounding


@pytest.mark.parametrize('motion', simulate.MOTIONS)
def test_random_scenes_are_deterministic(motion):
    def run(seed):
        scene = simulate.make_scene(motion, 'random', seed=seed, width=80, height=60)
        return simulate.simulate(scene, 0.03, seed=seed)

    first, again, other = run(5), run(5), run(6)
    assert len(first) > 0
    np.testing.assert_array_equal(first.events.t_ns, again.events.t_ns)
    np.testing.assert_array_equal(first.events.x, again.events.x)
    np.testing.assert_array_equal(first.flow_px_s, again.flow_px_s)
    assert len(first) != len(other) or not np.array_equal(first.events.x, other.events.x)


def test_npz_round_trip(tmp_path):
    scene = simulate.make_scene('objects', 'polygons', seed=2, width=80, height=60)
    sequence = simulate.simulate(scene, 0.03, seed=2)
    path = tmp_path / 'sequence.npz'
    simulate.save_npz(sequence, path)
    loaded = simulate.load_npz(path)
    np.testing.assert_array_equal(loaded.events.t_ns, sequence.events.t_ns)
    np.testing.assert_array_equal(loaded.events.p, sequence.events.p)
    np.testing.assert_array_equal(loaded.flow_px_s, sequence.flow_px_s)
    np.testing.assert_array_equal(loaded.is_noise, sequence.is_noise)
    assert (loaded.width, loaded.height) == (80, 60)
    assert loaded.description['motion'] == 'objects'
    with np.load(path) as data:
        assert data['t'].dtype == np.int64 and data['x'].dtype == np.uint16
        assert data['gt_u'].dtype == np.float32


def test_unknown_names_are_rejected():
    with pytest.raises(ValueError, match='unknown texture'):
        simulate.make_scene('translation', 'marble', seed=0)
    with pytest.raises(ValueError, match='unknown motion'):
        simulate.make_scene('wobble', 'noise', seed=0)


def test_spiral_is_zoom_with_rotation_and_speed_range_is_checked():
    scene = simulate.make_scene('spiral', 'fine', seed=4, width=80, height=60)
    gradient = scene.layers[0].motion.gradient_per_s
    # A similarity: equal diagonal (zoom rate), antisymmetric off-diagonal (rotation rate).
    assert gradient[0, 0] == pytest.approx(gradient[1, 1])
    assert gradient[0, 1] == pytest.approx(-gradient[1, 0])
    assert np.abs(gradient).max() > 0
    fast = simulate.make_scene('translation', 'noise', seed=4, speed_range_px_s=(2000, 3000))
    assert 2000 <= fast.description['speed_px_s'] <= 3000
    with pytest.raises(ValueError, match='speed_range_px_s'):
        simulate.make_scene('translation', 'noise', seed=4, speed_range_px_s=(100, 10))


def test_contrast_range_scales_the_textures_and_leaves_the_rest_of_the_scene():
    def scene(seed, **contrast):
        return simulate.make_scene('translation', 'noise', seed=seed, width=80, height=60,
                                   **contrast)
    default = scene(5)
    low = scene(5, contrast_range=(0.1, 0.1), contrast_distribution='log-uniform')
    double = scene(5, contrast_range=(0.2, 0.2))
    # One draw either way: same texture pattern, motion and sensor, other amplitude.
    np.testing.assert_allclose(double.layers[0].log_texture, 2 * low.layers[0].log_texture,
                               rtol=1e-5, atol=1e-7)
    assert low.sensor == default.sensor
    np.testing.assert_array_equal(low.layers[0].motion.velocity_px_s,
                                  default.layers[0].motion.velocity_px_s)
    ratio = np.std(default.layers[0].log_texture) / np.std(low.layers[0].log_texture)
    assert 3 - 1e-3 <= ratio <= 15 + 1e-3  # default contrast 0.3..1.5, here 0.1
    # Log-uniform puts more scenes at low contrast than uniform over the same range.
    spread = {kind: np.median([np.std(scene(seed, contrast_range=(0.1, 1.5),
                                            contrast_distribution=kind).layers[0].log_texture)
                               for seed in range(24)]) for kind in ('uniform', 'log-uniform')}
    assert spread['log-uniform'] < 0.7 * spread['uniform']
    with pytest.raises(ValueError, match=r'contrast_range .* got \(0.5, 0.1\)'):
        scene(5, contrast_range=(0.5, 0.1))
    with pytest.raises(ValueError, match="unknown contrast_distribution 'normal'"):
        scene(5, contrast_distribution='normal')


def test_threshold_sigma_range_sets_the_sensor_spread_and_nothing_else():
    default = simulate.make_scene('zoom', 'edges', seed=7, width=80, height=60)
    wide = simulate.make_scene('zoom', 'edges', seed=7, width=80, height=60,
                               threshold_sigma_range=(0.1, 0.1))
    assert wide.sensor.threshold_sigma == pytest.approx(0.1)
    assert 0.01 <= default.sensor.threshold_sigma <= 0.06
    assert wide.sensor.threshold == default.sensor.threshold
    np.testing.assert_array_equal(wide.layers[0].log_texture, default.layers[0].log_texture)
    with pytest.raises(ValueError, match=r'threshold_sigma_range .* got \(0.2, 0.1\)'):
        simulate.make_scene('zoom', 'edges', seed=7, threshold_sigma_range=(0.2, 0.1))


def test_fine_texture_is_fine_grained_and_of_reduced_contrast():
    rng = np.random.default_rng(0)
    fine = simulate.make_texture('fine', 128, rng)
    coarse = simulate.make_texture('noise', 128, rng)
    assert 0 < np.abs(fine).max() <= 0.5
    # Fine grain: neighbouring pixels are far less alike than in the coarse noise.

    def neighbour_correlation(image):
        return float(np.corrcoef(image[:, :-1].ravel(), image[:, 1:].ravel())[0, 1])
    assert neighbour_correlation(fine) < neighbour_correlation(coarse) - 0.1


def test_expm2_matches_series():
    for matrix in ([[0.3, -1.2], [0.7, 0.1]], [[0.5, 0.0], [0.0, 0.5]], [[0, -2], [2, 0]],
                   [[0.2, 1.0], [0.0, 0.2]]):
        m = np.array(matrix)
        series = np.eye(2)
        term = np.eye(2)
        for k in range(1, 30):
            term = term @ m / k
            series = series + term
        np.testing.assert_allclose(simulate.expm2(m), series, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize('encoding', ['evt3', 'mono'])
def test_cli_writes_npz_and_a_bag_that_decodes_to_the_same_events(tmp_path, encoding):
    from veckm_flow_ros.cli import main
    from veckm_flow_ros.eventio.bag import EventBag
    from veckm_flow_ros.eventio.decode import PacketDecoder
    from veckm_flow_ros.eventio.events import EventArray
    out, bag = tmp_path / 'seq.npz', tmp_path / 'bag'
    assert main(['simulate', '--out', str(out), '--bag', str(bag), '--encoding', encoding,
                 '--seed', '1', '--duration-s', '0.03', '--width', '80', '--height', '60']) == 0
    expected = simulate.load_npz(out).events
    decoder = PacketDecoder()
    with EventBag(bag) as reader:
        decoded = EventArray.concatenate([decoder.decode_message(item.msg).events
                                          for item in reader.messages()])
    assert len(decoded) == len(expected) > 0

    def canonical(events):
        return events[np.lexsort((events.p, events.x, events.y, events.t_ns))]

    a, b = canonical(decoded), canonical(expected)
    for name in ('t_ns', 'x', 'y', 'p'):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
