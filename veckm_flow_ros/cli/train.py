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

"""`veckm-flow train`: train a model on simulated events (see veckm_flow_ros/train.py)."""

import dataclasses

from veckm_flow_ros.cli import add_command

# Recipe values a run may override (default None: the recipe's): flag, type, help.
RECIPE_OVERRIDES = (
    ('--epochs', int, 'override the epochs'),
    ('--num-sequences', int, 'override the number of simulated training sequences'),
    ('--batches-per-epoch', int, 'override the batches per epoch'),
    ('--noise-target-fraction', float, 'background-noise targets (trained towards zero flow) '
     'per signal target (default: the recipe value)'),
    ('--noise-loss-weight', float, 'weight of the pull of noise targets towards zero flow'),
    ('--max-speed-px-s', float, 'override the highest typical scene speed (log-uniform from '
     '30 px/s; quick and full: 1500, full2: 3000)'),
    ('--learning-rate', float, 'override the peak learning rate (default 2e-3)'),
)


def register(subparsers):
    parser = add_command(
        subparsers, 'train', run, 'train a normal-flow model on simulated events',
        'Simulate training scenes, encode a feature bank with the compiled '
        'encoder and train the MLP with the generalized-normal-flow loss. '
        'Resumable: rerun with --resume and the same work directory.')
    parser.add_argument('--out', required=True, help='output checkpoint (.npz)')
    parser.add_argument('--work-dir', default='train_work',
                        help='cache for sequences, feature bank and training state '
                             '(default: ./train_work)')
    parser.add_argument('--pixel-radius', type=int, default=8, help='r in pixels (default 8)')
    parser.add_argument('--tau-ms', type=float, default=16.0,
                        help='half the time slice in ms (default 16)')
    parser.add_argument('--block-ms', type=float, default=0.0,
                        help='target block length of the training samples [ms]; 0 (default): '
                             "2 tau, the node's automatic block")
    parser.add_argument('--recipe', choices=('quick', 'full', 'full2'), default='quick',
                        help='quick: minutes per model; full: more data and epochs, < 2 h CPU '
                             '(the shipped models); full2: full plus dense fine texture, zoom '
                             'with rotation and speeds up to 3000 px/s (model card)')
    parser.add_argument('--seed', type=int, default=0, help='random seed (default 0)')
    for flag, value_type, help_text in RECIPE_OVERRIDES:
        parser.add_argument(flag, type=value_type, default=None, help=help_text)
    parser.add_argument('--scenes3d', type=int, default=None, metavar='N',
                        help='add N 3D room scenes (simulate --scene 3d, all trajectories in '
                             'turn) to the 2D training sequences (default 0)')
    parser.add_argument('--equivariance', choices=('c4', 'd4', 'none'), default=None,
                        help='c4 (default): exactly equivariant to rotations by 90 degrees '
                             '(frequencies in orbits, MLP weights averaged over the group); '
                             'd4: also to flips; none: a plain MLP on independent frequencies')
    parser.add_argument('--init-model', default=None, metavar='MODEL',
                        help='fine-tune: start from this model (shipped name or .npz) instead '
                             'of random weights; it must have the same D, hidden size, '
                             'equivariance and frequencies (seed)')
    parser.add_argument('--contrast-range', type=float, nargs=2, default=None,
                        metavar=('LOW', 'HIGH'),
                        help='override the texture contrast range of the scenes [log '
                             'intensity] (default 0.3 1.5)')
    parser.add_argument('--contrast-distribution', choices=('uniform', 'log-uniform'),
                        default=None,
                        help='how the contrast is drawn in its range (default uniform; '
                             'log-uniform puts more scenes at low contrast)')
    parser.add_argument('--threshold-sigma-range', type=float, nargs=2, default=None,
                        metavar=('LOW', 'HIGH'),
                        help='override the range of the per-pixel threshold spread of the '
                             'random sensors [log intensity] (default 0.01 0.06)')
    parser.add_argument('--threads', type=int, default=None,
                        help='torch CPU threads (default: torch decides)')
    parser.add_argument('--name', default=None, help='model name stored in the checkpoint')
    parser.add_argument('--resume', action='store_true',
                        help='continue from the training state in --work-dir')


def run(args):
    import torch

    from veckm_flow_ros.core.estimator import automatic_block_s
    from veckm_flow_ros.core.model import MAX_PIXEL_RADIUS, MAX_TAU_S, MIN_TAU_S
    from veckm_flow_ros.learning import train
    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f'--threads must be >= 1, got {args.threads}')
        torch.set_num_threads(args.threads)
    if not 1 <= args.pixel_radius <= MAX_PIXEL_RADIUS:
        raise ValueError(f'--pixel-radius must be in 1..{MAX_PIXEL_RADIUS}, got '
                         f'{args.pixel_radius}')
    if not MIN_TAU_S * 1e3 <= args.tau_ms <= MAX_TAU_S * 1e3:  # the model's bounds
        raise ValueError(f'--tau-ms must be in [{MIN_TAU_S * 1e3:g}, {MAX_TAU_S * 1e3:g}] ms, '
                         f'got {args.tau_ms}')
    overrides = dict(train.RECIPES[args.recipe])
    if not 0 <= args.block_ms <= 2 * args.tau_ms:
        raise ValueError(f'--block-ms must be in [0, 2 tau = {2 * args.tau_ms:g}] ms, got '
                         f'{args.block_ms}')
    overrides.update(pixel_radius=args.pixel_radius, tau_s=args.tau_ms / 1000.0, seed=args.seed,
                     block_s=args.block_ms / 1000.0 or automatic_block_s(args.tau_ms / 1000.0))

    def override(key, value, ok=lambda v: True, rule=''):
        """Set overrides[key] to a given option value; ValueError naming it when not ok."""
        if value is None:
            return
        if not ok(value):
            raise ValueError(f'{rule}, got {value}')
        overrides[key] = value

    def override_range(keys, value, lowest, highest, flag):
        """Set the recipe's (min, max) `keys` to a LOW HIGH option in [lowest, highest]."""
        if value is None:
            return
        low, high = value
        if not lowest <= low <= high <= highest:
            raise ValueError(f'{flag} must be {lowest:g} <= LOW <= HIGH <= {highest:g} (log '
                             f'intensity), got {low:g} {high:g}')
        overrides.update(zip(keys, (low, high)))

    override('epochs', args.epochs)
    override('num_sequences', args.num_sequences)
    override('scenes3d', args.scenes3d, lambda v: 0 <= v <= 100000,
             '--scenes3d must be in [0, 100000] scenes')
    override('batches_per_epoch', args.batches_per_epoch, lambda v: v >= 1,
             '--batches-per-epoch must be >= 1')
    if args.equivariance is not None:
        overrides['equivariance'] = args.equivariance
        if args.equivariance == 'none':
            # A plain MLP learns the symmetries from augmented copies instead.
            overrides.update(blocks_per_sequence=6, augmentations_per_block=4)
    if args.init_model is not None:
        from veckm_flow_ros.core.model import load_model
        load_model(args.init_model)  # fails early, naming the value
        overrides['init_model'] = args.init_model
    override('speed_max_px_s', args.max_speed_px_s, lambda v: 30 <= v <= 20000,
             '--max-speed-px-s must be in [30, 20000] px/s')
    override_range(('contrast_min', 'contrast_max'), args.contrast_range, 0.01, 10,
                   '--contrast-range')
    override('contrast_distribution', args.contrast_distribution)
    override_range(('threshold_sigma_min', 'threshold_sigma_max'), args.threshold_sigma_range,
                   0, 0.5, '--threshold-sigma-range')
    override('learning_rate', args.learning_rate, lambda v: 0 < v < 1,
             '--learning-rate must be in (0, 1)')
    override('noise_target_fraction', args.noise_target_fraction, lambda v: 0 <= v <= 1,
             '--noise-target-fraction must be in [0, 1]')
    override('noise_loss_weight', args.noise_loss_weight, lambda v: v >= 0,
             '--noise-loss-weight must be >= 0')
    recipe = dataclasses.replace(train.Recipe(), **overrides)
    train.train(recipe, args.out, args.work_dir, resume=args.resume, name=args.name)
    return 0
