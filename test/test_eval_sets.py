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

"""The low-contrast evaluation set (offline/evaluate.py) and `veckm-flow evaluate --set`."""

import numpy as np
import pytest

from veckm_flow_ros import cli
from veckm_flow_ros.offline import evaluate


def _events_per_px_s(sequence, duration_s):
    return len(sequence) / (sequence.width * sequence.height * duration_s)


def test_lowcontrast_set_is_the_dense_scene_at_lower_contrast_with_its_own_seeds():
    name = 'translation-fine-2000'
    faint = evaluate.lowcontrast_sequences(0.02, names=[f'{name}-c0.3', f'{name}-c0.5'])
    assert list(faint) == [f'{name}-c0.3', f'{name}-c0.5']
    dense = evaluate.dense_sequences(0.02, names=[name])[name]
    sequences = (faint[f'{name}-c0.3'], faint[f'{name}-c0.5'], dense)
    rates = [_events_per_px_s(sequence, 0.02) for sequence in sequences]
    # Lower contrast, fewer threshold crossings: sparse events for 2000 px/s.
    assert 2 < rates[0] < rates[1] < 0.5 * rates[2]
    for contrast, sequence in zip((0.3, 0.5), faint.values()):
        assert sequence.description['contrast_thresholds'] == contrast
        assert sequence.description['seed'] >= evaluate.LOWCONTRAST_SEED
        assert (sequence.width, sequence.height) == (346, 260)
        signal = ~sequence.is_noise
        speed = np.hypot(*sequence.flow_px_s[signal].T)
        assert np.median(speed) == pytest.approx(2000, rel=0.05)
    with pytest.raises(ValueError, match=r"unknown low-contrast sequence\(s\) \['fine-9'\]"):
        evaluate.lowcontrast_sequences(0.02, names=['fine-9'])


def test_evaluate_command_scores_a_simulated_set(capsys):
    assert cli.main(['evaluate', '--set', 'lowcontrast', '--duration', '0.004']) == 0
    out = capsys.readouterr().out
    assert 'lowcontrast/translation-fine-3000-c0.3' in out
    assert 'lowcontrast/affine-fine-1500-c0.5' in out and '%Pos' in out
    assert cli.main(['evaluate']) != 0
    assert 'nothing to evaluate: give sequence paths (SEQ) or --set heldout|dense|lowcontrast' \
        in capsys.readouterr().err
