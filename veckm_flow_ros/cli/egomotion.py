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
veckm-flow egomotion: camera rotation, heading, FOE and time to contact from events.

Two inputs: a bag (`veckm-flow egomotion BAG --camera-info CAM.yaml [--imu-topic T]`,
times are the bag's ROS time) or an events npz (`--events IN.npz [--gyro GYRO.npz]`, sensor
time). The flow estimator runs with its defaults, then the egomotion estimator per window.
Output npz: see veckm_flow_ros.offline.egomotion; a plot of heading, angular velocity and
minimum time to contact beside it (OUT.png).
"""

import pathlib
import sys

import numpy as np

from veckm_flow_ros.cli import add_command


def register(subparsers):
    parser = add_command(
        subparsers, 'egomotion', run,
        'camera rotation, heading, FOE and time to contact from events',
        'Run the normal-flow estimator (defaults) over a bag or an events npz, '
        'then estimate per window the angular velocity, the translation '
        'direction, the focus of expansion and the time to contact.')
    parser.add_argument('bag', nargs='?', default=None,
                        help='input bag directory or .db3/.mcap file (or use --events)')
    parser.add_argument('--events', default=None, metavar='IN.npz',
                        help='input events npz: t (float64 s or int64 ns), x, y, p, width, '
                             'height')
    parser.add_argument('--camera-info', required=True, metavar='CAM.yaml',
                        help='ROS camera-calibration YAML of the event camera')
    parser.add_argument('--gyro', default=None, metavar='GYRO.npz',
                        help='with --events: gyroscope samples t (s, sensor clock), wx, wy, '
                             'wz (rad/s, camera optical frame)')
    parser.add_argument('--imu-topic', default=None, metavar='TOPIC',
                        help='with a bag: sensor_msgs/Imu topic giving the angular velocity')
    parser.add_argument('--imu-rotation', type=float, nargs=9, default=None, metavar='R',
                        help='rotation camera <- IMU frame, 9 values row-major (default: '
                             'identity; for --gyro files the rates are already in the camera '
                             'frame)')
    parser.add_argument('--imu-time-offset-ms', type=float, default=0.0,
                        help='camera time = IMU time + this [ms]')
    parser.add_argument('--gyro-max-rate', type=float, default=34.9, metavar='RAD_S',
                        help="the gyroscope's full scale [rad/s]: a file or topic with rates "
                             'not finite or at 0.98 of it or beyond (saturated, deg/s) is '
                             'refused')
    parser.add_argument('--topic', default=None,
                        help="with a bag: event topic (default: the bag's only event topic)")
    parser.add_argument('--out', default=None, metavar='OUT.npz',
                        help='output npz (default: INPUT_egomotion.npz in the current '
                             'folder, INPUT the name of the bag or events file); the plot is '
                             'written beside it as .png')
    parser.add_argument('--plot', default=None, metavar='PLOT.png',
                        help='plot path (default: the output with .png)')
    parser.add_argument('--window-ms', type=float, default=30.0,
                        help='flows per estimate [ms of sensor time]')
    parser.add_argument('--model', default=None,
                        help='flow model: shipped name, .npz checkpoint or published folder '
                             '(default: the shipped default model)')
    parser.add_argument('--confidence', action='store_true',
                        help="weight the flows by the flow estimator's confidence (rotation "
                             'ensemble, ~4x the flow cost)')
    parser.add_argument('--quiet', action='store_true', help='no progress bars')


def _check_args(args):
    if (args.bag is None) == (args.events is None):
        raise ValueError('give either a BAG or --events IN.npz (not both)')
    if args.bag is not None and args.gyro is not None:
        raise ValueError('--gyro goes with --events; with a bag use --imu-topic')
    if args.events is not None and args.imu_topic is not None:
        raise ValueError('--imu-topic goes with a bag; with --events use --gyro GYRO.npz')
    if not 0 < args.window_ms <= 10_000:
        raise ValueError(f'--window-ms must be in (0, 10000] ms, got {args.window_ms}')
    if not 0 < args.gyro_max_rate <= 1000:
        raise ValueError(f'--gyro-max-rate must be in (0, 1000] rad/s, got {args.gyro_max_rate}')


def check_gyro(source, t_s, omega_rad_s, max_rate_rad_s):
    """Raise ValueError naming the first bad sample when any rate is unusable."""
    from veckm_flow_ros.stream.egomotion_input import gyro_sample_problems, SATURATION_SHARE
    bad = gyro_sample_problems(np.asarray(omega_rad_s, np.float64), max_rate_rad_s)
    if bad.any():
        first = int(np.argmax(bad))
        raise ValueError(f'{source}: {int(bad.sum())} of {len(bad)} gyroscope samples are not '
                         f'finite or beyond +-{SATURATION_SHARE * max_rate_rad_s:g} rad/s '
                         f'(--gyro-max-rate; saturated, deg/s?), first at t = '
                         f'{float(t_s[first]):.6f} s: {np.asarray(omega_rad_s)[first].tolist()}')


def run(args) -> int:
    from veckm_flow_ros.core.camera import CameraModel
    from veckm_flow_ros.core.egomotion import EgomotionConfig, GyroBuffer
    from veckm_flow_ros.eventio.npz import load_events, npz_path
    from veckm_flow_ros.offline import egomotion
    _check_args(args)
    camera = CameraModel.from_yaml(args.camera_info)
    source = pathlib.Path(args.bag if args.bag is not None else args.events)
    out = npz_path(args.out or f'{source.stem}_egomotion.npz')
    if out.is_dir():
        raise ValueError(f'--out {out} is an existing directory; name a file')
    plot = pathlib.Path(args.plot) if args.plot else out.with_suffix('.png')
    rotation = (np.eye(3) if args.imu_rotation is None
                else np.asarray(args.imu_rotation).reshape(3, 3))
    config = EgomotionConfig(window_s=args.window_ms * 1e-3).check()
    gyro = None
    if args.events is not None:
        events, width, height, unit = egomotion_inputs(load_events, args.events, camera)
        if args.gyro is not None:
            gyro_t, gyro_w = egomotion.load_gyro_npz(args.gyro)
            check_gyro(args.gyro, gyro_t, gyro_w, args.gyro_max_rate)
            gyro = GyroBuffer(rotation, args.imu_time_offset_ms * 1e-3,
                              max_age_s=float(gyro_t[-1] - gyro_t[0]) + 1.0,
                              max_samples=len(gyro_t) + 1)
            gyro.add(gyro_t, gyro_w)
        print(f'egomotion: {len(events)} events ({unit}), sensor {width}x{height}, '
              f'{camera!r}', file=sys.stderr)
        flows = egomotion.flows_from_events(events, width, height, args.model,
                                            progress=not args.quiet,
                                            confidence=args.confidence)
    else:
        if args.imu_topic is not None:
            from veckm_flow_ros.eventio.bag import EventBag
            with EventBag(args.bag) as bag:
                gyro_t, gyro_w = bag.imu_rates(args.imu_topic)
            if len(gyro_t) < 2:
                raise ValueError(f'{args.bag}: topic {args.imu_topic} holds {len(gyro_t)} '
                                 'IMU messages; need at least 2')
            check_gyro(f'{args.bag}: topic {args.imu_topic}', gyro_t, gyro_w,
                       args.gyro_max_rate)
            order = np.argsort(gyro_t, kind='stable')
            gyro = GyroBuffer(rotation, args.imu_time_offset_ms * 1e-3,
                              max_age_s=float(gyro_t.max() - gyro_t.min()) + 1.0,
                              max_samples=len(gyro_t) + 1)
            gyro.add(gyro_t[order], gyro_w[order])
        flows = egomotion.flows_from_bag(args.bag, args.topic, args.model,
                                         progress=not args.quiet, confidence=args.confidence)
    estimates = egomotion.estimate_windows(camera, *flows, config=config, gyro=gyro,
                                           progress=not args.quiet)
    arrays = egomotion.estimates_to_arrays(estimates, config.ttc_grid)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(out, **arrays)
    egomotion.plot_egomotion(arrays, plot, title=f'{source.name}: egomotion per '
                                                 f'{args.window_ms:g} ms window')
    print(summary(arrays, len(flows[0])))
    print(f'wrote {out} and {plot}')
    return 0


def egomotion_inputs(load_events, path, camera):
    """Read the events and check that they fit the camera (same sensor size)."""
    events, width, height, unit = load_events(path)
    if (width, height) != (camera.width, camera.height):
        raise ValueError(f'{path}: events of a {width}x{height} sensor, but the camera '
                         f'calibration is {camera.width}x{camera.height} px')
    return events, width, height, unit


def summary(arrays, flow_count) -> str:
    """Return a short table: windows, estimates, medians."""
    direction_ok = np.all(np.isfinite(arrays['direction']), axis=1)
    gyro = arrays['omega_from_gyro']
    speed = np.linalg.norm(arrays['omega_rad_s'], axis=1)
    rows = [('flows', f'{flow_count:,}'),
            ('windows', f'{len(arrays["t_s"])} ({int(direction_ok.sum())} with a direction, '
                        f'{int(arrays["foe_valid"].sum())} with a FOE, '
                        f'{int(gyro.sum())} with gyroscope)'),
            ('undetermined', ', '.join(
                f'{count} {reason}' for reason, count in zip(*np.unique(
                    arrays['undetermined'][arrays['undetermined'] != ''],
                    return_counts=True))) or 'none'),
            ('median |omega|', f'{np.nanmedian(speed) if np.any(np.isfinite(speed)) else 0:.3f}'
                               ' rad/s'),
            ('min time to contact', f'{np.nanmin(arrays["min_ttc_s"]):.2f} s'
             if np.any(np.isfinite(arrays['min_ttc_s'])) else 'none')]
    width = max(len(name) for name, _ in rows)
    return '\n'.join(f'{name:<{width}}  {value}' for name, value in rows)
