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
Hostile input to the offline tools and the model loader (issue 22, items 4-8).

Each user mistake or bad file gives exit status 1 and one line on stderr, never a traceback;
bad data is refused, not silently repaired; NaN/Inf flows never reach an output.
"""

import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from veckm_flow_ros import cli
from veckm_flow_ros.core.model import load_model, ModelError, save_model, VecKMFlowModel
from veckm_flow_ros.learning.simulate import save_npz
from veckm_flow_ros.offline.replay import (load_flows_npz, replay_bag, ReplayOptions,
                                           ReplayOutputs)
from veckm_flow_ros.offline.sequences import load_sequence
from veckm_flow_ros.stream.pipeline import check_config, ConfigurationError

DATA_DIR = pathlib.Path(__file__).resolve().parents[1] / 'veckm_flow_ros' / 'data'
DEMO_BAG = DATA_DIR / 'demo_scene.mcap'
DEMO_TRUTH = DATA_DIR / 'demo_scene.npz'


def _cli_error(argv, capsys) -> str:
    """Run the CLI, expect exit status 1 and one stderr line without traceback; return it."""
    status = cli.main([str(arg) for arg in argv])
    err = capsys.readouterr().err
    assert status == 1, err
    assert 'Traceback' not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith(f'veckm-flow {argv[0]}: error: ')
    return lines[0]


def _quick(**changes):
    return ReplayOptions(progress=False, duration_s=0.06, **changes)


@pytest.fixture(scope='module')
def demo_sequence():
    sequence = load_sequence(DEMO_TRUTH)
    return sequence[:np.searchsorted(sequence.events.t_ns, 20_000_000)]


def _events_npz(path, sequence, **changes):
    events = sequence.events
    arrays = {'t': events.t_ns, 'x': events.x, 'y': events.y, 'p': events.p,
              'width': np.int64(sequence.width), 'height': np.int64(sequence.height)}
    arrays.update(changes)
    np.savez(path, **arrays)
    return path


def _raw_checkpoint(path, model, **config_changes):
    """Write a checkpoint as save_model does, with config values save_model would refuse."""
    save_model(model, path)
    with np.load(path, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    config = json.loads(str(arrays['config']))
    config.update({key: value for key, value in config_changes.items() if key in config})
    arrays['config'] = np.array(json.dumps(config))
    for name in ('w1', 'w2', 'w3'):
        if name in config_changes:
            arrays[name] = config_changes[name]
    np.savez(path, **arrays)
    return path


# ------------------------------------------------------------------------------------------
# 4. replay refuses a centred block longer than 2 tau, with the node's message


def test_replay_refuses_a_block_longer_than_2_tau_as_the_node_does(model, tmp_path, capsys):
    with pytest.raises(ConfigurationError) as node_error:
        check_config(model, {'device': 'cpu', 'pixel_radius': 0, 'tau_ms': 0.0,
                             'block_ms': 1000.0, 'causal': False, 'model': model.name})
    line = _cli_error(['replay', DEMO_BAG, '--block-ms', 1000, '--quiet',
                       '--npz', tmp_path / 'flows.npz'], capsys)
    assert line.endswith(str(node_error.value))
    assert not (tmp_path / 'flows.npz').exists()
    with pytest.raises(ConfigurationError, match='block_ms is 1000 ms'):
        replay_bag(DEMO_BAG, model, _quick(block_s=1.0))


def test_replay_accepts_2_tau_exactly_and_long_causal_blocks(model):
    assert replay_bag(DEMO_BAG, model, _quick(block_s=2 * model.tau_s)).flows > 100
    assert replay_bag(DEMO_BAG, model, _quick(block_s=0.1, causal=True)).flows > 100


# ------------------------------------------------------------------------------------------
# 5. absurd model parameters are refused at load, naming the value and the range


@pytest.mark.parametrize('changes, expected', [
    ({'tau_s': 10.0}, r'tau_s must be a time in seconds in \[1e-06, 0.5\].*got 10.0'),
    ({'tau_s': 0.0}, r'tau_s .*in \[1e-06, 0.5\].*got 0.0'),
    ({'tau_s': -0.016}, r'tau_s .*got -0.016'),
    ({'tau_s': float('nan')}, r'tau_s .*got nan'),
    ({'tau_s': True}, r'tau_s .*got True'),
    ({'pixel_radius': 0}, r'pixel_radius must be an integer in \[1, 64\], got 0'),
    ({'pixel_radius': 65}, r'pixel_radius .*got 65'),
    ({'w1': np.full((128, 128), np.inf, np.float32)}, 'w1 holds 16384 NaN/Inf values'),
])
def test_absurd_model_values_are_refused_at_load(model, tmp_path, changes, expected):
    path = _raw_checkpoint(tmp_path / 'absurd.npz', model, **changes)
    with pytest.raises(ModelError, match=expected):
        load_model(path)


def test_published_folder_with_a_20_s_slice_is_refused(model, tmp_path):
    folder = tmp_path / f'640x480_20000ms_C{model.num_features}_k{model.pixel_radius}'
    folder.mkdir()
    for name in ('freq_t', 'freq_x', 'freq_y', 'w1', 'w2', 'w3'):
        file_name = {'freq_t': 'At', 'freq_x': 'Ax', 'freq_y': 'Ay'}.get(name, name)
        np.savetxt(folder / f'{file_name}.txt', getattr(model, name).numpy().reshape(-1))
    with pytest.raises(ModelError, match=r'tau_s .*got 10.0'):
        load_model(folder)


def _node_start_up(model_path):
    env = dict(os.environ, ROS_DOMAIN_ID=str(150 + os.getpid() % 50),
               ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST')
    return subprocess.run(
        [sys.executable, '-c', 'import sys; from veckm_flow_ros.ros import main; '
         'sys.exit(main())', '--ros-args', '-p', f'model:={model_path}'],
        capture_output=True, text=True, timeout=120, env=env)


def test_node_fails_at_start_up_with_one_line_for_bad_model_files(model, tmp_path):
    """A real node process (rclpy): tau = 10 s, a truncated file, random bytes."""
    pytest.importorskip('rclpy')
    tau_10_s = _raw_checkpoint(tmp_path / 'tau10.npz', model, tau_s=10.0)
    truncated = tmp_path / 'truncated.npz'
    truncated.write_bytes(save_model(model, tmp_path / 'whole.npz').read_bytes()[:5000])
    random_bytes = tmp_path / 'random.npz'
    random_bytes.write_bytes(np.random.default_rng(0).bytes(4096))
    for path, expected in ((tau_10_s, 'tau_s must be a time in seconds in [1e-06, 0.5]'),
                           (truncated, 'truncated or corrupt'),
                           (random_bytes, 'not a .npz')):
        result = _node_start_up(path)
        assert result.returncode == 1, result.stderr
        assert 'Traceback' not in result.stderr
        lines = [line for line in result.stderr.splitlines() if 'error' in line]
        assert len(lines) == 1 and expected in lines[0] and str(path) in lines[0], \
            result.stderr


# ------------------------------------------------------------------------------------------
# 6. and 8. damaged files and wrong arguments: one line, no traceback


def test_damaged_model_files_give_one_line(model, tmp_path, capsys):
    whole = save_model(model, tmp_path / 'whole.npz').read_bytes()
    cases = {'empty.npz': (b'', 'not a readable model checkpoint: the file is empty (0 bytes)'),
             'truncated.npz': (whole[:len(whole) // 2],
                               'not a readable model checkpoint: truncated or corrupt'),
             'cut_member.npz': (whole[:-30], 'truncated or corrupt'),
             'random.npz': (np.random.default_rng(1).bytes(1000), 'not a .npz')}
    for name, (content, expected) in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(ModelError, match=re.escape(expected)):
            load_model(tmp_path / name)
        line = _cli_error(['replay', DEMO_BAG, '--model', tmp_path / name, '--quiet'], capsys)
        assert expected in line and 'allow_pickle' not in line


def test_checkpoint_with_pickled_objects_is_refused_in_our_words(model, tmp_path):
    path = tmp_path / 'pickled.npz'
    np.savez(path, config=np.array([{'format': 'x'}], dtype=object))
    with pytest.raises(ModelError, match='pickled Python objects, which are never loaded'):
        load_model(path)


def test_evaluate_on_a_truncated_or_random_npz(demo_sequence, tmp_path, capsys):
    save_npz(demo_sequence, tmp_path / 'whole.npz')
    whole = (tmp_path / 'whole.npz').read_bytes()
    (tmp_path / 'truncated.npz').write_bytes(whole[:len(whole) // 2])
    (tmp_path / 'random.npz').write_bytes(np.random.default_rng(2).bytes(3000))
    line = _cli_error(['evaluate', tmp_path / 'truncated.npz'], capsys)
    assert 'truncated.npz' in line and 'truncated or corrupt' in line
    line = _cli_error(['evaluate', tmp_path / 'random.npz'], capsys)
    assert 'not a .npz' in line and 'allow_pickle' not in line


def test_replay_png_dir_naming_an_existing_file(tmp_path, capsys):
    existing = tmp_path / 'frames'
    existing.write_text('not a directory')
    line = _cli_error(['replay', DEMO_BAG, '--png-dir', existing, '--quiet'], capsys)
    assert f'PNG frame directory {existing} is an existing file' in line
    line = _cli_error(['replay', DEMO_BAG, '--npz', existing / 'flows.npz', '--quiet'], capsys)
    assert str(existing) in line


@pytest.mark.parametrize('changes, expected', [
    ({'t': np.float64(0.5)}, 't must be a 1-D array'),
    ({'width': np.array([346, 346])}, r'width must be one integer in \[1, 65536\].*\[346, 346\]'),
    ({'width': np.int64(65536), 'height': np.int64(65536)},
     'sensor 65536x65536 has 4294967296 pixels, more than the encoder handles'),
])
def test_predict_refuses_bad_shapes_and_sizes(demo_sequence, tmp_path, capsys, changes,
                                              expected):
    events = _events_npz(tmp_path / 'events.npz', demo_sequence, **changes)
    line = _cli_error(['predict', '--events', events, '--out', tmp_path / 'out.npz'], capsys)
    assert re.search(expected, line), line
    assert not (tmp_path / 'out.npz').exists()


def test_npz_outputs_without_suffix_print_the_file_written(model, tmp_path, demo_sequence,
                                                           capsys):
    status = cli.main(['replay', str(DEMO_BAG), '--duration', '0.03', '--quiet',
                       '--npz', str(tmp_path / 'flows_noext')])
    out = capsys.readouterr().out
    assert status == 0
    written = tmp_path / 'flows_noext.npz'
    assert written.is_file() and not (tmp_path / 'flows_noext').exists()
    assert re.search(rf'^wrote +{re.escape(str(written))}$', out, re.MULTILINE), out
    events = _events_npz(tmp_path / 'events.npz', demo_sequence)
    status = cli.main(['predict', '--events', str(events), '--out', str(tmp_path / 'pred')])
    err = capsys.readouterr().err
    assert status == 0
    assert (tmp_path / 'pred.npz').is_file() and f'to {tmp_path / "pred.npz"}' in err


# ------------------------------------------------------------------------------------------
# 7. bad data is refused, not silently repaired


def test_unsorted_times_are_refused_by_both_sequence_layouts(demo_sequence, tmp_path,
                                                             capsys):
    """One rule: the simulator npz and the EVIMO2 directory refuse unsorted times alike."""
    t_ns = demo_sequence.events.t_ns.copy()
    t_ns[100] = t_ns[200]  # event 101 is then older than event 100
    sequence = demo_sequence[:]
    sequence.events.t_ns = t_ns
    save_npz(sequence, tmp_path / 'unsorted.npz')
    line = _cli_error(['evaluate', tmp_path / 'unsorted.npz'], capsys)
    assert 't is not in time order: event 101' in line and 'sort the events' in line
    evimo = tmp_path / 'evimo'
    evimo.mkdir()
    np.save(evimo / 'dataset_events_t.npy', t_ns * 1e-9)
    np.save(evimo / 'dataset_events_xy.npy', np.stack([sequence.events.x,
                                                       sequence.events.y], 1).astype(int))
    np.save(evimo / 'dataset_events_flow.npy', sequence.flow_px_s)
    line = _cli_error(['evaluate', evimo], capsys)
    assert 't is not in time order: event 101' in line
    events = _events_npz(tmp_path / 'events.npz', sequence)
    line = _cli_error(['predict', '--events', events, '--out', tmp_path / 'o.npz'], capsys)
    assert 't is not in time order: event 101' in line


def test_non_finite_times_and_pixels_are_refused(demo_sequence, tmp_path, capsys):
    t_s = demo_sequence.events.t_ns * 1e-9
    t_s[7] = np.nan
    events = _events_npz(tmp_path / 'nan_t.npz', demo_sequence, t=t_s)
    line = _cli_error(['predict', '--events', events, '--out', tmp_path / 'o.npz'], capsys)
    assert 't holds 1 NaN/Inf values (the first at index 7' in line
    sequence = demo_sequence[:]
    np.savez(tmp_path / 'sim_inf.npz', t=np.where(np.arange(len(t_s)) == 3, np.inf, t_s),
             x=sequence.events.x, y=sequence.events.y, p=sequence.events.p,
             gt_u=sequence.flow_px_s[:, 0], gt_v=sequence.flow_px_s[:, 1],
             width=np.int64(346), height=np.int64(260))
    line = _cli_error(['evaluate', tmp_path / 'sim_inf.npz'], capsys)
    assert 'NaN/Inf values (the first at index 3' in line
    x = demo_sequence.events.x.astype(np.float64)
    x[5] = np.nan
    events = _events_npz(tmp_path / 'nan_x.npz', demo_sequence, x=x)
    line = _cli_error(['predict', '--events', events, '--out', tmp_path / 'o.npz'], capsys)
    assert 'x holds 1 NaN/Inf values (the first at index 5)' in line


def _overflowing_model(model):
    """Return the model with w3's u column scaled so that many flows overflow float32."""
    w3 = model.w3.clone()
    w3[:, 0] *= 3e37
    return VecKMFlowModel(model.num_features, model.pixel_radius, model.tau_s,
                          model.freq_t, model.freq_x, model.freq_y, model.w1, model.w2, w3,
                          model.flow_scale_px_s, {'name': 'overflowing'})


def test_non_finite_flows_are_left_out_and_counted(model, demo_sequence, tmp_path, capsys):
    """Huge but finite weights: replay and predict write only finite flows and count the rest."""
    overflowing = _overflowing_model(model)
    path = save_model(overflowing, tmp_path / 'overflowing.npz')
    clean = replay_bag(DEMO_BAG, model, _quick())
    summary = replay_bag(DEMO_BAG, overflowing, _quick(),
                         ReplayOutputs(npz=tmp_path / 'flows.npz', bag=tmp_path / 'bag'))
    assert 0 < summary.non_finite_flows < clean.flows
    # Every target is written, left out as NaN/Inf, or left out for low validity (counted
    # only when finite).
    assert summary.flows + summary.non_finite_flows + summary.low_validity_flows == \
        clean.flows + clean.low_validity_flows
    assert 'NaN/Inf' in summary.table()
    flows = load_flows_npz(tmp_path / 'flows.npz')
    assert len(flows['u_px_s']) == summary.flows
    assert np.isfinite(flows['u_px_s']).all() and np.isfinite(flows['v_px_s']).all()

    events = _events_npz(tmp_path / 'events.npz', demo_sequence)
    status = cli.main(['predict', '--events', str(events), '--out', str(tmp_path / 'p.npz'),
                       '--model', str(path)])
    err = capsys.readouterr().err
    assert status == 0
    with np.load(tmp_path / 'p.npz') as predicted:
        assert np.isfinite(predicted['u']).all() and np.isfinite(predicted['v']).all()
        written = len(predicted['idx'])
    assert 0 < written < len(demo_sequence)
    assert "'non_finite_flow': " in err


def test_estimator_jobs_leave_out_non_finite_flows(model, demo_sequence):
    """The node's path (push_jobs, run in pool threads) gets the same filtering."""
    from veckm_flow_ros.core.estimator import NormalFlowEstimator
    estimator = NormalFlowEstimator(_overflowing_model(model), demo_sequence.width,
                                    demo_sequence.height, block_s=0.005)
    blocks = [job() for job in estimator.push_jobs(demo_sequence.events)]
    assert blocks
    for block in blocks:
        assert np.isfinite(block.u_px_s).all() and np.isfinite(block.v_px_s).all()
        assert len(block.t_ns) == len(block.x) == len(block.event_index) == len(block.u_px_s)
    assert estimator.events_dropped['non_finite_flow'] > 0
    assert torch.isfinite(model.w3).all()  # the shipped model is untouched
