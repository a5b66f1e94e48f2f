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

"""Counters, latency samples and log throttling of the streaming pipelines (no torch, no ROS)."""

import collections
import math
import sys
import threading
import time
from typing import Callable

import numpy as np

LATENCY_SAMPLES = 10000


def percentile(values, q: float) -> float:
    """Return the q-th percentile of values, NaN when there are none."""
    return float(np.percentile(values, q)) if len(values) else math.nan


class PeriodCounters:
    """
    Named counters shared by threads (one lock): totals and counts since the last period.

    Subclasses name their counters in NAMES and add their own samples (latencies...) under
    self._lock, resetting them in _reset_period().
    """

    NAMES = ()

    def __init__(self):
        self._lock = threading.Lock()
        self.totals = dict.fromkeys(self.NAMES, 0)
        self._period = dict.fromkeys(self.NAMES, 0)
        self._period_start = time.monotonic()

    def add(self, **counts):
        with self._lock:
            for name, value in counts.items():
                self.totals[name] += value
                self._period[name] += value

    def _take(self, samples):
        """
        Close the period: return (elapsed_s, period counts, totals, samples()).

        samples: called under the lock before the reset, returns the subclass's samples.
        """
        with self._lock:
            now = time.monotonic()
            elapsed_s = max(now - self._period_start, 1e-9)
            period, totals = dict(self._period), dict(self.totals)
            taken = samples()
            self._period = dict.fromkeys(self.NAMES, 0)
            self._reset_period()
            self._period_start = now
        return elapsed_s, period, totals, taken

    def _reset_period(self):
        """Clear the subclass's per-period samples (called under the lock)."""


class Statistics(PeriodCounters):
    """Counters shared by the node's threads (guarded by one lock)."""

    NAMES = ('packets', 'handled_packets', 'events', 'flows', 'blocks', 'seq_gaps',
             'missed_packets',
             'dropped_packets', 'dropped_events', 'decode_problems', 'bad_packets',
             'failed_blocks', 'estimator_resets', 'time_sync_jumps', 'implausible_stamps',
             'images', 'low_validity_flows', 'long_context_flows',
             'long_context_skipped_blocks')

    def __init__(self):
        self._latencies_ms = collections.deque(maxlen=LATENCY_SAMPLES)
        super().__init__()

    def add_latency_ms(self, latency_ms: float):
        with self._lock:
            self._latencies_ms.append(latency_ms)

    def _reset_period(self):
        self._latencies_ms.clear()

    def take_period(self) -> dict:
        """Return rates and latency percentiles since the previous call, and the totals."""
        elapsed_s, period, totals, latencies = self._take(
            lambda: np.array(self._latencies_ms, dtype=np.float64))
        return {
            'elapsed_s': elapsed_s,
            'events_per_s': period['events'] / elapsed_s,
            'flows_per_s': period['flows'] / elapsed_s,
            'packets_per_s': period['packets'] / elapsed_s,
            'latency_p50_ms': percentile(latencies, 50),
            'latency_p99_ms': percentile(latencies, 99),
            'period': period,
            'totals': totals,
        }


class Throttle:
    """Pass at most one message per period from each call site to log()."""

    def __init__(self, log: Callable[[str, str], None]):
        self._log = log
        self._times = {}

    def __call__(self, level: str, message: str, period_s: float = 5.0, depth: int = 1):
        # Cheaper than rclpy's throttle_duration_sec, which looks the caller up (file system
        # calls) on every call, also when throttled: under overload warnings would add load.
        caller = sys._getframe(depth)
        key = (caller.f_code, caller.f_lineno)
        now = time.monotonic()
        if now - self._times.get(key, -math.inf) < period_s:
            return
        self._times[key] = now
        self._log(level, message)
