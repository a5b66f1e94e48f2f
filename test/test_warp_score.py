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

"""The ground-truth-free warp score (offline/warp_score.py) and its use by `evaluate`."""

import pathlib

import numpy as np
import pytest

from veckm_flow_ros import cli
from veckm_flow_ros.cli import evaluate as evaluate_command
from veckm_flow_ros.learning import simulate
from veckm_flow_ros.offline import evaluate, warp_score

DATA = pathlib.Path(__file__).resolve().parents[1] / 'veckm_flow_ros' / 'data'

# (motion, texture, seed, speed px/s): full-frame motions of three kinds and occluding objects.
SCENES = [('translation', 'noise', 11, 300.0), ('rotation', 'edges', 12, 400.0),
          ('zoom', 'checker', 13, 300.0), ('objects', 'polygons', 14, 600.0)]


@pytest.fixture(scope='module', params=SCENES, ids=lambda spec: f'{spec[0]}-{spec[1]}')
def scene_and_sequence(request):
    motion, texture, seed, speed = request.param
    scene = simulate.make_scene(motion, texture, seed=seed, width=240, height=180,
                                speed_px_s=speed)
    return scene, simulate.simulate(scene, 0.2, seed=seed)


def _score(sequence, flow, **params):
    events = sequence.events
    return warp_score.warp_score(events.t_ns, events.x, events.y, flow, sequence.width,
                                 sequence.height, **params)


def test_ground_truth_flows_score_above_one_and_peak_at_scale_one(scene_and_sequence):
    scene, sequence = scene_and_sequence
    optical = sequence.flow_px_s
    normal = simulate.normal_flow_px_s(scene, sequence)
    for name, flow in (('optical flow', optical), ('normal flow', normal)):
        result = _score(sequence, flow)
        summary = result.summary()
        assert summary['windows'] >= 3, (name, summary)
        # Measured 1.95-3.71 (optical) and 1.95-3.70 (normal) on these scenes.
        assert summary['score'] > 1.3, (name, summary)
        assert 0.9 <= summary['best_s'] <= 1.1, (name, summary)
        assert result.at(0.0) == 1.0
    # A magnitude bias shows as the inverse best scale; the reversed flow blurs the events.
    doubled = _score(sequence, 2 * optical).summary()
    halved = _score(sequence, 0.5 * optical).summary()
    reversed_ = _score(sequence, -optical).summary()
    assert 0.45 <= doubled['best_s'] <= 0.55, doubled
    assert 1.8 <= halved['best_s'] <= 2.2, halved
    assert reversed_['score'] < 0.9 and reversed_['best_s'] < 0.2, reversed_


def test_normal_flow_of_the_simulator_lies_on_the_circle(scene_and_sequence):
    scene, sequence = scene_and_sequence
    normal = simulate.normal_flow_px_s(scene, sequence)
    has = np.isfinite(normal).all(axis=1)
    assert has.mean() > 0.9
    u = sequence.flow_px_s[has].astype(np.float64)
    n = normal[has].astype(np.float64)
    # n . (u - n) = 0 and |n| <= |u| (a projection of u), up to float32 rounding.
    scale = np.sum(u * u, axis=1) + 1e-9
    assert np.max(np.abs(np.sum(n * (u - n), axis=1)) / scale) < 1e-4
    assert np.all(np.linalg.norm(n, axis=1) <= np.linalg.norm(u, axis=1) * (1 + 1e-5) + 1e-3)


def _moving_edges(count=20_000, speed_px_s=(400.0, 0.0), duration_s=0.2, seed=0):
    """Events of vertical edges every 16 px translating at speed_px_s (exact flow)."""
    rng = np.random.default_rng(seed)
    t_s = np.sort(rng.uniform(0, duration_s, count))
    y = rng.integers(0, 120, count)
    edge = rng.integers(0, 8, count)
    x = np.round(20 + 16 * edge + speed_px_s[0] * t_s) % 160
    t_ns = np.round(t_s * 1e9).astype(np.int64)
    flow = np.tile(np.asarray(speed_px_s, np.float32), (count, 1))
    return t_ns, x, y, flow


def test_windows_weights_and_masks():
    t_ns, x, y, flow = _moving_edges()
    full = warp_score.warp_score(t_ns, x, y, flow, 160, 120, window_s=0.02)
    # Consecutive complete windows of 20 ms (the last partial one is dropped).
    assert full.windows == 9
    assert np.all(np.diff(full.window_start_ns) == 20_000_000)
    assert full.summary()['score'] > 2.0
    assert np.all(full.ratios[:, 0] == 1.0)
    # Events without flow and events of weight 0 take no part, the same way.
    drop = np.arange(len(t_ns)) % 3 == 0
    nan_flow = flow.copy()
    nan_flow[drop] = np.nan
    by_nan = warp_score.warp_score(t_ns, x, y, nan_flow, 160, 120, window_s=0.02)
    by_mask = warp_score.warp_score(t_ns, x, y, flow, 160, 120, window_s=0.02, weight=~drop)
    np.testing.assert_array_equal(by_nan.ratios, by_mask.ratios)
    np.testing.assert_array_equal(by_nan.events, by_mask.events)
    assert 0.6 < by_mask.events.sum() / full.events.sum() < 0.7
    # Uniform weights change nothing; a constant factor cancels in the ratio.
    halves = warp_score.warp_score(t_ns, x, y, flow, 160, 120, window_s=0.02,
                                   weight=np.full(len(t_ns), 0.5))
    np.testing.assert_allclose(halves.ratios, full.ratios, rtol=1e-6)
    # Windows below min_events do not count; max_windows keeps an evenly spaced subset.
    assert warp_score.warp_score(t_ns, x, y, flow, 160, 120, window_s=0.02,
                                 min_events=5000).windows == 0
    few = warp_score.warp_score(t_ns, x, y, flow, 160, 120, window_s=0.02, max_windows=3)
    assert few.windows == 3
    np.testing.assert_array_equal(few.window_start_ns, full.window_start_ns[[0, 4, 8]])


def test_empty_and_flowless_input_give_no_windows():
    empty = warp_score.warp_score(np.empty(0, np.int64), [], [], np.empty((0, 2)), 10, 10)
    assert empty.windows == 0
    summary = empty.summary()
    assert summary['windows'] == 0 and np.isnan(summary['score'])
    t_ns, x, y, flow = _moving_edges(2000)
    none = warp_score.warp_score(t_ns, x, y, np.full_like(flow, np.nan), 160, 120)
    assert none.windows == 0 and np.isnan(none.best()[0])
    text = warp_score.format_table({'m': {'rec': none.summary()}})
    assert 'rec' in text and ' - ' in text


def test_bad_input_names_the_value():
    t_ns, x, y, flow = _moving_edges(2000)
    with pytest.raises(ValueError, match='event 5 .* before'):
        warp_score.warp_score(np.r_[t_ns[:5], t_ns[4] - 1, t_ns[6:]], x, y, flow, 160, 120)
    with pytest.raises(ValueError, match=r'flow_px_s of shape \(2000, 2\)'):
        warp_score.warp_score(t_ns, x, y, flow[:10], 160, 120)
    with pytest.raises(ValueError, match='window_s must be > 0 seconds, got 0'):
        warp_score.warp_score(t_ns, x, y, flow, 160, 120, window_s=0)
    with pytest.raises(ValueError, match='weight must be finite and >= 0'):
        warp_score.warp_score(t_ns, x, y, flow, 160, 120, weight=-np.ones(len(t_ns)))
    with pytest.raises(ValueError, match='integer nanoseconds'):
        warp_score.warp_score(t_ns * 1e-9, x, y, flow, 160, 120)
    with pytest.raises(ValueError, match='scale 0.55 was not swept'):
        warp_score.warp_score(t_ns, x, y, flow, 160, 120).at(0.55)


def test_validity_filter_needs_a_validity():
    prediction = evaluate.Prediction(np.ones((4, 2), np.float32))
    assert evaluate.valid_flow(prediction) is prediction.flow_px_s
    with pytest.raises(ValueError, match='min_validity 0.5 .* no per-flow validity'):
        evaluate.valid_flow(prediction, 0.5)
    prediction.validity = np.array([0.1, 0.6, 0.5, 0.0], np.float32)
    kept = np.isfinite(evaluate.valid_flow(prediction, 0.5)).all(axis=1)
    np.testing.assert_array_equal(kept, [False, True, True, False])


def test_command_defaults_match_the_module():
    assert evaluate_command.DEFAULT_WINDOW_S == warp_score.DEFAULT_WINDOW_S
    assert evaluate_command.DEFAULT_MIN_EVENTS == warp_score.DEFAULT_MIN_EVENTS


def test_evaluate_cli_scores_a_bag_without_ground_truth(model_args, capsys):
    bag, truth = DATA / 'demo_scene.mcap', DATA / 'demo_scene.npz'
    assert evaluate.is_bag(bag) and not evaluate.is_bag(truth)
    status = cli.main(['evaluate', str(bag), str(truth), '--duration', '0.15',
                       '--baseline', 'planefit'] + model_args)
    out = capsys.readouterr().out
    assert status == 0
    assert 'demo_scene: ' in out and 'no ground truth' in out
    rows = [line.split() for line in out.splitlines()
            if line.startswith('demo_scene') and ('VecKM' in line or 'plane fit' in line
                                                  or 'ground truth' in line)]
    # The bag's table has no accuracy row but a warp row per method; the npz (same events)
    # has both, and its ground truth scores too.
    warp_rows = {(row[0], ' '.join(row[1:-5])): row[-5:] for row in rows}
    assert ('demo_scene+', 'ground truth') in warp_rows
    assert ('demo_scene', 'ground truth') not in warp_rows
    veckm = [key for key in warp_rows if key[1].startswith('VecKM')]
    assert {key[0] for key in veckm} == {'demo_scene', 'demo_scene+'}
    for key in veckm + [('demo_scene+', 'ground truth')]:
        score, best_s, _, windows, _ = warp_rows[key]
        assert int(windows) >= 2 and float(score) > 1.1, (key, warp_rows[key])
        assert 0.5 <= float(best_s) <= 1.3, (key, warp_rows[key])
    # The bag and the npz hold the same events: the model scores the same on both.
    bag_row = warp_rows[next(key for key in veckm if key[0] == 'demo_scene')]
    npz_row = warp_rows[next(key for key in veckm if key[0] == 'demo_scene+')]
    assert bag_row[0] == npz_row[0] and bag_row[3] == npz_row[3]


def test_evaluate_cli_names_a_bag_without_events(tmp_path, capsys):
    from veckm_flow_ros.eventio.bag import EventBagWriter
    with EventBagWriter(tmp_path / 'empty'):
        pass
    assert cli.main(['evaluate', str(tmp_path / 'empty')]) != 0
    assert 'holds no event messages' in capsys.readouterr().err


def test_evaluate_cli_min_validity_scores_fewer_flows(model_args, capsys):
    bag = str(DATA / 'demo_scene.mcap')

    def model_row(extra):
        assert cli.main(['evaluate', bag, '--duration', '0.15'] + extra + model_args) == 0
        out = capsys.readouterr().out
        return next(line.split() for line in out.splitlines()
                    if line.startswith('demo_scene ') and 'VecKM' in line)
    every, filtered = model_row([]), model_row(['--min-validity', '0.9'])
    # The same windows, fewer events with a flow (the last column).
    assert 0 < int(filtered[-1]) < int(every[-1])
    assert cli.main(['evaluate', bag, '--min-validity', '1.5']) == 1
    assert '--min-validity must be in [0, 1], got 1.5' in capsys.readouterr().err
