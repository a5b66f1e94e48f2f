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


"""Small synthetic scenes with known flow, shared by the pipeline and node tests."""

import numpy as np

EDGES = ((160, 120, 0.3, 250.0), (480, 120, 2.0, 300.0),
         (160, 360, -2.5, 200.0), (480, 360, -0.9, 350.0))


def moving_edges(duration_s=0.3, t0_ns=1_000_000_000, radius_px=50, events_per_pixel=2,
                 seed=0):
    """Events of EDGES sweeping their disks; returns (EventArray sorted by time, gt u, gt v)."""
    from veckm_flow_ros.eventio.events import EventArray
    rng = np.random.default_rng(seed)
    columns = []
    for cx, cy, angle, speed in EDGES:
        ys, xs = np.mgrid[cy - radius_px:cy + radius_px + 1, cx - radius_px:cx + radius_px + 1]
        inside = (xs - cx) ** 2 + (ys - cy) ** 2 <= radius_px ** 2
        xs, ys = xs[inside], ys[inside]
        normal = np.array([np.cos(angle), np.sin(angle)])
        # The edge passes the disk centre at mid-time; a pixel fires when the edge crosses it.
        t_s = ((xs - cx) * normal[0] + (ys - cy) * normal[1]) / speed + duration_s / 2
        for _ in range(events_per_pixel):
            t_event_s = t_s + rng.uniform(0, 1.5e-3, len(t_s))
            keep = (t_event_s >= 0) & (t_event_s < duration_s)
            n = int(keep.sum())
            columns.append((t0_ns + np.round(t_event_s[keep] * 1e9).astype(np.int64),
                            xs[keep], ys[keep], np.full(n, speed * normal[0]),
                            np.full(n, speed * normal[1])))
    t_ns, x, y, gt_u, gt_v = (np.concatenate(c) for c in zip(*columns))
    order = np.argsort(t_ns, kind='stable')
    events = EventArray(t_ns[order], x[order], y[order], np.ones(len(order), np.uint8))
    return events, gt_u[order], gt_v[order]


def background_noise(duration_s=0.3, t0_ns=1_000_000_000, rate_hz_per_px=0.5, width=640,
                     height=480, seed=1):
    """Isolated background-activity events: uniform in time and over the sensor (EventArray)."""
    from veckm_flow_ros.eventio.events import EventArray
    rng = np.random.default_rng(seed)
    n = int(rng.poisson(rate_hz_per_px * width * height * duration_s))
    t_ns = np.sort(t0_ns + rng.integers(0, int(duration_s * 1e9), n))
    return EventArray(t_ns, rng.integers(0, width, n), rng.integers(0, height, n),
                      rng.integers(0, 2, n).astype(np.uint8))


def hot_pixel(x, y, duration_s=0.3, t0_ns=1_000_000_000, rate_hz=2000.0):
    """Return the events of a pixel firing on its own at rate_hz (a hot pixel)."""
    from veckm_flow_ros.eventio.events import EventArray
    t_ns = t0_ns + np.arange(0, int(duration_s * 1e9), int(1e9 / rate_hz), dtype=np.int64)
    n = len(t_ns)
    return EventArray(t_ns, np.full(n, x), np.full(n, y), np.ones(n, np.uint8))


def merged(*arrays):
    """Join EventArrays into one sorted by time (stable); returns (events, source index)."""
    from veckm_flow_ros.eventio.events import EventArray
    events = EventArray.concatenate(list(arrays))
    source = np.concatenate([np.full(len(a), i) for i, a in enumerate(arrays)])
    order = np.argsort(events.t_ns, kind='stable')
    return events[order], source[order]
