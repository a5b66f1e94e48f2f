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

"""`veckm-flow predict`: output against the estimator run directly, and its error messages."""

import numpy as np
import pytest
from scenes import EDGES, moving_edges

from veckm_flow_ros import cli


@pytest.fixture(scope='module')
def scene():
    """Return moving edges: events, ground-truth u, v [px/s]."""
    return moving_edges(duration_s=0.1, radius_px=30)


def _save(path, events, t=None, **extra):
    arrays = {'t': events.t_ns * 1e-9 if t is None else t, 'x': events.x.astype(np.int32),
              'y': events.y.astype(np.int32), 'p': events.p}
    arrays.update(extra)
    np.savez(path, **{name: value for name, value in arrays.items() if value is not None})
    return path


def _predict(*arguments):
    return cli.main(['predict', *map(str, arguments)])


def _direct(model, events, **options):
    """Run the streaming estimator over all events (what predict promises to equal)."""
    from veckm_flow_ros.core.estimator import automatic_block_s, FlowBlock, NormalFlowEstimator
    from veckm_flow_ros.stream.parameters import parameter_default
    options.setdefault('min_validity', parameter_default('min_validity'))  # predict's default
    options.setdefault('long_context_below_px_s', parameter_default('long_context_below_px_s'))
    # The node's and replay's block (block_ms 0): 2 tau centred, tau causal.
    options.setdefault('block_s', automatic_block_s(model.tau_s, options.get('causal', False)))
    estimator = NormalFlowEstimator(model, 640, 480, **options)
    blocks = estimator.push(events) + estimator.flush()
    return FlowBlock.concatenate(blocks)


def test_predict_equals_the_estimator(model, scene, tmp_path, capsys):
    events, gt_u, gt_v = scene
    source = _save(tmp_path / 'events.npz', events, t=events.t_ns, width=640, height=480)
    assert _predict('--events', source, '--out', tmp_path / 'flow.npz') == 0
    err = capsys.readouterr().err
    assert f'predict: {len(events)} events, t as integer nanoseconds' in err
    assert 'sensor 640x480' in err and 'model veckm_r10_tau12ms' in err
    out = np.load(tmp_path / 'flow.npz')
    direct = _direct(model, events)
    np.testing.assert_array_equal(out['idx'], direct.event_index)
    np.testing.assert_array_equal(out['u'], direct.u_px_s)
    np.testing.assert_array_equal(out['v'], direct.v_px_s)
    np.testing.assert_array_equal(out['validity'], direct.validity)
    assert out['u'].dtype == np.float32 and out['idx'].dtype == np.int64
    assert len(out['idx']) == len(events)  # flush: every event gets a flow
    # Indices address the input events: the flows point along the edges' motion there.
    index = out['idx']
    positive = np.mean(out['u'] * gt_u[index] + out['v'] * gt_v[index] > 0)
    assert positive > 0.9, positive
    speeds = {s for _, _, _, s in EDGES}
    ratio = np.median(np.hypot(out['u'], out['v'])) / np.median(list(speeds))
    assert 0.75 < ratio < 1.25, ratio


def test_predict_options_and_float_seconds(model, scene, tmp_path, capsys):
    events, _, _ = scene
    source = _save(tmp_path / 'events.npz', events)  # float seconds, size from max + 1
    assert _predict('--events', source, '--out', tmp_path / 'flow.npz', '--stride', 3,
                    '--causal', '--model', 'veckm_r8_tau16ms') == 0
    err = capsys.readouterr().err
    assert 't as float seconds (float64)' in err and 'model veckm_r8_tau16ms' in err
    from veckm_flow_ros.core.model import load_model
    from veckm_flow_ros.eventio.npz import load_events
    loaded, width, height, _ = load_events(source)
    assert (width, height) == (int(events.x.max()) + 1, int(events.y.max()) + 1)
    np.testing.assert_array_equal(loaded.t_ns, events.t_ns)
    from veckm_flow_ros.core.estimator import automatic_block_s, FlowBlock, NormalFlowEstimator
    from veckm_flow_ros.stream.parameters import parameter_default
    r8 = load_model('veckm_r8_tau16ms')
    estimator = NormalFlowEstimator(r8, width, height, causal=True, target_stride=3,
                                    block_s=automatic_block_s(r8.tau_s, causal=True),
                                    long_context_below_px_s=parameter_default(
                                        'long_context_below_px_s'))
    direct = FlowBlock.concatenate(estimator.push(events) + estimator.flush())
    out = np.load(tmp_path / 'flow.npz')
    np.testing.assert_array_equal(out['idx'], direct.event_index)
    np.testing.assert_array_equal(out['u'], direct.u_px_s)
    assert len(out['idx']) == pytest.approx(len(events) / 3, abs=2)


@pytest.mark.parametrize('case, message', [
    ('missing', 'events file .*missing.npz does not exist'),
    ('not_npz', r'not_npz.npz: not a readable events file: not a .npz'),
    ('no_y', r"missing arrays \['y'\] \(needs t, x, y\)"),
    ('lengths', r"the event arrays differ in length \({'t': 5, 'x': 5, 'y': 4}\)"),
    ('nan_t', r't holds 1 NaN/Inf values \(the first at index 1\)'),
    ('text_t', 't has dtype <U1; expected float seconds or integer nanoseconds'),
    ('text_x', 'x has dtype <U1; expected integers'),
    ('negative_x', r'x must be pixel coordinates in \[0, 65535\], found \[-1, 3\]'),
    ('unsorted', r't is not in time order: event 1 \(3000000 ns\) is older than event 0'),
    ('stride', '--stride must be >= 1, got 0'),
    ('model', 'no_such_model'),
])
def test_predict_errors_name_the_problem(case, message, tmp_path, capsys):
    path = tmp_path / f'{case}.npz'
    t, x, y = np.arange(5) * 1e-3, np.arange(5), np.arange(5)
    arrays = {'t': t, 'x': x, 'y': y}
    if case == 'not_npz':
        path.write_bytes(b'not a zip file')
    elif case != 'missing':
        changes = {'no_y': {'y': None}, 'lengths': {'y': y[:4]},
                   'nan_t': {'t': np.array([0, np.nan, 2, 3, 4])},
                   'text_t': {'t': np.array(list('abcde'))},
                   'text_x': {'x': np.array(list('abcde'))}, 'negative_x': {'x': x - 1},
                   'unsorted': {'t': t[::-1].copy()}}.get(case, {})
        arrays.update(changes)
        np.savez(path, **{name: value for name, value in arrays.items() if value is not None})
    extra = {'stride': ['--stride', '0'], 'model': ['--model', 'no_such_model']}.get(case, [])
    status = _predict('--events', path, '--out', tmp_path / 'out.npz', *extra)
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert status == 1
    assert error.startswith('veckm-flow predict: error:') and 'Traceback' not in error
    import re
    assert re.search(message, error), error
    assert not (tmp_path / 'out.npz').exists()


def test_predict_long_context_flag(model, scene, tmp_path, capsys):
    """--long-context-below-px-s reaches the estimator (default: the node's); checked."""
    events, _, _ = scene
    source = _save(tmp_path / 'events.npz', events, t=events.t_ns, width=640, height=480)
    assert _predict('--events', source, '--out', tmp_path / 'off.npz',
                    '--long-context-below-px-s', 0) == 0
    assert 'estimated again' not in capsys.readouterr().err
    off = np.load(tmp_path / 'off.npz')
    direct = _direct(model, events, long_context_below_px_s=0.0)
    np.testing.assert_array_equal(off['u'], direct.u_px_s)
    assert _predict('--events', source, '--out', tmp_path / 'all.npz',
                    '--long-context-below-px-s', 1e6) == 0
    assert f', {len(events)} estimated again with the long context' in capsys.readouterr().err
    every = np.load(tmp_path / 'all.npz')
    np.testing.assert_array_equal(every['u'], _direct(model, events,
                                                      long_context_below_px_s=1e6).u_px_s)
    assert np.mean(every['u'] != off['u']) > 0.5
    assert _predict('--events', source, '--out', tmp_path / 'x.npz',
                    '--long-context-below-px-s', -1) == 1
    assert '--long-context-below-px-s must be a speed in [0, 1e+06] px/s (0 = off), got -1' \
        in capsys.readouterr().err


def test_predict_leaves_out_background_activity_unless_min_validity_is_0(model, scene,
                                                                         tmp_path, capsys):
    from scenes import background_noise, merged
    edges, _, _ = scene
    events, source = merged(edges, background_noise(duration_s=0.1, rate_hz_per_px=0.5))
    path = _save(tmp_path / 'events.npz', events, t=events.t_ns, width=640, height=480)
    assert _predict('--events', path, '--out', tmp_path / 'flow.npz') == 0
    assert "'low_validity': " in capsys.readouterr().err
    out = np.load(tmp_path / 'flow.npz')
    kept = np.zeros(len(events), bool)
    kept[out['idx']] = True
    assert kept[source == 0].mean() > 0.99 and kept[source == 1].mean() < 0.1
    assert np.all(out['validity'] >= 0.5)
    assert _predict('--events', path, '--out', tmp_path / 'all.npz', '--min-validity', 0) == 0
    assert len(np.load(tmp_path / 'all.npz')['idx']) == len(events)
    assert _predict('--events', path, '--out', tmp_path / 'x.npz', '--min-validity', -1) == 1
    assert '--min-validity must be in [0, 1] (0 keeps every flow), got -1' in \
        capsys.readouterr().err
