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
Cost of EgomotionEstimator.estimate per window, with and without gyroscope.

    OMP_NUM_THREADS=1 python3 benchmarks/bench_egomotion.py [--rates 100000 300000 1000000]
                                                            [--window-ms 30] [--repeats 20]
                                                            [--reference OLD_egomotion.py
                                                             [--reference-numpy]]
                                                            [--pause-ms 27]

Each case is a window of window_ms at a flow rate (analytic normal flow of a 346x260 camera
with plumb_bob distortion, random motion; the case "biased" gives the magnitudes errors of the
flow model's kind, so that the estimator without a gyroscope takes the rotation start),
estimated `--repeats` times. Columns: flows per
window, flows used (max_flows subsamples above it), CPU ms and wall ms per window (median),
and the CPU share of one core the estimator needs to keep up with the rate, per 100 k flows/s
of input. The baseline row (measured in the same run) is the input stage alone (pixel ->
normalized undistorted coordinates and the normal-flow transform) at the same rate; column
"x baseline" is each row's ratio to it. --reference FILE: an egomotion.py of a version before
the estimator was split into modules (commit 3d1023a and earlier: `git show
3d1023a:veckm_flow_ros/core/egomotion.py > /tmp/old.py`), timed on the same windows with its
calls interleaved with this version's (rows "(reference)"), so that both see the same load;
it runs with this build's extension. --reference-numpy: that file's numpy solve instead
(EgomotionEstimator(compiled=False), which those versions kept as the extension's
reference). Then a last column gives the reference's CPU time over this version's.
--pause-ms: sleep before each timed call, as the node idles between windows (caches and
branch predictors go cold: a call then costs more than back to back).
"""

import argparse
import statistics
import time

import numpy as np


def flow_model_gain(x_px, y_px, magnitude_px_s, angle_rad, rng, cell_gain):
    """
    Gains that give exact normal flows magnitude errors of the flow model's kind.

    As test_egomotion's biased_window: slow flows (< 150 px/s) 1.4x and fast ones 1.15x too
    large, +-20 % with the edge orientation angle_rad, the log-normal cell_gain (rows x
    columns of 32 px cells) and log-normal 0.3 per flow; not noise that averages out, so that
    the estimator without a gyroscope takes the rotation start as on the flow model's flows.
    """
    speed = np.abs(magnitude_px_s)
    return (np.where(speed < 150, 1.4, 1.15) * (1 + 0.2 * np.cos(2 * angle_rad))
            * cell_gain[(np.asarray(y_px) // 32).astype(int), (np.asarray(x_px) // 32).astype(int)]
            * np.exp(0.3 * rng.standard_normal(len(speed))))


def analytic_window(camera, count, rng, biased=False):
    """
    Pixel positions and normal flows [px/s] of a random motion (see test_egomotion).

    biased: magnitudes with the flow model's kind of errors (flow_model_gain).
    """
    from veckm_flow_ros.learning.simulate3d import motion_field
    v = rng.normal(size=3)
    v[2] = abs(v[2]) + 0.3
    omega = rng.normal(size=3) * 0.5
    x_px = rng.integers(0, camera.width, count)
    y_px = rng.integers(0, camera.height, count)
    x, y = camera.normalize(x_px, y_px)
    depth = 3.0 + 1.5 * x + 0.5 * np.sin(3.0 * y)
    dx, dy = motion_field(x, y, 1.0 / depth, v / np.linalg.norm(v), omega)
    u_px, v_px = camera.velocity_to_pixels(x, y, dx, dy)
    angle = rng.uniform(0, 2 * np.pi, count)
    magnitude = (np.cos(angle) * u_px + np.sin(angle) * v_px) * (
        1 + 0.05 * rng.standard_normal(count))
    if biased:
        cells = (camera.height // 32 + 1, camera.width // 32 + 1)
        cell_gain = np.exp(0.3 * rng.standard_normal(cells))
        magnitude = magnitude * flow_model_gain(x_px, y_px, magnitude, angle, rng, cell_gain)
    return x_px, y_px, magnitude * np.cos(angle), magnitude * np.sin(angle), omega


def measure(function, repeats, other=None, pause_s=0.0):
    """
    Median CPU and wall time [ms] of function() over repeats calls, and its last result.

    other: a second function called alternately with the first; then returns a pair of
    (cpu, wall, result), the first function's and the other's. pause_s: sleep this long
    before each call (not timed), as the node idles between windows.
    """
    functions = [function] if other is None else [function, other]
    cpu, wall, result = [[] for _ in functions], [[] for _ in functions], [None] * 2
    for _ in range(repeats):
        for index, call in enumerate(functions):
            if pause_s:
                time.sleep(pause_s)
            c0, w0 = time.process_time(), time.perf_counter()
            result[index] = call()
            cpu[index].append((time.process_time() - c0) * 1e3)
            wall[index].append((time.perf_counter() - w0) * 1e3)
    timings = [(statistics.median(c), statistics.median(w), r)
               for c, w, r in zip(cpu, wall, result)]
    return timings[0] if other is None else timings


def load_reference(path):
    """Import another version of veckm_flow_ros/core/egomotion.py from path."""
    import importlib.util
    spec = importlib.util.spec_from_file_location('reference_egomotion', path)
    if spec is None:
        raise SystemExit(f'--reference {path}: not a Python file')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--rates', type=float, nargs='+', default=[1e5, 3e5, 1e6],
                        help='flow rates [flows/s]')
    parser.add_argument('--window-ms', type=float, default=30.0)
    parser.add_argument('--repeats', type=int, default=20)
    parser.add_argument('--reference', default=None,
                        help='an egomotion.py of a version before the split into modules, '
                        'timed interleaved (rows "(reference)")')
    parser.add_argument('--reference-numpy', action='store_true',
                        help="the --reference file's numpy solve (compiled=False)")
    parser.add_argument('--pause-ms', type=float, default=0.0,
                        help='sleep before each timed call [ms], as the node idles between '
                        'windows (e.g. 27 for 30 ms windows); 0: back to back')
    args = parser.parse_args()
    pause_s = args.pause_ms * 1e-3
    from veckm_flow_ros.core.camera import CameraModel
    from veckm_flow_ros.core.egomotion import EgomotionConfig, EgomotionEstimator
    camera = CameraModel.pinhole(346, 260, 250.0, 'plumb_bob', (-0.3, 0.1, 1e-3, -1e-3, 0.0))
    config = EgomotionConfig(window_s=args.window_ms * 1e-3)
    estimator = EgomotionEstimator(camera, config)
    reference = None
    if args.reference_numpy and not args.reference:
        parser.error('--reference-numpy needs --reference FILE')
    if args.reference:
        module = load_reference(args.reference)
        options = {'compiled': False} if args.reference_numpy else {}
        reference = module.EgomotionEstimator(
            camera, module.EgomotionConfig(window_s=args.window_ms * 1e-3), **options)
    rng = np.random.default_rng(0)
    print(f'window {args.window_ms:g} ms, max_flows {config.max_flows}, cells '
          f'{config.cell_px} px, {config.sphere_directions} sphere directions\n')
    print('| flows/s | case | flows/window | used | CPU ms/window | wall ms/window | '
          '% core per 100 k flows/s | x baseline |' + (' reference / this |' if reference
                                                       else ''))
    print('|---|---|---|---|---|---|---|---|' + ('---|' if reference else ''))
    for rate in args.rates:
        count = int(round(rate * args.window_ms * 1e-3))
        x, y, u, v, omega = analytic_window(camera, count, rng)
        biased = analytic_window(camera, count, rng, biased=True)
        rows = []
        base_cpu, base_wall, _ = measure(
            lambda: estimator._input.prepare(x, y, u, v, None), args.repeats, pause_s=pause_s)
        rows.append(('baseline: input stage', '-', base_cpu, base_wall))
        for case, gyro, flows in (('with gyro', omega, (x, y, u, v)),
                                  ('without gyro', None, (x, y, u, v)),
                                  ('without gyro, biased: rotation start', None, biased[:4])):
            def run(chosen):
                return lambda: chosen.estimate(*flows, omega_rad_s=gyro)
            if reference is None:
                cpu, wall, result = measure(run(estimator), args.repeats, pause_s=pause_s)
                rows.append((case, result.num_flows, cpu, wall))
                continue
            for label, (cpu, wall, result) in zip(
                    ('', ' (reference)'),
                    measure(run(estimator), args.repeats, run(reference), pause_s)):
                rows.append((case + label, result.num_flows, cpu, wall))
        cpu_of = {case: cpu for case, _, cpu, _ in rows}
        for case, used, cpu, wall in rows:
            share = 100.0 * cpu / args.window_ms / (rate / 1e5)
            ratio = ''
            if reference is not None and case + ' (reference)' in cpu_of:
                ratio = f' {cpu_of[case + " (reference)"] / max(cpu, 1e-9):.2f} |'
            elif reference is not None:
                ratio = ' |'
            print(f'| {rate:,.0f} | {case} | {count:,} | {used} | {cpu:.2f} | {wall:.2f} | '
                  f'{share:.1f} | {cpu / max(base_cpu, 1e-9):.1f} |{ratio}')


if __name__ == '__main__':
    main()
