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
veckm-flow predict: per-event normal flow for events stored in a .npz file.

Input npz: t (float64 seconds or int64 ns, detected by dtype; finite and in time order:
unsorted times are refused, naming the first out-of-order event), x, y (integers), optional
p, optional width and height (else max + 1). Output npz: idx (int64 input indices that got a
flow), u, v (float32 px/s, x right, y down), validity (float32, 0..1); events whose flow is
NaN/Inf or whose validity is below --min-validity (the node's min_validity, same default) get
none (counted); flows slower than --long-context-below-px-s (the node's parameter, same
default) are estimated again with the long context (counted).
Runs the streaming NormalFlowEstimator over the whole input (centred context), so results
equal those of the node and of replay.
"""

import sys

import numpy as np

from veckm_flow_ros.cli import add_command
from veckm_flow_ros.cli.replay import (add_long_context_argument, add_min_validity_argument,
                                       check_long_context_argument, check_min_validity_argument)

CHUNK_EVENTS = 200_000


def register(subparsers):
    parser = add_command(
        subparsers, 'predict', run, 'normal flow for events in a .npz file',
        'Per-event normal flow for events in a .npz (t, x, y[, p, width, height]).')
    parser.add_argument('--events', required=True, metavar='IN.npz',
                        help='input events: t (float64 s or int64 ns, finite, sorted by time: '
                             'unsorted times are refused), x, y, optional p, width, height')
    parser.add_argument('--out', required=True, metavar='OUT.npz',
                        help='output: idx (int64), u, v (float32 px/s); .npz is appended to a '
                             'name without it')
    parser.add_argument('--model', default=None, metavar='PATH|NAME',
                        help='checkpoint .npz, published VecKM_flow_cpp folder or shipped model '
                             'name (default: the shipped default model)')
    parser.add_argument('--device', default='cpu', choices=('cpu', 'cuda'),
                        help='where to run the encoding and MLP (default: cpu)')
    parser.add_argument('--stride', type=int, default=1, metavar='K',
                        help='compute the flow of every K-th event (default: 1, all events)')
    parser.add_argument('--causal', action='store_true',
                        help='past-only context (lower latency, lower accuracy)')
    add_min_validity_argument(parser)
    add_long_context_argument(parser)


def run(args) -> int:
    from tqdm import tqdm

    from veckm_flow_ros.core.model import load_model
    from veckm_flow_ros.eventio.npz import load_events, npz_path
    from veckm_flow_ros.stream.pipeline import node_default_estimator
    events, width, height, unit = load_events(args.events)
    if args.stride < 1:
        raise ValueError(f'--stride must be >= 1, got {args.stride}')
    check_min_validity_argument(args)
    check_long_context_argument(args)
    out = npz_path(args.out)  # the name np.savez writes
    if out.is_dir():
        raise ValueError(f'--out {out} is an existing directory; name a file')
    model = load_model(args.model)
    print(f'predict: {len(events)} events, t as {unit}, sensor {width}x{height}, '
          f'model {model.name} (r={model.pixel_radius}, tau={model.tau_s * 1e3:g} ms), '
          f'device {args.device}', file=sys.stderr)
    estimator = node_default_estimator(model, width, height, device=args.device,
                                       causal=args.causal, target_stride=args.stride,
                                       max_buffered_events=max(4_000_000, 2 * CHUNK_EVENTS),
                                       min_validity=args.min_validity,
                                       long_context_below_px_s=args.long_context_below_px_s)
    with tqdm(total=len(events), unit='ev', unit_scale=True, file=sys.stderr,
              disable=len(events) < 2 * CHUNK_EVENTS) as progress:
        flows = estimator.estimate_all(events, CHUNK_EVENTS, progress.update)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(out, idx=flows.event_index.astype(np.int64), u=flows.u_px_s, v=flows.v_px_s,
             validity=(flows.validity if flows.validity is not None
                       else np.empty(0, np.float32)))
    dropped = {reason: count for reason, count in estimator.events_dropped.items() if count}
    if estimator.low_validity_flows:
        dropped['low_validity'] = estimator.low_validity_flows
    again = (f', {estimator.long_context_flows} estimated again with the long context'
             if estimator.long_context_flows else '')
    print(f'predict: wrote {len(flows)} flows to {out}{again}'
          + (f' (events without a flow: {dropped})' if dropped else ''), file=sys.stderr)
    return 0
