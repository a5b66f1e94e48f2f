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

"""Bag reading and writing (veckm_flow_ros.eventio.bag) and the `veckm-flow info` command."""

import shutil

import numpy as np
import pytest

from veckm_flow_ros.cli import main as cli_main
from veckm_flow_ros.eventio.bag import (EVENT_ARRAY_TYPE, EVENT_PACKET_TYPE, EventBag,
                                        EventBagWriter, list_event_topics, read_event_messages)
from veckm_flow_ros.eventio.decode import PacketDecoder
from veckm_flow_ros.eventio.events import EventArray, TriggerArray
from veckm_flow_ros.eventio.packets import encode_packets, sort_for_vectors
from veckm_flow_ros.offline.bag_summary import summarize_bag

TOPIC = '/event_camera/events'


def _events(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    t_ns = np.sort(rng.integers(0, 50_000, n)) * 1000
    return sort_for_vectors(EventArray(t_ns, rng.integers(0, 640, n), rng.integers(0, 480, n),
                                       rng.integers(0, 2, n)))


def _write_bag(path, storage, packets, encoding='evt3', seq_skip=()):
    stamp0 = 1_700_000_000 * 10**9
    with EventBagWriter(path, storage=storage) as writer:
        seq = 0
        for packet in packets:
            seq += 1 + (seq in seq_skip)
            writer.write(TOPIC, stamp0 + packet.first_t_ns, encoding=encoding,
                         events=packet.data, width=640, height=480, seq=seq,
                         time_base=packet.time_base)
    return stamp0


@pytest.mark.parametrize('storage', ['mcap', 'sqlite3'])
def test_writer_round_trip(tmp_path, storage):
    events = _events()
    triggers = TriggerArray(np.array([5_000, 20_000_000]), np.array([1, 2]), np.array([1, 0]))
    packets = encode_packets(events, 'evt3', triggers=triggers, packet_duration_ns=5_000_000)
    stamp0 = _write_bag(tmp_path / 'bag', storage, packets)
    assert list(list_event_topics(tmp_path / 'bag')) == [TOPIC]
    decoder = PacketDecoder()
    items = list(read_event_messages(tmp_path / 'bag'))
    assert len(items) == len(packets)
    for item, packet in zip(items, packets):
        assert item.msgtype == EVENT_PACKET_TYPE
        assert item.stamp_ns == stamp0 + packet.first_t_ns
        assert (item.msg.encoding, item.msg.width, item.msg.height) == ('evt3', 640, 480)
        assert item.msg.events.tobytes() == packet.data
    decoded = EventArray.concatenate([decoder.decode_message(i.msg).events for i in items])
    np.testing.assert_array_equal(decoded.t_ns, events.t_ns)
    np.testing.assert_array_equal(decoded.x, events.x)


def test_writer_refuses_existing_path(tmp_path):
    (tmp_path / 'bag').mkdir()
    with pytest.raises(ValueError, match='already exists'):
        EventBagWriter(tmp_path / 'bag')
    with pytest.raises(ValueError, match='storage'):
        EventBagWriter(tmp_path / 'other', storage='rosbag1')


def test_single_storage_file_opens(tmp_path):
    packets = encode_packets(_events(), 'mono', packet_duration_ns=10_000_000)
    _write_bag(tmp_path / 'bag', 'mcap', packets, encoding='mono')
    (mcap_file,) = (tmp_path / 'bag').glob('*.mcap')
    assert len(list(read_event_messages(mcap_file))) == len(packets)


def test_recordings_topics_and_types(recordings_dir):
    expected = {'py_test_events_1': (EVENT_PACKET_TYPE, 517),
                'py_test_events_2': (EVENT_PACKET_TYPE, 100),
                'codecs_test_data_libcaer_rollover': (EVENT_PACKET_TYPE, 201),
                'codecs_test_data_mono_cd': (EVENT_ARRAY_TYPE, 2)}
    for name, (msgtype, count) in expected.items():
        topics = list_event_topics(recordings_dir / name)
        assert list(topics) == [TOPIC]
        assert (topics[TOPIC].msgtype, topics[TOPIC].message_count) == (msgtype, count)


def test_empty_storage_identifier_is_patched_in_a_copy(recordings_dir, tmp_path):
    # A Jazzy mcap bag may have `storage_identifier: ""`; the user's files stay untouched.
    bag = tmp_path / 'jazzy'
    shutil.copytree(recordings_dir / 'py_test_events_2', bag)
    metadata = (bag / 'metadata.yaml').read_bytes()
    assert b'storage_identifier: ""' in metadata
    with EventBag(bag) as reader:
        first = next(reader.messages())
        assert first.msg.encoding == 'libcaer_cmp'
    assert (bag / 'metadata.yaml').read_bytes() == metadata
    assert sorted(p.name for p in bag.iterdir()) == ['metadata.yaml', 'test_events_2_0.mcap']


def test_missing_and_corrupt_bags(tmp_path):
    with pytest.raises(FileNotFoundError, match='nothing_here'):
        EventBag(tmp_path / 'nothing_here')
    (tmp_path / 'not_a_bag').mkdir()
    with pytest.raises(ValueError, match='not_a_bag.*metadata.yaml'):
        EventBag(tmp_path / 'not_a_bag').open()
    garbage = tmp_path / 'garbage.mcap'
    garbage.write_bytes(b'\x89MCAP0\r\n' + bytes(range(256)) * 4)
    with pytest.raises(ValueError, match='garbage.mcap'):
        with EventBag(garbage) as reader:
            list(reader.messages())
    wrong = tmp_path / 'events.txt'
    wrong.write_text('hello')
    with pytest.raises(ValueError, match='events.txt'):
        EventBag(wrong).open()


@pytest.mark.parametrize('storage', ['mcap', 'sqlite3'])
def test_truncated_bag_gives_value_error(tmp_path, storage):
    packets = encode_packets(_events(20000), 'evt3', packet_duration_ns=1_000_000)
    _write_bag(tmp_path / 'bag', storage, packets)
    (data_file,) = [p for p in (tmp_path / 'bag').iterdir() if p.name != 'metadata.yaml']
    data_file.write_bytes(data_file.read_bytes()[:len(data_file.read_bytes()) // 2])
    with pytest.raises(ValueError, match=str(tmp_path / 'bag')):
        with EventBag(tmp_path / 'bag') as reader:
            list(reader.messages())


def test_unknown_topic(recordings_dir):
    with EventBag(recordings_dir / 'py_test_events_1') as reader:
        with pytest.raises(ValueError, match="'/nope'.*event topics.*events"):
            list(reader.messages(['/nope']))


def test_info_summary_counts_everything(tmp_path, capsys):
    events = _events()
    triggers = TriggerArray(np.array([1_000_000, 2_000_000, 3_000_000]), np.zeros(3),
                            np.array([1, 0, 1]))
    packets = encode_packets(events, 'evt3', triggers=triggers, packet_duration_ns=5_000_000)
    _write_bag(tmp_path / 'bag', 'mcap', packets, seq_skip=(3, 5))
    (info,) = summarize_bag(tmp_path / 'bag')
    assert info.messages == len(packets)
    # As the node and replay see the stream (one StreamFrontEnd): after each seq gap the evt3
    # decoder drops events until the next time words.
    decoder, seq, on, total = PacketDecoder(), 0, 0, 0
    for packet in packets:
        if seq in (3, 5):
            decoder.resync()
        seq += 1 + (seq in (3, 5))
        decoded = decoder.decode('evt3', packet.data, packet.time_base, 640, 480).events
        on, total = on + int(decoded.p.sum()), total + len(decoded)
    assert total < len(events)
    assert (info.events_on, info.events_off) == (on, total - on)
    assert (info.triggers_rising, info.triggers_falling) == (2, 1)
    assert (info.seq_gaps, info.seq_missing) == (2, 2)
    assert info.t_first_ns == min(int(events.t_ns[0]), 1_000_000)
    assert not info.problems
    assert cli_main(['info', str(tmp_path / 'bag')]) == 0
    out = capsys.readouterr().out
    assert 'evt3' in out and '640 x 480' in out and 'seq gaps         2 (2 messages' in out


def test_info_on_recording(recordings_dir, capsys):
    assert cli_main(['info', str(recordings_dir / 'py_test_events_1')]) == 0
    out = capsys.readouterr().out
    assert 'CD events        343474 (ON 125183, OFF 218291)' in out
    assert 'triggers         4157 (rising 2079, falling 2078)' in out
    assert 'decode problems  none' in out


def test_info_errors(tmp_path, capsys):
    assert cli_main(['info', str(tmp_path / 'missing')]) == 1
    assert 'bag not found' in capsys.readouterr().err
