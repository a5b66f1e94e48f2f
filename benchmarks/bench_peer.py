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
Side by side with the published VecKM_flow_cpp CUDA estimator: same events, targets, weights.

    python3 benchmarks/bench_peer.py [--peer DIR] [--weights DIR] [--sizes 640x480 1280x720]
        [--repeats 7] [--build-dir DIR] [--rehearse]

The published estimator is built from --peer (its sources, default
../shared/data/veckm_flow_cpp_src beside the project) with nvcc and the C++ compiler into
--build-dir (default: a temporary folder; never inside the project, whose licence differs),
loaded, and timed next to this package on synthetic moving edges (one 2 tau slice) for each
sensor size and workload. Columns: events, targets, the published flows/s (its predict_flows:
events from host memory, flows back to host memory, one call), ours host->host (the same: one
packed host->device copy of the events, flows copied back), ours with the inputs already on
the GPU (CUDA events), ours on the GPU with encode forced onto its dense and its sparse path
(the data for the path's cost model), the ratio host->host, the GPU memory of each (ours: the
peak allocated by the call; the published: what its constructor takes), and the largest
relative difference between the two sets of flows (per flow, |ours - published| / |ours|,
floored at 1 px/s). Skips with one line without the sources or without a GPU. --rehearse
needs no GPU: it generates every workload and compiles the published sources with nvcc (when
nvcc, cuBLAS and pybind11 are found), then prints the workloads.
"""

import argparse
import glob
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_PEER = ROOT.parent / 'shared' / 'data' / 'veckm_flow_cpp_src'
DEFAULT_WEIGHTS = ROOT.parent / 'shared' / 'data' / 'veckm_flow_cpp_models' / \
    '640x480_24ms_C64_k10'
# (events, fraction of them that are targets; None: all) per sensor size. 1280x720 has 3x the
# pixels of 640x480: the same densities at about 2-4x the events.
WORKLOADS = {
    (640, 480): [(122_000, None), (500_000, None), (500_000, 0.25), (500_000, 0.125),
                 (500_000, 0.0625), (500_000, 0.02), (500_000, 0.01), (50_000, 0.125),
                 (50_000, 0.03)],
    (1280, 720): [(1_000_000, None), (2_000_000, None), (1_000_000, 0.25), (1_000_000, 0.125),
                  (1_000_000, 0.0625), (1_000_000, 0.02), (1_000_000, 0.01),
                  (200_000, 0.125), (200_000, 0.03)],
}
PEER_LIBRARY = 'libSliceNormalFlowEstimator.so'


def parse_size(text):
    """'640x480' -> (640, 480)."""
    try:
        width, height = (int(part) for part in text.lower().split('x'))
    except ValueError:
        raise argparse.ArgumentTypeError(f'size must be WIDTHxHEIGHT, got {text!r}') from None
    if (width, height) not in WORKLOADS:
        raise argparse.ArgumentTypeError(f'size must be one of '
                                         f'{["%dx%d" % size for size in WORKLOADS]}, got {text!r}')
    return width, height


def workload(width, height, events, fraction, seed=0):
    """(t_ns int64, x int32, y int32, targets int64 or None) of one row: edges in one 2 tau."""
    from veckm_flow_ros.offline.benchmark import synthetic_edges
    t_ns, x, y = synthetic_edges(events, seed=seed, num_edges=60 * (width * height) // 307200,
                                 width=width, height=height)
    targets = None
    if fraction is not None:
        count = max(1, int(round(events * fraction)))
        targets = np.linspace(0, events - 1, count).round().astype(np.int64)
    return t_ns, x, y, targets


def _cublas_dirs():
    """(include, lib) folders of cuBLAS from the CUDA toolkit or the nvidia Python wheels."""
    candidates = []
    for site in {sysconfig.get_paths()['purelib'], sysconfig.get_paths()['platlib']}:
        candidates += glob.glob(os.path.join(site, 'nvidia', 'cu*'))
        candidates += glob.glob(os.path.join(site, 'nvidia', 'cublas'))
    candidates += ['/usr/local/cuda']
    for folder in candidates:
        libs = glob.glob(os.path.join(folder, 'lib*', 'libcublas.so*'))
        if os.path.isfile(os.path.join(folder, 'include', 'cublas_v2.h')) and libs:
            return os.path.join(folder, 'include'), os.path.dirname(sorted(libs)[0]), \
                os.path.basename(sorted(libs)[-1])
    return None


def library_command(peer, build, nvcc='nvcc', arch='sm_90'):
    """Return the nvcc command that builds the published estimator's shared library in `build`."""
    cublas = _cublas_dirs()
    if cublas is None:
        raise RuntimeError('cuBLAS (cublas_v2.h and libcublas.so) not found in the CUDA '
                           'toolkit or the nvidia Python wheels')
    include, lib, library = cublas
    return [nvcc, '-O3', f'-arch={arch}', '-Xcompiler', '-fPIC', '-shared',
            str(peer / 'SliceNormalFlowEstimator.cpp'), str(peer / 'SliceNormalFlowEstimator.cu'),
            f'-I{peer}', f'-I{include}', f'-L{lib}', f'-l:{library}',
            f'-Xlinker=-rpath,{lib}', '-o', str(build / PEER_LIBRARY)]


def module_command(peer, build):
    """Return the C++ compiler command that builds its Python module (pybind11) in `build`."""
    import pybind11
    suffix = sysconfig.get_config_var('EXT_SUFFIX')
    return [os.environ.get('CXX', 'g++'), '-O3', '-shared', '-fPIC', '-std=c++17',
            f'-I{pybind11.get_include()}', f'-I{sysconfig.get_paths()["include"]}',
            f'-I{peer}', str(peer / '_binding.cpp'), f'-L{build}', '-lSliceNormalFlowEstimator',
            f'-Wl,-rpath,{build}', '-o', str(build / f'VecKM_flow{suffix}')]


def build_peer(peer, build):
    """Build the published module in `build` (seconds); raises with the compiler's output."""
    start = time.perf_counter()
    for command in (library_command(peer, build), module_command(peer, build)):
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f'{" ".join(command)}\n{result.stdout}{result.stderr}')
    return time.perf_counter() - start


def compare_row(peer, model, width, height, events, fraction, repeats):
    """Measure one workload; return the row's values."""
    import torch

    from veckm_flow_ros import ops
    from veckm_flow_ros.core.device_staging import EventUploader
    from veckm_flow_ros.offline.benchmark import _time, _time_cuda
    device = torch.device('cuda')
    t_ns, x, y, targets = workload(width, height, events, fraction)
    m = events if targets is None else len(targets)
    tau_s = model.tau_s
    # The published estimator reads float32 seconds: times from the slice start.
    txy = np.stack([(t_ns - t_ns[0]) * 1e-9, x, y], axis=1).astype(np.float32)
    peer_targets = (np.arange(events) if targets is None else targets).astype(np.int32)

    def published():
        return peer.predict_flows(txy, events, peer_targets, m, tau_s, tau_s)
    published_s, _ = _time(published, device, repeats)
    published_flow = np.asarray(published()) * model.flow_scale_px_s

    uploader = EventUploader(device)
    host_targets = None if targets is None else torch.from_numpy(targets.astype(np.int32))

    def ours_host():
        t_dev, x_dev, y_dev = uploader.upload(t_ns, x, y)
        if host_targets is None:
            index = torch.arange(events, device=device)
        else:
            index = host_targets.to(device).long()
        return ours_device((t_dev, x_dev, y_dev), index).cpu()

    def ours_device(columns, index):
        features, _ = ops.encode(*columns, index, width, height, model.freq_t, model.freq_x,
                                 model.freq_y, model.tau_s, model.pixel_radius)
        return model.predict_flow_px_s(features)

    host_s, _ = _time(ours_host, device, repeats)
    columns = tuple(torch.from_numpy(a).to(device) for a in (t_ns, x, y))
    index = torch.arange(events, device=device) if targets is None else \
        torch.from_numpy(targets).to(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    flow = ours_device(columns, index).cpu().numpy()
    memory_mb = (torch.cuda.max_memory_allocated(device) - before) / 2**20
    device_s = _time_cuda(lambda: ours_device(columns, index), repeats)
    path_s = {}
    for path in ('dense', 'sparse'):
        with ops.forced_encode_path(path):
            path_s[path] = _time_cuda(lambda: ours_device(columns, index), repeats)
    scale = np.maximum(np.linalg.norm(flow, axis=1), 1.0)
    difference = np.linalg.norm(flow - published_flow, axis=1) / scale
    return {'events': events, 'targets': m, 'published': m / published_s,
            'host': m / host_s, 'device': m / device_s, 'dense': m / path_s['dense'],
            'sparse': m / path_s['sparse'], 'memory_mb': memory_mb,
            'max_rel': float(difference.max()), 'p99_rel': float(np.quantile(difference, 0.99))}


def _format(row, peer_mb):
    targets = 'all' if row['targets'] == row['events'] else \
        f'{100 * row["targets"] / row["events"]:.3g} %'
    return (f'{row["events"]:>10,} {targets:>8} {row["published"] / 1e6:10.1f} '
            f'{row["host"] / 1e6:10.1f} {row["device"] / 1e6:10.1f} {row["dense"] / 1e6:9.1f} '
            f'{row["sparse"] / 1e6:9.1f} {row["host"] / row["published"]:8.2f}x '
            f'{row["memory_mb"]:8.0f} {peer_mb:8.0f} {row["max_rel"]:9.1e} {row["p99_rel"]:9.1e}')


HEADER = (f'{"events":>10} {"targets":>8} {"published":>10} {"ours h2h":>10} {"ours dev":>10} '
          f'{"dense dev":>9} {"sparse":>9} {"h2h ratio":>9} {"ours MB":>8} {"publ MB":>8} '
          f'{"max rel":>9} {"p99 rel":>9}')


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[1])
    parser.add_argument('--peer', type=pathlib.Path, default=DEFAULT_PEER,
                        help='folder of the published VecKM_flow_cpp sources')
    parser.add_argument('--weights', type=pathlib.Path, default=DEFAULT_WEIGHTS,
                        help='published weights folder (<W>x<H>_<ms>ms_C<D>_k<r>)')
    parser.add_argument('--sizes', type=parse_size, nargs='+',
                        default=[(640, 480), (1280, 720)])
    parser.add_argument('--repeats', type=int, default=7, help='timed calls per cell (best)')
    parser.add_argument('--build-dir', type=pathlib.Path, default=None,
                        help='where the published module is built (default: a temporary folder)')
    parser.add_argument('--rehearse', action='store_true',
                        help='no GPU needed: generate the workloads and compile the published '
                             'sources only')
    args = parser.parse_args(argv)
    if not (args.peer / 'SliceNormalFlowEstimator.cu').is_file():
        print(f'bench_peer: skipped: no published sources in {args.peer}')
        return 0
    if not args.weights.is_dir():
        print(f'bench_peer: skipped: no published weights in {args.weights}')
        return 0
    import torch
    if not args.rehearse and not torch.cuda.is_available():
        print('bench_peer: skipped: no CUDA GPU (torch.cuda.is_available() is False)')
        return 0
    build = args.build_dir or pathlib.Path(tempfile.mkdtemp(prefix='veckm_peer_'))
    if ROOT in build.resolve().parents or build.resolve() == ROOT:
        parser.error(f'--build-dir {build} is inside the project; the published code must not '
                     'be built there')
    build.mkdir(parents=True, exist_ok=True)
    try:
        return _run(args, build)
    finally:
        if args.build_dir is None:
            shutil.rmtree(build, ignore_errors=True)


def _rehearse_build(peer, build):
    """Compile the published library and module here (no GPU needed); 0 unless one fails."""
    nvcc = shutil.which('nvcc') or '/usr/local/cuda/bin/nvcc'
    if not os.path.exists(nvcc):
        print('bench_peer: rehearsal: nvcc not found, the published build not tried')
        return 0
    steps = (('nvcc build of the published library', lambda: library_command(peer, build, nvcc),
              RuntimeError),
             ('its Python module', lambda: module_command(peer, build), ImportError))
    for label, make_command, missing in steps:
        try:
            command = make_command()
        except missing as error:
            print(f'bench_peer: rehearsal: {label} not tried ({error})')
            return 0
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        print(f'bench_peer: rehearsal: {label} {"ok" if result.returncode == 0 else "FAILED"}: '
              f'{" ".join(command)}')
        if result.returncode != 0:
            print(result.stderr[-2000:])
            return 1
    return 0


def _run(args, build):
    import torch

    from veckm_flow_ros.core.model import load_model
    model = load_model(args.weights)
    if args.rehearse:
        for width, height in args.sizes:
            for events, fraction in WORKLOADS[(width, height)]:
                t_ns, x, y, targets = workload(width, height, events, fraction)
                print(f'{width}x{height}: {events:,} events over {(t_ns[-1] - t_ns[0]) / 1e6:.1f}'
                      f' ms, {len(np.unique(y.astype(np.int64) * width + x)):,} pixels, '
                      f'{events if targets is None else len(targets):,} targets')
        return _rehearse_build(args.peer, build)
    seconds = build_peer(args.peer, build)
    sys.path.insert(0, str(build))
    import VecKM_flow  # noqa: E402  (the module just built)
    model = model.to('cuda')
    print(f'published estimator built in {seconds:.0f} s from {args.peer}; weights '
          f'{args.weights.name}; {torch.cuda.get_device_name()}, torch {torch.__version__}; '
          f'flows/s in millions (best of {args.repeats} after a warm-up); max/p99 rel: per flow')
    for width, height in args.sizes:
        rows = WORKLOADS[(width, height)]
        free_before, _ = torch.cuda.mem_get_info()
        peer = VecKM_flow.SliceNormalFlowEstimator(
            str(args.weights), max(events for events, _ in rows), width, height,
            model.num_features, model.pixel_radius)
        peer_mb = (free_before - torch.cuda.mem_get_info()[0]) / 2**20
        print(f'\n{width}x{height}\n{HEADER}')
        for events, fraction in rows:
            print(_format(compare_row(peer, model, width, height, events, fraction,
                                      args.repeats), peer_mb), flush=True)
        del peer
        torch.cuda.empty_cache()
    return 0


if __name__ == '__main__':
    sys.exit(main())
