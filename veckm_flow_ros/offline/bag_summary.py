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
What an event-camera bag holds, decoded message by message (`veckm-flow info`).

    for info in summarize_bag('recording.mcap'):
        print(format_info(info))
"""

from collections import Counter
from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np

from veckm_flow_ros.eventio.decode import DecodeResult, PacketDecoder
from veckm_flow_ros.stream.frontend import StreamFrontEnd


@dataclass
class TopicInfo:
    """Totals of one event topic."""

    topic: str
    msgtype: str
    encodings: Counter = field(default_factory=Counter)
    sizes: Counter = field(default_factory=Counter)
    messages: int = 0
    events_on: int = 0
    events_off: int = 0
    triggers_rising: int = 0
    triggers_falling: int = 0
    t_first_ns: Optional[int] = None
    t_last_ns: Optional[int] = None
    stamp_first_ns: Optional[int] = None
    stamp_last_ns: Optional[int] = None
    seq_gaps: int = 0
    seq_missing: int = 0
    seq_restarts: int = 0  # stream restarts (StreamFrontEnd.resets)
    undecodable: int = 0
    problems: Counter = field(default_factory=Counter)

    @property
    def events(self) -> int:
        return self.events_on + self.events_off

    @property
    def span_s(self) -> float:
        if self.t_first_ns is None:
            return 0.0
        return (self.t_last_ns - self.t_first_ns) * 1e-9

    def add_times(self, t_ns: np.ndarray):
        """Widen the sensor time span [ns] to cover t_ns (events or trigger edges)."""
        if len(t_ns):
            first, last = int(t_ns.min()), int(t_ns.max())
            self.t_first_ns = first if self.t_first_ns is None else min(self.t_first_ns, first)
            self.t_last_ns = last if self.t_last_ns is None else max(self.t_last_ns, last)


def summarize_bag(path, topic: Optional[str] = None, backend: str = 'auto') -> List[TopicInfo]:
    """
    Decode every event message of the bag at `path`; return one TopicInfo per topic, by name.

    Each topic goes through its own StreamFrontEnd, as the node and replay would take it: a
    header stamp, seq or sensor time that goes back is a stream restart (counted), a seq gap
    resynchronises the decoder, an undecodable message is counted and skipped.
    """
    from veckm_flow_ros.eventio.bag import EventBag
    from veckm_flow_ros.eventio.timesync import SeqGapCounter
    from veckm_flow_ros.stream.frontend import Events, InputPacket
    infos, front_ends, seq_counters = {}, {}, {}
    with EventBag(path) as bag:
        topics = bag.event_topics()
        if not topics:
            raise ValueError(f'bag {path} has no EventPacket topics; topics: '
                             f'{sorted(bag.topics()) or "none"}')
        wanted = [topic] if topic is not None else list(topics)
        for item in bag.messages(wanted):
            info = infos.get(item.topic)
            if info is None:
                info = infos[item.topic] = TopicInfo(item.topic, item.msgtype)
                front_ends[item.topic] = _SummaryFrontEnd(backend, info)
                seq_counters[item.topic] = SeqGapCounter()
            msg = item.msg
            info.messages += 1
            info.encodings[msg.encoding] += 1
            info.sizes[(int(msg.width), int(msg.height))] += 1
            if info.stamp_first_ns is None:
                info.stamp_first_ns = item.stamp_ns
            info.stamp_last_ns = item.stamp_ns
            seq_counters[item.topic].update(msg.seq)
            packet = InputPacket(msg.encoding, msg.events, msg.time_base, msg.width,
                                 msg.height, msg.seq, item.stamp_ns, msg.header.frame_id)
            for step in front_ends[item.topic].feed(packet):
                if isinstance(step, Events):
                    on = int(step.events.p.sum())
                    info.events_on += on
                    info.events_off += len(step.events) - on
                    info.add_times(step.events.t_ns)
    for name, info in infos.items():
        counter, front_end = seq_counters[name], front_ends[name]
        info.seq_gaps, info.seq_missing = counter.gaps, counter.missing
        info.seq_restarts = front_end.resets
        info.undecodable = front_end.bad_packets
        info.problems = +front_end.problem_counts()
    return [infos[name] for name in sorted(infos)]


class _SummaryFrontEnd(StreamFrontEnd):
    """
    The shared front end, with a decoder that also tallies trigger edges and problem kinds.

    The front end passes on CD events only; `info` also reports triggers and which decode
    problems occurred, so each decoder it creates (one per stream restart) adds its trigger
    edges to the TopicInfo and is kept for its problem_counts.
    """

    def __init__(self, backend: str, info: TopicInfo):
        self._backend, self._info, self._decoders = backend, info, []
        super().__init__()

    def restart(self):
        super().restart()
        self.decoder = _TriggerTallyDecoder(self._backend, self._info)
        self._decoders.append(self.decoder)

    def problem_counts(self) -> Counter:
        """Problem kind -> count over all decoders of the stream."""
        return sum((decoder.problem_counts for decoder in self._decoders), Counter())


class _TriggerTallyDecoder(PacketDecoder):
    """A PacketDecoder that adds each message's trigger edges and times to a TopicInfo."""

    def __init__(self, backend: str, info: TopicInfo):
        super().__init__(backend)
        self._info = info

    def decode(self, *args, **kwargs) -> DecodeResult:
        result = super().decode(*args, **kwargs)
        rising = int(result.triggers.edge.sum())
        self._info.triggers_rising += rising
        self._info.triggers_falling += len(result.triggers) - rising
        self._info.add_times(result.triggers.t_ns)
        return result


def format_info(info: TopicInfo) -> str:
    """Human-readable block of lines for one topic."""
    def listing(counter, fmt=str):
        return ', '.join(f'{fmt(key)} ({count} msgs)' if len(counter) > 1 else fmt(key)
                         for key, count in counter.most_common()) or '-'

    rate = info.events / info.span_s * 1e-6 if info.span_s > 0 else 0.0
    lines = [
        f'{info.topic}  [{info.msgtype}]',
        f'  encoding         {listing(info.encodings)}',
        f'  sensor size      {listing(info.sizes, lambda s: f"{s[0]} x {s[1]} px")}',
        f'  messages         {info.messages}',
        f'  CD events        {info.events} (ON {info.events_on}, OFF {info.events_off})',
        f'  triggers         {info.triggers_rising + info.triggers_falling} (rising '
        f'{info.triggers_rising}, falling {info.triggers_falling})',
    ]
    if info.t_first_ns is not None:
        lines.append(f'  sensor time      {info.t_first_ns * 1e-9:.6f} s .. '
                     f'{info.t_last_ns * 1e-9:.6f} s (span {info.span_s:.3f} s)')
        lines.append(f'  event rate       {rate:.3f} M events/s (mean over the span)')
    else:
        lines.append('  sensor time      - (no events)')
    if info.stamp_first_ns is not None:
        lines.append(f'  header stamps    span '
                     f'{(info.stamp_last_ns - info.stamp_first_ns) * 1e-9:.3f} s')
    lines.append(f'  seq gaps         {info.seq_gaps} ({info.seq_missing} messages missing'
                 + (f', {info.seq_restarts} restarts' if info.seq_restarts else '') + ')')
    problems = ', '.join(f'{kind} {count}' for kind, count in sorted(info.problems.items()))
    if info.undecodable:
        problems = (problems + ', ' if problems else '') + (
            f'{info.undecodable} undecodable messages')
    lines.append(f'  decode problems  {problems or "none"}')
    return '\n'.join(lines)
