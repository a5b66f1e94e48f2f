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

import pathlib
import time

from veckm_flow_ros.cli import add_command


def register(subparsers):
    from veckm_flow_ros.learning import simulate, simulate3d
    parser = add_command(
        subparsers, 'simulate', run, 'simulate events with exact ground-truth optical flow',
        'Render a procedurally textured scene under a known motion and write its '
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
    parser.add_argument('--scene', default='random',
                        choices=('random',) + simulate.MOTIONS + ('3d',),
                        help='motion of the 2D scene, or 3d: a camera moving through a room of '
                             'textured planes (default: random)')
    parser.add_argument('--texture', default='random', choices=('random',) + simulate.TEXTURES,
                        help='texture of the layers (default: random)')
    parser.add_argument('--seed', type=int, default=0, help='random seed (default: 0)')
    parser.add_argument('--duration-s', type=float, default=0.5,
                        help='simulated time in seconds (default: 0.5)')
    parser.add_argument('--speed-px-s', type=float, default=None,
                        help='typical image speed in px/s (default: random 30..1500)')
    parser.add_argument('--width', type=int, default=346, help='sensor width in px')
    parser.add_argument('--height', type=int, default=260, help='sensor height in px')
    group = parser.add_argument_group(
        '3D scenes (--scene 3d)', 'also write OUT_gyro.npz (gyroscope t [s], wx, wy, wz '
        '[rad/s], camera frame) and OUT_camera.yaml (ROS camera calibration) beside --out')
    group.add_argument('--trajectory', default=None, choices=simulate3d.TRAJECTORIES,
                       help='camera motion (default: constant)')
    group.add_argument('--distortion', default=None, choices=simulate3d.DISTORTIONS,
                       help='lens distortion of the camera (default: none)')
    group.add_argument('--noise-hz', type=float, default=None,
                       help='background activity in Hz per pixel (default: 1)')
    group.add_argument('--gyro-rate-hz', type=float, default=None,
                       help='gyroscope sample rate in Hz (default: 1000)')
    group.add_argument('--gyro-out', default=None,
                       help='gyroscope .npz path (default: OUT with _gyro.npz)')
    group.add_argument('--camera-out', default=None,
                       help='camera calibration YAML path (default: OUT with _camera.yaml)')


OPTIONS_3D = ('trajectory', 'distortion', 'noise_hz', 'gyro_rate_hz', 'gyro_out', 'camera_out')


def run(args):
    from veckm_flow_ros.eventio.bag import DEFAULT_EVENT_TOPIC, write_event_bag
    from veckm_flow_ros.learning import simulate
    if args.duration_s <= 0:
        raise ValueError(f'--duration-s must be positive, got {args.duration_s}')
    if not (8 <= args.width <= 4096 and 8 <= args.height <= 4096):
        raise ValueError(f'sensor size {args.width}x{args.height} outside 8..4096 px')
    if args.scene == '3d':
        return run_3d(args)
    given = [name for name in OPTIONS_3D if getattr(args, name) is not None]
    if given:
        raise ValueError(f'--{given[0].replace("_", "-")} applies to --scene 3d only '
                         f'(got --scene {args.scene})')
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


def beside(out, suffix):
    """Path next to `out` with its .npz extension replaced by suffix (e.g. _gyro.npz)."""
    out = pathlib.Path(out)
    stem = out.name[:-4] if out.name.endswith('.npz') else out.name
    return out.with_name(stem + suffix)


def run_3d(args):
    """Simulate a 3D scene; write the sequence, gyroscope, camera (and bag)."""
    from veckm_flow_ros.eventio.bag import (DEFAULT_CAMERA_INFO_TOPIC, DEFAULT_EVENT_TOPIC,
                                            DEFAULT_IMU_TOPIC, write_event_bag)
    from veckm_flow_ros.learning import simulate3d
    if args.speed_px_s is not None:
        raise ValueError('--speed-px-s applies to 2D scenes only: the image speed of --scene 3d '
                         'follows from the camera trajectory and the scene depth')
    noise_hz = 1.0 if args.noise_hz is None else args.noise_hz
    if not (noise_hz >= 0 and noise_hz <= 1000):
        raise ValueError(f'--noise-hz must be in 0..1000 Hz per pixel, got {noise_hz}')
    gyro_rate_hz = 1000.0 if args.gyro_rate_hz is None else args.gyro_rate_hz
    if not (10 <= gyro_rate_hz <= 100_000):
        raise ValueError(f'--gyro-rate-hz must be in 10..100000 Hz, got {gyro_rate_hz}')
    gyro_out = args.gyro_out or beside(args.out, '_gyro.npz')
    camera_out = args.camera_out or beside(args.out, '_camera.yaml')
    start = time.perf_counter()
    scene = simulate3d.make_scene3d(
        args.trajectory or 'constant', seed=args.seed, width=args.width, height=args.height,
        distortion=args.distortion or 'none', noise_hz=noise_hz, texture=args.texture,
        gyro=simulate3d.GyroConfig(rate_hz=gyro_rate_hz))

    def progress(t_s, events):
        print(f'  {t_s:.3f} / {args.duration_s} s: {events} events', flush=True)
    sequence = simulate3d.simulate3d(scene, args.duration_s, seed=args.seed, progress=progress)
    simulate3d.save_npz3d(sequence, args.out)
    simulate3d.save_gyro_npz(sequence, gyro_out)
    scene.camera.to_yaml(camera_out)
    if args.bag:
        packets = write_event_bag(args.bag, sequence.events, sequence.width, sequence.height,
                                  args.encoding, packet_duration_ns=int(args.packet_ms * 1e6),
                                  gyro=(sequence.gyro_t_s, sequence.gyro_rad_s),
                                  camera=scene.camera)
        print(f'{args.bag}: {packets} {args.encoding} EventPackets on {DEFAULT_EVENT_TOPIC}, '
              f'{len(sequence.gyro_t_s)} sensor_msgs/Imu on {DEFAULT_IMU_TOPIC}, the '
              f'sensor_msgs/CameraInfo on {DEFAULT_CAMERA_INFO_TOPIC}')
    elapsed = time.perf_counter() - start
    print(f'{args.out}: {len(sequence)} events ({int(sequence.is_noise.sum())} noise), '
          f'{args.width}x{args.height}, {args.duration_s} s, trajectory '
          f'{scene.trajectory.kind}, {elapsed:.1f} s')
    print(f'{gyro_out}: {len(sequence.gyro_t_s)} gyroscope samples; {camera_out}: '
          f'{scene.camera!r}')
    return 0
