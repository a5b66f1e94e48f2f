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

"""`veckm-flow simulate`: a synthetic event sequence with exact ground-truth flow (.npz)."""

import time


def register(subparsers):
    from veckm_flow_ros.learning import simulate
    parser = subparsers.add_parser(
        'simulate', help='simulate events with exact ground-truth optical flow',
        description='Render a procedurally textured scene under a known motion and write its '
                    'events with per-event ground-truth optical flow (px/s) to an .npz file.')
    parser.add_argument('--out', required=True, help='output .npz path')
    parser.add_argument('--bag', default=None,
                        help='also write the events as a ROS 2 bag of EventPackets (a new '
                             'directory), on /event_camera/events')
    parser.add_argument('--encoding', default='evt3',
                        choices=('evt3', 'libcaer_cmp', 'libcaer', 'mono'),
                        help='EventPacket encoding of --bag (default: evt3)')
    parser.add_argument('--packet-ms', type=float, default=1.0,
                        help='time covered by one EventPacket of --bag in ms (default: 1)')
    parser.add_argument('--scene', default='random', choices=('random',) + simulate.MOTIONS,
                        help='motion of the scene (default: random)')
    parser.add_argument('--texture', default='random', choices=('random',) + simulate.TEXTURES,
                        help='texture of the layers (default: random)')
    parser.add_argument('--seed', type=int, default=0, help='random seed (default: 0)')
    parser.add_argument('--duration-s', type=float, default=0.5,
                        help='simulated time in seconds (default: 0.5)')
    parser.add_argument('--speed-px-s', type=float, default=None,
                        help='typical image speed in px/s (default: random 30..1500)')
    parser.add_argument('--width', type=int, default=346, help='sensor width in px')
    parser.add_argument('--height', type=int, default=260, help='sensor height in px')
    parser.set_defaults(func=run)


def run(args):
    from veckm_flow_ros.eventio.bag import DEFAULT_EVENT_TOPIC, write_event_bag
    from veckm_flow_ros.learning import simulate
    if args.duration_s <= 0:
        raise ValueError(f'--duration-s must be positive, got {args.duration_s}')
    if not (8 <= args.width <= 4096 and 8 <= args.height <= 4096):
        raise ValueError(f'sensor size {args.width}x{args.height} outside 8..4096 px')
    start = time.perf_counter()
    scene = simulate.make_scene(args.scene, args.texture, seed=args.seed, width=args.width,
                                height=args.height, speed_px_s=args.speed_px_s)
    sequence = simulate.simulate(scene, args.duration_s, seed=args.seed)
    simulate.save_npz(sequence, args.out)
    if args.bag:
        packets = write_event_bag(args.bag, sequence.events, sequence.width, sequence.height,
                                  args.encoding, packet_duration_ns=int(args.packet_ms * 1e6))
        print(f'{args.bag}: {packets} {args.encoding} EventPackets on {DEFAULT_EVENT_TOPIC}')
    elapsed = time.perf_counter() - start
    print(f'{args.out}: {len(sequence)} events ({int(sequence.is_noise.sum())} noise), '
          f'{args.width}x{args.height}, {args.duration_s} s, motion '
          f'{scene.description["motion"]}, {elapsed:.1f} s')
    return 0
