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

"""`veckm-flow replay BAG`: run the node's estimator over a bag offline and write the results."""


from veckm_flow_ros.cli import add_command


def register(subparsers):
    parser = add_command(
        subparsers, 'replay', run,
        'replay an EventPacket bag through the estimator, write flows/pictures',
        'Decode an event-camera bag (.db3 / .mcap / bag directory), run the same '
        'NormalFlowEstimator as the node, and write any of: a bag with the '
        '/veckm_flow/flow PointCloud2 and /veckm_flow/flow_image messages, an npz '
        'of per-event flows, an mp4 video, PNG frames. Prints a summary table.')
    parser.add_argument('bag', help='input bag directory or .db3/.mcap file')
    parser.add_argument('--topic', default=None,
                        help="event topic (default: the bag's only event topic)")
    parser.add_argument('--model', default=None,
                        help='model: a shipped model name, an .npz checkpoint, or a published '
                             'VecKM_flow_cpp folder (default: the shipped default model)')
    parser.add_argument('--out', default=None, metavar='OUT_BAG',
                        help='write the flow messages to this new bag directory')
    parser.add_argument('--storage', default='mcap', choices=('mcap', 'sqlite3'),
                        help='storage of --out')
    parser.add_argument('--npz', default=None, metavar='OUT.npz',
                        help='write per-event flows (t_ns, x, y, u_px_s, v_px_s, ...); .npz '
                             'is appended to a name without it')
    parser.add_argument('--video', default=None, metavar='OUT.mp4', help='write an mp4 video')
    parser.add_argument('--png-dir', default=None, metavar='DIR',
                        help='write PNG frames to this directory (created when missing)')
    parser.add_argument('--stride', type=int, default=1, metavar='K',
                        help='estimate the flow of every K-th event (context uses all)')
    parser.add_argument('--device', default='cpu', choices=('cpu', 'cuda'))
    parser.add_argument('--block-ms', type=float, default=0.0,
                        help="target block length [ms], as the node's block_ms (0: the "
                             "model's, 2 tau centred; centred blocks longer than 2 tau are "
                             'refused, as by the node)')
    parser.add_argument('--causal', action='store_true',
                        help='use past context only (lower latency, lower accuracy)')
    parser.add_argument('--duration', type=float, default=None, metavar='SECONDS',
                        help='replay only the first SECONDS of sensor time')
    parser.add_argument('--fps', type=float, default=25.0,
                        help='picture rate in sensor time [Hz] (video, PNG, flow_image)')
    parser.add_argument('--max-speed', type=float, default=None, metavar='PX_S',
                        help='colour scale of the pictures [px/s] (default: from the first '
                             'frame with flows)')
    parser.add_argument('--threads', type=int, default=0,
                        help='torch CPU threads (0: torch default; 1 is often fastest on a '
                             'busy machine)')
    parser.add_argument('--confidence', action='store_true',
                        help='add a per-flow confidence [0..1] (rotation ensemble, ~4x the '
                             'cost) to the npz and the ~/flow PointCloud2')
    parser.add_argument('--rotation-mean', action='store_true',
                        help='flows = mean of the confidence ensemble (more accurate, 2-4x the '
                             "cost; the node's rotation_mean_flow)")
    add_min_validity_argument(parser)
    add_long_context_argument(parser)
    parser.add_argument('--quiet', action='store_true', help='no progress bar')


def add_min_validity_argument(parser):
    """Add --min-validity, defaulting to the node's min_validity (shared with predict)."""
    from veckm_flow_ros.stream.parameters import parameter_default
    default = parameter_default('min_validity')
    parser.add_argument('--min-validity', type=float, default=default, metavar='V',
                        help='leave out flows whose validity [0..1] is below V, as the '
                             f"node's min_validity (default: {default:g}; 0 keeps every flow)")


def check_min_validity_argument(args):
    """Raise ValueError naming --min-validity unless it is in [0, 1]."""
    value = getattr(args, 'min_validity', None)
    if value is not None and not 0.0 <= value <= 1.0:
        raise ValueError(f'--min-validity must be in [0, 1] (0 keeps every flow), got {value:g}')


def add_long_context_argument(parser, note: str = ''):
    """
    Add --long-context-below-px-s, defaulting to the node's parameter.

    Shared with predict, evaluate and the accuracy benchmarks; `note` ends the help text.
    """
    from veckm_flow_ros.stream.parameters import parameter_default
    default = parameter_default('long_context_below_px_s')
    parser.add_argument('--long-context-below-px-s', type=float, default=default,
                        metavar='PX_S',
                        help='estimate kept flows slower than PX_S [px/s] again on a context '
                             "twice as long, as the node's long_context_below_px_s (default: "
                             f'{default:g}; 0 = off; the extra context is past: no extra latency)'
                             + (f'; {note}' if note else ''))


def parse_benchmark_arguments(parser, argv=None):
    """Parse a benchmark's arguments; a bad --long-context-below-px-s is a usage error."""
    args = parser.parse_args(argv)
    try:
        check_long_context_argument(args)
    except ValueError as error:
        parser.error(str(error))
    return args


def check_long_context_argument(args):
    """Raise ValueError naming --long-context-below-px-s unless it is in the node's range."""
    from veckm_flow_ros.core.estimator import check_long_context, MAX_LONG_CONTEXT_BELOW_PX_S
    value = getattr(args, 'long_context_below_px_s', None)
    if value is None:
        return
    try:
        check_long_context(value)  # the estimator's rule; the message names the flag
    except ValueError:
        raise ValueError(f'--long-context-below-px-s must be a speed in [0, '
                         f'{MAX_LONG_CONTEXT_BELOW_PX_S:g}] px/s (0 = off), '
                         f'got {value:g}') from None


def set_threads(threads: int):
    """Set torch's CPU thread count when threads > 0 (shared with the demo command)."""
    if threads < 0:
        raise ValueError(f'--threads must be >= 0, got {threads}')
    if threads:
        import torch
        torch.set_num_threads(threads)


def options_from_args(args):
    """Build ReplayOptions from parsed arguments (shared with the demo command)."""
    from veckm_flow_ros.offline.replay import ReplayOptions
    if args.stride < 1:
        raise ValueError(f'--stride must be >= 1, got {args.stride}')
    if args.fps <= 0:
        raise ValueError(f'--fps must be > 0, got {args.fps}')
    if args.block_ms < 0:
        raise ValueError(f'--block-ms must be >= 0 (0: automatic), got {args.block_ms}')
    if args.duration is not None and args.duration <= 0:
        raise ValueError(f'--duration must be > 0 seconds, got {args.duration}')
    check_min_validity_argument(args)
    check_long_context_argument(args)
    extra = {}
    if getattr(args, 'min_validity', None) is not None:
        extra['min_validity'] = args.min_validity
    if getattr(args, 'long_context_below_px_s', None) is not None:
        extra['long_context_below_px_s'] = args.long_context_below_px_s
    return ReplayOptions(topic=args.topic, device=args.device,
                         block_s=args.block_ms * 1e-3 or None, causal=args.causal,
                         target_stride=args.stride, duration_s=args.duration,
                         frame_rate_hz=args.fps,
                         max_speed_px_s=args.max_speed, progress=not args.quiet,
                         confidence=getattr(args, 'confidence', False),
                         rotation_mean=getattr(args, 'rotation_mean', False), **extra)


def run(args) -> int:
    from veckm_flow_ros.core.model import load_model
    from veckm_flow_ros.offline.replay import replay_bag, ReplayOutputs
    options = options_from_args(args)
    set_threads(args.threads)
    outputs = ReplayOutputs(bag=args.out, npz=args.npz, video=args.video,
                            png_dir=args.png_dir, bag_storage=args.storage)
    model = load_model(args.model)
    summary = replay_bag(args.bag, model, options, outputs)
    print(f'model  {getattr(model, "name", args.model)}')
    print(summary.table())
    return 0
