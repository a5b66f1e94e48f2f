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

"""Model checkpoints: save/load round trip, error messages, published-folder loader."""

import dataclasses
import json
import shutil

import numpy as np
import pytest
import torch

from veckm_flow_ros.core import model as model_module
from veckm_flow_ros.core.model import (load_model, load_published_model, ModelError,
                                       save_model, VecKMFlowModel)

PUBLISHED = ('640x480_24ms_C64_k8', '640x480_24ms_C64_k10', '640x480_32ms_C64_k8',
             '640x480_32ms_C64_k10')


def make_model(d=8, hidden=16, seed=0, **overrides):
    generator = torch.Generator().manual_seed(seed)
    fields = {
        'num_features': d, 'pixel_radius': 3, 'tau_s': 0.012,
        'freq_t': 5 * torch.randn(d, generator=generator),
        'freq_x': 5 * torch.randn(d, generator=generator),
        'freq_y': 5 * torch.randn(d, generator=generator),
        'w1': torch.randn(2 * d, hidden, generator=generator),
        'w2': torch.randn(hidden, hidden, generator=generator),
        'w3': torch.randn(hidden, 2, generator=generator),
        'flow_scale_px_s': 60.0,
        'metadata': {'name': 'tiny', 'trained_sensor_size': [64, 48]}}
    fields.update(overrides)
    return VecKMFlowModel(**fields)


def test_save_load_round_trip(tmp_path):
    original = make_model()
    path = save_model(original, tmp_path / 'tiny')
    assert path.suffix == '.npz'
    loaded = load_model(path)
    for name in ('freq_t', 'freq_x', 'freq_y', 'w1', 'w2', 'w3'):
        assert torch.equal(getattr(loaded, name), getattr(original, name))
    assert (loaded.num_features, loaded.pixel_radius, loaded.tau_s,
            loaded.flow_scale_px_s) == (8, 3, 0.012, 60.0)
    assert loaded.metadata['trained_sensor_size'] == [64, 48]
    assert load_model(path, pixel_radius=5).pixel_radius == 5


@pytest.mark.parametrize('overrides, message', [
    ({'w1': torch.zeros(16, 15)}, r'w2 must have shape \(15, 15\), found \(16, 16\)'),
    ({'w3': torch.zeros(16, 3)}, r'w3 must have shape \(16, 2\), found \(16, 3\)'),
    ({'freq_x': torch.zeros(7)}, r'freq_x must have shape \(8,\), found \(7,\)'),
    ({'w1': torch.full((16, 16), float('nan'))}, 'w1 holds 256 NaN/Inf'),
    ({'pixel_radius': 0}, 'pixel_radius must be an integer in'),
    ({'tau_s': -0.01}, 'tau_s must be a time in seconds'),
    ({'flow_scale_px_s': 0.0}, 'flow_scale_px_s must be a positive number'),
])
def test_invalid_models_are_rejected(overrides, message):
    with pytest.raises(ModelError, match=message):
        make_model(**overrides)


def test_checkpoint_errors(tmp_path):
    with pytest.raises(ModelError, match='does not exist'):
        load_model(tmp_path / 'missing.npz')
    path = save_model(make_model(), tmp_path / 'good.npz')
    with np.load(path) as archive:
        arrays = {name: archive[name] for name in archive.files}
    # Wrong shape inside a file: caught at load, with the shape found.
    np.savez(tmp_path / 'bad_shape.npz', **{**arrays, 'w2': np.zeros((16, 4), np.float32)})
    with pytest.raises(ModelError, match=r'w2 must have shape \(16, 16\), found \(16, 4\)'):
        load_model(tmp_path / 'bad_shape.npz')
    # D mismatch between config and arrays.
    config = json.loads(str(arrays['config']))
    config['num_features'] = 16
    np.savez(tmp_path / 'bad_d.npz', **{**arrays, 'config': np.array(json.dumps(config))})
    with pytest.raises(ModelError, match='freq_t must have shape'):
        load_model(tmp_path / 'bad_d.npz')
    # Object arrays need pickle: refused.
    np.savez(tmp_path / 'pickled.npz', **{**arrays, 'w1': np.array([object()], dtype=object)})
    with pytest.raises(ModelError, match='not a readable'):
        load_model(tmp_path / 'pickled.npz')
    np.savez(tmp_path / 'no_config.npz', w1=arrays['w1'])
    with pytest.raises(ModelError, match='lacks arrays'):
        load_model(tmp_path / 'no_config.npz')
    (tmp_path / 'model.txt').write_text('1 2 3')
    with pytest.raises(ModelError, match='unknown model format'):
        load_model(tmp_path / 'model.txt')


def test_shipped_models_and_default(tmp_path, monkeypatch):
    monkeypatch.setattr(model_module, 'MODELS_DIR', tmp_path)
    assert model_module.list_shipped_models() == []
    with pytest.raises(ModelError, match='no shipped model is installed yet'):
        load_model(None)
    with pytest.raises(ModelError, match='neither an existing path nor a shipped model'):
        load_model('nonexistent_model_name')
    save_model(make_model(), tmp_path / 'first.npz')
    assert load_model(None).name == 'tiny'
    assert load_model('first').name == 'tiny'
    save_model(make_model(seed=1), tmp_path / 'second.npz')
    with pytest.raises(ModelError, match='several models'):
        load_model(None)
    (tmp_path / 'DEFAULT').write_text('second\n')
    assert torch.equal(load_model(None).w1, make_model(seed=1).w1)


def test_predict_flow_px_s_scales_the_mlp():
    model = make_model()
    features = torch.randn(5, 16)
    expected = torch.relu(torch.relu(features @ model.w1) @ model.w2) @ model.w3 * 60.0
    assert torch.allclose(model.predict_flow_px_s(features), expected, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize('name', PUBLISHED)
def test_published_folders_load(published_models_dir, name):
    model = load_model(published_models_dir / name)
    assert model.num_features == 64 and model.hidden_size == 128
    assert model.pixel_radius == int(name.rsplit('_k', 1)[1])
    assert model.tau_s == pytest.approx(int(name.split('_')[1][:-2]) / 2000)
    assert model.flow_scale_px_s == 60.0
    assert model.w1.shape == (128, 128) and model.w3.shape == (128, 2)
    # First value of At.txt, read as a number (no transpose of the weights either).
    first = float((published_models_dir / name / 'At.txt').read_text().split()[0])
    assert model.freq_t[0].item() == pytest.approx(first)
    w1_first_row = np.loadtxt(published_models_dir / name / 'w1.txt', max_rows=128)
    assert torch.allclose(model.w1[0], torch.from_numpy(w1_first_row).float())


def test_published_loader_errors(published_models_dir, tmp_path):
    source = published_models_dir / PUBLISHED[0]
    renamed = tmp_path / 'my_model'
    shutil.copytree(source, renamed)
    with pytest.raises(ModelError, match='pass pixel_radius and tau_s'):
        load_model(renamed)
    model = load_published_model(renamed, pixel_radius=9, tau_s=0.02)
    assert (model.pixel_radius, model.tau_s) == (9, 0.02)
    broken = tmp_path / '640x480_24ms_C64_k8'
    shutil.copytree(source, broken)
    (broken / 'w3.txt').write_text('\n'.join(['0.5'] * 255))
    with pytest.raises(ModelError, match='w3.txt holds 255 values, expected 256'):
        load_model(broken)
    (broken / 'w3.txt').write_text('\n'.join(['nan'] * 256))
    with pytest.raises(ModelError, match='w3 holds 256 NaN'):
        load_model(broken)
    (broken / 'w3.txt').unlink()
    with pytest.raises(ModelError, match=r"missing weight files \['w3.txt'\]"):
        load_model(broken)
    wrong_d = tmp_path / '640x480_24ms_C32_k8'
    shutil.copytree(source, wrong_d)
    with pytest.raises(ModelError, match='folder name says C32 but At.txt holds 64'):
        load_model(wrong_d)


def test_model_to_its_own_device_is_the_same_object():
    """to() the device the model is on returns it (no copy); test_cuda moves one to CUDA."""
    model = make_model()
    assert model.to('cpu') is model and model.to(torch.device('cpu')) is model


def _c4_model(seed=0):
    from veckm_flow_ros.learning import train
    recipe = train.Recipe(equivariance='c4', seed=seed)
    freq = train.recipe_frequencies(recipe)
    torch.manual_seed(seed)
    w1, w2, w3 = train.make_mlp(recipe, 128, freq).weights()
    return VecKMFlowModel(num_features=64, pixel_radius=8, tau_s=0.016, freq_t=freq[0],
                          freq_x=freq[1], freq_y=freq[2], w1=w1, w2=w2, w3=w3,
                          flow_scale_px_s=60.0, metadata={'name': 'c4'})


@pytest.mark.parametrize('rows', [0, 1, 23, 24, 25, 1000])
def test_c4_fourier_mlp_equals_the_dense_mlp(rows):
    from veckm_flow_ros import ops
    for model in (_c4_model(0), _c4_model(1), load_model('veckm_r10_tau12ms'),
                  load_model('veckm_r8_tau16ms')):
        assert model.equivariance == 'c4' and model.c4_fourier_blocks is not None
        features = torch.randn(rows, 128, generator=torch.Generator().manual_seed(rows))
        dense = ops.flow_mlp(features, model.w1, model.w2, model.w3, 60.0)
        fast = model.predict_flow_px_s(features)
        scale = float(dense.abs().max()) if rows else 1.0
        torch.testing.assert_close(fast, dense, rtol=0, atol=2e-5 * scale + 1e-6)


@pytest.mark.parametrize('rows', [1, 5, 23, 24, 25, 301])
def test_portable_mlp_kernels_equal_the_default_ones(rows, monkeypatch):
    # VECKM_CPU_KERNELS=portable: the micro-kernels of an aarch64 build, here on any CPU.
    from veckm_flow_ros import ops
    model = load_model('veckm_r8_tau16ms')
    blocks, groups = model.c4_fourier_blocks
    features = torch.randn(rows, 128, generator=torch.Generator().manual_seed(rows))
    exact = ((features.double() @ model.w1.double()).relu() @ model.w2.double()).relu() \
        @ model.w3.double() * 60.0
    results = {}
    for kernels in ('default', 'portable'):
        if kernels == 'portable':
            monkeypatch.setenv('VECKM_CPU_KERNELS', 'portable')
        results[kernels] = (ops.flow_mlp(features, model.w1, model.w2, model.w3, 60.0),
                            ops.flow_mlp_c4(features, blocks, model.w3, groups, 60.0))
    scale = float(exact.abs().max())
    for dense, fourier in results.values():
        torch.testing.assert_close(dense.double(), exact, rtol=0, atol=2e-6 * scale)
        torch.testing.assert_close(fourier.double(), exact, rtol=0, atol=2e-5 * scale)
    # Not the same code on an AVX2 machine (different summation orders), equal up to rounding.
    for default, portable in zip(results['default'], results['portable']):
        torch.testing.assert_close(portable, default, rtol=0, atol=2e-5 * scale)


def test_c4_fourier_form_only_for_models_it_reproduces():
    from veckm_flow_ros import ops
    # Every CPU build runs it (AVX2 kernels on x86-64, portable ones elsewhere).
    assert ops.has_flow_mlp_c4()
    model = _c4_model()
    # Not equivariant any more: the dense kernel.
    broken = dataclasses.replace(model, w2=model.w2 + 0.01 * torch.randn(model.w2.shape))
    assert broken.equivariance == 'none' and broken.c4_fourier_blocks is None
    blocks, groups = model.c4_fourier_blocks
    with pytest.raises(RuntimeError, match='block 2 must be float32'):
        ops.flow_mlp_c4(torch.zeros(3, 128), blocks[:2] + [blocks[0]] + blocks[3:],
                        model.w3, groups)
    with pytest.raises(RuntimeError, match='do not fit'):
        ops.flow_mlp_c4(torch.zeros(3, 64), blocks, model.w3, groups)
