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

from veckm_flow_ros.cli import add_command


def register(subparsers):
    parser = add_command(
        subparsers, 'info', run, 'summarise the event topics of a bag (decodes every message)',
        'For each EventPacket topic of a bag (.db3 / .mcap / bag directory): '
        'encoding, sensor size, message count, CD events ON/OFF, triggers, sensor '
        'time span, event rate, seq gaps and decode problems.')
    parser.add_argument('bag', help='bag directory or .db3/.mcap file')
    parser.add_argument('--topic', default=None, help='only this topic (default: all event '
                                                      'topics)')
    parser.add_argument('--backend', default='auto', choices=('auto', 'cpp', 'numpy'),
                        help='decoder backend')


def run(args) -> int:
    from veckm_flow_ros.offline.bag_summary import format_info, summarize_bag
    for index, info in enumerate(summarize_bag(args.bag, args.topic, args.backend)):
        if index:
            print()
        print(format_info(info))
    return 0
