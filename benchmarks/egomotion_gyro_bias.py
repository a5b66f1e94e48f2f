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
The motion suite with a gyroscope, biased (as the suite) and unbiased: the bias estimate's cost.

    python3 benchmarks/egomotion_gyro_bias.py [--split heldout] [--count 4] [--cache-dir DIR]

The gyroscope mode of `veckm-flow evaluate-egomotion --motions SPLIT` (exact normal flow,
0.6 s sequences) twice per kind: with the suite's gyroscope (0.5 deg/s bias per axis, random
signs, and noise) and with the same samples less their bias (noise only). Columns as that
table: per class the windows, the median direction error [deg] over the windows with a
direction and the share with one; rotating windows more than 10 deg off ('wrong'); the median
angular-velocity error (the gyroscope's after the bias estimate) [deg/s]. An estimator that
subtracts the errors of its bias measurements from an unbiased gyroscope shows in the second
row of each kind.
"""

import argparse

from veckm_flow_ros.core.egomotion import EgomotionConfig
from veckm_flow_ros.learning import motion_suite
from veckm_flow_ros.offline import evaluate_motions


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--split', default='heldout', choices=motion_suite.SPLITS)
    parser.add_argument('--count', type=int, default=4, help='sequences per kind')
    parser.add_argument('--kinds', nargs='+', default=list(motion_suite.MOTION_KINDS),
                        choices=motion_suite.MOTION_KINDS)
    parser.add_argument('--cache-dir', default=None, metavar='DIR',
                        help='keep simulated sequences here and reuse them')
    args = parser.parse_args()
    config = EgomotionConfig()
    columns = [column for column in evaluate_motions.COLUMNS
               if not column[0].startswith(('ttc', 'min_ttc', 'omega_pct'))]
    print('| kind | gyroscope | ' + ' | '.join(column[1] for column in columns) + ' |')
    print('|' + '---|' * (len(columns) + 2))
    for kind in args.kinds:
        datas = [evaluate_motions.load_sequence(kind, seed, 0.6, 'normal', args.cache_dir)
                 for seed in motion_suite.split_seeds(args.split, args.count)]
        for gyroscope in ('biased', 'unbiased'):
            if gyroscope == 'unbiased':
                datas = [dict(data, gyro_rad_s=data['gyro_rad_s'] - data['gyro_bias_rad_s'])
                         for data in datas]
            results = [evaluate_motions.run_sequence(data, 'gyro', config) for data in datas]
            row = evaluate_motions.kind_rows(datas, results, 'gyro')
            cells = ['-' if value != value else fmt.format(value)
                     for value, fmt in ((row[key], fmt) for key, _, fmt in columns)]
            print(f'| {kind} | {gyroscope} | ' + ' | '.join(cells) + ' |', flush=True)


if __name__ == '__main__':
    main()
