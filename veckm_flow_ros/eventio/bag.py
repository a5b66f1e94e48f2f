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
Read and write ROS 2 bags (.db3 / .mcap) of event-camera packets without ROS, via rosbags.

Reads `event_camera_msgs/msg/EventPacket` and the older, field-identical
`event_array_msgs/msg/EventArray`. The message types are registered from their definition text,
so no ROS install is needed. A bag is a directory with metadata.yaml or a single .db3/.mcap
file. The user's bag is never modified: a Jazzy mcap whose metadata.yaml has an empty
`storage_identifier` is opened through a temporary directory with a patched copy of the
metadata (the data files are linked, not copied).

    with EventBag(path) as bag:
        print(bag.event_topics())                  # {'/event_camera/events': TopicSummary}
        for item in bag.messages():                # BagMessage per EventPacket, in log order
            item.msg.encoding, item.msg.events     # events: numpy uint8 array
"""

from dataclasses import dataclass
import os
import pathlib
import shutil
import tempfile
from typing import Iterator, Optional, Sequence, Union

DEFAULT_EVENT_TOPIC = '/event_camera/events'
# Topics of the gyroscope and the calibration that write_event_bag can add (simulated scenes).
DEFAULT_IMU_TOPIC = '/imu/data'
DEFAULT_CAMERA_INFO_TOPIC = '/event_camera/camera_info'
IMU_TYPE = 'sensor_msgs/msg/Imu'
CAMERA_INFO_TYPE = 'sensor_msgs/msg/CameraInfo'
# ROS time of sensor time 0 in bags written from events (2025-01-01T00:00:00Z): stamps that
# look like real ones.
DEFAULT_STAMP_OFFSET_NS = 1_735_689_600_000_000_000
EVENT_PACKET_TYPE = 'event_camera_msgs/msg/EventPacket'
EVENT_ARRAY_TYPE = 'event_array_msgs/msg/EventArray'
# Message types holding encoded events; both have the same fields.
EVENT_TYPES = (EVENT_PACKET_TYPE, EVENT_ARRAY_TYPE)

EVENT_PACKET_DEFINITION = """\
std_msgs/Header header
uint32 height
uint32 width
uint64 seq
uint64 time_base
string encoding
bool is_bigendian
uint8[] events
"""

_STORAGE_BY_SUFFIX = {'.mcap': 'mcap', '.db3': 'sqlite3'}

PathLike = Union[str, os.PathLike]


@dataclass
class TopicSummary:
    """One topic of a bag: its message type name and message count."""

    topic: str
    msgtype: str
    message_count: int


@dataclass
class BagMessage:
    """
    One deserialised event message.

    topic: topic name; msgtype: message type name; stamp_ns: header stamp (ROS time, ns);
    log_time_ns: time the recorder received it (ns); msg: the message, with fields header,
    height, width, seq, time_base, encoding, is_bigendian and events (numpy uint8[N]).
    """

    topic: str
    msgtype: str
    stamp_ns: int
    log_time_ns: int
    msg: object


def make_typestore():
    """Return a rosbags typestore (ROS 2 Humble base) with the event message types registered."""
    from rosbags.typesys import get_types_from_msg, get_typestore, Stores
    typestore = get_typestore(Stores.ROS2_HUMBLE)
    types = {}
    for name in EVENT_TYPES:
        types.update(get_types_from_msg(EVENT_PACKET_DEFINITION, name))
    typestore.register(types)
    return typestore


def _read_metadata(bag_dir: pathlib.Path) -> dict:
    from ruamel.yaml import YAML
    try:
        return YAML(typ='safe').load((bag_dir / 'metadata.yaml').read_text())
    except Exception as error:  # noqa: B902  (any parse error means a corrupt bag)
        raise ValueError(
            f'cannot read bag metadata {bag_dir / "metadata.yaml"}: {error}') from None


def _needs_storage_patch(bag_dir: pathlib.Path) -> Optional[str]:
    """Return the storage identifier to write when metadata.yaml lacks one, else None."""
    metadata = _read_metadata(bag_dir)
    info = metadata.get('rosbag2_bagfile_information') if isinstance(metadata, dict) else None
    if not isinstance(info, dict) or info.get('storage_identifier'):
        return None
    suffixes = {pathlib.PurePath(name).suffix for name in info.get('relative_file_paths') or []}
    if len(suffixes) != 1 or next(iter(suffixes)) not in _STORAGE_BY_SUFFIX:
        raise ValueError(
            f'bag {bag_dir} has an empty storage_identifier and data files {sorted(suffixes)} '
            'from which it cannot be inferred; set storage_identifier in metadata.yaml')
    return _STORAGE_BY_SUFFIX[next(iter(suffixes))]


class EventBag:
    """
    A ROS 2 bag opened for reading event messages; use as a context manager.

    Raises FileNotFoundError when the path does not exist and ValueError (naming the path) when
    the bag cannot be opened or a message cannot be read (corrupt or truncated bag).
    """

    def __init__(self, path: PathLike):
        self.path = pathlib.Path(path)
        if not self.path.exists():
            raise FileNotFoundError(f'bag not found: {self.path}')
        self._reader = None
        self._tmpdir = None
        self._typestore = make_typestore()

    def __enter__(self) -> 'EventBag':
        self.open()
        return self

    def __exit__(self, *exc_info):
        self.close()
        return False

    def open(self):  # noqa: A003  (the reader idiom: open/close)
        """Open the bag (patching a missing storage identifier in a temporary copy)."""
        from rosbags.rosbag2 import Reader
        open_path = self.path
        try:
            if self.path.is_dir():
                if not (self.path / 'metadata.yaml').is_file():
                    raise ValueError(
                        f'{self.path} is a directory without metadata.yaml: not a ROS 2 bag')
                storage = _needs_storage_patch(self.path)
                if storage is not None:
                    open_path = self._patched_copy(storage)
            elif self.path.suffix not in _STORAGE_BY_SUFFIX:
                raise ValueError(
                    f'{self.path}: unknown bag file type {self.path.suffix!r}; expected a bag '
                    'directory or a .db3 / .mcap file')
            self._reader = Reader(open_path)
            self._reader.open()
        except ValueError:
            self.close()
            raise
        except Exception as error:  # noqa: B902  (rosbags raises many types for corrupt bags)
            self.close()
            raise ValueError(f'cannot open bag {self.path}: {error}') from None

    def _patched_copy(self, storage: str) -> pathlib.Path:
        from ruamel.yaml import YAML
        self._tmpdir = tempfile.TemporaryDirectory(prefix='veckm_flow_bag_')
        copy_dir = pathlib.Path(self._tmpdir.name) / self.path.name
        copy_dir.mkdir()
        metadata = _read_metadata(self.path)
        metadata['rosbag2_bagfile_information']['storage_identifier'] = storage
        for name in metadata['rosbag2_bagfile_information'].get('relative_file_paths') or []:
            source = (self.path / pathlib.PurePath(name).name).resolve()
            target = copy_dir / pathlib.PurePath(name).name
            try:
                target.symlink_to(source)
            except OSError:
                shutil.copyfile(source, target)
        with open(copy_dir / 'metadata.yaml', 'w') as stream:
            YAML(typ='safe').dump(metadata, stream)
        return copy_dir

    def close(self):
        """Close the bag and remove any temporary patched copy."""
        if self._reader is not None:
            try:
                self._reader.close()
            except Exception:  # noqa: B902  (closing a half-open reader must not mask errors)
                pass
            self._reader = None
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None

    def topics(self) -> dict:
        """All topics: {name: TopicSummary}."""
        self._check_open()
        return {name: TopicSummary(name, info.msgtype or '', info.msgcount)
                for name, info in sorted(self._reader.topics.items())}

    def event_topics(self) -> dict:
        """Topics of EventPacket (or EventArray) messages: {name: TopicSummary}."""
        return {name: summary for name, summary in self.topics().items()
                if summary.msgtype in EVENT_TYPES}

    def messages(self, topics: Optional[Sequence[str]] = None) -> Iterator[BagMessage]:
        """
        Yield the event messages of `topics` (default: all event topics) in log order.

        Raises ValueError for a topic that is not an event topic of this bag.
        """
        self._check_open()
        event_topics = self.event_topics()
        if topics is None:
            topics = list(event_topics)
        for topic in topics:
            if topic not in event_topics:
                raise ValueError(
                    f'topic {topic!r} is not an event topic of {self.path}; '
                    f'event topics: {sorted(event_topics) or "none"}')
        connections = [c for c in self._reader.connections
                       if c.topic in topics and c.msgtype in EVENT_TYPES]
        if not connections:
            return
        iterator = self._reader.messages(connections=connections)
        while True:
            try:
                connection, log_time_ns, raw = next(iterator)
                msg = self._typestore.deserialize_cdr(raw, connection.msgtype)
            except StopIteration:
                return
            except Exception as error:  # noqa: B902  (corrupt storage or CDR payload)
                raise ValueError(f'corrupt message in bag {self.path}: {error}') from None
            stamp_ns = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
            yield BagMessage(connection.topic, connection.msgtype, stamp_ns, log_time_ns, msg)

    def imu_rates(self, topic: str):
        """
        Angular velocities of the sensor_msgs/msg/Imu messages on `topic`.

        Returns (t_s float64 [G], header stamps in seconds; omega float64 [G, 3], rad/s in
        the IMU frame), in log order. Raises ValueError for a topic that is not an Imu topic.
        """
        import numpy as np
        self._check_open()
        imu_type = 'sensor_msgs/msg/Imu'
        topics = self.topics()
        if topic not in topics or topics[topic].msgtype != imu_type:
            imu_topics = sorted(name for name, summary in topics.items()
                                if summary.msgtype == imu_type)
            raise ValueError(f'topic {topic!r} is not a {imu_type} topic of {self.path}; IMU '
                             f'topics: {", ".join(imu_topics) or "none"}')
        connections = [c for c in self._reader.connections if c.topic == topic]
        t_s, omega = [], []
        try:
            for connection, _, raw in self._reader.messages(connections=connections):
                msg = self._typestore.deserialize_cdr(raw, connection.msgtype)
                t_s.append(msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9)
                rate = msg.angular_velocity
                omega.append((rate.x, rate.y, rate.z))
        except Exception as error:  # noqa: B902  (corrupt storage or CDR payload)
            raise ValueError(f'corrupt message in bag {self.path}: {error}') from None
        return np.asarray(t_s, np.float64), np.asarray(omega, np.float64).reshape(-1, 3)

    def _check_open(self):
        if self._reader is None:
            raise ValueError(f'bag {self.path} is not open; use `with EventBag(path) as bag:`')


def list_event_topics(path: PathLike) -> dict:
    """Event topics of the bag at `path`: {name: TopicSummary}."""
    with EventBag(path) as bag:
        return bag.event_topics()


def read_event_messages(path: PathLike, topics: Optional[Sequence[str]] = None
                        ) -> Iterator[BagMessage]:
    """Yield BagMessage for each event message of `topics` (default all) of the bag at `path`."""
    with EventBag(path) as bag:
        yield from bag.messages(topics)


class EventBagWriter:
    """
    Write EventPacket messages to a new ROS 2 bag (mcap by default, or sqlite3 .db3).

        with EventBagWriter(out_dir) as writer:
            writer.write('/event_camera/events', stamp_ns, encoding='evt3', events=buffer,
                         width=640, height=480, seq=0, time_base=0)

    The bag directory must not exist yet (rosbags refuses to overwrite).
    """

    def __init__(self, path: PathLike, storage: str = 'mcap', frame_id: str = 'event_camera'):
        from rosbags.rosbag2 import StoragePlugin, Writer
        if storage not in ('mcap', 'sqlite3'):
            raise ValueError(f'storage must be "mcap" or "sqlite3", got {storage!r}')
        self.path = pathlib.Path(path)
        if self.path.exists():
            raise ValueError(f'bag output {self.path} already exists; choose a new path')
        plugin = StoragePlugin.MCAP if storage == 'mcap' else StoragePlugin.SQLITE3
        self.frame_id = frame_id
        self._typestore = make_typestore()
        self._writer = Writer(self.path, version=9, storage_plugin=plugin)
        self._connections = {}

    def __enter__(self) -> 'EventBagWriter':
        self._writer.open()
        return self

    def __exit__(self, *exc_info):
        self._writer.close()
        return False

    def write(self, topic: str, stamp_ns: int, *, encoding: str, events, width: int,
              height: int, seq: int, time_base: int = 0, log_time_ns: Optional[int] = None,
              frame_id: Optional[str] = None):
        """
        Append one EventPacket; events: bytes-like of the encoded events.

        frame_id: the header's frame id (None: the writer's frame_id).
        """
        import numpy as np
        types = self._typestore.types
        if topic not in self._connections:
            self._connections[topic] = self._writer.add_connection(
                topic, EVENT_PACKET_TYPE, typestore=self._typestore)
        header = self.header(stamp_ns, frame_id)
        msg = types[EVENT_PACKET_TYPE](
            header=header, height=int(height), width=int(width), seq=int(seq),
            time_base=int(time_base), encoding=encoding, is_bigendian=False,
            events=np.frombuffer(bytes(events), dtype=np.uint8))
        self.write_message(topic, EVENT_PACKET_TYPE, msg,
                           int(stamp_ns if log_time_ns is None else log_time_ns))

    def write_message(self, topic: str, msgtype: str, msg, log_time_ns: int):
        """Append a message of any type of the writer's typestore (see `types`)."""
        if topic not in self._connections:
            self._connections[topic] = self._writer.add_connection(
                topic, msgtype, typestore=self._typestore)
        self._writer.write(self._connections[topic], int(log_time_ns),
                           self._typestore.serialize_cdr(msg, msgtype))

    @property
    def types(self):
        """Message classes by type name (rosbags typestore, ROS 2 Humble + event types)."""
        return self._typestore.types

    def header(self, stamp_ns: int, frame_id: Optional[str] = None):
        """std_msgs/Header with a stamp [ns] and the writer's frame id (or frame_id)."""
        types = self._typestore.types
        return types['std_msgs/msg/Header'](
            stamp=types['builtin_interfaces/msg/Time'](
                sec=int(stamp_ns) // 1_000_000_000, nanosec=int(stamp_ns) % 1_000_000_000),
            frame_id=self.frame_id if frame_id is None else frame_id)

    def write_imu(self, topic: str, stamp_ns: int, omega_rad_s):
        """
        Append a sensor_msgs/Imu with an angular velocity (3,) [rad/s] only.

        Orientation and linear acceleration are marked unknown (covariance[0] = -1).
        """
        import numpy as np
        types = self._typestore.types
        vector = types['geometry_msgs/msg/Vector3']
        unknown = np.zeros(9)
        unknown[0] = -1.0
        msg = types[IMU_TYPE](
            header=self.header(stamp_ns),
            orientation=types['geometry_msgs/msg/Quaternion'](x=0.0, y=0.0, z=0.0, w=1.0),
            orientation_covariance=unknown.copy(),
            angular_velocity=vector(x=float(omega_rad_s[0]), y=float(omega_rad_s[1]),
                                    z=float(omega_rad_s[2])),
            angular_velocity_covariance=np.zeros(9),
            linear_acceleration=vector(x=0.0, y=0.0, z=0.0),
            linear_acceleration_covariance=unknown.copy())
        self.write_message(topic, IMU_TYPE, msg, stamp_ns)

    def write_camera_info(self, topic: str, stamp_ns: int, camera):
        """Append a sensor_msgs/CameraInfo of a core.camera.CameraModel."""
        import numpy as np
        types = self._typestore.types
        msg = types[CAMERA_INFO_TYPE](
            header=self.header(stamp_ns), height=int(camera.height), width=int(camera.width),
            distortion_model=camera.distortion_model, d=np.asarray(camera.D, np.float64),
            k=np.asarray(camera.K, np.float64).reshape(-1), r=np.eye(3).reshape(-1),
            p=np.hstack([camera.K, np.zeros((3, 1))]).reshape(-1), binning_x=0, binning_y=0,
            roi=types['sensor_msgs/msg/RegionOfInterest'](
                x_offset=0, y_offset=0, height=0, width=0, do_rectify=False))
        self.write_message(topic, CAMERA_INFO_TYPE, msg, stamp_ns)


def write_event_bag(path: PathLike, events, width: int, height: int, encoding: str = 'evt3',
                    packet_duration_ns: int = 1_000_000, topic: str = DEFAULT_EVENT_TOPIC,
                    stamp_offset_ns: int = DEFAULT_STAMP_OFFSET_NS, gyro=None,
                    camera=None) -> int:
    """
    Encode an EventArray as EventPackets and write them to a new bag; return the packet count.

    Each packet covers packet_duration_ns of sensor time; its header stamp is
    stamp_offset_ns + the sensor time of its last event [ns] and its seq counts from 0. For
    evt3 and libcaer_cmp the events are first ordered so that they pack into vector words.
    gyro: optional (t_s (G,), omega_rad_s (G, 3)) written as sensor_msgs/Imu on
    DEFAULT_IMU_TOPIC, stamped stamp_offset_ns + t; camera: optional CameraModel written as
    one sensor_msgs/CameraInfo on DEFAULT_CAMERA_INFO_TOPIC before the first packet.
    """
    import numpy as np

    from veckm_flow_ros.eventio.packets import encode_packets, sort_for_vectors
    if not packet_duration_ns > 0:
        raise ValueError(f'packet duration must be positive, got {packet_duration_ns} ns')
    if encoding in ('evt3', 'libcaer_cmp'):
        events = sort_for_vectors(events)
    packets = encode_packets(events, encoding, packet_duration_ns=int(packet_duration_ns))
    # Messages of all topics in time order: (stamp, kind, index).
    items = [(stamp_offset_ns + packet.last_t_ns, 1, i) for i, packet in enumerate(packets)]
    if gyro is not None:
        gyro_t_ns = stamp_offset_ns + np.round(np.asarray(gyro[0]) * 1e9).astype(np.int64)
        items += [(int(stamp), 2, i) for i, stamp in enumerate(gyro_t_ns)]
    items.sort()
    with EventBagWriter(path) as writer:
        if camera is not None:
            first = items[0][0] if items else stamp_offset_ns
            writer.write_camera_info(DEFAULT_CAMERA_INFO_TOPIC, min(first, stamp_offset_ns),
                                     camera)
        for stamp, kind, i in items:
            if kind == 1:
                packet = packets[i]
                writer.write(topic, stamp, encoding=encoding, events=packet.data, width=width,
                             height=height, seq=i, time_base=packet.time_base)
            else:
                writer.write_imu(DEFAULT_IMU_TOPIC, stamp, gyro[1][i])
    return len(packets)
