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

"""Training: loss, frequencies, augmentation, a tiny run that learns, exact resume."""

import dataclasses
import math

import numpy as np
import pytest
import torch

from veckm_flow_ros.core.model import load_model
from veckm_flow_ros.learning import train

TINY = train.Recipe(pixel_radius=4, tau_s=0.008, num_sequences=4, duration_s=0.04, width=64,
                    height=48, blocks_per_sequence=2, targets_per_block=256,
                    augmentations_per_block=2, epochs=4, batch_size=128, batches_per_epoch=40,
                    hidden_size=32, num_features=32, validation_fraction=0.25,
                    learning_rate=1e-2, equivariance='none', block_s=0.004)


@pytest.fixture(scope='module', autouse=True)
def one_thread():
    # Tiny matrices: threads only add synchronisation (and fight on a shared machine).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope='module')
def tiny_bank():
    freq = train.standard_frequencies(TINY.num_features, TINY.seed)
    return freq, train.build_feature_bank(TINY, freq, log=lambda message: None)


def _bank_losses(mlps, features, flow, recipe):
    """Return the §2.6 loss of each MLP on the whole feature bank."""
    x = torch.from_numpy(features).float()
    target = torch.from_numpy(flow / recipe.flow_scale_px_s)
    with torch.no_grad():
        return [float(train.generalized_normal_flow_loss(mlp(x), target)) for mlp in mlps]


def test_loss_is_zero_on_the_circle_and_positive_off_it():
    gt = torch.tensor([[2.0, 0.0], [0.0, -3.0]])
    on_circle = gt / 2 + torch.tensor([[0.0, 1.0], [1.5, 0.0]])
    assert float(train.generalized_normal_flow_loss(on_circle, gt)) == pytest.approx(0.0,
                                                                                     abs=1e-6)
    assert float(train.generalized_normal_flow_loss(gt, gt)) == pytest.approx(-1.0, abs=1e-6)
    assert float(train.generalized_normal_flow_loss(-gt, gt)) > 1.0


def test_standard_frequencies():
    t, x, y = train.standard_frequencies(64, seed=3)
    assert t.dtype == torch.float32 and t.shape == (64,)
    # Same values (the quantiles), different orders.
    torch.testing.assert_close(torch.sort(t).values, torch.sort(x).values)
    assert not torch.equal(t, x) and not torch.equal(x, y)
    assert float(t.std()) == pytest.approx(5.0, rel=0.1)
    assert float(torch.sort(t).values[32]) == pytest.approx(5 * 0.0196, abs=1e-3)
    again = train.standard_frequencies(64, seed=3)
    assert all(torch.equal(a, b) for a, b in zip((t, x, y), again))


def test_transformed_frequencies_encode_transformed_events():
    from veckm_flow_ros import ops
    rng = np.random.default_rng(0)
    n = 300
    t_ns = torch.from_numpy(np.sort(rng.integers(0, 10_000_000, n)))
    x = torch.from_numpy(rng.integers(10, 31, n).astype(np.int32))
    y = torch.from_numpy(rng.integers(10, 31, n).astype(np.int32))
    freq_t, freq_x, freq_y = train.standard_frequencies(16, 0)
    targets = torch.arange(0, n, 7)
    for g in train.SQUARE_SYMMETRIES:
        fx, fy = train.transformed_frequencies(freq_x, freq_y, g)
        features, _ = ops.encode(t_ns, x, y, targets, 41, 41, freq_t, fx, fy, 0.005, 4)
        # Transform the events about the image centre (20, 20) with G.
        moved = torch.from_numpy(np.stack([x.numpy() - 20, y.numpy() - 20], 1) @ g.T + 20)
        expected, _ = ops.encode(t_ns, moved[:, 0].int().contiguous(),
                                 moved[:, 1].int().contiguous(), targets, 41, 41,
                                 freq_t, freq_x, freq_y, 0.005, 4)
        torch.testing.assert_close(features, expected, atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize('group_name', ['c4', 'd4'])
def test_symmetric_frequencies_are_orbits(group_name):
    group = train.symmetry_group(group_name)
    t, x, y = train.symmetric_frequencies(64, 0, group_name)
    assert t.shape == x.shape == (64,)
    assert float(x.std()) == pytest.approx(5.0, rel=0.15)
    assert float(t.std()) == pytest.approx(5.0, rel=0.15)
    # Every element of the group permutes the frequencies (T kept); all 64 are distinct.
    permutations = train.feature_permutations((t, x, y), group)
    assert permutations is not None and len(permutations) == len(group)
    assert len({(a, b, c) for a, b, c in zip(t.tolist(), x.tolist(), y.tolist())}) == 64
    assert train.feature_permutations(train.standard_frequencies(64, 0), group) is None
    with pytest.raises(ValueError, match='multiple of the group size 8'):
        train.symmetric_frequencies(36, 0, 'd4')


@pytest.mark.parametrize('group_name', ['c4', 'd4'])
def test_equivariant_mlp_turns_the_flow_with_the_events(group_name):
    """Encode events and their rotated/flipped copy: the flows differ by the same G."""
    from veckm_flow_ros import ops
    recipe = train.Recipe(equivariance=group_name, num_features=32, hidden_size=32)
    freq = train.recipe_frequencies(recipe)
    torch.manual_seed(1)
    mlp = train.make_mlp(recipe, 64, freq)
    w1, w2, w3 = mlp.weights()
    rng = np.random.default_rng(0)
    n = 600
    t_ns = torch.from_numpy(np.sort(rng.integers(0, 10_000_000, n)))
    x = rng.integers(10, 31, n)
    y = rng.integers(10, 31, n)
    targets = torch.arange(0, n, 5)

    def flows(xx, yy):
        features, _ = ops.encode(t_ns, torch.from_numpy(xx.astype(np.int32)),
                                 torch.from_numpy(yy.astype(np.int32)), targets, 41, 41,
                                 *freq, 0.005, 4)
        return torch.relu(torch.relu(features @ w1) @ w2) @ w3

    plain = flows(x, y)
    assert float(plain.abs().mean()) > 1e-3
    for g in train.symmetry_group(group_name):
        moved = np.stack([x - 20, y - 20], 1) @ g.T + 20
        turned = flows(moved[:, 0], moved[:, 1])
        expected = plain @ torch.from_numpy(g.T.astype(np.float32))
        torch.testing.assert_close(turned, expected, atol=2e-5, rtol=1e-4)
    # The exported weights are those the training forward uses.
    features = torch.randn(8, 64)
    torch.testing.assert_close(mlp(features), torch.relu(torch.relu(features @ w1) @ w2) @ w3)


def test_equivariant_training_run_learns(tmp_path):
    recipe = dataclasses.replace(TINY, equivariance='c4', augmentations_per_block=1)
    assert train.Recipe().equivariance == 'c4'  # the default
    freq = train.recipe_frequencies(recipe)
    features, flow, groups = train.build_feature_bank(recipe, freq, log=lambda message: None)
    torch.manual_seed(recipe.seed)
    untrained = train.make_mlp(recipe, features.shape[1], freq)
    mlp, _ = train.train_mlp(features, flow, groups, recipe, log=lambda message: None)
    before, after = _bank_losses((untrained, mlp), features, flow, recipe)
    assert after < before - 0.05
    # The checkpoint is an ordinary model that is found equivariant again when loaded.
    train.train(dataclasses.replace(recipe, num_sequences=2, epochs=1), tmp_path / 'c4.npz',
                tmp_path / 'work', log=lambda message: None)
    model = load_model(tmp_path / 'c4.npz')
    assert model.equivariance == 'c4' and model.metadata['recipe']['equivariance'] == 'c4'


def test_fine_tuning_starts_at_the_checkpoint(tmp_path):
    recipe = dataclasses.replace(TINY, equivariance='c4', augmentations_per_block=1,
                                 num_sequences=2, epochs=1)
    train.train(recipe, tmp_path / 'first.npz', tmp_path / 'work', log=lambda message: None)
    first = load_model(tmp_path / 'first.npz')
    tuned = dataclasses.replace(recipe, init_model=str(tmp_path / 'first.npz'))
    freq = train.recipe_frequencies(tuned)
    features, flow, groups = train.build_feature_bank(tuned, freq, log=lambda message: None)
    # Stopped before the first epoch: the MLP is exactly the checkpoint's.
    mlp, _ = train.train_mlp(features, flow, groups, tuned, stop_after_epoch=0,
                             log=lambda message: None)
    for found, expected in zip(mlp.weights(), (first.w1, first.w2, first.w3)):
        torch.testing.assert_close(found, expected.float(), atol=1e-6, rtol=1e-5)
    # A checkpoint with other frequencies (another seed) is refused, naming it.
    other = dataclasses.replace(tuned, seed=1)
    with pytest.raises(ValueError, match='does not match the recipe'):
        train.train_mlp(features, flow, groups, other, log=lambda message: None)


def test_older_recipes_keep_their_cache_names(tmp_path):
    # The fields added with 'full2' do not enter the names while at their defaults.
    path = tmp_path / 'sequences'
    train.training_sequence(dataclasses.replace(TINY, num_sequences=1), 0, path)
    names = [p.name for p in path.iterdir()]
    assert names == ['train_64x48_0.04s_noise-edges-checker-polygons-bars-pink_'
                     'translation-rotation-zoom-objects_0.npz']
    full2 = dataclasses.replace(TINY, **{k: v for k, v in train.FULL2_RECIPE.items()
                                         if k in ('textures', 'motions', 'speed_max_px_s')})
    sequence = train.training_sequence(full2, 0, path)
    assert len(sequence) > 0 and len(list(path.iterdir())) == 2
    assert 'spiral' in full2.motions and 'fine' in full2.textures


def test_contrast_and_threshold_options_reach_the_scenes_and_their_cache_names(tmp_path, capsys):
    from veckm_flow_ros import cli
    path = tmp_path / 'sequences'
    recipe = dataclasses.replace(TINY, num_sequences=1)
    low = dataclasses.replace(recipe, contrast_min=0.1, contrast_max=0.1,
                              contrast_distribution='log-uniform')
    default = train.training_sequence(recipe, 0, path)
    faint = train.training_sequence(low, 0, path)
    names = sorted(p.name.split('objects_')[1] for p in path.iterdir())
    assert names == ['0.npz', 'contrast-log-uniform-0.1-0.1_0.npz']
    # Same scene at a tenth or less of the contrast: far fewer events.
    assert 0 < len(faint) < 0.5 * len(default)
    assert cli.main(['train', '--out', str(tmp_path / 'm.npz'), '--work-dir', str(tmp_path),
                     '--contrast-range', '0.5', '0.2']) != 0
    assert '--contrast-range must be 0.01 <= LOW <= HIGH <= 10 (log intensity), got 0.5 ' \
        '0.2' in capsys.readouterr().err
    assert cli.main(['train', '--out', str(tmp_path / 'm.npz'), '--work-dir', str(tmp_path),
                     '--threshold-sigma-range', '0.01', '0.9']) != 0
    assert '--threshold-sigma-range must be 0 <= LOW <= HIGH <= 0.5 (log intensity), got ' \
        '0.01 0.9' in capsys.readouterr().err
    wide = dataclasses.replace(recipe, threshold_sigma_max=0.12)
    train.training_sequence(wide, 0, path)
    assert any(p.name.endswith('objects_sigma-0.01-0.12_0.npz') for p in path.iterdir())


def test_inverse_density_weights_flatten_the_speed_histogram():
    speeds = np.concatenate([np.full(700, 10.0), np.full(300, 1000.0)])
    flow = np.stack([speeds, np.zeros_like(speeds)], 1)
    weights = train.inverse_density_weights(flow)
    assert weights.sum() == pytest.approx(1.0)
    assert weights[speeds == 10.0].sum() == pytest.approx(0.5)
    # A lone sample is boosted at most max_boost times the average-density weight.
    speeds = np.concatenate([np.full(999, 10.0), [1000.0]])
    flow = np.stack([speeds, np.zeros_like(speeds)], 1)
    weights = train.inverse_density_weights(flow, max_boost=4.0)
    assert weights[-1] / weights[0] == pytest.approx(999 / 125)


def test_tiny_training_run_learns(tiny_bank):
    freq, (features, flow, groups) = tiny_bank
    assert len(flow) > 500 and features.dtype == np.float16
    assert np.isfinite(flow).all()
    torch.manual_seed(TINY.seed)
    untrained = train.FlowMLP(features.shape[1], TINY.hidden_size)
    mlp, state = train.train_mlp(features, flow, groups, TINY, log=lambda message: None)
    before, after = _bank_losses((untrained, mlp), features, flow, TINY)
    assert after < before - 0.05
    assert len(state.history) == TINY.epochs


def test_resume_is_identical(tiny_bank, tmp_path):
    _, (features, flow, groups) = tiny_bank
    quiet = {'log': lambda message: None}
    straight, _ = train.train_mlp(features, flow, groups, TINY, **quiet)
    state_path = tmp_path / 'state.pt'
    train.train_mlp(features, flow, groups, TINY, state_path, stop_after_epoch=1, **quiet)
    resumed, state = train.train_mlp(features, flow, groups, TINY, state_path, resume=True,
                                     **quiet)
    assert state.epoch == TINY.epochs
    for a, b in zip(straight.weights(), resumed.weights()):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    other = dataclasses.replace(TINY, learning_rate=1e-4)
    with pytest.raises(ValueError, match='another recipe'):
        train.train_mlp(features, flow, groups, other, state_path, resume=True, **quiet)


def test_train_writes_a_loadable_checkpoint(tmp_path):
    recipe = dataclasses.replace(TINY, num_sequences=2, epochs=1)
    train.train(recipe, tmp_path / 'tiny.npz', tmp_path / 'work', log=lambda message: None)
    model = load_model(tmp_path / 'tiny.npz')
    assert model.pixel_radius == 4 and model.tau_s == pytest.approx(0.008)
    assert model.flow_scale_px_s == 60.0
    assert model.metadata['recipe']['seed'] == 0
    assert model.metadata['data']['textures'] == list(recipe.textures)
    assert math.isfinite(model.metadata['history'][-1]['train_loss'])
    torch.testing.assert_close(model.freq_t, train.standard_frequencies(32, 0)[0])


def test_noise_targets_are_labelled_zero_and_pulled_towards_zero():
    recipe = dataclasses.replace(TINY, num_sequences=2, noise_target_fraction=0.5)
    freq = train.standard_frequencies(recipe.num_features, recipe.seed)
    features, flow, _ = train.build_feature_bank(recipe, freq, log=lambda message: None)
    plain_features, plain_flow, _ = train.build_feature_bank(TINY, freq,
                                                             log=lambda message: None)
    assert not np.any(np.all(plain_flow == 0, axis=1))
    is_noise = np.all(flow == 0, axis=1)
    # Up to half as many noise targets as signal targets (fewer when a block has few).
    assert 0 < is_noise.sum() <= 0.5 * (~is_noise).sum() + 1
    # The loss of a zero label is the norm term only: zero for a zero flow, growing with |n|.
    zero = torch.zeros(3, 2)
    assert float(train.generalized_normal_flow_loss(zero, zero)) == pytest.approx(0.0)
    small = float(train.generalized_normal_flow_loss(torch.full((3, 2), 0.1), zero))
    large = float(train.generalized_normal_flow_loss(torch.full((3, 2), 1.0), zero))
    assert 0 < small < large


def test_draw_handles_banks_beyond_multinomials_limit():
    generator = torch.Generator().manual_seed(0)
    size = 2 ** 24 + 10  # torch.multinomial refuses more than 2^24 categories
    weights = torch.zeros(size, dtype=torch.float64)
    weights[-1], weights[3] = 0.75, 0.25
    draws = train._draw(weights, 4000, generator)
    assert set(draws.tolist()) == {3, size - 1}
    assert float((draws == size - 1).double().mean()) == pytest.approx(0.75, abs=0.03)


def test_3d_scenes_join_the_bank_without_their_occlusion_events(tmp_path):
    recipe = dataclasses.replace(TINY, num_sequences=1, scenes3d=1, duration_s=0.06)
    path = tmp_path / 'sequences'
    scene3d = train.training_sequence(recipe, 1, path)
    # The 3D scene: cached under its own name, ground truth marked at depth edges.
    assert any(p.name.startswith('train3d_64x48_0.06s_constant_') for p in path.iterdir())
    assert scene3d.at_occlusion.any() and (~scene3d.at_occlusion & ~scene3d.is_noise).any()
    freq = train.standard_frequencies(recipe.num_features, recipe.seed)
    features, flow, groups = train.build_feature_bank(recipe, freq, path,
                                                      log=lambda message: None)
    assert set(np.unique(groups)) == {0, 1}
    # Every 3D target's label is the exact flow of a signal event not at an occlusion (up to
    # the bank's augmentation: a symmetry of the square keeps the speed).
    trusted = ~scene3d.is_noise & ~scene3d.at_occlusion
    speeds = np.sort(np.hypot(*scene3d.flow_px_s[trusted].T.astype(np.float64)))
    labels = np.hypot(*flow[groups == 1].T.astype(np.float64))
    assert len(labels) > 0
    nearest = np.clip(np.searchsorted(speeds, labels), 1, len(speeds) - 1)
    gap = np.minimum(np.abs(speeds[nearest] - labels), np.abs(speeds[nearest - 1] - labels))
    assert np.all(gap <= 1e-3 * np.maximum(labels, 1.0))
    occluded = np.hypot(*scene3d.flow_px_s[scene3d.at_occlusion & ~scene3d.is_noise].T)
    assert not np.isin(np.round(labels, 3), np.setdiff1d(np.round(occluded, 3),
                                                         np.round(speeds, 3))).any()
