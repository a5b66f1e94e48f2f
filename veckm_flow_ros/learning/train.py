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
Train a VecKM normal-flow model on simulated events with exact ground truth.

Recipe (loss: docs/algorithm.md), in three cached stages under a work directory:

1. data: `num_sequences` random scenes from the training textures and motions
   (simulate.TRAIN_TEXTURES / TRAIN_MOTIONS; the held-out ones are never seen);
2. feature bank: in each sequence, `blocks_per_sequence` random target blocks of `block_s`;
   each block is encoded like the estimator does (context = the events within +-tau of the
   block centre) by the compiled encoder. Targets are drawn from the block's signal events
   with weights inversely proportional to the density of log|u|. Every block is encoded under
   `augmentations_per_block` random elements of the square's symmetry group (rotations by
   90 degrees and flips): transforming the frequency vectors (X, Y) is exactly the same as
   transforming the event cloud (the pixel lattice and the square window map onto
   themselves), and the ground-truth flow is transformed with it;
3. MLP: the paper's shape (2D -> H -> H -> 2, ReLU, no biases), trained on the bank with the
   generalized-normal-flow loss, uniform batches (weighted_sampling=True draws them with
   inverse-density weights again), AdamW with cosine decay. The state (weights, optimiser,
   epoch) is checkpointed after every epoch; `resume` continues bit-identically.
   With equivariance 'c4' (the default) or 'd4' the MLP is exactly equivariant to rotations
   by 90 degrees (and flips): its weights are averaged over the group (EquivariantFlowMLP,
   learning/flow_mlp.py),
   on frequencies closed under the group (symmetry.symmetric_frequencies). The saved model is
   an ordinary MLP of the same shape and cost.

Frequencies ('none'): 5 x the standard-normal quantiles at (k + 0.5) / D, shuffled
independently for T, X and Y with the seed; ('c4', 'd4'): D / |G| orbits of the group, see
symmetric_frequencies. Saved with the model. The MLP predicts flow
in units of flow_scale_px_s (60 px/s, one pixel per 1/60 s like the published models, so the
loss's lambda = 0.1 means the same as in the authors' recipe).
"""

import dataclasses
from dataclasses import dataclass, field
import json
import math
import pathlib
import statistics
import time
from typing import Callable, Optional, Tuple

import numpy as np
import torch

from veckm_flow_ros.core import metrics
from veckm_flow_ros.core.model import save_model, VecKMFlowModel
from veckm_flow_ros.core.symmetry import (  # noqa: F401 - part of this module's interface
    feature_permutations, SQUARE_SYMMETRIES, symmetric_frequencies, symmetry_group,
    transformed_frequencies)
from veckm_flow_ros.learning import simulate
from veckm_flow_ros.learning.flow_mlp import EquivariantFlowMLP, FlowMLP


@dataclass
class Recipe:
    """Everything that determines a trained model (saved in its metadata)."""

    pixel_radius: int = 8
    tau_s: float = 0.016
    num_features: int = 64
    hidden_size: int = 128
    flow_scale_px_s: float = 60.0
    seed: int = 0
    # Data.
    num_sequences: int = 160
    duration_s: float = 0.12
    width: int = 240
    height: int = 180
    textures: Tuple[str, ...] = simulate.TRAIN_TEXTURES
    motions: Tuple[str, ...] = simulate.TRAIN_MOTIONS
    # 3D scenes (learning/simulate3d.py: a camera moving through a room of textured planes,
    # perspective, creases and outlines, all four trajectories in turn), appended to the
    # num_sequences 2D scenes; their seeds are apart from the 3D held-out set's.
    scenes3d: int = 0
    # Typical image speed of a scene, log-uniform in [speed_min_px_s, speed_max_px_s].
    speed_min_px_s: float = simulate.SPEED_RANGE_PX_S[0]
    speed_max_px_s: float = simulate.SPEED_RANGE_PX_S[1]
    # Texture contrast of a layer [log intensity], drawn in [contrast_min, contrast_max],
    # 'uniform' or 'log-uniform' (contrast_distribution); low contrast makes sparse, noisy
    # edges of fine texture (model card, "Low-contrast fine texture").
    contrast_min: float = simulate.CONTRAST_RANGE[0]
    contrast_max: float = simulate.CONTRAST_RANGE[1]
    contrast_distribution: str = 'uniform'
    # Spread (standard deviation) of the random sensors' per-pixel thresholds [log intensity],
    # uniform in [threshold_sigma_min, threshold_sigma_max].
    threshold_sigma_min: float = simulate.THRESHOLD_SIGMA_RANGE[0]
    threshold_sigma_max: float = simulate.THRESHOLD_SIGMA_RANGE[1]
    # Feature bank.
    # An equivariant model gets the same loss for every rotated copy of a sample, so one
    # random symmetry per block (flips still teach a 'c4' model) and 4x the blocks instead.
    blocks_per_sequence: int = 24
    # Targets up to block_s / 2 either side of the centre of their context, as the estimator
    # will show them: train on the longest block used (4 ms blocks trained models that were
    # worse at 20 ms: relative PEE 29.5 -> 53.3 %, model card). `veckm-flow train` uses 2 tau,
    # the node's automatic block, unless told otherwise; this default suits tau >= 10 ms.
    block_s: float = 0.020
    targets_per_block: int = 512
    augmentations_per_block: int = 1
    # Background-noise events added as targets with flow label 0, as a share of the signal
    # targets of a block: the loss (norm term only, since u = 0) pulls their flow to zero, so
    # the model does not invent a fixed direction for isolated events (their feature is the
    # constant sqrt(D) (1, .., 1, 0, .., 0), whatever the scene).
    noise_target_fraction: float = 0.0
    # Weight of the noise targets' term, norm term with u = 0: (log(lambda + |n|) - log
    # lambda)^2, averaged over the batch. Weight 1 (as strong as the signal's norm term) makes
    # the model give zero flow on many sparse signal events too (measured: 42 % coverage on
    # held-out gratings).
    noise_loss_weight: float = 1.0
    # 'c4' or 'd4': frequencies closed under the group's rotations (and flips), so a rotated
    # or flipped event cloud has permuted features, and an MLP whose weights are averaged over
    # the group (exactly equivariant: rotating the neighbourhood rotates the flow). The trained
    # weights are an ordinary MLP; inference costs the same. 'none': independent frequencies.
    equivariance: str = 'c4'
    # Optimisation.
    epochs: int = 30
    batch_size: int = 1024
    batches_per_epoch: int = 300
    learning_rate: float = 2e-3
    weight_decay: float = 0.0
    # Targets are already drawn with inverse-density weights into the bank; weighting the
    # batches again over-weights rare speeds (measured: lower %Pos on held-out scenes).
    weighted_sampling: bool = False
    loss_lambda: float = 0.1
    validation_fraction: float = 0.05
    # Fine-tuning: start the MLP from this checkpoint's weights (same D, H, frequencies and
    # equivariance) instead of random ones; '' trains from scratch.
    init_model: str = ''

    def to_json(self):
        return dataclasses.asdict(self)


# The defaults are the quick recipe (minutes per model). The full one made the shipped r10
# model: about 14 min of one CPU core for the feature bank and the MLP, plus about 6 min once
# to simulate the 800 sequences (cached in the work directory). The shipped r8 used 1600
# sequences and 800 batches per epoch (model card).
FULL_RECIPE = {'num_sequences': 800, 'epochs': 100, 'batches_per_epoch': 600}
# 'full2': the full budget on data that also holds dense fine texture (many events per pixel),
# zoom combined with rotation, and typical speeds up to 3000 px/s (model card).
FULL2_RECIPE = dict(FULL_RECIPE, textures=simulate.TRAIN_TEXTURES + simulate.DENSE_TEXTURES,
                    motions=simulate.TRAIN_MOTIONS + simulate.DENSE_MOTIONS,
                    speed_max_px_s=3000.0)
RECIPES = {'quick': {}, 'full': FULL_RECIPE, 'full2': FULL2_RECIPE}
# Fields added after the first models: left out of cache keys at their defaults, so the
# older recipes keep their cached sequences and banks.
_NEW_FIELD_DEFAULTS = {'speed_min_px_s': simulate.SPEED_RANGE_PX_S[0],
                       'speed_max_px_s': simulate.SPEED_RANGE_PX_S[1], 'init_model': '',
                       'scenes3d': 0, 'contrast_min': simulate.CONTRAST_RANGE[0],
                       'contrast_max': simulate.CONTRAST_RANGE[1],
                       'contrast_distribution': 'uniform',
                       'threshold_sigma_min': simulate.THRESHOLD_SIGMA_RANGE[0],
                       'threshold_sigma_max': simulate.THRESHOLD_SIGMA_RANGE[1]}
# First seed of the 3D training scenes (simulate3d.heldout_3d_specs uses 3,700,000 + i).
TRAIN_3D_SEED = 5_000_000


def standard_frequencies(num_features: int, seed: int):
    """
    Return T, X, Y float32 [D]: 5 x standard-normal quantiles, each shuffled by the seed.

    The quantiles are at probabilities (k + 0.5) / D, k = 0..D-1.
    """
    probabilities = (torch.arange(num_features, dtype=torch.float64) + 0.5) / num_features
    quantiles = 5.0 * math.sqrt(2.0) * torch.erfinv(2 * probabilities - 1)
    generator = torch.Generator().manual_seed(int(seed))
    return tuple(quantiles[torch.randperm(num_features, generator=generator)].to(torch.float32)
                 for _ in range(3))


def generalized_normal_flow_loss(pred, gt, loss_lambda=0.1):
    """
    Return the generalised normal-flow loss, mean over the batch (pred, gt float [B, 2]).

    pred and gt are in the model's unit (docs/algorithm.md, The MLP);
    angular = -cos(n - u/2, u); norm = (log(lambda + |u/2|) - log(lambda + |n - u/2|))^2.
    """
    offset = pred - gt / 2
    angular = -torch.nn.functional.cosine_similarity(offset, gt, dim=1, eps=1e-8)
    norm = (torch.log(loss_lambda + torch.linalg.norm(gt / 2, dim=1))
            - torch.log(loss_lambda + torch.linalg.norm(offset, dim=1))) ** 2
    return angular.mean() + norm.mean()


def inverse_density_weights(flow_px_s, bins=40, max_boost=4.0):
    """
    Weights (N,) float64 proportional to 1 / histogram density of log|u|, normalised.

    Sparse bins get at most max_boost times the weight of a bin of average density, so a few
    extreme samples cannot dominate the batches.
    """
    log_speed = np.log(np.maximum(np.hypot(flow_px_s[:, 0], flow_px_s[:, 1]), 1e-3))
    counts, edges = np.histogram(log_speed, bins=bins)
    which = np.clip(np.searchsorted(edges, log_speed, side='right') - 1, 0, bins - 1)
    floor = len(log_speed) / np.count_nonzero(counts) / max_boost
    weights = 1.0 / np.maximum(counts[which], floor)
    return weights / weights.sum()


# --------------------------------------------------------------------------------------------
# Stage 1 and 2: data and feature bank


def _log(message):
    print(message, flush=True)


def training_sequence(recipe: Recipe, index: int, cache_dir: Optional[pathlib.Path] = None):
    """Return the index-th training sequence (simulated, or read from the cache)."""
    if index >= recipe.num_sequences:
        return _training_sequence3d(recipe, index - recipe.num_sequences, cache_dir)
    seed = recipe.seed * 100003 + index
    speed_range = (recipe.speed_min_px_s, recipe.speed_max_px_s)
    contrast_range = (recipe.contrast_min, recipe.contrast_max)
    path = None
    if cache_dir is not None:
        speeds = '' if speed_range == simulate.SPEED_RANGE_PX_S else \
            f'{speed_range[0]:g}-{speed_range[1]:g}px_s_'
        contrasts = '' if (contrast_range == simulate.CONTRAST_RANGE
                           and recipe.contrast_distribution == 'uniform') else \
            f'contrast-{recipe.contrast_distribution}-{contrast_range[0]:g}-' \
            f'{contrast_range[1]:g}_'
        sigma_range = (recipe.threshold_sigma_min, recipe.threshold_sigma_max)
        if sigma_range != simulate.THRESHOLD_SIGMA_RANGE:
            contrasts += f'sigma-{sigma_range[0]:g}-{sigma_range[1]:g}_'
        path = cache_dir / (f'train_{recipe.width}x{recipe.height}_{recipe.duration_s}s_'
                            f'{"-".join(recipe.textures)}_{"-".join(recipe.motions)}_{speeds}'
                            f'{contrasts}{seed}.npz')

    def make():
        scene = simulate.make_scene('random', 'random', seed=seed, width=recipe.width,
                                    height=recipe.height, textures=recipe.textures,
                                    motions=recipe.motions, speed_range_px_s=speed_range,
                                    contrast_range=contrast_range,
                                    contrast_distribution=recipe.contrast_distribution,
                                    threshold_sigma_range=(recipe.threshold_sigma_min,
                                                           recipe.threshold_sigma_max))
        return simulate.simulate(scene, recipe.duration_s, seed=seed)
    return _cached_sequence(path, simulate.load_npz, make, simulate.save_npz)


def _cached_sequence(path, load, make, save):
    """Return load(path) if the cache has it, else make(), written to path when given."""
    if path is not None and path.is_file():
        return load(path)
    sequence = make()
    if path is not None:
        # Written under another name and renamed: an interrupted run leaves no broken cache.
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(path.stem + '.partial.npz')
        save(sequence, temporary)
        temporary.replace(path)
    return sequence


def _training_sequence3d(recipe: Recipe, index: int, cache_dir: Optional[pathlib.Path]):
    """Return the index-th 3D training scene (trajectories in turn, noise 0.02-2 Hz/px)."""
    from veckm_flow_ros.learning import simulate3d
    seed = TRAIN_3D_SEED + recipe.seed * 100003 + index
    trajectory = simulate3d.TRAJECTORIES[index % len(simulate3d.TRAJECTORIES)]
    path = None
    if cache_dir is not None:
        path = cache_dir / (f'train3d_{recipe.width}x{recipe.height}_{recipe.duration_s}s_'
                            f'{trajectory}_{seed}.npz')

    def make():
        noise_hz = float(np.exp(np.random.default_rng(seed).uniform(np.log(0.02),
                                                                    np.log(2.0))))
        scene = simulate3d.make_scene3d(trajectory, seed=seed, width=recipe.width,
                                        height=recipe.height, noise_hz=noise_hz)
        return simulate3d.simulate3d(scene, recipe.duration_s, seed=seed)
    return _cached_sequence(path, simulate3d.load_npz3d, make, simulate3d.save_npz3d)


def _encode(events_slice, targets, width, height, freq, tau_s, pixel_radius):
    from veckm_flow_ros import ops
    t_ns, x, y = events_slice
    return ops.encode(t_ns, x, y, targets, width, height, freq[0], freq[1], freq[2], tau_s,
                      pixel_radius)


def sequence_features(sequence, recipe: Recipe, freq, rng: np.random.Generator):
    """
    Feature-bank rows of one sequence.

    Returns (features float16 [S, 2D], flow float32 [S, 2] in px/s, both in the augmented
    frames; flow (0, 0) marks a background-noise target). Blocks without signal events
    contribute nothing.
    """
    events = sequence.events
    t_ns = torch.from_numpy(events.t_ns)
    x = torch.from_numpy(events.x.astype(np.int32))
    y = torch.from_numpy(events.y.astype(np.int32))
    tau_ns = int(round(recipe.tau_s * 1e9))
    block_ns = int(round(recipe.block_s * 1e9))
    duration_ns = int(events.t_ns[-1]) if len(events) else 0
    signal = ~sequence.is_noise
    # Events at a 3D scene's depth edges carry the ground truth of the surface at the pixel
    # centre, not necessarily of the contour that fired them: never a target.
    trusted = signal & ~np.asarray(getattr(sequence, 'at_occlusion', np.zeros(len(signal), bool)))
    features, flows = [], []
    for _ in range(recipe.blocks_per_sequence):
        # Centres at least tau from both ends, so every context window is complete.
        if duration_ns <= 2 * tau_ns + block_ns:
            break
        centre = int(rng.integers(tau_ns + block_ns // 2, duration_ns - tau_ns - block_ns // 2))
        lo, hi = np.searchsorted(events.t_ns, [centre - tau_ns, centre + tau_ns + 1])
        tlo, thi = np.searchsorted(events.t_ns, [centre - block_ns // 2,
                                                 centre + block_ns // 2 + 1])
        candidates = np.arange(tlo, thi)[trusted[tlo:thi]]
        if len(candidates) == 0:
            continue
        count = min(recipe.targets_per_block, len(candidates))
        weights = inverse_density_weights(sequence.flow_px_s[candidates])
        chosen = rng.choice(candidates, size=count, replace=False, p=weights)
        noise = np.arange(tlo, thi)[~signal[tlo:thi]]
        noise_count = min(len(noise), int(round(recipe.noise_target_fraction * count)))
        if noise_count:
            chosen = np.concatenate([chosen, rng.choice(noise, size=noise_count,
                                                        replace=False)])
        chosen = np.sort(chosen)
        # Noise targets are supervised towards zero flow.
        chosen_flow = np.where(signal[chosen, None], sequence.flow_px_s[chosen], 0.0)
        targets = torch.from_numpy(chosen - lo)
        symmetries = rng.choice(len(SQUARE_SYMMETRIES), size=recipe.augmentations_per_block,
                                replace=False)
        for which in symmetries:
            g = SQUARE_SYMMETRIES[which]
            fx, fy = transformed_frequencies(freq[1], freq[2], g)
            block_features, block_count = _encode(
                (t_ns[lo:hi], x[lo:hi], y[lo:hi]), targets, sequence.width, sequence.height,
                (freq[0], fx, fy), recipe.tau_s, recipe.pixel_radius)
            valid = (block_count > 0).numpy()
            # float16 halves the bank; |features| <= sqrt(D), so 3 digits are plenty.
            features.append(block_features.numpy()[valid].astype(np.float16))
            flows.append((chosen_flow @ g.T.astype(np.float32))[valid])
    if not features:
        d = 2 * recipe.num_features
        return np.zeros((0, d), np.float16), np.zeros((0, 2), np.float32)
    return np.concatenate(features), np.concatenate(flows).astype(np.float32)


def build_feature_bank(recipe: Recipe, freq, cache_dir=None, log: Callable = _log):
    """Stage 1 + 2: features float16 [S, 2D], flow float32 [S, 2] px/s, group int32 [S]."""
    rng = np.random.default_rng(recipe.seed + 7)
    features, flows, groups = [], [], []
    start = time.perf_counter()
    total_sequences = recipe.num_sequences + recipe.scenes3d
    for index in range(total_sequences):
        sequence = training_sequence(recipe, index, cache_dir)
        block_features, block_flow = sequence_features(sequence, recipe, freq, rng)
        features.append(block_features)
        flows.append(block_flow)
        groups.append(np.full(len(block_flow), index, np.int32))
        if (index + 1) % 10 == 0 or index + 1 == total_sequences:
            total = sum(len(f) for f in flows)
            log(f'  bank: {index + 1}/{total_sequences} sequences, {total} samples, '
                f'{time.perf_counter() - start:.0f} s')
    return np.concatenate(features), np.concatenate(flows), np.concatenate(groups)


# --------------------------------------------------------------------------------------------
# Stage 3: the MLP


def make_mlp(recipe: Recipe, input_size: int, freq=None):
    """Return the recipe's MLP: FlowMLP, or EquivariantFlowMLP when recipe.equivariance is set."""
    if recipe.equivariance == 'none':
        return FlowMLP(input_size, recipe.hidden_size)
    group = symmetry_group(recipe.equivariance)
    if freq is None:
        freq = symmetric_frequencies(recipe.num_features, recipe.seed, recipe.equivariance)
    permutations = feature_permutations(freq, group)
    if permutations is None:
        raise ValueError(f'the frequencies are not closed under {recipe.equivariance}')
    return EquivariantFlowMLP(input_size, recipe.hidden_size, group, permutations)


def recipe_frequencies(recipe: Recipe):
    """Return the frequencies T, X, Y a recipe trains with."""
    if recipe.equivariance == 'none':
        return standard_frequencies(recipe.num_features, recipe.seed)
    return symmetric_frequencies(recipe.num_features, recipe.seed, recipe.equivariance)


def _batch_loss(pred, gt, recipe: Recipe):
    """Loss of a batch: signal rows by the §2.6 loss, zero-flow (noise) rows pulled to 0."""
    is_noise = ~torch.any(gt != 0, dim=1)
    if not bool(is_noise.any()):
        return generalized_normal_flow_loss(pred, gt, recipe.loss_lambda)
    signal = ~is_noise
    loss = generalized_normal_flow_loss(pred[signal], gt[signal], recipe.loss_lambda) \
        if bool(signal.any()) else pred.sum() * 0
    lam = recipe.loss_lambda
    noise_term = (torch.log(lam + torch.linalg.norm(pred[is_noise], dim=1)) - math.log(lam)) ** 2
    return loss + recipe.noise_loss_weight * noise_term.sum() / len(gt)


@dataclass
class TrainState:
    epoch: int = 0
    history: list = field(default_factory=list)


def _load_initial_weights(mlp, recipe: Recipe):
    """Copy recipe.init_model's MLP weights into mlp (fine-tuning); ValueError on mismatch."""
    from veckm_flow_ros.core.model import load_model
    model = load_model(recipe.init_model)
    freq = recipe_frequencies(recipe)
    same_freq = all(torch.equal(a.float(), b.float()) for a, b in
                    zip((model.freq_t, model.freq_x, model.freq_y), freq))
    if (model.num_features != recipe.num_features or model.w2.shape[0] != recipe.hidden_size
            or not same_freq or model.equivariance != recipe.equivariance):
        raise ValueError(f'--init-model {recipe.init_model} does not match the recipe '
                         f'(D = {model.num_features}, hidden {model.w2.shape[0]}, '
                         f'equivariance {model.equivariance!r}, same frequencies: {same_freq});'
                         f' it needs D = {recipe.num_features}, hidden {recipe.hidden_size}, '
                         f'equivariance {recipe.equivariance!r} and seed {recipe.seed}')
    with torch.no_grad():
        # The model's weights already commute with the group: averaging leaves them as they
        # are, so the equivariant MLP starts exactly at the checkpoint.
        for layer, weight in zip((mlp.layer1, mlp.layer2, mlp.layer3),
                                 (model.w1, model.w2, model.w3)):
            layer.weight.copy_(weight.T.float())


def _split(groups, fraction, seed):
    """Split samples by sequence: (train_index, validation_index)."""
    ids = np.unique(groups)
    rng = np.random.default_rng(seed + 11)
    held = rng.choice(ids, size=max(1, int(round(fraction * len(ids)))), replace=False) \
        if len(ids) > 1 and fraction > 0 else np.array([], ids.dtype)
    is_validation = np.isin(groups, held)
    return np.flatnonzero(~is_validation), np.flatnonzero(is_validation)


def _draw(weights, count: int, generator) -> torch.Tensor:
    """
    Draw `count` indices with replacement, with probabilities `weights` (float64, sum 1).

    torch.multinomial takes at most 2^24 categories; a larger bank (e.g. 19 M samples with
    20 ms blocks) is sampled by inverting the cumulative weights instead.
    """
    if len(weights) <= 2 ** 24:
        return torch.multinomial(weights, count, replacement=True, generator=generator)
    cumulative = torch.cumsum(weights, 0)
    uniform = torch.rand(count, generator=generator, dtype=torch.float64) * cumulative[-1]
    return torch.searchsorted(cumulative, uniform).clamp_(max=len(weights) - 1)


def train_mlp(features, flow_px_s, groups, recipe: Recipe, state_path=None, resume=False,
              log: Callable = _log, stop_after_epoch: Optional[int] = None):
    """
    Stage 3: train the MLP; returns (FlowMLP, TrainState).

    With state_path, the state is written after each epoch; resume=True continues from it.
    Results depend only on the data and the recipe (each epoch's batches are drawn from a
    generator seeded by (seed, epoch)), so a resumed run equals an uninterrupted one.
    stop_after_epoch: return after that epoch (an interrupted run, for tests).
    """
    torch.manual_seed(recipe.seed)
    mlp = make_mlp(recipe, features.shape[1])
    if recipe.init_model:
        _load_initial_weights(mlp, recipe)
        log(f'  starting from the weights of {recipe.init_model}')
    optimizer = torch.optim.AdamW(mlp.parameters(), lr=recipe.learning_rate,
                                  weight_decay=recipe.weight_decay)
    total_steps = recipe.epochs * recipe.batches_per_epoch

    def cosine(step):
        return 0.5 * (1 + math.cos(math.pi * min(step, total_steps) / total_steps))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, cosine)
    state = TrainState()
    if resume and state_path is not None and pathlib.Path(state_path).is_file():
        saved = torch.load(state_path, weights_only=True)
        if saved['recipe'] != json.dumps(recipe.to_json(), sort_keys=True):
            raise ValueError(f'{state_path} was written by another recipe; remove it or '
                             'train without --resume')
        mlp.load_state_dict(saved['mlp'])
        optimizer.load_state_dict(saved['optimizer'])
        scheduler.load_state_dict(saved['scheduler'])
        state = TrainState(int(saved['epoch']), json.loads(saved['history']))
        log(f'  resumed at epoch {state.epoch}')

    train_index, validation_index = _split(groups, recipe.validation_fraction, recipe.seed)
    x_all = torch.from_numpy(features)
    target_all = torch.from_numpy(flow_px_s / recipe.flow_scale_px_s)
    if recipe.weighted_sampling:
        weights = torch.from_numpy(inverse_density_weights(flow_px_s[train_index]))
    else:
        weights = torch.full((len(train_index),), 1.0 / len(train_index), dtype=torch.float64)
    train_index = torch.from_numpy(train_index)
    validation_index = torch.from_numpy(validation_index)
    last_epoch = recipe.epochs if stop_after_epoch is None else min(stop_after_epoch,
                                                                    recipe.epochs)
    while state.epoch < last_epoch:
        start = time.perf_counter()
        generator = torch.Generator().manual_seed(recipe.seed * 1000003 + state.epoch)
        draws = _draw(weights, recipe.batches_per_epoch * recipe.batch_size, generator)
        draws = train_index[draws].view(recipe.batches_per_epoch, recipe.batch_size)
        mlp.train()
        losses = []
        for batch in draws:
            loss = _batch_loss(mlp(x_all[batch].float()), target_all[batch], recipe)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            losses.append(float(loss.detach()))
        state.epoch += 1
        row = {'epoch': state.epoch, 'train_loss': statistics.fmean(losses)}
        if len(validation_index):
            with torch.no_grad():
                pred = mlp(x_all[validation_index].float()) * recipe.flow_scale_px_s
            gt = flow_px_s[validation_index.numpy()]
            is_noise = ~np.any(gt != 0, axis=1)
            scores = metrics.flow_metrics(pred.numpy()[~is_noise], gt[~is_noise])
            row.update(validation_pos=scores['pos'], validation_rel_pee=scores['rel_pee'])
            if is_noise.any():
                row['validation_noise_median_px_s'] = float(
                    np.median(np.linalg.norm(pred.numpy()[is_noise], axis=1)))
        state.history.append(row)
        log(f'  epoch {state.epoch}/{recipe.epochs}: loss {row["train_loss"]:.4f}'
            + (f', validation %Pos {100 * row["validation_pos"]:.2f}, relPEE '
               f'{100 * row["validation_rel_pee"]:.2f}%' if 'validation_pos' in row else '')
            + (f', noise median |flow| {row["validation_noise_median_px_s"]:.1f} px/s'
               if 'validation_noise_median_px_s' in row else '')
            + f' ({time.perf_counter() - start:.1f} s)')
        if state_path is not None:
            state_path = pathlib.Path(state_path)
            state_path.parent.mkdir(parents=True, exist_ok=True)
            temporary = state_path.with_name(state_path.name + '.tmp')
            torch.save({'mlp': mlp.state_dict(), 'optimizer': optimizer.state_dict(),
                        'scheduler': scheduler.state_dict(), 'epoch': state.epoch,
                        'history': json.dumps(state.history),
                        'recipe': json.dumps(recipe.to_json(), sort_keys=True)}, temporary)
            temporary.replace(state_path)
    return mlp, state


# --------------------------------------------------------------------------------------------
# Everything


def train(recipe: Recipe, out_path, work_dir, resume=False, name=None,
          log: Callable = _log) -> VecKMFlowModel:
    """
    Run the recipe end to end and write the model to out_path (save_model format).

    work_dir caches the simulated sequences, the feature bank and the training state.
    """
    work_dir = pathlib.Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    torch.manual_seed(recipe.seed)
    freq = recipe_frequencies(recipe)
    # The bank depends on the data and encoding fields only ('equivariance' changes the
    # frequencies; left out when 'none' so earlier banks keep their names).
    key = json.dumps({k: v for k, v in recipe.to_json().items()
                      if k not in ('epochs', 'batch_size', 'batches_per_epoch',
                                   'learning_rate', 'loss_lambda', 'validation_fraction',
                                   'hidden_size', 'weight_decay', 'weighted_sampling',
                                   'noise_loss_weight', 'init_model')
                      and not (k == 'equivariance' and v == 'none')
                      and not (k in _NEW_FIELD_DEFAULTS and v == _NEW_FIELD_DEFAULTS[k])},
                     sort_keys=True)
    tag = f'r{recipe.pixel_radius}_tau{recipe.tau_s * 1e3:g}ms_{abs(hash_text(key)):016x}'
    bank_path = work_dir / f'bank_{tag}.npz'
    if bank_path.is_file():
        with np.load(bank_path) as bank:
            features, flow, groups = bank['features'], bank['flow'], bank['groups']
        log(f'feature bank: {len(flow)} samples from {bank_path}')
    else:
        scenes3d = f' + {recipe.scenes3d} 3D' if recipe.scenes3d else ''
        log(f'feature bank: simulating {recipe.num_sequences}{scenes3d} sequences and encoding '
            f'(r = {recipe.pixel_radius}, tau = {recipe.tau_s * 1e3:g} ms)')
        features, flow, groups = build_feature_bank(recipe, freq, work_dir / 'sequences', log)
        np.savez(bank_path, features=features, flow=flow, groups=groups)
    bank_s = time.perf_counter() - start
    log(f'training {recipe.epochs} epochs x {recipe.batches_per_epoch} batches of '
        f'{recipe.batch_size}')
    mlp, state = train_mlp(features, flow, groups, recipe, work_dir / f'state_{tag}.pt',
                           resume, log)
    w1, w2, w3 = mlp.weights()
    final = state.history[-1] if state.history else {}
    model = VecKMFlowModel(
        num_features=recipe.num_features, pixel_radius=recipe.pixel_radius,
        tau_s=recipe.tau_s, freq_t=freq[0], freq_x=freq[1], freq_y=freq[2], w1=w1, w2=w2,
        w3=w3, flow_scale_px_s=recipe.flow_scale_px_s,
        metadata={
            'name': name or pathlib.Path(out_path).stem,
            'source': 'veckm_flow_ros train (Apache-2.0), trained on simulated events',
            'output_unit': f'px/s (MLP output times flow_scale_px_s = '
                           f'{recipe.flow_scale_px_s:g})',
            'data': {'simulator': 'veckm_flow_ros.learning.simulate',
                     'textures': list(recipe.textures),
                     'motions': list(recipe.motions), 'sequences': recipe.num_sequences,
                     'scenes3d': recipe.scenes3d,
                     'sensor_size': [recipe.width, recipe.height],
                     'samples': int(len(flow))},
            'recipe': recipe.to_json(),
            'seed': recipe.seed,
            'validation': {k: v for k, v in final.items() if k.startswith('validation')},
            'history': state.history,
            'time_s': {'bank': round(bank_s, 1),
                       'total': round(time.perf_counter() - start, 1)},
        })
    path = save_model(model, out_path)
    log(f'wrote {path}')
    return model


def hash_text(text: str) -> int:
    """Stable 64-bit hash of a string (Python's hash() is salted per process)."""
    import hashlib
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], 'little')
