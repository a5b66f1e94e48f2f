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
CPU of EgomotionEstimator.estimate per paced window on the motion suite, two source trees.

    OMP_NUM_THREADS=1 python3 benchmarks/bench_egomotion_trees.py BASELINE_TREE [TREE] \
        [--split tuning] [--count 2] [--runs 3] [--cache-dir DIR]

Each tree (a checkout with its extension built in place: `python3 setup.py build_ext
--inplace`; TREE defaults to this one) runs in its own process, the two alternated --runs
times, so that both see the same load; each estimates every window of the motion suite's
exact-flow sequences (learning/motion_suite.py: six kinds, --count sequences of 0.6 s each,
cached in --cache-dir) with and without the gyroscope, sleeping 27 ms before each call as
the node idles between windows (cold caches). Printed: per tree, mode and run the median
and mean CPU ms per window, then the median over runs and its ratio to the baseline's.
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys

PAUSE_S = 0.027

CHILD = r"""
import json, sys, time, statistics
import numpy as np
from veckm_flow_ros.core.egomotion import EgomotionConfig, EgomotionEstimator, GyroBuffer
from veckm_flow_ros.learning import motion_suite
from veckm_flow_ros.offline import evaluate_motions
split, count = sys.argv[1], int(sys.argv[2])
cache_dir, pause_s = sys.argv[3] or None, float(sys.argv[4])
datas = [evaluate_motions.load_sequence(kind, seed, 0.6, 'normal', cache_dir)
         for kind in motion_suite.MOTION_KINDS for seed in motion_suite.split_seeds(split, count)]
out = {}
for mode in ('gyro', 'free'):
    cpu = []
    for data in datas:
        estimator = EgomotionEstimator(evaluate_motions._camera(data), EgomotionConfig())
        gyro = GyroBuffer(max_age_s=10.0, max_samples=len(data['gyro_t_s']) + 1)
        gyro.add(data['gyro_t_s'], data['gyro_rad_s'])
        bounds = np.concatenate([[0], np.cumsum(data['counts'])])
        for i in range(len(data['counts'])):
            part = slice(bounds[i], bounds[i + 1])
            t0, t1 = float(data['t0_s'][i]), float(data['t1_s'][i])
            rate = gyro.mean(t0, t1) if mode == 'gyro' else None
            flow = data['flow_px_s'][part]
            time.sleep(pause_s)
            start = time.thread_time()
            estimator.estimate(data['x_px'][part], data['y_px'][part], flow[:, 0], flow[:, 1],
                               None, omega_rad_s=rate, t_s=0.5 * (t0 + t1))
            cpu.append(time.thread_time() - start)
    out[mode] = [1e3 * statistics.median(cpu), 1e3 * statistics.mean(cpu), len(cpu)]
print(json.dumps(out))
"""


def run_tree(tree, args):
    """Run the child in tree; return {mode: [median ms, mean ms, windows]}."""
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS='1')
    result = subprocess.run([sys.executable, '-c', CHILD, args.split, str(args.count),
                             args.cache_dir or '', str(PAUSE_S)],
                            cwd=tree, env=env, capture_output=True, text=True, check=False)
    if result.returncode:
        raise SystemExit(f'{tree}: the estimate failed:\n{result.stderr[-2000:]}')
    return json.loads(result.stdout.strip().splitlines()[-1])


def main():
    """Alternate the two trees and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('baseline', type=pathlib.Path, help='the baseline source tree')
    parser.add_argument('tree', type=pathlib.Path, nargs='?',
                        default=pathlib.Path(__file__).resolve().parents[1])
    parser.add_argument('--split', default='tuning', choices=('tuning', 'heldout'))
    parser.add_argument('--count', type=int, default=2, help='sequences per kind')
    parser.add_argument('--runs', type=int, default=3)
    parser.add_argument('--cache-dir', default=None)
    args = parser.parse_args()
    trees = {'baseline': args.baseline.resolve(), 'this': args.tree.resolve()}
    results = {name: [] for name in trees}
    for run in range(args.runs):
        for name, tree in trees.items():
            results[name].append(run_tree(tree, args))
            print(f'run {run + 1}/{args.runs} {name} done', file=sys.stderr, flush=True)
    print('| tree | mode | windows | CPU ms per window, median per run | mean per run | '
          'median of runs | x baseline |')
    print('|---|---|---|---|---|---|---|')
    for mode in ('gyro', 'free'):
        base = statistics.median(r[mode][0] for r in results['baseline'])
        for name in trees:
            medians = [r[mode][0] for r in results[name]]
            means = [r[mode][1] for r in results[name]]
            middle = statistics.median(medians)
            print(f'| {name} ({trees[name]}) | {mode} | {results[name][0][mode][2]} | '
                  f'{", ".join(f"{m:.2f}" for m in medians)} | '
                  f'{", ".join(f"{m:.2f}" for m in means)} | {middle:.2f} | '
                  f'{middle / base:.2f} |')


if __name__ == '__main__':
    main()
