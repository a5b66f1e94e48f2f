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
The sign check (`max_sign_disagreement`) on the flow model's flows of the motion suite.

    python3 benchmarks/egomotion_sign_check.py corridor:4100001 sideways:4100000 \
        [--duration 0.24] [--flow model] [--cache-dir DIR]

Each KIND:SEED sequence of learning/motion_suite.py (seeds 4,100,000 + i: tuning, 4,200,000 +
i: held-out) with a gyroscope, the check off (max_sign_disagreement 1) and at the default:
windows, windows with a heading, the median and largest direction error over those [deg],
how many of them are more than 30 deg off, and the undetermined reasons. The flows are the
flow node's (`--flow model`, simulated and estimated once, then cached) or exact normal flow.
"""

import argparse
import math

import numpy as np

from veckm_flow_ros.core.egomotion import EgomotionConfig
from veckm_flow_ros.offline import evaluate_motions


def angle_deg(direction, truth):
    """Angle [deg] between a unit direction and a translation (3,)."""
    truth = truth / np.linalg.norm(truth)
    return math.degrees(math.acos(float(np.clip(np.dot(direction, truth), -1.0, 1.0))))


def main(argv=None):
    """Print one table row per sequence and setting."""
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('sequences', nargs='+', metavar='KIND:SEED')
    parser.add_argument('--duration', type=float, default=0.24, help='[s]')
    parser.add_argument('--flow', choices=('model', 'normal'), default='model')
    parser.add_argument('--cache-dir', default=None)
    args = parser.parse_args(argv)
    settings = (('off', EgomotionConfig(max_sign_disagreement=1.0)), ('on', EgomotionConfig()))
    print('| kind | seed | check | windows | with heading | median deg | max deg | > 30 deg '
          '| reasons |')
    print('|---|---|---|---|---|---|---|---|---|')
    for sequence in args.sequences:
        kind, seed = sequence.split(':')
        data = evaluate_motions.load_sequence(kind, int(seed), args.duration, args.flow,
                                              cache_dir=args.cache_dir)
        for name, config in settings:
            result = evaluate_motions.run_sequence(data, 'gyro', config)
            reasons = result['reason']
            errors = [angle_deg(result['direction'][i], data['v_m_s'][i])
                      for i in range(len(reasons)) if np.all(np.isfinite(result['direction'][i]))]
            counts = {reason: reasons.count(reason) for reason in sorted(set(reasons)) if reason}
            median = f'{np.median(errors):.1f}' if errors else '-'
            largest = f'{max(errors):.1f}' if errors else '-'
            print(f'| {kind} | {seed} | {name} | {len(reasons)} | {len(errors)} | {median} | '
                  f'{largest} | {sum(error > 30 for error in errors)} | {counts} |', flush=True)


if __name__ == '__main__':
    main()
