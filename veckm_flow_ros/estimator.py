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
The streaming normal-flow estimator: the one implementation of the pipeline.

Events are pushed in time order (any packet size); the stream is cut into target blocks of
`block_s` seconds of sensor time. A block is encoded once its context is complete:

- centred (default): context = all events within +-tau_s of the block centre (how the model
  was trained); a block is ready when an event newer than centre + tau_s has arrived, so the
  latency is about tau_s + block_s / 2;
- causal: context = all events in [block end - 2 tau_s, block end] (only past and in-block
  events, latency about block_s; less accurate).

Context always uses all events; targets are every `target_stride`-th event of the stream (by
stream index, so the choice does not depend on packet boundaries) and at most
`max_flows_per_block` per block (evenly spaced). Memory is bounded: the buffer holds only what
pending blocks need, and past `max_buffered_events` the oldest events are dropped and counted.
The live node, bag replay, `predict`, evaluation and the benchmark all use this class.
"""

import dataclasses
import logging
import math
import os
from typing import Dict, Iterator, List, Optional, Union

import numpy as np
import torch

from veckm_flow_ros import ops
from veckm_flow_ros.events import EventArray
from veckm_flow_ros.model import load_model, VecKMFlowModel

LOGGER = logging.getLogger(__name__)
# A packet whose first event is older than the newest seen by more than this restarts the
# stream (bag loop, camera restart); smaller disorder is tolerated.
TIME_RESET_TOLERANCE_NS = 1_000_000


@dataclasses.dataclass
class FlowBlock:
    """
    Normal flow of the target events of one block (M flows).

    event_index int64[M]: index of the target in the stream of all events pushed since
    construction or the last reset (counting from 0); t_ns int64[M]: sensor time;
    x, y uint16[M]: pixel (x right, y down); u_px_s, v_px_s float32[M]: normal flow in px/s
    along x and y; confidence float32[M] or None; valid bool[M] or None (None: all valid);
    t_newest_ns: newest sensor time pushed when the block was computed; ready_ns: the end of
    its context window, the sensor time the stream had to reach before the block could be
    computed (a caller that pushes several packets at once finds the packet that completed
    it; None for blocks built by hand).
    """

    event_index: np.ndarray
    t_ns: np.ndarray
    x: np.ndarray
    y: np.ndarray
    u_px_s: np.ndarray
    v_px_s: np.ndarray
    t_newest_ns: int
    confidence: Optional[np.ndarray] = None
    valid: Optional[np.ndarray] = None
    ready_ns: Optional[int] = None

    def __len__(self):
        return len(self.event_index)

    @staticmethod
    def concatenate(blocks: List['FlowBlock']) -> 'FlowBlock':
        """Join blocks into one (t_newest_ns of the last); an empty list gives an empty block."""
        if not blocks:
            return FlowBlock(np.empty(0, np.int64), np.empty(0, np.int64),
                             np.empty(0, np.uint16), np.empty(0, np.uint16),
                             np.empty(0, np.float32), np.empty(0, np.float32), 0)

        def join(name):
            return np.concatenate([getattr(block, name) for block in blocks])
        return FlowBlock(join('event_index'), join('t_ns'), join('x'), join('y'),
                         join('u_px_s'), join('v_px_s'), blocks[-1].t_newest_ns,
                         confidence=None if blocks[0].confidence is None else join('confidence'),
                         valid=None if blocks[0].valid is None else join('valid'))


def _check_int(name, value, low, high):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
            or not low <= value <= high:
        raise ValueError(f'{name} must be an integer in [{low}, {high}], got {value!r}')
    return int(value)


def _check_device(device) -> torch.device:
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f'device must be "cpu" or "cuda[:N]", got {device!r} ({error})') \
            from None
    if device.type == 'cuda' and not torch.cuda.is_available():
        raise ValueError(f'device {str(device)!r} requested but torch.cuda.is_available() is '
                         'False on this machine; use device="cpu"')
    if device.type not in ('cpu', 'cuda'):
        raise ValueError(f'device must be "cpu" or "cuda[:N]", got {str(device)!r}')
    return device


class NormalFlowEstimator:
    """
    Streaming per-event normal flow: push(EventArray) -> list of FlowBlock.

    model: a VecKMFlowModel, or a path/name for load_model (None: the shipped default).
    width, height: sensor size in pixels (events outside are dropped and counted).
    device: 'cpu' or 'cuda[:N]'. block_s: target block length in seconds, in (0, 1].
    causal: past-only context (see module docstring). target_stride: every k-th event is a
    target (k >= 1). max_flows_per_block: cap on targets per block (0 = no cap).
    max_buffered_events: bound on buffered events; the oldest beyond it are dropped.
    confidence: fill FlowBlock.confidence [0, 1] with the rotation-ensemble agreement
    (confidence.predict_with_confidence; same flows, ~4x the encoding cost).
    rotation_mean: the flow is the mean of the rotation ensemble's back-rotated predictions
    instead of the plain prediction (cancels the model's orientation bias: more accurate,
    ~4x the encoding cost, shared with confidence when both are on).
    """

    def __init__(self, model: Union[VecKMFlowModel, str, os.PathLike, None], width: int,
                 height: int, device: Union[str, torch.device] = 'cpu', block_s: float = 0.010,
                 causal: bool = False, target_stride: int = 1, max_flows_per_block: int = 0,
                 max_buffered_events: int = 4_000_000, confidence: bool = False,
                 rotation_mean: bool = False):
        if not isinstance(model, VecKMFlowModel):
            model = load_model(model)
        self.width = _check_int('width', width, 1, 65536)
        self.height = _check_int('height', height, 1, 65536)
        if not (isinstance(block_s, (int, float)) and math.isfinite(block_s)
                and 0.0 < block_s <= 1.0):
            raise ValueError(f'block_s must be a duration in seconds in (0, 1], got {block_s!r}')
        self.block_ns = max(1, int(round(block_s * 1e9)))
        self.causal = bool(causal)
        self.target_stride = _check_int('target_stride', target_stride, 1, 1_000_000)
        self.max_flows_per_block = _check_int('max_flows_per_block', max_flows_per_block, 0,
                                              100_000_000)
        self.max_buffered_events = _check_int('max_buffered_events', max_buffered_events, 1000,
                                              1_000_000_000)
        self.confidence = bool(confidence)
        self.rotation_mean = bool(rotation_mean)
        self.device = _check_device(device)
        self.model = model.to(self.device)
        self.tau_ns = int(round(model.tau_s * 1e9))
        self.reset()
        self.events_in = 0
        self.flows_out = 0
        self.events_dropped: Dict[str, int] = {'outside_image': 0, 'buffer_full': 0,
                                               'time_reset': 0}
        self.time_resets = 0

    # -- public API ------------------------------------------------------------------------

    def reset(self):
        """Forget buffered events and pending blocks; stream indices restart at 0."""
        self._chunks: List[EventArray] = []
        self._index_chunks: List[np.ndarray] = []
        self._buffered = 0
        self._next_index = 0        # stream index of the next pushed event
        self._block_start_ns = None  # start of the next block to compute
        self._newest_ns = None

    def push(self, events: EventArray) -> List[FlowBlock]:
        """Add events (time-ordered); return the blocks whose context became complete."""
        return list(self.push_iter(events))

    def push_iter(self, events: EventArray) -> Iterator[FlowBlock]:
        """
        Like push(), but yield each block as soon as it is computed.

        Consume the iterator completely before the next push (the buffer bound is enforced
        at its end); blocks not yet computed when it is abandoned stay pending.
        """
        if len(events) == 0:
            return
        if self._newest_ns is not None and \
                int(events.t_ns[0]) < self._newest_ns - TIME_RESET_TOLERANCE_NS:
            self.time_resets += 1
            self.events_dropped['time_reset'] += self._buffered
            LOGGER.warning('event time jumped back from %d ns to %d ns (bag loop or camera '
                           'restart): estimator reset #%d, %d buffered events dropped',
                           self._newest_ns, int(events.t_ns[0]), self.time_resets,
                           self._buffered)
            self.reset()
        count = len(events)
        indices = np.arange(self._next_index, self._next_index + count, dtype=np.int64)
        self._next_index += count
        self.events_in += count
        inside = (events.x < self.width) & (events.y < self.height)
        if not inside.all():
            self.events_dropped['outside_image'] += int(count - inside.sum())
            events, indices = events[inside], indices[inside]
            if len(events) == 0:
                return
        newest = int(events.t_ns.max())
        self._newest_ns = newest if self._newest_ns is None else max(self._newest_ns, newest)
        if self._block_start_ns is None:
            self._block_start_ns = int(events.t_ns[0])
        self._chunks.append(events)
        self._index_chunks.append(indices)
        self._buffered += len(events)
        yield from self._ready_blocks(final=False)
        self._enforce_bound()

    def flush(self) -> List[FlowBlock]:
        """End of stream: compute all remaining blocks with the context available."""
        blocks = list(self._ready_blocks(final=True))
        self._chunks, self._index_chunks, self._buffered = [], [], 0
        return blocks

    @property
    def latency_s(self) -> float:
        """Sensor time from a block's first event until the block can be computed (seconds)."""
        if self.causal:
            return self.block_ns * 1e-9
        return (self.block_ns // 2 + self.tau_ns) * 1e-9

    # -- internals -------------------------------------------------------------------------

    def _context_range(self, block_start):
        block_end = block_start + self.block_ns
        if self.causal:
            return block_end - 2 * self.tau_ns, block_end
        centre = block_start + self.block_ns // 2
        return centre - self.tau_ns, centre + self.tau_ns

    def _buffer(self):
        if len(self._chunks) > 1:
            self._chunks = [EventArray.concatenate(self._chunks)]
            self._index_chunks = [np.concatenate(self._index_chunks)]
        return self._chunks[0], self._index_chunks[0]

    def _ready_blocks(self, final: bool) -> Iterator[FlowBlock]:
        while self._buffered and self._block_start_ns is not None:
            block_start = self._block_start_ns
            context_low, context_high = self._context_range(block_start)
            if not final and self._newest_ns < context_high:
                break
            events, indices = self._buffer()
            block_end = block_start + self.block_ns
            in_block = (events.t_ns >= block_start) & (events.t_ns < block_end)
            later = events.t_ns >= block_end
            if not in_block.any():
                if not later.any():
                    break
                # Skip empty blocks (a pause in the stream) in one step.
                first_later = int(events.t_ns[later].min())
                skipped = (first_later - block_start) // self.block_ns
                self._block_start_ns = block_start + skipped * self.block_ns
                continue
            block = self._compute_block(events, indices, in_block, context_low, context_high)
            self._block_start_ns = block_end
            self._trim()
            if block is not None:
                yield block

    def _select_targets(self, indices, in_block):
        targets = np.flatnonzero(in_block)
        if self.target_stride > 1:
            targets = targets[indices[targets] % self.target_stride == 0]
        if self.max_flows_per_block and len(targets) > self.max_flows_per_block:
            keep = np.linspace(0, len(targets) - 1, self.max_flows_per_block).round()
            targets = targets[keep.astype(np.int64)]
        return targets

    def _compute_block(self, events, indices, in_block, context_low, context_high):
        targets = self._select_targets(indices, in_block)
        if len(targets) == 0:
            return None
        in_context = (events.t_ns >= context_low) & (events.t_ns <= context_high)
        in_context[targets] = True  # a target is always its own context
        context = np.flatnonzero(in_context)
        # Target positions within the context selection.
        target_in_context = np.searchsorted(context, targets)
        flow, confidence = self._encode_and_predict(events[context], target_in_context)
        flow = flow.cpu().numpy()
        self.flows_out += len(targets)
        return FlowBlock(
            event_index=indices[targets].copy(),
            t_ns=events.t_ns[targets].copy(),
            x=events.x[targets].copy(),
            y=events.y[targets].copy(),
            u_px_s=np.ascontiguousarray(flow[:, 0], dtype=np.float32),
            v_px_s=np.ascontiguousarray(flow[:, 1], dtype=np.float32),
            t_newest_ns=int(self._newest_ns),
            confidence=None if confidence is None else confidence.cpu().numpy(),
            ready_ns=int(context_high),
        )

    def _encode_and_predict(self, context: EventArray, targets: np.ndarray):
        """Return (flow float32 [M, 2] px/s, confidence float32 [M] or None) on the device."""
        model, device = self.model, self.device
        t_ns = torch.from_numpy(context.t_ns).to(device)
        x = torch.from_numpy(context.x.astype(np.int32)).to(device)
        y = torch.from_numpy(context.y.astype(np.int32)).to(device)
        target_index = torch.from_numpy(np.ascontiguousarray(targets, dtype=np.int64)).to(device)
        if self.confidence or self.rotation_mean:
            from veckm_flow_ros.confidence import predict_with_confidence
            flow, confidence = predict_with_confidence(model, t_ns, x, y, target_index,
                                                       self.width, self.height,
                                                       mean_flow=self.rotation_mean)
            return flow, (confidence if self.confidence else None)
        features, _ = ops.encode(t_ns, x, y, target_index, self.width, self.height,
                                 model.freq_t, model.freq_x, model.freq_y, model.tau_s,
                                 model.pixel_radius)
        return model.predict_flow_px_s(features), None

    def _trim(self):
        """Drop buffered events that no pending block needs."""
        if not self._buffered:
            return
        keep_from, _ = self._context_range(self._block_start_ns)
        keep_from = min(keep_from, self._block_start_ns)
        events, indices = self._buffer()
        keep = events.t_ns >= keep_from
        if not keep.all():
            self._chunks, self._index_chunks = [events[keep]], [indices[keep]]
            self._buffered = int(keep.sum())

    def _enforce_bound(self):
        excess = self._buffered - self.max_buffered_events
        if excess <= 0:
            return
        events, indices = self._buffer()
        self._chunks, self._index_chunks = [events[excess:]], [indices[excess:]]
        self._buffered -= excess
        self.events_dropped['buffer_full'] += excess
        LOGGER.warning('event buffer over max_buffered_events=%d: dropped the %d oldest events',
                       self.max_buffered_events, excess)
        if self._buffered and self._block_start_ns < int(self._chunks[0].t_ns[0]):
            self._block_start_ns = int(self._chunks[0].t_ns[0])
