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
Where the CUDA time of one dense encode + MLP call goes (torch profiler, kernel table).

    python3 benchmarks/profile_cuda.py [--radius 10] [--events 200000] [--size 1280x720]
        [--targets 0.02] [--path sparse]

Same workload as `veckm-flow bench` dense (synthetic edges, 640x480, every event a target), or
the same edges on another sensor size, a fraction of the events as targets, and encode forced
onto one of its paths (dense, sparse; auto: its cost model).
Prints the CUDA kernels and host-side ops by total GPU time, and the wall time per call with
and without the MLP, so an optimisation can be aimed at the slowest stage.
"""

import argparse
import time

import torch
from torch.profiler import profile, ProfilerActivity

from veckm_flow_ros import ops
from veckm_flow_ros.offline import benchmark


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument('--radius', type=int, default=10)
    parser.add_argument('--events', type=int, default=200_000)
    parser.add_argument('--repeats', type=int, default=20)
    parser.add_argument('--size', default='640x480', help='sensor WxH')
    parser.add_argument('--targets', type=float, default=1.0,
                        help='fraction of the events that are targets (evenly spaced)')
    parser.add_argument('--path', default='auto', choices=ops.ENCODE_PATHS)
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.lower().split('x'))
    device = torch.device('cuda')
    (freq_t, freq_x, freq_y), (w1, w2, w3) = benchmark.random_model_tensors()
    t_ns, x, y = benchmark.synthetic_edges(args.events, seed=1, width=width, height=height)
    inputs = [torch.from_numpy(a).to(device) for a in (t_ns, x, y)]
    count = max(1, int(round(args.events * args.targets)))
    targets = torch.linspace(0, args.events - 1, count, device=device).round().long()
    freqs = [f.to(device) for f in (freq_t, freq_x, freq_y)]
    weights = [w.to(device) for w in (w1, w2, w3)]

    def encode():
        with ops.forced_encode_path(args.path):
            return ops.encode(*inputs, targets, width, height, *freqs, benchmark.TAU_S,
                              args.radius)[0]

    def both():
        return ops.flow_mlp(encode(), *weights, 60.0)

    for name, function in (('encode', encode), ('encode+mlp', both)):
        function()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(args.repeats):
            function()
        torch.cuda.synchronize()
        seconds = (time.perf_counter() - start) / args.repeats
        print(f'{name:<11} {seconds * 1e3:8.3f} ms/call  {count / seconds:14,.0f} flows/s')
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            both()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by='cuda_time_total', row_limit=25))


if __name__ == '__main__':
    main()
