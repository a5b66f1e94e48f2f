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
Accuracy of NormalFlowEstimator vs block length, centred and causal, on simulated scenes.

    .venv/bin/python benchmarks/accuracy_vs_block.py --model DIR [--sequences 6]
                                                     [--block-ms 2 5 10 20 32]
                                                     [--long-context-below-px-s 150]

The held-out simulated set of evaluate.py (DAVIS346 size) is scored for every block length in
both context modes; columns: %Pos, relative PEE (median-free mean of |PEE| / |u|), PEE in
px/s, coverage, and the latency of the mode (centred: tau + block / 2; causal: block; the
long context adds none, it is all past). Flows slower than --long-context-below-px-s (default: the
node's long_context_below_px_s, 150 px/s; 0 = off, the numbers measured before that default)
are estimated again on a context twice as long, as the node does.
"""

import argparse

from veckm_flow_ros.cli.replay import add_long_context_argument, parse_benchmark_arguments
from veckm_flow_ros.runtime import set_omp_wait_policy


def main():
    set_omp_wait_policy()  # before anything imports torch
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument('--model', required=True, help='model path or name')
    parser.add_argument('--sequences', type=int, default=6)
    parser.add_argument('--duration', type=float, default=0.15, help='seconds per sequence')
    parser.add_argument('--block-ms', type=float, nargs='+', default=[2, 5, 10, 20, 32])
    parser.add_argument('--threads', type=int, default=1)
    add_long_context_argument(parser, note='every block length and mode; 0 reproduces the '
                              'numbers measured before that default')
    args = parse_benchmark_arguments(parser)
    long_context = args.long_context_below_px_s

    import numpy as np
    import torch

    from veckm_flow_ros.core import metrics
    from veckm_flow_ros.core.estimator import FlowBlock, NormalFlowEstimator
    from veckm_flow_ros.core.model import load_model
    from veckm_flow_ros.offline import evaluate
    torch.set_num_threads(args.threads)
    model = load_model(args.model)
    sequences = evaluate.heldout_sequences(args.sequences, duration_s=args.duration)
    print(f'model {model.name}, {len(sequences)} held-out sequences of {args.duration} s, '
          f'{sum(len(s.events) for s in sequences.values())} events, long context below '
          f'{long_context:g} px/s')

    def method(block_s, causal):
        def run(sequence):
            estimator = NormalFlowEstimator(model, sequence.width, sequence.height,
                                            block_s=block_s, causal=causal,
                                            long_context_below_px_s=long_context)
            block = FlowBlock.concatenate(estimator.push(sequence.events) + estimator.flush())
            flow = np.full((len(sequence.events), 2), np.nan, np.float32)
            flow[block.event_index, 0] = block.u_px_s
            flow[block.event_index, 1] = block.v_px_s
            return evaluate.Prediction(flow)
        return run

    methods = {}
    for causal in (False, True):
        for block_ms in args.block_ms:
            methods[f'{"causal" if causal else "centred"} {block_ms:g} ms'] = \
                method(block_ms * 1e-3, causal)
    report = evaluate.evaluate(methods, sequences)
    print(report.table())
    print()
    print(f'{"mode":<8} {"block ms":>8} {"latency ms":>10} {"%Pos":>6} {"relPEE %":>8} '
          f'(sequence mean)')
    for name, row in report.sequence_mean().items():
        mode, block_ms, _ = name.split()
        block = float(block_ms)
        latency = block if mode == 'causal' else model.tau_s * 1e3 + block / 2
        print(f'{mode:<8} {block:>8g} {latency:>10.1f} {100 * row["pos"]:>6.2f} '
              f'{100 * row["rel_pee"]:>8.2f}')
    del metrics


if __name__ == '__main__':
    main()
