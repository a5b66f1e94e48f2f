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

"""`veckm-flow demo` end to end on the bundled recording (quick mode)."""

import cv2
import numpy as np

from veckm_flow_ros import cli
from veckm_flow_ros.cli import demo


def test_bundled_recording_is_small_and_complete():
    from veckm_flow_ros.eventio.bag import list_event_topics
    from veckm_flow_ros.offline.sequences import load_sequence
    assert demo.DEMO_BAG.stat().st_size + demo.DEMO_TRUTH.stat().st_size < 4_000_000
    topics = list_event_topics(demo.DEMO_BAG)
    assert topics['/event_camera/events'].message_count > 100
    sequence = load_sequence(demo.DEMO_TRUTH)
    assert (sequence.width, sequence.height) == (346, 260)
    assert np.isfinite(sequence.flow_px_s[~sequence.is_noise]).all()


def test_demo_quick_end_to_end(model_args, tmp_path, capsys):
    out_dir = tmp_path / 'demo'
    status = cli.main(['demo', '--quick', '--no-progress', '--out-dir', str(out_dir)]
                      + model_args)
    out = capsys.readouterr().out
    assert status == 0
    for name in ('flows.npz', 'demo.mp4', 'comparison.png', 'metrics.txt',
                 'flow_bag/metadata.yaml', 'frames/frame_000000.png'):
        assert (out_dir / name).is_file(), name
        assert str(out_dir / name.split('/')[0]) in out  # listed under outputs
    comparison = cv2.imread(str(out_dir / 'comparison.png'))
    assert comparison.shape[0] > 260 and comparison.shape[1] > 3 * 346
    assert comparison.any()
    metrics = (out_dir / 'metrics.txt').read_text()
    assert '%Pos' in metrics and 'PEE px/s' in metrics and metrics in out + '\n'
    row = next(line for line in metrics.splitlines() if line.startswith('VecKM'))
    events, coverage, pos, pee_px_s, rel_pee = (float(value) for value in row.split()[-5:])
    # Measured with the shipped default model (veckm_r10_tau12ms, CPU, deterministic) and the
    # node's defaults: 68,176 events, 99.56 % covered, %Pos 97.01, PEE 49.9 px/s, relative PEE
    # 33.49 % (without the long context: 94.98, 50.5 px/s, 34.95 %). Margins: %Pos 2 points,
    # relative PEE 20 %. A v component negated scores ~71 %Pos and ~76 % relative PEE; a flow
    # scale 2x or 0.5x keeps %Pos but moves the relative PEE far outside.
    assert events > 60_000 and coverage > 99.5
    assert abs(pos - 97.01) <= 2.0, pos
    assert 0.8 * 33.49 <= rel_pee <= 1.2 * 33.49, rel_pee
    assert 0.8 * 49.9 <= pee_px_s <= 1.2 * 49.9, pee_px_s


def test_demo_without_shipped_model_fails_clearly(monkeypatch, tmp_path, capsys):
    from veckm_flow_ros.core import model
    monkeypatch.setattr(model, 'MODELS_DIR', tmp_path / 'no_models')
    status = cli.main(['demo', '--quick', '--out-dir', str(tmp_path / 'demo')])
    error = capsys.readouterr().err.strip()
    assert status == 1
    assert len(error.splitlines()) == 1
    assert 'shipped default model' in error and 'Traceback' not in error


def test_previous_outputs_are_replaced_and_nothing_else(tmp_path):
    (tmp_path / 'flow_bag').mkdir()
    (tmp_path / 'flow_bag' / 'metadata.yaml').write_text('old')
    (tmp_path / 'demo.mp4').write_text('old')
    (tmp_path / 'mine.txt').write_text('keep')
    demo._remove_previous_outputs(tmp_path)
    assert not (tmp_path / 'flow_bag').exists() and not (tmp_path / 'demo.mp4').exists()
    assert (tmp_path / 'mine.txt').read_text() == 'keep'


def test_validity_picture_on_the_real_recordings(recordings_dir, model, tmp_path, capsys):
    path = tmp_path / 'validity_filter.png'
    assert demo.draw_validity_filter(recordings_dir, model, 'cpu', path, False) == [str(path)]
    image = cv2.imread(str(path))
    # Two recordings, two 640x480 panels each (plus label strips and the gap).
    assert image.shape[0] >= 2 * 480 and image.shape[1] >= 2 * 640 and image.any()
    shares = {}
    for line in capsys.readouterr().out.splitlines():
        if 'flows published' in line:
            name = line.split(':')[0].strip()
            shares[name] = float(line.split('(')[1].split()[0])
    # Measured (default model, first 1 s): the hand 72.3 % of its flows published, the
    # background activity alone 7.0 % (the filter's goal there: at most 10 %).
    assert set(shares) == set(demo.VALIDITY_RECORDINGS)
    assert shares['codecs_test_data_libcaer_rollover'] <= 10.0
    assert 60.0 <= shares['py_test_events_1'] <= 85.0
