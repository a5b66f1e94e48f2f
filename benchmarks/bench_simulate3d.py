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
Speed and content of the 3D simulator per trajectory, with the 2D simulator as baseline.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_simulate3d.py [--duration-s 0.5]
        [--width 346 --height 260] [--seed 0]

Times are CPU seconds of this process (one core; robust on a shared machine) for building the
scene and for simulating; the baseline row is the 2D simulator's translating 'noise' texture at
the median image speed of the 3D rows, same size and duration, in the same run. Columns:
events [M], noise and occlusion-flagged fractions, render steps, median and 95th-percentile
ground-truth flow [px/s] of signal events. `--point-sampled` adds, per trajectory, the same
scene rendered without pixel-area supersampling and optics blur (the renderer before they were
added), in the same run; its last column is the share of signal events that follow an event of
the same pixel and polarity within 1 ms (bursts; the real recordings have 0.0-0.2 %).
"""

import argparse
import time

import numpy as np


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument('--duration-s', type=float, default=0.5)
    parser.add_argument('--width', type=int, default=346)
    parser.add_argument('--height', type=int, default=260)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--point-sampled', action='store_true',
                        help='also time each scene rendered point-sampled (no supersampling, '
                             'no optics blur)')
    args = parser.parse_args()

    from veckm_flow_ros.learning import simulate, simulate3d

    print(f'{args.width}x{args.height} px, {args.duration_s} s, seed {args.seed}, CPU seconds')
    header = (f'{"scene":24s} {"build s":>8s} {"sim s":>7s} {"events M":>9s} {"noise%":>7s} '
              f'{"occl%":>6s} {"steps":>6s} {"flow p50":>9s} {"flow p95":>9s} {"burst%":>7s}')
    print(header)
    print('-' * len(header))
    medians = []

    def row(name, build_s, sim_s, sequence, occlusion):
        signal = ~sequence.is_noise
        speed = np.hypot(*sequence.flow_px_s[signal].T)
        steps = sequence.description.get('render_steps', '-')
        print(f'{name:24s} {build_s:8.1f} {sim_s:7.1f} {len(sequence) / 1e6:9.2f} '
              f'{100 * sequence.is_noise.mean():7.1f} {occlusion:6.1f} {steps!s:>6s} '
              f'{np.median(speed):9.0f} {np.percentile(speed, 95):9.0f} '
              f'{100 * burst_share(sequence):7.1f}', flush=True)
        return float(np.median(speed))

    def run3d(trajectory, point_sampled):
        start = time.process_time()
        scene = simulate3d.make_scene3d(trajectory, seed=args.seed, width=args.width,
                                        height=args.height)
        if point_sampled:
            scene.supersampling, scene.optics_sigma_px = 1, 0.0
        built = time.process_time()
        sequence = simulate3d.simulate3d(scene, args.duration_s, seed=args.seed)
        done = time.process_time()
        name = f'3d {trajectory}' + (' point-sampled' if point_sampled else '')
        return row(name, built - start, done - built, sequence,
                   100 * sequence.at_occlusion.mean())

    for trajectory in simulate3d.TRAJECTORIES:
        medians.append(run3d(trajectory, False))
        if args.point_sampled:
            run3d(trajectory, True)
    speed = float(np.median(medians))
    start = time.process_time()
    scene = simulate.make_scene('translation', 'noise', seed=args.seed, width=args.width,
                                height=args.height, speed_px_s=speed)
    built = time.process_time()
    sequence = simulate.simulate(scene, args.duration_s, seed=args.seed)
    done = time.process_time()
    row(f'2d translation {speed:.0f} px/s', built - start, done - built, sequence, 0.0)


def burst_share(sequence, gap_s=1e-3):
    """Share of signal events within gap_s after the previous event of their pixel and sign."""
    events = sequence.events
    signal = ~sequence.is_noise
    key = (events.y[signal].astype(np.int64) * sequence.width + events.x[signal]) * 2 \
        + events.p[signal]
    t_ns = events.t_ns[signal]
    order = np.lexsort((t_ns, key))
    key, t_ns = key[order], t_ns[order]
    close = (key[1:] == key[:-1]) & (np.diff(t_ns) < gap_s * 1e9)
    return float(close.sum()) / max(len(key), 1)


if __name__ == '__main__':
    main()
