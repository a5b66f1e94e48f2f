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
Plot the heading that veckm_egomotion_node publishes over time against the simulator's.

    python3 scripts/plot_egomotion_heading.py --out docs/images/egomotion_heading.png

Simulates a 3D recording (learning/simulate3d.py), runs veckm_flow_node and
veckm_egomotion_node on it over DDS in this process (test/egomotion_chain.py: the chained
test's harness), once with the simulated gyroscope on ~/imu and once without, and plots the
azimuth (atan2(x, z), positive = right) and elevation (atan2(-y, hypot(x, z)), positive =
up) of the ~/twist translation direction, with the true ones. Prints the median direction
error of each run.
"""

import argparse
import os
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / 'test'))


def heading_deg(direction):
    """Azimuth and elevation [deg] of unit directions (N, 3) in the optical frame."""
    x, y, z = direction[:, 0], direction[:, 1], direction[:, 2]
    return np.degrees(np.arctan2(x, z)), np.degrees(np.arctan2(-y, np.hypot(x, z)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[1])
    parser.add_argument('--trajectory', default='constant',
                        help='simulate3d trajectory: constant, accelerating, turning, approach')
    parser.add_argument('--seed', type=int, default=3)
    parser.add_argument('--duration-s', type=float, default=1.0)
    parser.add_argument('--domain-id', type=int, default=150 + os.getpid() % 50)
    parser.add_argument('--out', default='egomotion_heading.png')
    args = parser.parse_args(argv)
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    import rclpy
    from egomotion_chain import direction_errors_deg, run_chain
    from veckm_flow_ros.learning.simulate3d import make_scene3d, simulate3d
    print(f'simulating {args.duration_s:g} s of {args.trajectory!r} (seed {args.seed}) ...',
          file=sys.stderr)
    sequence = simulate3d(make_scene3d(args.trajectory, seed=args.seed),
                          duration_s=args.duration_s, seed=args.seed)
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=args.domain_id)
    runs = {}
    try:
        for use_imu in (True, False):
            label = 'gyroscope on ~/imu' if use_imu else 'no IMU'
            print(f'running the nodes ({label}) ...', file=sys.stderr)
            records = run_chain(context, sequence, use_imu=use_imu, timeout_s=600.0)
            errors = direction_errors_deg(sequence, records)
            print(f'{label}: {len(records.t_s)} twists, median direction error '
                  f'{np.median(errors):.1f} deg')
            runs[label] = (records, errors)
    finally:
        rclpy.shutdown(context=context)
    t_s = np.linspace(0.0, args.duration_s, 400)
    velocity, _ = sequence.twist_at(t_s)
    true_azimuth, true_elevation = heading_deg(
        velocity / np.linalg.norm(velocity, axis=1, keepdims=True))
    figure, axes = plt.subplots(2, 1, figsize=(7, 4.5), sharex=True)
    for axis, truth, index, name in ((axes[0], true_azimuth, 0, 'azimuth [deg]'),
                                     (axes[1], true_elevation, 1, 'elevation [deg]')):
        axis.plot(t_s, truth, 'k-', label='simulated')
        for (label, (records, errors)), marker in zip(runs.items(), ('o', 'x')):
            axis.plot(records.t_s, heading_deg(records.direction)[index], marker,
                      label=f'~/twist, {label} (median error {np.median(errors):.0f} deg)')
        axis.set_ylabel(name)
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    axes[1].set_xlabel('sensor time [s]')
    figure.suptitle(f'Heading of the camera, simulated {args.trajectory!r} trajectory '
                    f'(346x260, {len(sequence.events) / 1e6:.2f} M events)', fontsize=10)
    figure.tight_layout()
    figure.savefig(args.out, dpi=110)
    print(f'wrote {args.out}')


if __name__ == '__main__':
    main()
