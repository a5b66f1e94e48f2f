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
Offline replay: an EventPacket bag through the same estimator the node runs, to files.

    bag (EventBag) → StreamFrontEnd → NormalFlowEstimator.push → FlowBlocks
                   → any of: output bag (~/flow PointCloud2 + ~/flow_image Image),
                     npz of per-event flows, mp4 video, PNG frames

The packets go through the node's stream front end (stream/frontend.py: restarts, seq gaps,
time sync) and the flow messages are built exactly as the node builds them (flow_cloud
layout, header stamp = ROS time of the newest event of the block, frame_id copied from the
input), so replay and node give the same ~/flow bytes and stamps. Pictures are
rendered per frame of 1/frame_rate_hz seconds of *sensor* time: the events of the frame with
arrows of its flows, beside the colour-wheel flow image (the bag's ~/flow_image holds the
colour-wheel image alone, as the node publishes it).

The npz of flows holds one row per flow: t_ns int64 (sensor time), x, y float32 (pixels),
u_px_s, v_px_s float32 (px/s, x right, y down), validity float32 [0, 1] (core/validity.py),
confidence float32 (when the model gives one), stamp_ns int64 (ROS time of the event), and the
scalars width, height. Flows below min_validity are left out as by the node (counted), and
flows slower than long_context_below_px_s are estimated again with the long context, as by the
node (counted).
"""

from dataclasses import dataclass, field
import os
import pathlib
import sys
import time
from typing import List, Optional, Union

import numpy as np

from veckm_flow_ros.eventio.events import EventArray
from veckm_flow_ros.eventio.flow_cloud import block_flow_points, pointcloud2_fields
from veckm_flow_ros.eventio.npz import npz_path
from veckm_flow_ros.offline import visualize
from veckm_flow_ros.stream.frontend import Events, InputPacket, Reset, Resize, StreamFrontEnd
from veckm_flow_ros.stream.parameters import parameter_default
from veckm_flow_ros.stream.pipeline import check_config

PathLike = Union[str, os.PathLike]

# Output topics, as the node's private topics resolve for a node named veckm_flow.
FLOW_TOPIC = '/veckm_flow/flow'
FLOW_IMAGE_TOPIC = '/veckm_flow/flow_image'
POINTCLOUD2_TYPE = 'sensor_msgs/msg/PointCloud2'
IMAGE_TYPE = 'sensor_msgs/msg/Image'


@dataclass
class ReplayOptions:
    """
    How to replay.

    topic: the event topic (None: the bag's only event topic); device: 'cpu' or 'cuda';
    block_s, causal, target_stride: as the node's parameters, checked by the node's rule
    (stream.pipeline.check_config: centred blocks at most 2 tau; block_s None: automatic,
    estimator.automatic_block_s); confidence: per-flow
    confidence (rotation ensemble, ~4x the cost) in the npz and the bag's PointCloud2;
    rotation_mean: flows are the rotation ensemble's mean (node's rotation_mean_flow);
    min_validity: leave out flows of lower validity, as the node's min_validity (same
    default; 0 keeps every flow); long_context_below_px_s: estimate kept flows slower than
    this [px/s] again with the long context, as the node's parameter (same default; 0 = off);
    duration_s: replay only the first duration_s seconds of sensor time (None: all);
    frame_rate_hz: rate of the pictures (sensor time); max_speed_px_s: colour scale of the
    pictures (None: fixed from the first frame with flows); cell_px: arrow spacing;
    progress: tqdm bar on stderr.
    """

    topic: Optional[str] = None
    device: str = 'cpu'
    block_s: Optional[float] = None
    causal: bool = False
    target_stride: int = 1
    duration_s: Optional[float] = None
    confidence: bool = False
    rotation_mean: bool = False
    min_validity: float = parameter_default('min_validity')
    long_context_below_px_s: float = parameter_default('long_context_below_px_s')
    frame_rate_hz: float = 25.0
    max_speed_px_s: Optional[float] = None
    cell_px: int = 16
    progress: bool = True


@dataclass
class ReplayOutputs:
    """
    Files to write; each None = not written. png_dir holds frame_000000.png, ...

    npz: numpy appends .npz to a name without it; the summary names the file written.
    """

    bag: Optional[PathLike] = None
    npz: Optional[PathLike] = None
    video: Optional[PathLike] = None
    png_dir: Optional[PathLike] = None
    bag_storage: str = 'mcap'

    def wants_frames(self) -> bool:
        return any(path is not None for path in (self.bag, self.video, self.png_dir))


@dataclass
class ReplaySummary:
    """What a replay did: counts, times (ns / s), throughput, flow speeds, written files."""

    bag: str
    topic: str
    encoding: str = ''
    width: int = 0
    height: int = 0
    messages: int = 0
    events: int = 0
    flows: int = 0
    t_first_ns: Optional[int] = None
    t_last_ns: Optional[int] = None
    wall_s: float = 0.0
    cpu_s: float = 0.0
    bad_messages: int = 0
    decode_problems: int = 0
    non_finite_flows: int = 0
    low_validity_flows: int = 0
    long_context_flows: int = 0
    frames: int = 0
    speed_percentiles_px_s: dict = field(default_factory=dict)
    written: List[str] = field(default_factory=list)

    @property
    def span_s(self) -> float:
        """Sensor time covered by the replayed events [s]."""
        if self.t_first_ns is None:
            return 0.0
        return (self.t_last_ns - self.t_first_ns) * 1e-9

    @property
    def events_per_s(self) -> float:
        return self.events / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def real_time_factor(self) -> float:
        """Sensor seconds processed per wall second (> 1: faster than real time)."""
        return self.span_s / self.wall_s if self.wall_s > 0 else 0.0

    def rows(self) -> list:
        """(name, value) pairs of the summary table."""
        rows = [
            ('bag', self.bag),
            ('topic', f'{self.topic} ({self.encoding}, {self.width}x{self.height})'),
            ('messages', f'{self.messages}'),
            ('events', f'{self.events:,}'),
            ('flows', f'{self.flows:,}'),
            ('time span', f'{self.span_s:.3f} s'),
            ('wall time', f'{self.wall_s:.2f} s (process CPU time {self.cpu_s:.2f} s)'),
            ('throughput', f'{_si(self.events_per_s)} events/s, '
                           f'{self.real_time_factor:.2f}x real time'),
        ]
        if self.speed_percentiles_px_s:
            rows.append(('flow speed', ', '.join(
                f'p{int(q)} {value:.0f}' for q, value in self.speed_percentiles_px_s.items())
                + ' px/s'))
        if self.bad_messages or self.decode_problems:
            rows.append(('input problems', f'{self.bad_messages} undecodable messages, '
                                           f'{self.decode_problems} decode problems'))
        if self.low_validity_flows:
            rows.append(('low validity', f'{self.low_validity_flows:,} flows left out (validity '
                                         'below min_validity)'))
        if self.long_context_flows:
            rows.append(('long context', f'{self.long_context_flows:,} flows estimated again '
                                         '(slower than long_context_below_px_s)'))
        if self.non_finite_flows:
            rows.append(('flows left out', f'{self.non_finite_flows:,} NaN/Inf (the model '
                                           'overflows float32: check its weights)'))
        for path in self.written:
            rows.append(('wrote', path))
        return rows

    def table(self) -> str:
        """Return the summary as an aligned two-column text table."""
        rows = self.rows()
        width = max(len(name) for name, _ in rows)
        return '\n'.join(f'{name:<{width}}  {value}' for name, value in rows)


class FlowCollector:
    """Collect the flows of all blocks; write them as an npz (layout in the module doc)."""

    def __init__(self):
        self._chunks = []

    def add(self, block, stamp_ns: int, t_stamp_ns: int):
        """Add a block's flows; stamp_ns is the ROS time of sensor time t_stamp_ns."""
        t_ns = np.asarray(block.t_ns, np.int64)
        stamp = stamp_ns + (t_ns - int(t_stamp_ns))
        confidence = (None if block.confidence is None
                      else np.asarray(block.confidence, np.float32))
        validity = (np.full(len(t_ns), np.nan, np.float32) if block.validity is None
                    else np.asarray(block.validity, np.float32))
        self._chunks.append((t_ns, np.asarray(block.x, np.float32),
                             np.asarray(block.y, np.float32),
                             np.asarray(block.u_px_s, np.float32),
                             np.asarray(block.v_px_s, np.float32), validity, confidence, stamp))

    def arrays(self) -> dict:
        """Concatenated columns: t_ns, x, y, u_px_s, v_px_s, validity, stamp_ns [, confidence]."""
        names = ('t_ns', 'x', 'y', 'u_px_s', 'v_px_s', 'validity', 'confidence', 'stamp_ns')
        dtypes = (np.int64, np.float32, np.float32, np.float32, np.float32, np.float32,
                  np.float32, np.int64)
        columns = {}
        for index, (name, dtype) in enumerate(zip(names, dtypes)):
            parts = [chunk[index] for chunk in self._chunks]
            if name == 'confidence' and (not parts or any(part is None for part in parts)):
                continue
            columns[name] = np.concatenate(parts) if parts else np.empty(0, dtype)
        return columns

    def save(self, path: PathLike, width: int, height: int):
        np.savez_compressed(path, width=np.int64(width), height=np.int64(height),
                            **self.arrays())


def load_flows_npz(path: PathLike) -> dict:
    """Read a flows npz written by replay (see the module doc) into a dict of arrays."""
    with np.load(path, allow_pickle=False) as data:
        missing = {'t_ns', 'x', 'y', 'u_px_s', 'v_px_s'} - set(data.files)
        if missing:
            raise ValueError(f'{path} is not a veckm-flow flows npz: missing {sorted(missing)}')
        return {name: data[name] for name in data.files}


class FlowBagOutput:
    """Write ~/flow PointCloud2 and ~/flow_image Image messages to a new bag with rosbags."""

    def __init__(self, path: PathLike, storage: str = 'mcap'):
        from rosbags.rosbag2 import StoragePlugin, Writer

        from veckm_flow_ros.eventio.bag import make_typestore
        self.path = pathlib.Path(path)
        if self.path.exists():
            raise ValueError(f'output bag {self.path} already exists; choose a new path or '
                             'delete it')
        if storage not in ('mcap', 'sqlite3'):
            raise ValueError(f'bag storage must be "mcap" or "sqlite3", got {storage!r}')
        plugin = StoragePlugin.MCAP if storage == 'mcap' else StoragePlugin.SQLITE3
        self._typestore = make_typestore()
        self._types = self._typestore.types
        self._writer = Writer(self.path, version=9, storage_plugin=plugin)
        self._writer.open()
        self._flow = self._writer.add_connection(FLOW_TOPIC, POINTCLOUD2_TYPE,
                                                 typestore=self._typestore)
        self._image = self._writer.add_connection(FLOW_IMAGE_TOPIC, IMAGE_TYPE,
                                                  typestore=self._typestore)

    def _header(self, stamp_ns: int, frame_id: str):
        time_type = self._types['builtin_interfaces/msg/Time']
        return self._types['std_msgs/msg/Header'](
            stamp=time_type(sec=int(stamp_ns) // 1_000_000_000,
                            nanosec=int(stamp_ns) % 1_000_000_000),
            frame_id=frame_id)

    def write_flow(self, points: np.ndarray, stamp_ns: int, frame_id: str):
        """Write one flow cloud (points: flow_cloud structured array) stamped stamp_ns."""
        layout = pointcloud2_fields(points)
        point_field = self._types['sensor_msgs/msg/PointField']
        msg = self._types[POINTCLOUD2_TYPE](
            header=self._header(stamp_ns, frame_id),
            height=layout['height'], width=layout['width'],
            fields=[point_field(name=name, offset=offset, datatype=datatype, count=count)
                    for name, offset, datatype, count in layout['fields']],
            is_bigendian=layout['is_bigendian'], point_step=layout['point_step'],
            row_step=layout['row_step'], data=np.frombuffer(layout['data'], np.uint8),
            is_dense=layout['is_dense'])
        self._writer.write(self._flow, int(stamp_ns),
                           self._typestore.serialize_cdr(msg, POINTCLOUD2_TYPE))

    def write_image(self, bgr: np.ndarray, stamp_ns: int, frame_id: str):
        """Write one bgr8 image (uint8 H×W×3) stamped stamp_ns."""
        height, width = bgr.shape[:2]
        msg = self._types[IMAGE_TYPE](
            header=self._header(stamp_ns, frame_id), height=height, width=width,
            encoding='bgr8', is_bigendian=0, step=width * 3,
            data=np.ascontiguousarray(bgr, np.uint8).reshape(-1))
        self._writer.write(self._image, int(stamp_ns),
                           self._typestore.serialize_cdr(msg, IMAGE_TYPE))

    def close(self):
        self._writer.close()


def picture_zoom(width: int) -> int:
    """Upscaling of the video / PNG pictures: 2 for sensors narrower than 480 px, else 1."""
    return 2 if width < 480 else 1


class FramePainter:
    """
    Cut events and flows into frames of sensor time and hand the pictures to the outputs.

    A frame [start, start + period) is finished once a flow block with a target at or after
    its end has arrived (blocks come in time order), so each frame shows all of its flows.
    """

    def __init__(self, width, height, period_ns, max_speed_px_s, cell_px, on_frame):
        self.width, self.height = width, height
        self.period_ns = int(period_ns)
        self.max_speed_px_s = max_speed_px_s
        self.cell_px = cell_px
        self.zoom = picture_zoom(width)
        self.on_frame = on_frame  # callable(index, frame_end_ns, flow_image, panel_image)
        self.frame_start_ns = None
        self.first_start_ns = None
        self.frames = 0
        self._events = []
        self._flows = []

    def add_events(self, events: EventArray):
        if len(events) == 0:
            return
        if self.frame_start_ns is None:
            self.frame_start_ns = self.first_start_ns = int(events.t_ns[0])
        self._events.append(events)

    def add_flows(self, block):
        if len(block.t_ns) == 0:
            return
        t_ns = np.asarray(block.t_ns, np.int64)
        self._flows.append((t_ns, np.asarray(block.x), np.asarray(block.y),
                            np.asarray(block.u_px_s), np.asarray(block.v_px_s)))
        # Later blocks only hold targets after this block's: every flow up to its newest
        # target has arrived.
        done_ns = int(t_ns.max())
        while (self.frame_start_ns is not None
               and self.frame_start_ns + self.period_ns <= done_ns + 1):
            self._finish_frame()

    def finish(self, t_last_ns: Optional[int]):
        """Paint the remaining frames up to t_last_ns (the newest replayed event)."""
        if self.frame_start_ns is None or t_last_ns is None:
            return
        while self.frame_start_ns <= t_last_ns:
            self._finish_frame()

    def _finish_frame(self):
        start, end = self.frame_start_ns, self.frame_start_ns + self.period_ns
        events = EventArray.concatenate(self._events)
        in_frame = (events.t_ns >= start) & (events.t_ns < end)
        frame_events = events[in_frame]
        self._events = [events[events.t_ns >= end]]
        flows = ([np.concatenate(column) for column in zip(*self._flows)] if self._flows
                 else [np.empty(0)] * 5)
        t_ns, x, y, u, v = flows
        now = (t_ns >= start) & (t_ns < end)
        later = t_ns >= end
        self._flows = [tuple(column[later] for column in flows)] if later.any() else []
        x, y, u, v = x[now], y[now], u[now], v[now]
        if self.max_speed_px_s is None and len(u) >= 50:
            self.max_speed_px_s = visualize.auto_max_speed_px_s(u, v)
        max_speed = self.max_speed_px_s or 1.0
        # The bag's ~/flow_image is drawn as the node draws it; the panel grows the dots.
        flow_image = visualize.render_flow_image(x, y, u, v, self.width, self.height,
                                                 max_speed)
        flow_dots = visualize.render_flow_image(x, y, u, v, self.width, self.height,
                                                max_speed, dot_radius_px=1, zoom=self.zoom)
        arrows = visualize.render_arrow_image(
            frame_events.x, frame_events.y, frame_events.p, x, y, u, v, self.width,
            self.height, max_speed, cell_px=self.cell_px, zoom=self.zoom)
        label = f't = {(start - self.first_start_ns) * 1e-9:.3f} s'
        panel = visualize.side_by_side([(f'events + flow arrows, {label}', arrows),
                                        ('normal flow', flow_dots)])
        self.on_frame(self.frames, end, flow_image, panel)
        self.frames += 1
        self.frame_start_ns = end


class VideoOutput:
    """An mp4 (mp4v) written frame by frame with OpenCV."""

    def __init__(self, path: PathLike, frame_rate_hz: float):
        self.path = pathlib.Path(path)
        self.frame_rate_hz = frame_rate_hz
        self._writer = None

    def write(self, bgr: np.ndarray):
        import cv2
        if self._writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            height, width = bgr.shape[:2]
            self._writer = cv2.VideoWriter(str(self.path), cv2.VideoWriter_fourcc(*'mp4v'),
                                           self.frame_rate_hz, (width, height))
            if not self._writer.isOpened():
                raise ValueError(f'cannot open video {self.path} for writing (OpenCV mp4v)')
        self._writer.write(bgr)

    def close(self):
        if self._writer is not None:
            self._writer.release()


def _speed_percentiles(u, v, quantiles=(50, 90, 99)) -> dict:
    if len(u) == 0:
        return {}
    speed = np.hypot(np.asarray(u, np.float64), np.asarray(v, np.float64))
    speed = speed[np.isfinite(speed)]
    if speed.size == 0:
        return {}
    return {q: float(value) for q, value in zip(quantiles, np.percentile(speed, quantiles))}


def choose_topic(bag, topic: Optional[str]) -> str:
    """Return the event topic to replay: `topic`, or the bag's only event topic."""
    event_topics = bag.event_topics()
    if topic is not None:
        if topic not in event_topics:
            raise ValueError(f'topic {topic!r} is not an event topic of {bag.path}; event '
                             f'topics: {", ".join(sorted(event_topics)) or "none"}')
        return topic
    if len(event_topics) != 1:
        raise ValueError(f'{bag.path} has {len(event_topics)} event topics '
                         f'({", ".join(sorted(event_topics)) or "none"}); choose one with '
                         '--topic')
    return next(iter(event_topics))


def replay_bag(path: PathLike, model, options: ReplayOptions = None,
               outputs: ReplayOutputs = None) -> ReplaySummary:
    """
    Replay the bag at `path` through NormalFlowEstimator(model) and write `outputs`.

    model: a VecKMFlowModel (see model.load_model). Returns a ReplaySummary. Raises
    FileNotFoundError for a missing bag and ValueError (one line, naming the bag or the value)
    for options the node would refuse (a centred block longer than 2 tau), a bag that cannot
    be read, a wrong topic, an output that already exists or an output path that cannot be
    created.
    """
    from veckm_flow_ros.eventio.bag import EventBag
    options = options or ReplayOptions()
    outputs = outputs or ReplayOutputs()
    with EventBag(path) as bag:
        topic = choose_topic(bag, options.topic)
        total = bag.event_topics()[topic].message_count
        run = _ReplayRun(str(path), topic, model, options, outputs)
        try:
            run.consume(bag.messages([topic]), total)
            run.finish()
        finally:
            run.close()
    return run.summary


class _ReplayRun:
    """The state of one replay: decoder, time sync, estimator, outputs, counters."""

    def __init__(self, bag_name, topic, model, options, outputs):
        self.model = model
        self.options = options
        self.outputs = outputs
        self.summary = ReplaySummary(bag=bag_name, topic=topic)
        self.front_end = StreamFrontEnd()
        self.estimator = None
        self.sensor_size = None
        self.mark = None  # the newest packet's Mark (offset, frame id)
        self.collector = FlowCollector()
        self.bag_out = None
        self.video = None
        self.painter = None
        self._speeds = []
        self._t_stop_ns = None
        self._done = False
        self.npz_path = None if outputs.npz is None else npz_path(outputs.npz)
        self._check_options()
        self._check_outputs()

    def _check_options(self):
        """Refuse what the node refuses (one rule: stream.pipeline.check_config)."""
        options = self.options
        block_ms = round((options.block_s or 0.0) * 1e3, 9)  # no ulp above 2 tau from s -> ms
        check_config(self.model, {'device': options.device, 'pixel_radius': 0, 'tau_ms': 0.0,
                                  'block_ms': block_ms, 'causal': options.causal,
                                  'model': self.model.name,
                                  'min_validity': options.min_validity,
                                  'long_context_below_px_s': options.long_context_below_px_s})

    def _check_outputs(self):
        outputs = self.outputs
        for what, path in (('npz output', self.npz_path), ('video output', outputs.video),
                           ('output bag', outputs.bag)):
            if path is not None:
                _make_directory(pathlib.Path(path).parent, f'the folder of the {what}')
        for what, path in (('npz output', self.npz_path), ('video output', outputs.video)):
            if path is not None and pathlib.Path(path).is_dir():
                raise ValueError(f'the {what} {path} is an existing directory; name a file')
        if outputs.png_dir is not None:
            _make_directory(pathlib.Path(outputs.png_dir), 'the PNG frame directory')
        if outputs.bag is not None:
            self.bag_out = FlowBagOutput(outputs.bag, outputs.bag_storage)
        if outputs.video is not None:
            self.video = VideoOutput(outputs.video, self.options.frame_rate_hz)

    def consume(self, messages, total):
        progress = _progress_bar(total, self.options.progress)
        start = time.perf_counter()
        cpu_start = time.process_time()
        last_postfix = start
        try:
            for item in messages:
                self._message(item)
                progress.update(1)
                now = time.perf_counter()
                if now - last_postfix > 0.5:
                    last_postfix = now
                    rate = self.summary.events / max(now - start, 1e-9)
                    progress.set_postfix_str(f'{_si(rate)} events/s, '
                                             f'{_si(self.summary.flows)} flows',
                                             refresh=False)
                if self._done:
                    break
            if self.estimator is not None:
                self._blocks(self.estimator.flush())
        finally:
            progress.close()
            self.summary.wall_s += time.perf_counter() - start
            self.summary.cpu_s += time.process_time() - cpu_start

    def _message(self, item):
        msg = item.msg
        summary = self.summary
        summary.messages += 1
        front_end = self.front_end
        steps = front_end.feed(InputPacket(
            msg.encoding, msg.events, int(msg.time_base), int(msg.width), int(msg.height),
            int(msg.seq), int(item.stamp_ns), msg.header.frame_id))
        summary.bad_messages = front_end.bad_packets
        summary.decode_problems = front_end.decode_problems
        for step in steps:
            if isinstance(step, Reset):
                if self.estimator is not None:
                    self.estimator.reset()
            elif isinstance(step, Resize):
                self.sensor_size = (step.width, step.height)
                if self.estimator is not None:  # as the node: a new estimator
                    self.estimator = self._new_estimator(step.width, step.height)
            elif isinstance(step, Events):
                if not summary.encoding:
                    summary.encoding = msg.encoding
                self._events(step.events, step.mark)

    def _events(self, events, mark):
        summary = self.summary
        if self.estimator is None:
            self._start(*self.sensor_size, int(events.t_ns[0]))
        if self._t_stop_ns is not None and events.t_ns[-1] >= self._t_stop_ns:
            events = events[events.t_ns < self._t_stop_ns]
            self._done = True
        self.mark = mark
        if len(events) == 0:
            return
        summary.events += len(events)
        summary.t_last_ns = int(events.t_ns[-1])
        if self.painter is not None:
            self.painter.add_events(events)
        self._blocks(self.estimator.push(events))

    def _start(self, width, height, t_first_ns):
        options = self.options
        summary = self.summary
        summary.width, summary.height = width, height
        summary.t_first_ns = t_first_ns
        if options.duration_s is not None:
            self._t_stop_ns = t_first_ns + int(round(options.duration_s * 1e9))
        self.estimator = self._new_estimator(width, height)
        if self.outputs.wants_frames():
            self.painter = FramePainter(width, height, 1e9 / options.frame_rate_hz,
                                        options.max_speed_px_s, options.cell_px,
                                        self._on_frame)

    def _new_estimator(self, width, height):
        from veckm_flow_ros.core.estimator import automatic_block_s, NormalFlowEstimator
        self._count_non_finite()
        options = self.options
        return NormalFlowEstimator(
            self.model, width, height, device=options.device,
            block_s=options.block_s or automatic_block_s(self.model.tau_s, options.causal),
            causal=options.causal, target_stride=options.target_stride,
            confidence=options.confidence, rotation_mean=options.rotation_mean,
            min_validity=options.min_validity,
            long_context_below_px_s=options.long_context_below_px_s)

    def _blocks(self, blocks):
        for block in blocks:
            points, t_stamp_ns = block_flow_points(block, self.options.confidence)
            if t_stamp_ns is None:
                continue
            stamp_ns = t_stamp_ns + self.mark.offset_ns
            self.summary.flows += len(block.t_ns)
            self._speeds.append(np.hypot(np.asarray(block.u_px_s, np.float32),
                                         np.asarray(block.v_px_s, np.float32)))
            if self.outputs.npz is not None:
                self.collector.add(block, stamp_ns, t_stamp_ns)
            if self.bag_out is not None:
                self.bag_out.write_flow(points, stamp_ns, self.mark.frame_id)
            if self.painter is not None:
                self.painter.add_flows(block)

    def _on_frame(self, index, frame_end_ns, flow_image, panel):
        if self.bag_out is not None:
            self.bag_out.write_image(flow_image, frame_end_ns + self.mark.offset_ns,
                                     self.mark.frame_id)
        if self.video is not None:
            self.video.write(panel)
        if self.outputs.png_dir is not None:
            import cv2
            cv2.imwrite(str(pathlib.Path(self.outputs.png_dir) / f'frame_{index:06d}.png'),
                        panel)

    def _count_non_finite(self):
        """Add the current estimator's counts (flows left out, estimated again) to the summary."""
        if self.estimator is not None:
            self.summary.non_finite_flows += self.estimator.events_dropped['non_finite_flow']
            self.summary.low_validity_flows += self.estimator.low_validity_flows
            self.summary.long_context_flows += self.estimator.long_context_flows

    def finish(self):
        start = time.perf_counter()
        cpu_start = time.process_time()
        self._count_non_finite()
        if self.painter is not None:
            self.painter.finish(self.summary.t_last_ns)
            self.summary.frames = self.painter.frames
        speeds = np.concatenate(self._speeds) if self._speeds else np.empty(0)
        self.summary.speed_percentiles_px_s = _speed_percentiles(speeds, np.zeros_like(speeds))
        if self.npz_path is not None:
            self.collector.save(self.npz_path, self.summary.width, self.summary.height)
            self.summary.written.append(str(self.npz_path))
        self.summary.wall_s += time.perf_counter() - start
        self.summary.cpu_s += time.process_time() - cpu_start

    def close(self):
        if self.bag_out is not None:
            self.bag_out.close()
            self.summary.written.append(f'{self.outputs.bag} ({FLOW_TOPIC}, '
                                        f'{FLOW_IMAGE_TOPIC})')
            self.bag_out = None
        if self.video is not None:
            self.video.close()
            if self.video.path.exists():
                self.summary.written.append(str(self.video.path))
            self.video = None
        if self.outputs.png_dir is not None and self.summary.frames:
            self.summary.written.append(f'{self.outputs.png_dir}/frame_*.png '
                                        f'({self.summary.frames} frames)')


def _make_directory(path: pathlib.Path, what: str):
    """Create directory `path` (and its parents) or raise ValueError saying why not."""
    if path.exists() and not path.is_dir():
        raise ValueError(f'{what} {path} is an existing file, not a directory; choose another '
                         'path')
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ValueError(f'cannot create {what} {path}: {error.strerror or error}') from None


def _si(value: float) -> str:
    """Format a count or rate with a k / M suffix."""
    for scale, suffix in ((1e6, 'M'), (1e3, 'k')):
        if abs(value) >= scale:
            return f'{value / scale:.2f} {suffix}'
    return f'{value:.0f}'


def _progress_bar(total, enabled):
    from tqdm import tqdm
    return tqdm(total=total, unit='msg', file=sys.stderr, disable=not enabled,
                dynamic_ncols=True, leave=False)
