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

"""`veckm-flow info BAG`: what an event-camera bag holds, decoded message by message."""

from collections import Counter
from dataclasses import dataclass, field
from typing import Optional

from veckm_flow_ros.cli import HelpFormatter


def register(subparsers):
    parser = subparsers.add_parser(
        'info', help='summarise the event topics of a bag (decodes every message)',
        description='For each EventPacket topic of a bag (.db3 / .mcap / bag directory): '
                    'encoding, sensor size, message count, CD events ON/OFF, triggers, sensor '
                    'time span, event rate, seq gaps and decode problems.',
        formatter_class=HelpFormatter)
    parser.add_argument('bag', help='bag directory or .db3/.mcap file')
    parser.add_argument('--topic', default=None, help='only this topic (default: all event '
                                                      'topics)')
    parser.add_argument('--backend', default='auto', choices=('auto', 'cpp', 'numpy'),
                        help='decoder backend')
    parser.set_defaults(func=run)


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
    seq_restarts: int = 0
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


def summarize_bag(path, topic: Optional[str] = None, backend: str = 'auto') -> list:
    """Decode every event message of the bag at `path`; return one TopicInfo per topic."""
    from veckm_flow_ros.eventio.bag import EventBag
    from veckm_flow_ros.eventio.decode import DecodeError, PacketDecoder
    from veckm_flow_ros.eventio.timesync import SeqGapCounter
    infos, decoders, seq_counters = {}, {}, {}
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
                decoders[item.topic] = PacketDecoder(backend)
                seq_counters[item.topic] = SeqGapCounter()
            msg = item.msg
            info.messages += 1
            info.encodings[msg.encoding] += 1
            info.sizes[(int(msg.width), int(msg.height))] += 1
            if info.stamp_first_ns is None:
                info.stamp_first_ns = item.stamp_ns
            info.stamp_last_ns = item.stamp_ns
            seq_counters[item.topic].update(msg.seq)
            try:
                result = decoders[item.topic].decode_message(msg)
            except DecodeError:
                info.undecodable += 1
                continue
            events, triggers = result.events, result.triggers
            on = int(events.p.sum())
            info.events_on += on
            info.events_off += len(events) - on
            rising = int(triggers.edge.sum())
            info.triggers_rising += rising
            info.triggers_falling += len(triggers) - rising
            for t_ns in (events.t_ns, triggers.t_ns):
                if len(t_ns):
                    first, last = int(t_ns.min()), int(t_ns.max())
                    info.t_first_ns = first if info.t_first_ns is None else min(
                        info.t_first_ns, first)
                    info.t_last_ns = last if info.t_last_ns is None else max(
                        info.t_last_ns, last)
    for name, info in infos.items():
        counter = seq_counters[name]
        info.seq_gaps, info.seq_missing = counter.gaps, counter.missing
        info.seq_restarts = counter.restarts
        info.problems = Counter({kind: count for kind, count
                                 in decoders[name].problem_counts.items() if count})
    return [infos[name] for name in sorted(infos)]


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


def run(args) -> int:
    for index, info in enumerate(summarize_bag(args.bag, args.topic, args.backend)):
        if index:
            print()
        print(format_info(info))
    return 0
