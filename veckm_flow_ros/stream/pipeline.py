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
The live streaming pipeline, without ROS: packets in, stamped flow blocks out.

    pipeline = FlowPipeline(model, config, publish=send, log=print)
    pipeline.start()
    pipeline.put(packet)        # any thread (the node's receive thread); never blocks
    ...
    pipeline.stop()

publish(points, stamp_ns, frame_id) receives each block's flows in the ~/flow layout
(eventio.flow_cloud), in block order; log(level, message) receives throttled problem
reports. docs/threading.md explains the threads; in short:

- put() counts seq gaps and puts the packet in a PacketQueue bounded by max_queued_events
  (oldest whole packets dropped and counted; packets older than max_queue_delay_ms too);
- the decode thread takes batches (sized from the estimate thread's measured speed), feeds
  them through the StreamFrontEnd and hands at most MAX_DECODED_BATCHES decoded batches on;
- the estimate thread pushes them into the NormalFlowEstimator. While it keeps up it computes
  each block itself, its ops on all cores (lowest latency); when a decoded batch waits it hands
  blocks to compute_threads pool threads and publishes them in order. It warms itself and
  the pool threads up with a made-up block at start, and on a failure discards the blocks in
  flight, resets the estimator and has the decode thread restart its stream.

Memory is bounded by configuration: the queue (max_queued_events), the decoded batches
(MAX_DECODED_BATCHES x MAX_BATCH_EVENTS events), the estimator (max_buffered_events), one
context copy per block in flight (compute_threads + 1) and the per-pixel tables of the
encoder, the validity (4 bytes a pixel per computing thread) and the flow image
(max_sensor_width_px x max_sensor_height_px: larger packets are dropped by the front end;
the old estimator is released when the size changes).

Stamps: each block's stamp must lie within [first header stamp of the stream -
time_sync_max_jump_ms, header stamp of the packet that completed it + 2 time_sync_max_jump_ms]
(the front end re-synchronises on clock jumps, so this holds for any input it lets through);
a block outside is not published but counted (implausible_stamps), never sent downstream.
"""

import concurrent.futures
import ctypes
import ctypes.util
from dataclasses import dataclass
import os
import queue
import threading
import time
from typing import Callable, List, Optional, Tuple

import numpy as np

from veckm_flow_ros.core.estimator import (automatic_block_s, check_long_context,
                                           check_min_validity, NormalFlowEstimator,
                                           TIME_RESET_TOLERANCE_NS)
from veckm_flow_ros.eventio.events import EventArray
from veckm_flow_ros.eventio.flow_cloud import block_flow_points
from veckm_flow_ros.eventio.timesync import SeqGapCounter
from veckm_flow_ros.stream.counters import Statistics, Throttle  # noqa: F401 - node
from veckm_flow_ros.stream.frontend import Events, InputPacket, Reset, Resize, StreamFrontEnd
from veckm_flow_ros.stream.packet_queue import PacketQueue

# Minimal bytes per event of each encoding: the queue's event estimate is payload bytes / this,
# which over-estimates events for the 8-byte formats' triggers and evt3 time words (safe side).
BYTES_PER_EVENT = {'evt3': 2, 'libcaer_cmp': 2, 'mono': 8, 'libcaer': 8, 'trigger': 8}
# The decode thread takes batches of about BATCH_BUDGET_S of the estimate thread's measured
# processing time (fewer, larger pushes; this bounds the latency a batch adds), between MIN_
# and MAX_BATCH_EVENTS estimated events; at most MAX_DECODED_BATCHES decoded batches wait for
# the estimate thread (the decode thread decodes the next batch while the estimator runs).
BATCH_BUDGET_S = 0.02
MIN_BATCH_EVENTS = 2_000
MAX_BATCH_EVENTS = 500_000
MAX_DECODED_BATCHES = 2
# Longest wait for the compute threads' warm-up blocks (a busy machine; normally ~50 ms).
WARM_UP_TIMEOUT_S = 2.0
# Sensor size of the made-up warm-up blocks (VGA: Prophesee Gen3, DVXplorer).
WARM_UP_SIZE = (640, 480)

PublishFunction = Callable[[np.ndarray, int, str], None]  # (points, stamp_ns, frame_id)
LogFunction = Callable[[str, str], None]  # (level, message)


class ConfigurationError(ValueError):
    """The parameters and the model do not fit together (raised at start-up)."""


def check_config(model, config: dict):
    """Raise ConfigurationError when the parameters contradict each other or the model."""
    device = config['device']
    if device not in ('cpu', 'cuda'):
        raise ConfigurationError(f'parameter device is {device!r}; use cpu or cuda')
    if device == 'cuda':
        import torch
        if not torch.cuda.is_available():
            raise ConfigurationError('parameter device is cuda but torch sees no CUDA device '
                                     f'(torch {torch.__version__}); use device:=cpu')
    radius = config['pixel_radius']
    if radius and radius != model.pixel_radius:
        raise ConfigurationError(
            f'parameter pixel_radius is {radius} px but model {config["model"] or "(default)"} '
            f'was trained with r = {model.pixel_radius} px; set pixel_radius to 0 or '
            f'{model.pixel_radius}, or choose a model with r = {radius}')
    tau_ms = config['tau_ms']
    model_tau_ms = model.tau_s * 1e3
    if tau_ms and abs(tau_ms - model_tau_ms) > 1e-6 * max(tau_ms, 1.0):
        raise ConfigurationError(
            f'parameter tau_ms is {tau_ms:g} ms but model {config["model"] or "(default)"} '
            f'was trained with tau = {model_tau_ms:g} ms; set tau_ms to 0 or {model_tau_ms:g}')
    try:
        check_min_validity(config.get('min_validity', 0.0))
        check_long_context(config.get('long_context_below_px_s', 0.0))
    except ValueError as error:
        raise ConfigurationError(f'parameter {error}') from None
    block_ms = config['block_ms']
    if not config['causal'] and block_ms > 2 * model_tau_ms:
        raise ConfigurationError(
            f'parameter block_ms is {block_ms:g} ms, longer than the context slice of the model '
            f'2 tau = {2 * model_tau_ms:g} ms; use block_ms <= {2 * model_tau_ms:g}')


def compute_threads(config: dict) -> Tuple[int, int]:
    """
    Return (blocks computed at once, torch threads of each) for the parameters.

    Automatic (0): on the CPU min(cores, 4) blocks at once, the cores shared out among them
    (on 2 cores: two blocks, one thread each -- no idle core while one thread is in Python or
    in a serial part of an op); on CUDA one (the GPU runs the ops).
    """
    cores = os.cpu_count() or 1
    count = config['compute_threads']
    if config['device'] != 'cpu':
        count = 1
    elif count == 0:
        count = min(cores, 4)
    threads = config['torch_threads'] or max(1, cores // count)
    return count, threads


def estimated_events(encoding: str, payload_bytes: int) -> int:
    """Upper estimate of the events in a payload (the queue's unit)."""
    return max(payload_bytes // BYTES_PER_EVENT.get(encoding, 2), 1)


def node_default_estimator(model, width: int, height: int, **options) -> NormalFlowEstimator:
    """
    Return a NormalFlowEstimator with the node's defaults unless `options` say otherwise.

    The node's defaults: the automatic block (automatic_block_s: 2 tau centred, tau causal),
    the `min_validity` and the `long_context_below_px_s` of stream/parameters.py, so the flows
    are the ones the node would publish on ~/flow (predict, `veckm-flow egomotion` and
    `evaluate-egomotion` use it).
    """
    from veckm_flow_ros.stream.parameters import parameter_default
    options.setdefault('min_validity', parameter_default('min_validity'))
    options.setdefault('long_context_below_px_s', parameter_default('long_context_below_px_s'))
    options.setdefault('block_s', automatic_block_s(model.tau_s, options.get('causal', False)))
    return NormalFlowEstimator(model, width, height, **options)


@dataclass
class DecodedBatch:
    """
    A batch of packets decoded by the decode thread, for the estimate thread.

    steps: Reset, Resize or ('push', events, marks) -- the Events of consecutive packets
    joined into one push (fewer pushes, fewer GIL hand-offs; the same blocks as pushing packet
    by packet); packets, events: the batch's packet count and estimated events (counted as
    handled once the steps are done).
    """

    steps: list
    packets: int
    events: int


class FlowPipeline:
    """
    The node's packet queue, threads and estimator (see the module docstring).

    model: a loaded VecKMFlowModel; config: the parameters (stream.parameters.PARAMETERS
    names; checked with check_config); publish / log: callbacks; clock_ns: the time the
    latency is measured against (ROS time in the node); alive: False once the owner is
    shutting down (the node's ROS context), so that failures to publish then are no errors.
    """

    def __init__(self, model, config: dict, publish: PublishFunction,
                 log: LogFunction = lambda level, message: None,
                 clock_ns: Callable[[], int] = time.time_ns,
                 alive: Callable[[], bool] = lambda: True):
        check_config(model, config)
        self.model = model
        self.config = config
        self._publish = publish
        self._log = Throttle(log)
        self._clock_ns = clock_ns
        self._alive = alive
        # block_ms 0: the model's own block (2 tau centred, tau causal).
        self.block_ms = (config['block_ms']
                         or 1e3 * automatic_block_s(model.tau_s, config['causal']))
        if config['device'] == 'cpu':
            # Decide the MLP form at start-up (numeric checks, ~30 ms), not on the first block.
            _ = model.c4_fourier_blocks
        self.stats = Statistics()
        self.queue = PacketQueue(config['max_queued_events'])
        # Counted on arrival, so that the queue's own drops are not mistaken for losses.
        self.seq_gaps = SeqGapCounter()
        self.max_jump_ns = int(round(config['time_sync_max_jump_ms'] * 1e6))
        self.front_end = StreamFrontEnd(
            log=self._front_end_log,
            max_sensor_size=(config['max_sensor_width_px'], config['max_sensor_height_px']),
            max_jump_ns=self.max_jump_ns)
        # Built on the first packet, when the sensor size is known (rebuilt if it changes).
        self.estimator = None
        self.sensor_size = (0, 0)
        self._stop = threading.Event()
        self._decoded = queue.Queue(maxsize=MAX_DECODED_BATCHES)
        self._batch_events = MIN_BATCH_EVENTS  # set by the estimate thread from its speed
        # Set by the estimate thread when it failed: the decode thread restarts its stream.
        self._restart_decoding = threading.Event()
        # Blocks being computed by the pool: (future, newest sensor times, marks).
        self._in_flight = []
        self.inline_when_idle = True  # (tests turn it off to exercise the pool)
        # Set by the estimate thread once it and the pool threads computed a made-up block.
        self.warmed_up = threading.Event()
        self.warmed_up_threads = []  # then (thread name, its torch threads) per warmed thread
        self.compute_threads, pool_torch_threads = compute_threads(config)
        # Torch threads of a block computed by the estimate thread itself.
        self._inline_threads = config['torch_threads'] or _default_torch_threads()
        self._compute_pool = None
        if self.compute_threads > 1:
            self._compute_pool = concurrent.futures.ThreadPoolExecutor(
                self.compute_threads, thread_name_prefix='veckm_flow_compute',
                initializer=_set_torch_threads, initargs=(pool_torch_threads,))
        self._threads = [
            threading.Thread(target=self._decode_loop, name='veckm_flow_decode', daemon=True),
            threading.Thread(target=self._estimate_loop, name='veckm_flow_estimate',
                             daemon=True)]

    # -- life cycle ---------------------------------------------------------------------------

    def start(self):
        for thread in self._threads:
            thread.start()

    def is_alive(self) -> bool:
        """Return True while the decode and estimate threads run."""
        return all(thread.is_alive() for thread in self._threads)

    @property
    def stopping(self) -> bool:
        """Return True once stop() was called or the owner is shutting down."""
        return self._stop.is_set() or not self._alive()

    def stop(self, timeout_s: float = 5.0):
        """Stop the threads and the compute pool (idempotent)."""
        self._stop.set()
        self.queue.wake()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout_s)
        if self._compute_pool is not None:
            self._compute_pool.shutdown(wait=True, cancel_futures=True)

    # -- input (any thread) -------------------------------------------------------------------

    def put(self, packet: InputPacket):
        """Queue a packet (never blocks); count seq gaps and the packets dropped for room."""
        if not packet.estimated_events:
            packet.estimated_events = estimated_events(packet.encoding, len(packet.data))
        if not packet.received_s:
            packet.received_s = time.monotonic()
        restarts = self.seq_gaps.restarts
        missed = self.seq_gaps.update(packet.seq)
        dropped = self.queue.put(packet)
        self.stats.add(packets=1, missed_packets=missed, seq_gaps=int(missed > 0),
                       dropped_packets=dropped)
        if missed:
            self._log('warning', f'sequence gap on ~/events: seq {packet.seq} after '
                                 f'{packet.seq - missed - 1}, {missed} packet(s) lost upstream '
                                 f'(total gaps {self.stats.totals["seq_gaps"]})')
        if dropped:
            self._log('warning', f'input queue over capacity ({self.queue.max_events} events): '
                                 f'dropped {dropped} oldest packet(s), '
                                 f'{self.stats.totals["dropped_packets"]} in total; the '
                                 'estimator is slower than the input (raise target_stride or '
                                 'lower the event rate)')
        if self.seq_gaps.restarts != restarts:
            self._log('info', f'seq on ~/events went back or leapt ahead to {packet.seq}: '
                              'counted as a restart of the stream, not as lost packets')

    def count_bad_packet(self, reason: str):
        """Count a packet that never reached put() (malformed message bytes)."""
        self.stats.add(packets=1, bad_packets=1, handled_packets=1)
        self._log('warning', f'dropping a malformed EventPacket: {reason}')

    def process(self, packets: List[InputPacket]):
        """Decode, estimate and publish packets in the calling thread (what the threads do)."""
        self._estimate(self._decode_batch(packets))
        self._publish_computed(wait_s=None, everything=True)

    # -- decode thread ------------------------------------------------------------------------

    def _decode_loop(self):
        """Take packets in batches, decode them and hand them to the estimate thread."""
        max_delay_s = self.config['max_queue_delay_ms'] * 1e-3
        while not self._stop.is_set():
            if max_delay_s > 0:
                self._drop_late_packets(max_delay_s)
            if self._restart_decoding.is_set():  # the estimate thread failed: start afresh
                self._restart_decoding.clear()
                self.front_end.restart()
            packets = self.queue.take(timeout_s=0.05, max_events=self._batch_events)
            if not packets:
                continue
            steps = []
            try:
                self._decode_batch(packets, steps)
            except Exception as error:  # noqa: B902 - the thread must survive and say why
                if self.stopping:
                    return
                self.stats.add(bad_packets=len(packets))
                self._log('error', f'failed to decode {len(packets)} packet(s): '
                                   f'{type(error).__name__}: {error}')
                steps.append(self.front_end.reset(f'{type(error).__name__} while decoding'))
            batch = DecodedBatch(steps, len(packets), sum(p.estimated_events for p in packets))
            while not self._stop.is_set():
                try:
                    self._decoded.put(batch, timeout=0.05)
                    break
                except queue.Full:
                    continue

    def _decode_batch(self, packets: List[InputPacket], steps: Optional[list] = None) -> list:
        """
        Feed the packets through the front end; return the estimator steps (see DecodedBatch).

        The Events of consecutive packets become one ('push', events, marks) step; a Reset or
        Resize pushes what came before it first.
        """
        steps = [] if steps is None else steps
        front_end = self.front_end
        counts = (front_end.events, front_end.bad_packets, front_end.decode_problems,
                  front_end.resets, front_end.time_sync_jumps)
        pending, marks = [], []

        def flush():
            if pending:
                events = pending[0] if len(pending) == 1 else EventArray.concatenate(pending)
                steps.append(('push', events, list(marks)))
                pending.clear()
                marks.clear()

        try:
            for packet in packets:
                if self._stop.is_set():
                    break
                for step in front_end.feed(packet):
                    if isinstance(step, Events):
                        pending.append(step.events)
                        marks.append(step.mark)
                    else:
                        flush()
                        steps.append(step)
            flush()
        finally:
            self.stats.add(events=front_end.events - counts[0],
                           bad_packets=front_end.bad_packets - counts[1],
                           decode_problems=front_end.decode_problems - counts[2],
                           estimator_resets=front_end.resets - counts[3],
                           time_sync_jumps=front_end.time_sync_jumps - counts[4])
        return steps

    def _front_end_log(self, level: str, message: str):
        # One throttle key per front-end call site (depth 2: the line that called log).
        self._log(level, message, period_s=1.0 if level == 'info' else 5.0, depth=2)

    def _drop_late_packets(self, max_delay_s: float):
        """Overload: drop whole packets queued longer than max_delay_s, oldest first."""
        dropped = self.queue.drop_older_than(max_delay_s)
        if not dropped:
            return
        self.stats.add(dropped_packets=dropped)
        self._log('warning', f'input waited longer than max_queue_delay_ms = '
                             f'{self.config["max_queue_delay_ms"]:g} ms: dropped {dropped} '
                             f'oldest packet(s), {self.stats.totals["dropped_packets"]} in '
                             'total; the estimator is slower than the input (raise '
                             'target_stride or lower the event rate)')

    # -- estimate thread ----------------------------------------------------------------------

    def _estimate_loop(self):
        """Run the estimator on decoded batches and publish their blocks."""
        import torch
        # Per thread: OpenMP thread counts are a property of the calling thread (see _warm_up
        # for why this thread sets its own count, and when).
        torch.set_num_threads(self._inline_threads)
        try:
            self._warm_up()
        except Exception as error:  # noqa: B902 - the first blocks are only slower
            if self.stopping:
                return
            self._log('warning', f'warming up the compute threads failed (the first blocks '
                                 f'will be slower): {type(error).__name__}: {error}')
        recent_events, recent_s = 0.0, 0.0  # exponentially forgotten sums over batches
        while not self._stop.is_set():
            try:
                if self._in_flight:
                    try:
                        batch = self._decoded.get_nowait()
                    except queue.Empty:
                        # Nothing new: publish the oldest block as soon as it is done.
                        self._publish_computed(wait_s=0.002)
                        continue
                else:
                    batch = self._decoded.get(timeout=0.05)
            except queue.Empty:
                continue
            except Exception as error:  # noqa: B902 - a block computation failed
                if self.stopping:
                    return
                self._estimate_failed(error, packets=0)
                continue
            start = time.perf_counter()
            try:
                self._estimate(batch.steps)
                self._publish_computed(wait_s=0.0, everything=True)  # blocks done meanwhile
            except Exception as error:  # noqa: B902 - the thread must survive and say why
                if self.stopping:
                    return  # shutting down: publishing may fail
                self._estimate_failed(error, batch.packets)
            finally:
                self.stats.add(handled_packets=batch.packets)
            # Events per second of estimate time (smoothed: a batch without a ready block is
            # cheap) -> the size of the batches the decode thread takes.
            recent_events = 0.9 * recent_events + batch.events
            recent_s = 0.9 * recent_s + (time.perf_counter() - start)
            rate = recent_events / max(recent_s, 1e-6)
            self._batch_events = int(min(max(rate * BATCH_BUDGET_S, MIN_BATCH_EVENTS),
                                         MAX_BATCH_EVENTS))

    def _warm_up(self):
        """
        Compute a made-up block in this thread and in each compute pool thread.

        The first block a thread computes costs it one to two times a later one (its OpenMP
        team, per-thread tables and scratch pages): at 1x that was the worst latency of a run.
        Done when the estimate thread starts, before input usually arrives, for a sensor of
        WARM_UP_SIZE (the first packet's size gets its own phasor tables, ~1 ms).

        The order matters. torch.set_num_threads sets the calling thread's OpenMP count and
        a process-wide default, and each library (libtorch, this package's ops) gives a
        thread that default the first time the thread runs one of its parallel loops. When a
        pool thread (1 thread per block) started before the estimate thread's first block,
        the estimate thread's blocks ran on one core for the rest of the run. So this thread
        computes its block first, with its own count, then the pool threads theirs; then it
        sets its count again.
        """
        import torch
        start = time.perf_counter()
        estimator = self._new_estimator(*WARM_UP_SIZE)
        futures = []
        try:
            estimator.warm_up()  # this thread first
            if self._compute_pool is not None:
                # One made-up block per pool thread: each waits for the others before it
                # returns, so that no thread takes two.
                barrier = threading.Barrier(self.compute_threads)

                def warm_pool_thread():
                    estimator.warm_up()
                    try:
                        barrier.wait(timeout=WARM_UP_TIMEOUT_S)
                    except threading.BrokenBarrierError:
                        pass
                    return threading.current_thread().name, torch.get_num_threads()
                futures = [self._compute_pool.submit(warm_pool_thread)
                           for _ in range(self.compute_threads)]
                concurrent.futures.wait(futures, timeout=WARM_UP_TIMEOUT_S)
        finally:
            # Again: the pool threads' initializer changed the process-wide default.
            torch.set_num_threads(self._inline_threads)
        warmed = [(threading.current_thread().name, torch.get_num_threads())]
        warmed += [future.result() for future in futures if future.done()]  # raises errors
        self.warmed_up_threads = warmed
        self.warmed_up.set()
        self._log('info', f'warmed up {len(warmed)} compute thread(s) in '
                          f'{(time.perf_counter() - start) * 1e3:.0f} ms')

    def _new_estimator(self, width: int, height: int) -> NormalFlowEstimator:
        config = self.config
        return NormalFlowEstimator(
            self.model, width, height, device=config['device'],
            block_s=self.block_ms * 1e-3, causal=config['causal'],
            target_stride=config['target_stride'],
            max_flows_per_block=config['max_flows_per_block'],
            max_buffered_events=config['max_buffered_events'],
            confidence=config['publish_confidence'],
            rotation_mean=config['rotation_mean_flow'], min_validity=config['min_validity'],
            long_context_below_px_s=config['long_context_below_px_s'])

    def estimator_for(self, width: int, height: int) -> NormalFlowEstimator:
        """Return the estimator for this sensor size (a new one when the size changed)."""
        if self.estimator is not None and self.sensor_size == (width, height):
            return self.estimator
        if self.estimator is not None:
            self.stats.add(estimator_resets=1)
            self._log('warning', f'sensor size changed from {self.sensor_size[0]}x'
                                 f'{self.sensor_size[1]} to {width}x{height} px: restarting the '
                                 f'estimator ({self.stats.totals["estimator_resets"]} stream '
                                 'resets so far)')
            self.estimator = None  # its buffers go before the new one's are allocated
            _release_freed_memory()
        self.estimator = self._new_estimator(width, height)
        self.sensor_size = (width, height)
        return self.estimator

    def _estimate_failed(self, error: Exception, packets: int):
        """Count and log a failure of the estimator; restart the stream."""
        self.stats.add(bad_packets=packets, failed_blocks=1, estimator_resets=1)
        self._log('error', f'computing flow failed ({packets} packet(s) in the batch being '
                           f'handled): {type(error).__name__}: {error}; resetting the stream')
        self._discard_computing()
        if self.estimator is not None:
            self.estimator.reset()
        self._restart_decoding.set()

    def _estimate(self, steps: list):
        """Run decoded steps through the estimator and publish the blocks."""
        for step in steps:
            if self._stop.is_set():
                return
            if isinstance(step, (Resize, Reset)):
                # The blocks being computed belong to the stream before: publish them first.
                self._publish_computed(wait_s=None, everything=True)
            if isinstance(step, Resize):
                self.estimator_for(step.width, step.height)
            elif isinstance(step, Reset):
                if self.estimator is not None:
                    self.estimator.reset()
            else:
                self._push_and_publish(step[1], step[2])

    def _push_and_publish(self, events: EventArray, marks: list):
        """Push the events at once; publish the blocks as they are computed, in order."""
        time_resets = self.estimator.time_resets
        try:
            self._push_blocks(events, marks)
        finally:
            # The estimator restarts by itself when sensor time steps back by more than its
            # tolerance (less than the front end's): a stream reset like the others.
            resets = self.estimator.time_resets - time_resets if self.estimator else 0
            if resets:
                self.stats.add(estimator_resets=resets)
                self._log('warning', f'sensor time went back by more than '
                                     f'{TIME_RESET_TOLERANCE_NS * 1e-6:g} ms: estimator reset '
                                     f'({self.stats.totals["estimator_resets"]} stream resets '
                                     'so far)')

    def _behind(self) -> bool:
        """
        Return whether the pipeline is behind.

        Behind: a decoded batch waits, more events are queued than the decode thread takes at
        once, or every compute thread is busy.
        """
        return (not self._decoded.empty() or len(self._in_flight) >= self.compute_threads
                or self.queue.queued_events > self._batch_events)

    def _push_blocks(self, events: EventArray, marks: list):
        newest = np.array([mark.newest_ns for mark in marks], dtype=np.int64)
        estimator = self.estimator
        # Behind: the next blocks skip the long context's second look (counted) and the node
        # catches up at the plain cost instead of dropping input, unless
        # long_context_when_behind; set before each block is prepared (the iterators prepare a
        # block when asked for it).
        always = bool(self.config.get('long_context_when_behind', False))
        estimator.long_context_active = always or not self._behind()
        if self._compute_pool is None:
            for block in estimator.push_iter(events):
                if self._stop.is_set():
                    return
                self._publish_marked(block, newest, marks)
                estimator.long_context_active = always or not self._behind()
            return
        # Blocks computed by the pool, at most compute_threads at once (each job holds a
        # copy of its context: memory stays bounded), published in order. While the node
        # keeps up (nothing computing, no decoded batch waiting) a block is computed here,
        # its ops spread over this thread's torch threads: the lowest latency.
        for job in estimator.push_jobs(events):
            if self._stop.is_set():
                return
            if self.inline_when_idle and not self._in_flight and self._decoded.empty():
                self._publish_marked(job(), newest, marks)
            else:
                self._in_flight.append((self._compute_pool.submit(job), newest, marks))
                while len(self._in_flight) > self.compute_threads:
                    self._publish_computed(wait_s=None)
                self._publish_computed(wait_s=0.0, everything=True)
            estimator.long_context_active = always or not self._behind()

    def _publish_computed(self, wait_s: Optional[float], everything: bool = False):
        """
        Publish computed blocks in order, stopping at the first one not done.

        The oldest block is waited for up to wait_s (None: until done); with everything=True
        the ones after it that are done are published too.
        """
        while self._in_flight:
            future, newest, marks = self._in_flight[0]
            if not future.done():
                if wait_s is not None and wait_s <= 0.0:
                    return
                concurrent.futures.wait([future], timeout=wait_s)
                if not future.done():
                    return
            self._in_flight.pop(0)
            self._publish_marked(future.result(), newest, marks)  # raises a job's error
            if not everything:
                return

    def _discard_computing(self):
        """Forget the blocks being computed (after a failure); waits for their threads."""
        futures = [future for future, _, _ in self._in_flight]
        self._in_flight.clear()
        concurrent.futures.wait(futures)

    def _publish_marked(self, block, newest: np.ndarray, marks: list):
        """Publish a block stamped by the packet that completed it (the last if none did)."""
        mark = marks[min(int(np.searchsorted(newest, block.ready_ns)), len(marks) - 1)]
        if block.low_validity:
            self.stats.add(low_validity_flows=block.low_validity)
        if block.long_context:
            self.stats.add(long_context_flows=block.long_context)
        if block.long_context_skipped:
            self.stats.add(long_context_skipped_blocks=block.long_context_skipped)
        points, t_stamp_ns = block_flow_points(block, self.config['publish_confidence'])
        if t_stamp_ns is None:
            return
        stamp_ns = int(t_stamp_ns) + int(mark.offset_ns)
        low_ns = max(mark.first_stamp_ns - self.max_jump_ns, 0)
        high_ns = mark.stamp_ns + 2 * self.max_jump_ns
        if not low_ns <= stamp_ns <= high_ns:
            # A safety net: the front end re-synchronises on clock jumps, so this needs a
            # corrupt clock it did not see; a wrong stamp would mislead odometry downstream.
            self.stats.add(implausible_stamps=1)
            self._log('warning', f'not publishing a block stamped {stamp_ns} ns: outside the '
                                 f'input header stamps [{mark.first_stamp_ns}, '
                                 f'{mark.stamp_ns}] ns +- time_sync_max_jump_ms '
                                 f'({self.stats.totals["implausible_stamps"]} blocks so far)')
            return
        self._publish(points, stamp_ns, mark.frame_id)
        self.stats.add(flows=len(points), blocks=1)
        self.stats.add_latency_ms((self._clock_ns() - stamp_ns) * 1e-6)

    def estimator_drops(self) -> int:
        """Events the estimator dropped to stay within max_buffered_events (total)."""
        estimator = self.estimator
        return sum(getattr(estimator, 'events_dropped', {}).values()) if estimator else 0


def _release_freed_memory():
    """Return freed heap pages to the system (glibc keeps them otherwise); a no-op elsewhere."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library('c') or 'libc.so.6')
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _default_torch_threads() -> int:
    """Torch's own default thread count (read in a thread that never set its count)."""
    import torch
    return torch.get_num_threads()


def _set_torch_threads(count: int):
    """Thread initializer of the compute pool: torch threads of the calling thread."""
    import torch
    torch.set_num_threads(count)
