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

Slow flows get a second look (long_context_below_px_s > 0): a flow slower than that is
estimated again by the same model with a context twice as long (tau_s times
LONG_CONTEXT_FACTOR = 2 and the flow scale divided by it: the model sees the slow edge as one
twice as fast, where it is accurate) and replaced by that estimate. The long context is the
4 tau_s of events that end where the block's own context ends (the extra 2 tau_s are all in
the past), so a block is ready as soon as without it: no extra latency.

Context always uses all events; targets are every `target_stride`-th event of the stream (by
stream index, so the choice does not depend on packet boundaries) and at most
`max_flows_per_block` per block (evenly spaced). Memory is bounded: the buffer holds only what
pending blocks need, and past `max_buffered_events` the oldest events are dropped and counted.
The live node, bag replay, `predict`, evaluation and the benchmark all use this class.
"""

import collections
import copy
import logging
import math
import os
import threading
import time
from typing import Callable, Dict, Iterator, List, Optional, Union

import numpy as np
import torch

from veckm_flow_ros import ops
from veckm_flow_ros.core.device_staging import EventUploader, HostReader, read_block_results
from veckm_flow_ros.core.event_buffer import EventBuffer
from veckm_flow_ros.core.flow_block import FlowBlock  # noqa: F401 (re-exported)
from veckm_flow_ros.core.model import load_model, VecKMFlowModel
from veckm_flow_ros.core.validity import NeighbourCounter, validity_from_neighbours
from veckm_flow_ros.eventio.events import EventArray

LOGGER = logging.getLogger(__name__)
# The buffer-full warning comes at most once per this period [s] (the drops are counted).
BUFFER_WARNING_PERIOD_S = 5.0
# A packet whose first event is older than the newest seen by more than this restarts the
# stream (bag loop, camera restart); smaller disorder is tolerated.
TIME_RESET_TOLERANCE_NS = 1_000_000
# Events of the made-up block of warm_up(): spread over the sensor and 2 tau, like a busy
# block, so that the per-thread scratch buffers reach a typical size.
WARM_UP_EVENTS = 20_000
# Slow flows are estimated again with the time context (and so tau) this many times longer.
LONG_CONTEXT_FACTOR = 2
# Largest long_context_below_px_s [px/s].
MAX_LONG_CONTEXT_BELOW_PX_S = 1.0e6


def automatic_block_s(tau_s: float, causal: bool = False) -> float:
    """
    Return the block length [s] the node and replay use by default (block_ms 0).

    Centred: 2 tau, the model's context slice. The context is then the block itself, so each
    event is embedded and pooled once (a shorter block re-encodes the same context for every
    block it overlaps: 1.6x at 20 ms for tau = 16 ms); the shipped models lose 0.4 %Pos
    there against 20 ms blocks (model card). Latency: the newest flow of a block waits only
    for processing, the oldest 2 tau. Causal: tau (a causal block of 2 tau would be the
    centred block).
    """
    return tau_s if causal else 2.0 * tau_s


def _check_int(name, value, low, high):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
            or not low <= value <= high:
        raise ValueError(f'{name} must be an integer in [{low}, {high}], got {value!r}')
    return int(value)


def check_min_validity(min_validity) -> float:
    """Return min_validity as a float, or raise ValueError unless it is in [0, 1]."""
    if isinstance(min_validity, bool) or not isinstance(min_validity, (int, float)) \
            or not 0.0 <= min_validity <= 1.0:
        raise ValueError(f'min_validity must be a number in [0, 1] (0 keeps every flow), got '
                         f'{min_validity!r}')
    return float(min_validity)


def check_long_context(below_px_s) -> float:
    """
    Return long_context_below_px_s as a float, or raise ValueError with the offending value.

    It must be a speed in [0, MAX_LONG_CONTEXT_BELOW_PX_S] px/s (0 = off); any tau works.
    """
    if isinstance(below_px_s, bool) or not isinstance(below_px_s, (int, float)) \
            or not 0.0 <= below_px_s <= MAX_LONG_CONTEXT_BELOW_PX_S:
        raise ValueError(f'long_context_below_px_s must be a speed in px/s in [0, '
                         f'{MAX_LONG_CONTEXT_BELOW_PX_S:g}] (0 = off), got {below_px_s!r}')
    return float(below_px_s)


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


def _check_positions(targets, count: int):
    """
    Raise RuntimeError unless the target positions (sorted array or range) lie in [0, count).

    The host holds the positions, so the check costs nothing here; encode on a GPU does not
    check them against the events (that would wait for the device).
    """
    if isinstance(targets, tuple):
        first, last = targets[0], targets[1] - 1
    elif len(targets):
        first, last = int(targets[0]), int(targets[-1])
    else:
        return
    if first < 0 or last >= count:
        raise RuntimeError(f'target positions [{first}, {last}] outside the {count} context '
                           'events (a bug in the block bookkeeping)')


def _constant_step(positions: np.ndarray) -> int:
    """Return the step of an arithmetic progression of increasing positions, else 0."""
    if len(positions) < 2:
        return 1 if len(positions) else 0
    step = int(positions[1] - positions[0])
    if step > 0 and int(positions[-1] - positions[0]) == step * (len(positions) - 1) and \
            (step == 1 or bool(np.all(np.diff(positions) == step))):
        return step
    return 0


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
    min_validity: leave out (and count in FlowBlock.low_validity and low_validity_flows) the
    flows whose validity is below this, in [0, 1]; 0 keeps every flow. The node, replay and
    predict pass the parameter min_validity (stream/parameters.py; same default).
    long_context_below_px_s: kept flows slower than this [px/s] are estimated again with a
    context LONG_CONTEXT_FACTOR times as long, all of it up to the block's own context end
    (module docstring; no extra latency; counted in
    long_context_flows); 0 = off. The node, replay and predict pass the parameter of the same
    name (stream/parameters.py). A live caller that falls behind may set the attribute
    long_context_active to False: blocks prepared meanwhile skip the second look (their flows
    are the plain ones; counted in long_context_skipped_blocks), until it is True again.
    sync_free: the device form of the pipeline (default: on for CUDA, off for the CPU):
    fixed shapes and host-known sizes, so the host waits for the device once per block, for
    its finished flows (counted in host_reads); True on the CPU runs that form there (tests).
    """

    def __init__(self, model: Union[VecKMFlowModel, str, os.PathLike, None], width: int,
                 height: int, device: Union[str, torch.device] = 'cpu', block_s: float = 0.010,
                 causal: bool = False, target_stride: int = 1, max_flows_per_block: int = 0,
                 max_buffered_events: int = 4_000_000, confidence: bool = False,
                 rotation_mean: bool = False, min_validity: float = 0.0,
                 long_context_below_px_s: float = 0.0, sync_free: Optional[bool] = None):
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
        self.min_validity = check_min_validity(min_validity)
        self._neighbours = NeighbourCounter(self.width, self.height)
        self.device = _check_device(device)
        self.sync_free = self.device.type != 'cpu' if sync_free is None else bool(sync_free)
        # The device form: target positions travel through pinned staging, results through
        # one packed read per block (core/device_staging.py).
        self._uploader = EventUploader(self.device) if self.sync_free else None
        self._reader = HostReader(self.device) if self.device.type != 'cpu' or \
            self.sync_free else None
        self.model = model.to(self.device)
        if self.device.type == 'cpu':
            # Decide the MLP form now (numeric checks, ~30 ms once), not on the first block.
            _ = self.model.c4_fourier_blocks
        self.tau_ns = int(round(model.tau_s * 1e9))
        self.long_context_below_px_s = check_long_context(long_context_below_px_s)
        self._long_model = None
        # Length of the long context [ns] (0: no second look); it ends where a block's own
        # context ends.
        self._long_ns = 0
        if self.long_context_below_px_s > 0:
            # The same weights (and cached MLP form) with tau and the flow scale changed; a
            # copy, not dataclasses.replace, so that a model whose doubled tau is above the
            # checkpoint limit (model.MAX_TAU_S, set for its automatic block) still works.
            self._long_model = copy.copy(self.model)
            self._long_model.tau_s = model.tau_s * LONG_CONTEXT_FACTOR
            self._long_model.flow_scale_px_s = model.flow_scale_px_s / LONG_CONTEXT_FACTOR
            self._long_ns = 2 * self.tau_ns * LONG_CONTEXT_FACTOR
            if self.device.type == 'cpu':
                _ = self._long_model.c4_fourier_blocks
        self.reset()
        self.events_in = 0
        self.flows_out = 0
        # Counts of events that got no flow: outside the sensor, over max_buffered_events,
        # buffered at a time reset, late (older than a block already computed; they still
        # serve as context), or whose flow came out NaN/Inf (a model overflowing float32).
        self.events_dropped: Dict[str, int] = {'outside_image': 0, 'buffer_full': 0,
                                               'time_reset': 0, 'late': 0,
                                               'non_finite_flow': 0}
        # Flows left out because their validity was below min_validity (not events_dropped:
        # those are events lost to limits and faults, these are flows judged untrustworthy).
        self.low_validity_flows = 0
        # Flows replaced by their estimate with the long context (long_context_below_px_s).
        self.long_context_flows = 0
        # Blocks prepared while long_context_active was False (their flows are the plain ones).
        self.long_context_active = True
        self.long_context_skipped_blocks = 0
        self._count_lock = threading.Lock()  # jobs of push_jobs count from several threads
        self._buffer_warned_s = -math.inf  # when the buffer-full warning was last logged
        self.time_resets = 0

    # -- public API ------------------------------------------------------------------------

    def reset(self):
        """Forget buffered events and pending blocks; stream indices restart at 0."""
        self._events = EventBuffer(self.device, mirror=self.sync_free or None)
        self._next_index = 0        # stream index of the next pushed event
        self._block_start_ns = None  # start of the next block to compute
        self._newest_ns = None

    def push(self, events: EventArray) -> List[FlowBlock]:
        """Add events (time-ordered); return the blocks whose context became complete."""
        return list(self.push_iter(events))

    def estimate_all(self, events: EventArray, chunk_events: int = 200_000,
                     on_chunk: Optional[Callable[[int], None]] = None) -> FlowBlock:
        """
        Push a whole recording in chunks, flush, and return all its flows as one FlowBlock.

        on_chunk(n): called after each chunk of n events (e.g. a progress bar's update);
        max_buffered_events must hold at least two chunks.
        """
        blocks = []
        for start in range(0, len(events), chunk_events):
            chunk = events[start:start + chunk_events]
            blocks += self.push(chunk)
            if on_chunk is not None:
                on_chunk(len(chunk))
        blocks += self.flush()
        return FlowBlock.concatenate(blocks)

    def push_iter(self, events: EventArray) -> Iterator[FlowBlock]:
        """
        Like push(), but yield each block as soon as it is computed.

        Consume the iterator completely before the next push (the buffer bound is enforced
        at its end); blocks not yet computed when it is abandoned stay pending.
        """
        if not self.sync_free:
            for job in self._push(events, copy=False):
                block = job()
                if block is not None:
                    yield block
            return
        # The device form queues the next block's kernels before waiting for a block's
        # flows, so that the device is not idle while the host builds a block.
        started = collections.deque()
        for job in self._push(events, copy=False):
            started.append(job.start())
            if len(started) > 1:
                yield started.popleft()()
        while started:
            yield started.popleft()()

    def push_jobs(self, events: EventArray) -> Iterator[Callable[[], FlowBlock]]:
        """
        Like push_iter(), but yield each ready block as a job to run later, in any thread.

        A job takes no arguments and returns its FlowBlock. It holds copies of its inputs,
        so it may run after later pushes or a reset, and jobs may run at once in several
        threads (on the CPU, each op single-threaded: one block per core). The caller keeps
        the blocks in the order the jobs were yielded. Consume the iterator completely before
        the next push.
        """
        yield from self._push(events, copy=True)

    def _push(self, events: EventArray, copy: bool) -> Iterator[Callable[[], FlowBlock]]:
        if len(events) == 0:
            return
        if self._newest_ns is not None and \
                int(events.t_ns[0]) < self._newest_ns - TIME_RESET_TOLERANCE_NS:
            self.time_resets += 1
            self.events_dropped['time_reset'] += len(self._events)
            # Counted in time_resets; callers report it (the node counts and throttles it).
            LOGGER.info('event time jumped back from %d ns to %d ns (bag loop or camera '
                        'restart): estimator reset #%d, %d buffered events dropped',
                        self._newest_ns, int(events.t_ns[0]), self.time_resets,
                        len(self._events))
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
            self._block_start_ns = int(events.t_ns.min())
        late = int(np.count_nonzero(events.t_ns < self._block_start_ns))
        if late:
            self.events_dropped['late'] += late
        self._events.append(events.t_ns, events.x, events.y, indices)
        yield from self._ready_jobs(final=False, copy=copy)
        self._enforce_bound()

    def flush(self) -> List[FlowBlock]:
        """End of stream: compute all remaining blocks with the context available."""
        blocks = [job() for job in self._ready_jobs(final=True, copy=False)]
        self._events.clear()
        return blocks

    def warm_up(self, events: int = WARM_UP_EVENTS) -> float:
        """
        Compute a made-up block in the calling thread and discard it; return its seconds.

        The first block a thread computes pays for the encoder's per-thread tables and
        scratch buffers (pixel phasors of this sensor size, the ring of row embeddings,
        column sums, pooled features: a few MB of fresh pages) and, on CUDA, for loading the
        kernels -- on the dev CPU one to two times a later block's time. A streaming caller
        warms each thread that will compute blocks before the first real block is due. The
        stream's state (buffer, blocks, counters) is not touched.
        """
        events = _check_int('events', events, 1, 10_000_000)
        start = time.perf_counter()
        rng = np.random.default_rng(0)
        context = (torch.from_numpy(np.sort(rng.integers(0, 2 * self.tau_ns, events))),
                   torch.from_numpy(rng.integers(0, self.width, events, dtype=np.int32)),
                   torch.from_numpy(rng.integers(0, self.height, events, dtype=np.int32)))
        context = tuple(column.to(self.device) for column in context)
        flow, _, _ = self._encode_and_predict(context, (0, events))
        if self._long_model is not None:  # the second look's scratch buffers, a quarter
            flow, _, _ = self._predict(self._long_model, context,
                                       torch.arange(0, events, 4, device=self.device))
        flow.cpu()  # waits for a CUDA device
        return time.perf_counter() - start

    @property
    def host_reads(self) -> int:
        """Count the waits for device results in the sync-free form (one a block), else 0."""
        return 0 if self._reader is None or not self.sync_free else self._reader.reads

    @property
    def buffered_events(self) -> int:
        """Events held for pending blocks (at most max_buffered_events after a push)."""
        return len(self._events)

    # -- internals -------------------------------------------------------------------------

    def _context_range(self, block_start):
        """(low, high) sensor times of a block's context."""
        block_end = block_start + self.block_ns
        if self.causal:
            return block_end - 2 * self.tau_ns, block_end
        centre = block_start + self.block_ns // 2
        return centre - self.tau_ns, centre + self.tau_ns

    def _ready_jobs(self, final: bool, copy: bool) -> Iterator[Callable[[], FlowBlock]]:
        """
        Yield a job per ready block with targets, in order (a yielded block is done).

        copy=False: the job reads the buffer, so it must run before the next push.
        """
        buffer = self._events
        while len(buffer) and self._block_start_ns is not None:
            block_start = self._block_start_ns
            if not final and self._newest_ns < self._context_range(block_start)[1]:
                break
            block_end = block_start + self.block_ns
            first, stop = buffer.search(block_start), buffer.search(block_end)
            if first == stop:
                if stop == buffer.end:
                    break
                # Skip empty blocks (a pause in the stream) in one step.
                skipped = (int(buffer.t_ns[stop]) - block_start) // self.block_ns
                self._block_start_ns = block_start + skipped * self.block_ns
                continue
            job = self._prepare_block(first, stop, block_start, copy)
            self._block_start_ns = block_end
            self._trim()  # moves the buffer's start only: no data is overwritten until a push
            if job is not None:
                yield job

    def _select_targets(self, first, stop):
        """Buffer positions of the block's targets (block = positions [first, stop))."""
        stride = self.target_stride
        if stride == 1:
            targets = np.arange(first, stop, dtype=np.int64)
        else:
            index = self._events.index[first:stop]
            if int(index[-1]) - int(index[0]) == stop - 1 - first and \
                    bool(np.all(index[1:] > index[:-1])):
                # Consecutive stream indices (the usual case): every stride-th position, no
                # per-event integer division.
                targets = np.arange(first + (-int(index[0])) % stride, stop, stride,
                                    dtype=np.int64)
            else:
                targets = first + np.flatnonzero(index % stride == 0)
        if self.max_flows_per_block and len(targets) > self.max_flows_per_block:
            keep = np.linspace(0, len(targets) - 1, self.max_flows_per_block).round()
            targets = targets[keep.astype(np.int64)]
        return targets

    def _context(self, targets, low, high, copy):
        """
        Return (context columns on the device, targets' positions in it).

        The context window is the buffer positions [low, high); targets: buffer positions.
        """
        buffer = self._events
        if targets[0] >= low and targets[-1] < high:
            # The usual case (block within the context window): one contiguous slice.
            context = buffer.device_columns(low, high)
            if copy:  # views of the buffer, which later pushes overwrite
                context = tuple(column.clone() for column in context)
            return context, targets - low
        # A block longer than the context window: its targets outside the window are their
        # own context (nothing else of the block is), as in the paper's per-event
        # neighbourhoods.
        before, after = targets[targets < low], targets[targets >= high]
        positions = np.concatenate([before, np.arange(low, high), after])
        columns = buffer.device_columns(buffer.start, buffer.end)
        where = self._positions_on_device(positions - buffer.start)
        context = tuple(column.index_select(0, where) for column in columns)
        return context, np.searchsorted(positions, targets)

    def _prepare_block(self, first, stop, block_start, copy):
        """
        Return a job computing the block of buffer positions [first, stop) (None: no targets).

        block_start: the block's start in sensor time [ns].
        """
        buffer = self._events
        targets = self._select_targets(first, stop)
        if len(targets) == 0:
            return None
        context_low, context_high = self._context_range(block_start)
        low, high = buffer.search(context_low), buffer.search(context_high, 'right')
        long_context = long_targets = None
        skipped = int(self._long_model is not None and not self.long_context_active)
        self.long_context_skipped_blocks += skipped
        if self._long_model is not None and not skipped:
            # The long context ends where the short one does and starts earlier.
            long_low = buffer.search(context_high - self._long_ns)
            long_context, long_targets = self._context(targets, long_low, high, copy)
            if targets[0] >= low and targets[-1] < high:
                # The short context is a slice of the long one: no second copy.
                context = tuple(column[low - long_low:high - long_low]
                                for column in long_context)
                target_in_context = targets - low
            else:
                context, target_in_context = self._context(targets, low, high, copy)
        else:
            context, target_in_context = self._context(targets, low, high, copy)
        step = _constant_step(targets)
        if step and targets[0] >= low and targets[-1] < high:
            # Every event or every stride-th of the block, within the window: a range, made
            # where it is used (no index copy to a device).
            target_in_context = (int(targets[0]) - low, int(targets[-1]) + 1 - low, step)
        self.flows_out += len(targets)
        if isinstance(target_in_context, tuple):
            # copies of slices are cheaper than gathers
            targets = slice(int(targets[0]), int(targets[-1]) + 1, step)
        about = {'event_index': buffer.index[targets].copy(),
                 't_ns': buffer.t_ns[targets].copy(),
                 'x': buffer.x[targets].astype(np.uint16),
                 'y': buffer.y[targets].astype(np.uint16),
                 't_newest_ns': int(self._newest_ns), 'ready_ns': int(context_high)}

        def start() -> Callable[[], FlowBlock]:
            # Queues the block's device work; the returned callable waits for its flows.
            flow, confidence, validity = self._encode_and_predict(context, target_in_context)
            again = 0
            if long_context is not None:
                flow, confidence, again = self._estimate_slow_again(
                    long_context, long_targets, flow, confidence, validity)
            slow = again if isinstance(again, torch.Tensor) else None
            results = read_block_results(self._reader, flow, confidence, validity, slow)

            def finish() -> FlowBlock:
                flow, confidence, validity, looked_again = results()
                count = again if looked_again is None else looked_again
                if looked_again:
                    with self._count_lock:
                        self.long_context_flows += looked_again
                block = self._published_block(flow, confidence, validity, about)
                block.long_context, block.long_context_skipped = count, skipped
                return block
            return finish

        def job() -> FlowBlock:
            return start()()
        job.start = start
        return job

    def _estimate_slow_again(self, long_context, long_targets, flow, confidence, validity):
        """
        Replace the kept flows slower than long_context_below_px_s by the long model's.

        long_targets: the targets' positions in long_context (numpy, in target order).
        Returns (flow, confidence) on the device and the number of flows replaced, or, in the
        sync-free form, the bool mask [M] of the replaced flows (counted with the flows).
        """
        speed = torch.linalg.vector_norm(flow, dim=1)
        slow = (speed < self.long_context_below_px_s) & (validity >= self.min_validity)
        if self.sync_free:
            # Which flows are slow is known on the device only: the long model estimates
            # every target (fixed shapes, no read of how many) and the slow ones are kept.
            slow_flow, slow_confidence, _ = self._predict(
                self._long_model, long_context, self._positions_on_device(long_targets))
            flow = torch.where(slow[:, None], slow_flow.to(flow.dtype), flow)
            if confidence is not None:
                confidence = torch.where(slow, slow_confidence.to(confidence.dtype), confidence)
            return flow, confidence, slow
        which = torch.nonzero(slow).flatten()
        if len(which) == 0:
            return flow, confidence, 0
        target_index = self._positions_on_device(long_targets).index_select(0, which)
        slow_flow, slow_confidence, _ = self._predict(self._long_model, long_context,
                                                      target_index)
        flow = flow.index_copy(0, which, slow_flow.to(flow.dtype))
        if confidence is not None:
            confidence = confidence.index_copy(0, which, slow_confidence.to(confidence.dtype))
        with self._count_lock:
            self.long_context_flows += len(which)
        return flow, confidence, len(which)

    def _published_block(self, flow, confidence, validity, about) -> FlowBlock:
        """
        Build the FlowBlock of the flows to publish: the one rule for node, replay, predict.

        Flows that are NaN or Inf are left out and counted in events_dropped
        ['non_finite_flow']; finite flows with validity below min_validity are left out and
        counted in low_validity_flows and the block's low_validity.
        """
        finite = np.isfinite(flow).all(axis=1)
        if confidence is not None:
            finite &= np.isfinite(confidence)
        keep = finite & (validity >= self.min_validity)
        low_validity = int(np.count_nonzero(finite & ~keep))
        if not keep.all():
            invalid = int(np.count_nonzero(~finite))
            with self._count_lock:
                self.events_dropped['non_finite_flow'] += invalid
                self.low_validity_flows += low_validity
            flow, validity = flow[keep], validity[keep]
            confidence = None if confidence is None else confidence[keep]
            about = {name: value[keep] if isinstance(value, np.ndarray) else value
                     for name, value in about.items()}
        return FlowBlock(u_px_s=np.ascontiguousarray(flow[:, 0], dtype=np.float32),
                         v_px_s=np.ascontiguousarray(flow[:, 1], dtype=np.float32),
                         confidence=confidence, validity=validity, low_validity=low_validity,
                         **about)

    def _encode_and_predict(self, context, targets: np.ndarray):
        """
        Return (flow px/s, confidence or None, validity) of the targets, on the device.

        flow float32 [M, 2], confidence float32 [M], validity float32 [M]. context: (t_ns, x,
        y) tensors on the device; targets: positions within it, an array or a (begin, end,
        step) range.
        """
        _check_positions(targets, len(context[0]))
        if isinstance(targets, tuple):  # a range: made where it is used
            target_index = torch.arange(*targets, dtype=torch.int64, device=self.device)
        else:
            target_index = self._positions_on_device(targets)
        flow, confidence, count = self._predict(self.model, context, target_index)
        _, x, y = context
        return flow, confidence, self._validity(x, y, target_index, count)

    def _positions_on_device(self, positions: np.ndarray) -> torch.Tensor:
        """int64 [M] tensor on the device of host positions (pinned and asynchronous there)."""
        if self._uploader is not None:
            return self._uploader.upload_index(positions)
        return torch.from_numpy(np.ascontiguousarray(positions, dtype=np.int64)).to(self.device)

    def _predict(self, model, context, target_index: torch.Tensor):
        """Return (flow px/s, confidence or None, context counts) of `model` for the targets."""
        t_ns, x, y = context
        if self.confidence or self.rotation_mean:
            from veckm_flow_ros.core.confidence import predict_with_confidence
            counts = []
            flow, confidence = predict_with_confidence(model, t_ns, x, y, target_index,
                                                       self.width, self.height,
                                                       mean_flow=self.rotation_mean,
                                                       counts=counts)
            return flow, (confidence if self.confidence else None), counts[0]
        features, count = ops.encode(t_ns, x, y, target_index, self.width, self.height,
                                     model.freq_t, model.freq_x, model.freq_y,
                                     model.tau_s, model.pixel_radius)
        return model.predict_flow_px_s(features), None, count

    def _validity(self, x, y, target_index, count) -> torch.Tensor:
        """Return the targets' validity float32 [M] (core/validity.py) from the encoder's count."""
        neighbours = self._neighbours(x, y, target_index, count)
        return validity_from_neighbours(neighbours, self.model.pixel_radius, self.model.tau_s)

    def _trim(self):
        """Drop buffered events that no pending block needs."""
        if not len(self._events):
            return
        keep_from, high = self._context_range(self._block_start_ns)
        keep_from = min(keep_from, high - self._long_ns)
        self._events.drop_before(self._events.search(min(keep_from, self._block_start_ns)))

    def _enforce_bound(self):
        buffer = self._events
        excess = len(buffer) - self.max_buffered_events
        if excess <= 0:
            return
        buffer.drop_before(buffer.start + excess)
        self.events_dropped['buffer_full'] += excess
        now_s = time.monotonic()
        if now_s - self._buffer_warned_s >= BUFFER_WARNING_PERIOD_S:  # throttled: per push
            self._buffer_warned_s = now_s
            LOGGER.warning('event buffer over max_buffered_events=%d: dropped the %d oldest '
                           'events (%d in total)', self.max_buffered_events, excess,
                           self.events_dropped['buffer_full'])
        if len(buffer) and self._block_start_ns < int(buffer.t_ns[buffer.start]):
            self._block_start_ns = int(buffer.t_ns[buffer.start])
