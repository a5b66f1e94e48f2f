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
veckm_flow_node on a real ROS 2 graph (rclpy + Fast DDS, no mocks).

The node under test and a probe node share one executor in this process; the probe publishes
EventPackets (a real evt3 recording, a synthetic moving edge, malformed packets, a burst) on
the node's ~/events with the drivers' QoS and receives ~/flow and ~/flow_image. Each test
session uses its own ROS_DOMAIN_ID and localhost discovery, so parallel runs do not mix.
The node runs the shipped default model (veckm_flow_ros/models), so these tests need nothing
from ../shared except the real-recording test. Accuracy and speed bounds are set from values
measured with that model (docs/testing.md), close enough that a flow scale off by 2x, a
flipped axis or a disconnected parameter fails.
"""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

rclpy = pytest.importorskip('rclpy')
pytest.importorskip('event_camera_msgs')

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus  # noqa: E402, I100
from event_camera_msgs.msg import EventPacket  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import Image, PointCloud2  # noqa: E402

from conftest import ROS_DOMAIN_ID  # noqa: E402, I100
from node_harness import closing_factory, NodeHarness  # noqa: E402
from scenes import background_noise, EDGES, merged, moving_edges  # noqa: E402
from veckm_flow_ros.eventio.flow_cloud import points_from_pointcloud2  # noqa: E402
from veckm_flow_ros.ros import node as flow_node  # noqa: E402
from veckm_flow_ros.ros.cdr import parse_event_packet_cdr, pointcloud2_cdr  # noqa: E402
from veckm_flow_ros.ros.messages import (image_message, parameter_descriptor,  # noqa: E402
                                         stamp_from_ns, stamp_to_ns)


DOMAIN_ID = ROS_DOMAIN_ID  # conftest: the ros_context fixture's domain
MODEL_NAME = 'veckm_r10_tau12ms'  # the shipped default (models/DEFAULT)
EVENTS_TOPIC = f'/{flow_node.NODE_NAME}/events'
FLOW_TOPIC = f'/{flow_node.NODE_NAME}/flow'
IMAGE_TOPIC = f'/{flow_node.NODE_NAME}/flow_image'


@pytest.fixture(scope='module')
def model_path():
    """Return the node's model parameter: the shipped default model, by name."""
    return MODEL_NAME


class Harness(NodeHarness):
    """The node under test plus a probe node (publisher of events, subscriber of outputs)."""

    def __init__(self, context, **parameters):
        super().__init__(context, flow_node.VecKMFlowNode, 'flow_probe', parameters)
        self.events_pub = self.probe.create_publisher(EventPacket, EVENTS_TOPIC,
                                                      flow_node.EVENTS_QOS)
        self.clouds = []
        self.images = []
        self.flow_sub = self.probe.create_subscription(
            PointCloud2, FLOW_TOPIC, self.clouds.append,
            QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE))
        self.image_sub = None
        self.seq = 0
        self.published = 0
        self.wait_for_discovery(lambda: self.events_pub.get_subscription_count() > 0
                                and self.probe.count_publishers(FLOW_TOPIC) > 0)

    def subscribe_images(self):
        self.image_sub = self.probe.create_subscription(
            Image, IMAGE_TOPIC, self.images.append, flow_node.OUTPUT_QOS)

    def unsubscribe_images(self):
        self.probe.destroy_subscription(self.image_sub)
        self.image_sub = None

    def publish(self, encoding, payload, stamp_ns, width=640, height=480, time_base=0,
                seq=None, frame_id='event_camera'):
        msg = EventPacket()
        msg.header.stamp = stamp_from_ns(stamp_ns)
        msg.header.frame_id = frame_id
        msg.width, msg.height = width, height
        msg.encoding = encoding
        msg.time_base = int(time_base)
        msg.seq = self.seq if seq is None else seq
        self.seq = msg.seq + 1
        msg.events = bytes(payload)
        self.events_pub.publish(msg)
        self.published += 1
        self.executor.spin_once(timeout_sec=0.0)

    def flow_points(self):
        chunks = [points_from_pointcloud2([f.name for f in c.fields], c.point_step, c.data)
                  for c in self.clouds]
        return np.concatenate(chunks) if chunks else None

    def wait_idle(self, timeout_s: float = 20.0, quiet_s: float = 0.3):
        """Spin until the worker handled every received packet and no flow came for quiet_s."""
        totals = self.node.pipeline.stats.totals
        last = [len(self.clouds), time.monotonic()]

        def idle():
            if len(self.clouds) != last[0]:
                last[:] = [len(self.clouds), time.monotonic()]
            return (totals['packets'] + totals['missed_packets'] >= self.published
                    and totals['handled_packets'] + totals['dropped_packets'] >= totals['packets']
                    and time.monotonic() - last[1] > quiet_s)
        return self.spin_until(idle, timeout_s)


@pytest.fixture
def harness_factory(ros_context, model_path):
    def make(**parameters):
        parameters.setdefault('model', model_path)
        # max_queue_delay_ms keeps its default (200 ms); tests that compare exact outputs or
        # count every packet set it to 0 (they publish faster than real time on a busy
        # machine).
        return Harness(ros_context, **parameters)
    yield from closing_factory(make)


# ------------------------------------------------------------------------------------------
# Without a graph


def test_config_yaml_mirrors_the_declared_parameters(project_root):
    import yaml
    config = yaml.safe_load((project_root / 'config' / 'veckm_flow.yaml').read_text())
    parameters = config['/**']['ros__parameters']
    specs = {spec.name: spec for spec in flow_node.PARAMETERS}
    assert list(parameters) == list(specs)
    for name, value in parameters.items():
        default = specs[name].default
        assert type(value) is type(default), f'{name}: yaml {value!r}, code {default!r}'
        assert value == default, f'{name}: yaml {value!r}, code {default!r}'


def test_every_parameter_has_a_descriptor_with_units_and_range():
    for spec in flow_node.PARAMETERS:
        descriptor = parameter_descriptor(spec)
        assert len(descriptor.description) > 20, spec.name
        if isinstance(spec.default, (int, float)) and not isinstance(spec.default, bool):
            assert spec.value_range is not None, f'{spec.name} has no range'
            assert spec.value_range[0] <= spec.default <= spec.value_range[1], spec.name
    read_only = {spec.name for spec in flow_node.PARAMETERS if spec.read_only}
    assert {'model', 'device'} <= read_only


def test_raw_event_packet_parsing_matches_rclpy():
    from rclpy.serialization import serialize_message
    rng = np.random.default_rng(5)
    for frame_id, encoding, size in (('', 'evt3', 0), ('cam', 'mono', 8), ('camera_x', 'evt3', 37),
                                     ('ab', 'libcaer_cmp', 4000)):
        msg = EventPacket()
        msg.header.stamp = stamp_from_ns(1_700_000_000_123_456_789)
        msg.header.frame_id = frame_id
        msg.width, msg.height, msg.seq, msg.time_base = 640, 480, 2**40 + 3, 2**50 + 7
        msg.encoding = encoding
        payload = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        msg.events = payload
        raw = serialize_message(msg)
        fields = parse_event_packet_cdr(raw)
        assert fields == {**fields, 'stamp_ns': 1_700_000_000_123_456_789, 'frame_id': frame_id,
                          'width': 640, 'height': 480, 'seq': 2**40 + 3, 'time_base': 2**50 + 7,
                          'encoding': encoding}
        assert bytes(fields['events']) == payload
        with pytest.raises(ValueError):
            parse_event_packet_cdr(raw[:len(raw) - 1 - size // 2])
    with pytest.raises(ValueError):
        parse_event_packet_cdr(b'\x00\x01\x00\x00' + b'\xff' * 12)


def _pointcloud2_message(points, stamp_ns, frame_id):
    """Build the ~/flow PointCloud2 field by field with rclpy (the reference layout)."""
    from sensor_msgs.msg import PointField
    from veckm_flow_ros.eventio.flow_cloud import pointcloud2_fields
    layout = pointcloud2_fields(points)
    msg = PointCloud2()
    msg.header.stamp = stamp_from_ns(stamp_ns)
    msg.header.frame_id = frame_id
    msg.height, msg.width = layout['height'], layout['width']
    msg.fields = [PointField(name=name, offset=offset, datatype=datatype, count=count)
                  for name, offset, datatype, count in layout['fields']]
    msg.is_bigendian = layout['is_bigendian']
    msg.point_step, msg.row_step = layout['point_step'], layout['row_step']
    msg.data = layout['data']
    msg.is_dense = layout['is_dense']
    return msg


def test_serialized_flow_cloud_is_the_pointcloud2_message():
    from rclpy.serialization import deserialize_message
    from veckm_flow_ros.eventio.flow_cloud import flow_point_dtype
    rng = np.random.default_rng(3)
    for with_confidence in (False, True):
        for count in (0, 1, 5, 1001):
            for frame_id in ('', 'cam', 'camera_optical', 'a' * 17):
                points = np.zeros(count, flow_point_dtype(with_confidence))
                for name in points.dtype.names:
                    points[name] = rng.normal(size=count)
                stamp_ns = 1_700_000_000_123_456_789 + count
                raw = pointcloud2_cdr(points, stamp_ns, frame_id)
                expected = _pointcloud2_message(points, stamp_ns, frame_id)
                assert deserialize_message(raw, PointCloud2) == expected


def test_image_message_layout():
    bgr = np.zeros((4, 5, 3), np.uint8)
    bgr[1, 2] = (10, 20, 30)
    msg = image_message(bgr, 1_500_000_000, 'cam')
    assert (msg.height, msg.width, msg.step, msg.encoding) == (4, 5, 15, 'bgr8')
    assert (msg.header.stamp.sec, msg.header.stamp.nanosec) == (1, 500_000_000)
    back = np.frombuffer(bytes(msg.data), np.uint8).reshape(4, 5, 3)
    assert np.array_equal(back, bgr)
    with pytest.raises(ValueError, match='H, W, 3'):
        image_message(np.zeros((4, 5), np.uint8), 0, '')


# ------------------------------------------------------------------------------------------
# Start-up errors


def test_out_of_range_parameter_fails_at_start_up(ros_context, model_path):
    with pytest.raises(rclpy.exceptions.ParameterException, match='block_ms'):
        flow_node.VecKMFlowNode(context=ros_context, parameter_overrides=[
            Parameter('model', value=model_path), Parameter('block_ms', value=1000.0)])
    with pytest.raises(rclpy.exceptions.ParameterException, match='min_validity') as error:
        flow_node.VecKMFlowNode(context=ros_context, parameter_overrides=[
            Parameter('model', value=model_path), Parameter('min_validity', value=1.5)])
    assert 'range' in str(error.value)
    with pytest.raises(rclpy.exceptions.ParameterException,
                       match='long_context_below_px_s') as error:
        flow_node.VecKMFlowNode(context=ros_context, parameter_overrides=[
            Parameter('model', value=model_path),
            Parameter('long_context_below_px_s', value=-1.0)])
    assert 'range' in str(error.value)


def test_model_that_does_not_fit_fails_at_start_up(ros_context, model_path):
    with pytest.raises(flow_node.ConfigurationError, match='pixel_radius is 8 px.*r = 10 px'):
        flow_node.VecKMFlowNode(context=ros_context, parameter_overrides=[
            Parameter('model', value=model_path), Parameter('pixel_radius', value=8)])
    with pytest.raises(flow_node.ConfigurationError, match='tau_ms is 16 ms.*tau = 12 ms'):
        flow_node.VecKMFlowNode(context=ros_context, parameter_overrides=[
            Parameter('model', value=model_path), Parameter('tau_ms', value=16.0)])


def test_cuda_without_a_gpu_fails_at_start_up(ros_context, model_path):
    import torch
    if torch.cuda.is_available():
        pytest.skip('this machine has a CUDA device (test_cuda runs the node there)')
    with pytest.raises(flow_node.ConfigurationError, match='device is cuda but torch sees no'):
        flow_node.VecKMFlowNode(context=ros_context, parameter_overrides=[
            Parameter('model', value=model_path), Parameter('device', value='cuda')])


def test_the_automatic_block_is_the_models_context_slice(harness_factory):
    """block_ms 0 (the default): 2 tau centred (the context is the block), tau causal."""
    for causal, taus in ((False, 2), (True, 1)):
        node = harness_factory(causal=causal).node
        tau_ms = node.model.tau_s * 1e3
        assert node.config['block_ms'] == 0.0
        assert node.pipeline.block_ms == pytest.approx(taus * tau_ms)
        estimator = node.pipeline.estimator_for(640, 480)
        assert estimator.block_ns == round(taus * tau_ms * 1e6)
    pipeline = harness_factory(block_ms=5.0).node.pipeline
    assert pipeline.estimator_for(640, 480).block_ns == 5_000_000


def test_console_entry_point_reports_start_up_errors_without_traceback(model_path):
    env = dict(os.environ, ROS_DOMAIN_ID=str(DOMAIN_ID), ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST')
    result = subprocess.run(
        [sys.executable, '-c', 'import sys; from veckm_flow_ros.ros import main; '
         'sys.exit(main())', '--ros-args', '-p', f'model:={model_path}',
         '-p', 'pixel_radius:=8'],
        capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 1, result.stderr
    assert 'pixel_radius is 8 px' in result.stderr
    assert 'Traceback' not in result.stderr


def _stream_until(executor, publisher, process, packets, done, deadline):
    """Publish `packets` in a loop (fresh stamps and seq) until done() or the process ends."""
    seq = 0
    while process.poll() is None and time.monotonic() < deadline:
        for packet in packets:
            msg = EventPacket()
            msg.header.stamp = stamp_from_ns(packet.first_t_ns + seq * 1_000_000)
            msg.width, msg.height, msg.encoding, msg.seq = 640, 480, 'evt3', seq
            msg.events = bytes(packet.data)
            publisher.publish(msg)
            seq += 1
            executor.spin_once(timeout_sec=0.001)
            if done() or process.poll() is not None:
                return


@pytest.mark.parametrize('phase', ['starting', 'streaming'])
@pytest.mark.parametrize('stop_signal', [signal.SIGINT, signal.SIGTERM], ids=['SIGINT', 'SIGTERM'])
def test_node_process_stops_cleanly(ros_context, stop_signal, phase):
    """
    Ctrl-C / SIGTERM while the worker computes, or while the model loads: exit 0, quiet stderr.

    The console script with torch_threads 2 (an OpenMP pool owned by the worker thread) and
    the shipped default model. Catches 'terminate called without an active exception' (a
    thread left inside C++ at exit), tracebacks (publishers created on a context the signal
    already shut down) and errors from a worker publishing after shutdown.
    """
    from veckm_flow_ros.eventio.packets import encode_packets
    env = dict(os.environ, ROS_DOMAIN_ID=str(DOMAIN_ID), ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST')
    # A name of its own: the graph may still list the in-process test nodes' 'veckm_flow'.
    name = f'veckm_flow_stop_{phase}_{int(stop_signal)}'
    process = subprocess.Popen(
        [sys.executable, '-c', 'import sys; from veckm_flow_ros.ros import main; '
         'sys.exit(main())', '--ros-args', '-r', f'__node:={name}', '-p', 'torch_threads:=2',
         '-p', 'block_ms:=5.0'],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    probe = Node('stop_probe', context=ros_context)
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(probe)
    try:
        deadline = time.monotonic() + 60
        if phase == 'starting':
            # The ROS node exists before the model loads (torch import, weights): stop then.
            while name not in probe.get_node_names() \
                    and process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
            process.send_signal(stop_signal)
        else:
            clouds = []
            publisher = probe.create_publisher(EventPacket, f'/{name}/events',
                                               flow_node.EVENTS_QOS)
            probe.create_subscription(PointCloud2, f'/{name}/flow', clouds.append, QoSProfile(
                depth=1000, reliability=ReliabilityPolicy.RELIABLE))
            while (publisher.get_subscription_count() == 0
                   or probe.count_publishers(f'/{name}/flow') == 0) \
                    and process.poll() is None and time.monotonic() < deadline:
                executor.spin_once(timeout_sec=0.05)
            events, _, _ = moving_edges(duration_s=0.2, radius_px=80)
            packets = encode_packets(events, 'evt3', packet_duration_ns=1_000_000)
            _stream_until(executor, publisher, process, packets, lambda: len(clouds) >= 3,
                          deadline)
            assert len(clouds) >= 3, 'no ~/flow from the node'
            process.send_signal(stop_signal)  # mid-stream: the worker is computing
            _stream_until(executor, publisher, process, packets, lambda: False,
                          time.monotonic() + 15)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
        executor.shutdown()
        probe.destroy_node()
    assert process.returncode == 0, stderr
    for problem in ('terminate called', 'Traceback', 'Exception ignored', 'failed to decode',
                    'computing flow failed'):
        assert problem not in stderr, stderr


STOP_AS_THE_NODE_STARTED = '\n'.join([
    'import sys',
    'import rclpy',
    'from rclpy.node import Node',
    'from veckm_flow_ros.ros.spin import run_node',
    '',
    'def make_node():',
    "    node = Node('stop_as_started_probe')",
    "    rclpy.get_default_context().try_shutdown()  # what rclpy's handler does on a stop signal",
    '    return node',
    '',
    "sys.exit(run_node(make_node, 'stop_as_started', args=[]))",
])


def test_a_stop_as_the_node_finishes_starting_is_a_clean_exit():
    """
    ros/spin.py: a stop signal just after the node is built (seen once in CI, on Jazzy).

    An executor built on the context the signal had shut down failed half-way, and rclpy's
    Executor.__del__ printed a traceback at exit.
    """
    env = dict(os.environ, ROS_DOMAIN_ID=str(DOMAIN_ID), ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST')
    result = subprocess.run([sys.executable, '-c', STOP_AS_THE_NODE_STARTED], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert 'Traceback' not in result.stderr and 'Exception ignored' not in result.stderr, \
        result.stderr


# ------------------------------------------------------------------------------------------
# On the graph


def _publish_recording(harness, recording, limit=None):
    from veckm_flow_ros.eventio.bag import read_event_messages
    sent = []
    for index, item in enumerate(read_event_messages(recording)):
        if limit is not None and index >= limit:
            break
        msg = item.msg
        harness.publish(msg.encoding, msg.events.tobytes(), item.stamp_ns, width=msg.width,
                        height=msg.height, time_base=msg.time_base, seq=msg.seq,
                        frame_id=msg.header.frame_id)
        sent.append(item)
        if index % 20 == 19:
            harness.spin_for(0.01)  # let DDS and the worker breathe: best effort drops bursts
    return sent


def test_flow_from_a_real_evt3_recording(harness_factory, recordings_dir):
    # long_context_when_behind: the second look at slow flows for every block, also when the
    # node falls behind the publisher (it usually does here), so the flows are the replay's.
    harness = harness_factory(block_ms=5.0, max_queue_delay_ms=0.0,
                              long_context_when_behind=True)
    # The first 120 packets (~0.5 s, ~80 k events): a flow for every event stays quick here.
    sent = _publish_recording(harness, recordings_dir / 'py_test_events_1', limit=120)
    assert harness.wait_idle(), 'the node did not finish the recording'
    assert harness.clouds, 'no ~/flow message'
    cloud = harness.clouds[0]
    assert [(f.name, f.offset, f.datatype, f.count) for f in cloud.fields] == [
        ('x', 0, 7, 1), ('y', 4, 7, 1), ('t', 8, 7, 1), ('u', 12, 7, 1), ('v', 16, 7, 1),
        ('validity', 20, 7, 1)]
    assert (cloud.height, cloud.point_step, cloud.is_bigendian) == (1, 24, False)
    assert {c.header.frame_id for c in harness.clouds} == {sent[0].msg.header.frame_id}
    # Stamps: ROS time of the newest event of each block, inside the recording's stamps.
    stamps = np.array([stamp_to_ns(c.header.stamp) for c in harness.clouds])
    assert np.all(np.diff(stamps) >= 0)
    assert sent[0].stamp_ns - 50e6 <= stamps[0] and stamps[-1] <= sent[-1].stamp_ns + 50e6
    points = harness.flow_points()
    events = harness.node.pipeline.stats.totals['events']
    assert events > 20_000
    # A flow per CD event, minus the tail still waiting for its future context (tau + block),
    # published or left out for low validity.
    left_out = harness.node.pipeline.stats.totals['low_validity_flows']
    assert 0.8 * events < len(points) + left_out <= events
    assert np.all((points['x'] >= 0) & (points['x'] < 640))
    assert np.all((points['y'] >= 0) & (points['y'] < 480))
    assert np.all((points['t'] <= 0) & (points['t'] > -0.1))  # within a block, seconds
    # Only flows at or above the default min_validity (0.5) are published; the hand moves
    # over background activity, so some are left out, and counted.
    assert np.all((points['validity'] >= 0.5) & (points['validity'] < 1))
    assert harness.node.pipeline.stats.totals['low_validity_flows'] > 0
    speed_px_s = np.hypot(points['u'], points['v'])
    assert np.all(np.isfinite(speed_px_s))
    # px/s, not px per 1/60 s: a hand-held scene moves tens to thousands of px/s.
    # px/s, measured with the shipped default model, the node's defaults and the second look
    # for every block: median 8.16 px/s over the 21,078 flows published (a slow scene: in its
    # first 0.1 s test_replay finds 4,112 of 4,113 flows estimated again with the long
    # context). Without the long context: 13.56 px/s over the same flows, 11.46 px/s over all
    # 36,633 flows (the flows of background activity are slower; the published 640x480_32ms
    # model measured 52 px/s over all: the models differ on this slow hand-held scene). +-25 %:
    # a flow scale off by 2x either way fails, and so does the plain flow (13.56 px/s).
    assert 0.75 * 8.16 < np.median(speed_px_s) < 1.25 * 8.16
    totals = harness.node.pipeline.stats.totals
    assert totals['long_context_skipped_blocks'] == 0
    assert totals['bad_packets'] == 0 and totals['dropped_packets'] == 0


def _publish_events(harness, events, packet_s=1e-3, stamp_offset_ns=0, pace=True):
    """Encode `events` as evt3 packets of packet_s and publish them; returns the count."""
    from veckm_flow_ros.eventio.packets import encode_packets
    packets = encode_packets(events, 'evt3', packet_duration_ns=int(packet_s * 1e9))
    for packet in packets:
        harness.publish('evt3', packet.data, packet.first_t_ns + stamp_offset_ns)
        if pace:
            harness.spin_for(0.0005)
    return len(packets)


def _quadrants(x, y):
    """Boolean masks of the four EDGES' quadrants."""
    index = (np.asarray(x) >= 320).astype(int) + 2 * (np.asarray(y) >= 240).astype(int)
    return [index == quadrant for quadrant in range(4)]


def _ground_truth_at(x, y):
    """Ground-truth flow of the EDGES by quadrant of (x, y)."""
    index = (np.asarray(x) >= 320).astype(int) + 2 * (np.asarray(y) >= 240).astype(int)
    speeds = np.array([[s * np.cos(a), s * np.sin(a)] for _, _, a, s in EDGES])
    return speeds[index, 0], speeds[index, 1]


def test_synthetic_moving_edges_flow_points_the_right_way(harness_factory):
    harness = harness_factory(block_ms=5.0)
    events, _, _ = moving_edges()
    _publish_events(harness, events)
    assert harness.wait_idle()
    points = harness.flow_points()
    assert points is not None and len(points) > 0.5 * len(events)
    gt_u, gt_v = _ground_truth_at(points['x'], points['y'])
    positive = np.mean(points['u'] * gt_u + points['v'] * gt_v > 0)
    assert positive >= 0.90, f'%Pos = {100 * positive:.1f} %'
    # Each edge moves along its normal: its normal flow is its motion (200-350 px/s).
    speed = np.hypot(points['u'], points['v'])
    # Per edge, median |flow| / edge speed, measured with the shipped default model: 1.20,
    # 1.05, 1.23, 1.01 (%Pos 100). +-25 %: a flow scale off by 2x fails.
    ratios = [np.median(speed[quadrant]) / np.hypot(gt_u[quadrant], gt_v[quadrant])[0]
              for quadrant in _quadrants(points['x'], points['y'])]
    for ratio, measured in zip(ratios, (1.20, 1.05, 1.23, 1.01)):
        assert 0.75 * measured <= ratio <= 1.25 * measured, ratios


def test_bad_input_is_counted_and_the_node_keeps_going(harness_factory):
    # Counts every packet: no age limit (a loaded machine warms up for over 200 ms).
    harness = harness_factory(max_queue_delay_ms=0.0)
    rng = np.random.default_rng(1)
    harness.publish('no_such_encoding', b'\x00' * 64, 1_000_000_000)
    harness.publish('evt3', rng.integers(0, 256, 5000, dtype=np.uint8).tobytes(), 1_001_000_000)
    harness.publish('mono', b'\x01\x02\x03', 1_002_000_000)  # not a whole 8-byte event
    harness.publish('evt3', b'', 1_003_000_000, seq=harness.seq + 5)  # 5 packets lost upstream
    totals = harness.node.pipeline.stats.totals
    # The worker decodes each packet and pushes its events before the next: wait for all four.
    assert harness.spin_until(lambda: totals['handled_packets'] >= 4, 10)
    assert totals['bad_packets'] >= 1
    assert totals['seq_gaps'] == 1 and totals['missed_packets'] == 5
    assert totals['decode_problems'] >= 1
    # The stream goes on: valid events after the garbage still give flows.
    events, _, _ = moving_edges(duration_s=0.1, t0_ns=2_000_000_000)
    _publish_events(harness, events)
    assert harness.wait_idle()
    assert harness.clouds and harness.node.pipeline.is_alive()


def test_an_estimator_failure_is_counted_and_the_stream_restarts(harness_factory):
    """The estimate thread survives an exception: counted, logged, stream reset, flows go on."""
    harness = harness_factory()
    totals = harness.node.pipeline.stats.totals
    events, _, _ = moving_edges(duration_s=0.1, t0_ns=1_000_000_000)
    _publish_events(harness, events)
    assert harness.wait_idle()
    assert harness.clouds
    estimator = harness.node.pipeline.estimator
    working = estimator._encode_and_predict
    failures = []

    def fail_once(*args):  # a block computation fails (inline or in a pool thread)
        if not failures:
            failures.append(1)
            raise RuntimeError('injected estimator failure')
        return working(*args)

    estimator._encode_and_predict = fail_once
    flows_before, resets_before = totals['flows'], totals['estimator_resets']
    events, _, _ = moving_edges(duration_s=0.15, t0_ns=2_000_000_000)
    _publish_events(harness, events)
    assert harness.wait_idle()
    assert failures and totals['failed_blocks'] == 1
    assert totals['estimator_resets'] > resets_before
    assert totals['flows'] > flows_before  # the packets after the failure still give flows
    assert harness.node.pipeline.is_alive()


def test_lost_evt3_packets_do_not_restart_the_stream(harness_factory):
    # evt3 carries its time across packets (TIME_HIGH every 4.096 ms). Packets 30-37 are
    # lost: the next packet's first events must not take the time of the last decoded
    # one (8 ms early), which would look like the sensor time jumping back and reset the
    # estimator; the decoder resyncs on the seq gap instead.
    from veckm_flow_ros.eventio.packets import encode_packets
    harness = harness_factory()
    events, _, _ = moving_edges(duration_s=0.12)
    packets = encode_packets(events, 'evt3', packet_duration_ns=1_000_000)
    for seq, packet in enumerate(packets):
        if not 30 <= seq < 38:
            harness.publish('evt3', packet.data, packet.first_t_ns, seq=seq)
            harness.spin_for(0.0005)
    assert harness.wait_idle()
    totals = harness.node.pipeline.stats.totals
    assert totals['seq_gaps'] == 1 and totals['missed_packets'] == 8
    assert totals['estimator_resets'] == 0
    assert harness.node.pipeline.front_end.decoder.problem_counts['time_backwards'] == 0
    assert harness.clouds


def test_burst_over_capacity_drops_whole_oldest_packets(harness_factory):
    capacity = 40_000
    harness = harness_factory(max_queued_events=capacity)
    # ~1.4 M events in 0.15 s of sensor time, published as fast as possible: far above what
    # this node sustains on 2 cores, so the queue must shed whole packets.
    events, _, _ = moving_edges(duration_s=0.15, radius_px=120, events_per_pixel=8)
    queued_max = []
    original_put = harness.node.pipeline.queue.put

    def put_and_watch(packet):
        dropped = original_put(packet)
        queued_max.append(harness.node.pipeline.queue.queued_events)
        return dropped
    harness.node.pipeline.queue.put = put_and_watch
    _publish_events(harness, events, packet_s=2e-3, pace=False)
    assert harness.wait_idle(timeout_s=30)
    totals = harness.node.pipeline.stats.totals
    assert totals['dropped_packets'] > 0
    assert max(queued_max) <= capacity
    assert harness.node.pipeline.is_alive()
    # After the burst the node still works.
    before = len(harness.clouds)
    calm, _, _ = moving_edges(duration_s=0.1, t0_ns=5_000_000_000)
    _publish_events(harness, calm)
    assert harness.wait_idle()
    assert len(harness.clouds) > before


def test_flow_image_only_while_subscribed(harness_factory):
    harness = harness_factory(image_rate_hz=20.0)
    events, _, _ = moving_edges(duration_s=0.2)
    _publish_events(harness, events)
    harness.wait_idle()
    harness.spin_for(0.3)
    assert harness.node.pipeline.stats.totals['images'] == 0  # nobody listens: nothing rendered
    harness.subscribe_images()
    more, _, _ = moving_edges(duration_s=0.2, t0_ns=events.t_ns[-1] + 1_000_000)
    _publish_events(harness, more)
    assert harness.spin_until(lambda: len(harness.images) >= 2, 10.0)
    image = harness.images[-1]
    assert (image.encoding, image.width, image.height, image.step) == ('bgr8', 640, 480, 1920)
    # Coloured flow pixels where the edges are (the legend sits in a corner, not there).
    lit = [np.frombuffer(bytes(m.data), np.uint8).reshape(480, 640, 3)[70:171, 110:211].any()
           for m in harness.images]
    assert any(lit)
    harness.unsubscribe_images()
    harness.spin_until(lambda: harness.node.image_pub.get_subscription_count() == 0, 5.0)
    harness.spin_for(0.2)
    rendered = harness.node.pipeline.stats.totals['images']
    harness.spin_for(0.5)
    assert harness.node.pipeline.stats.totals['images'] == rendered


def test_only_the_image_scale_changes_at_run_time(harness_factory):
    harness = harness_factory()
    node = harness.node
    result = node.set_parameters([Parameter('image_max_speed_px_s', value=500.0)])[0]
    assert result.successful and node.config['image_max_speed_px_s'] == 500.0
    for name, value in (('block_ms', 2.0), ('model', 'other'), ('image_rate_hz', 5.0)):
        assert not node.set_parameters([Parameter(name, value=value)])[0].successful, name
    assert not node.set_parameters([Parameter('image_max_speed_px_s', value=-1.0)])[0].successful
    assert node.config['block_ms'] == 0.0 and node.config['image_max_speed_px_s'] == 500.0


def _clouds_by_pass(clouds):
    """Split ~/flow messages where the header stamp goes back (a new pass of the input)."""
    passes = [[]]
    last = None
    for cloud in clouds:
        stamp = stamp_to_ns(cloud.header.stamp)
        if last is not None and stamp < last:
            passes.append([])
        passes[-1].append((stamp, bytes(cloud.data)))
        last = stamp
    return passes


def test_bag_loop_resets_the_decoder_before_decoding(harness_factory):
    """The same evt3 packets played twice (seq and stamps restart) give the same flows."""
    from veckm_flow_ros.eventio.packets import encode_packets
    harness = harness_factory(block_ms=5.0, target_stride=4, max_queue_delay_ms=0.0)
    events, _, _ = moving_edges(duration_s=0.15)
    packets = encode_packets(events, 'evt3', packet_duration_ns=1_000_000)
    for _ in range(2):
        for seq, packet in enumerate(packets):
            harness.publish('evt3', packet.data, packet.first_t_ns + 5_000_000_000, seq=seq)
            harness.spin_for(0.0005)
        # Each pass computed before the next starts: on a loaded machine the loop's first
        # packets could otherwise reach the node while the first pass's last blocks wait.
        assert harness.wait_idle()
    passes = _clouds_by_pass(harness.clouds)
    assert len(passes) == 2
    first, second = passes
    assert len(first) > 5
    # The old evt3 time state would put the loop's first packet 16.8 s late: an extra reset
    # and that packet's events in the second pass.
    assert harness.node.pipeline.stats.totals['estimator_resets'] == 1
    assert [(stamp, len(data)) for stamp, data in second] == \
        [(stamp, len(data)) for stamp, data in first]
    for (_, data_first), (_, data_second) in zip(first, second):
        # Under a CPU load a few events of a pass's first cloud get other flows (seen in CI
        # and with two busy processes here, on older code too: 60 of its 1,488 values), so
        # the values must agree on 90 %; the stamps and sizes above are exact.
        same = np.frombuffer(data_second, '<f4') == np.frombuffer(data_first, '<f4')
        assert same.mean() >= 0.9, f'{np.count_nonzero(~same)} of {len(same)} values differ'


def test_confidence_field_when_enabled(harness_factory):
    harness = harness_factory(block_ms=5.0, target_stride=8, publish_confidence=True)
    events, _, _ = moving_edges(duration_s=0.1)
    _publish_events(harness, events)
    assert harness.wait_idle()
    assert harness.clouds, 'no ~/flow message'
    names = [f.name for f in harness.clouds[0].fields]
    assert names == ['x', 'y', 't', 'u', 'v', 'validity', 'confidence']
    confidence = harness.flow_points()['confidence']
    assert len(confidence) > 0
    assert np.all((confidence >= 0) & (confidence <= 1))  # NaN fails too
    assert confidence.std() > 0


def _replayed_flow(bag_path, model_path, tmp_path):
    """Replay a bag (target_stride 4) and return its ~/flow as (stamp_ns, frame_id, data)."""
    from rosbags.rosbag2 import Reader

    from veckm_flow_ros.core.model import load_model
    from veckm_flow_ros.eventio.bag import make_typestore
    from veckm_flow_ros.offline.replay import ReplayOptions, ReplayOutputs, replay_bag
    replay_bag(bag_path, load_model(model_path), ReplayOptions(target_stride=4, progress=False),
               ReplayOutputs(bag=tmp_path / 'flow_bag'))
    typestore = make_typestore()
    flows = []
    with Reader(tmp_path / 'flow_bag') as reader:
        for connection, _, raw in reader.messages():
            if connection.topic == FLOW_TOPIC:
                cloud = typestore.deserialize_cdr(raw, connection.msgtype)
                flows.append((stamp_to_ns(cloud.header.stamp), cloud.header.frame_id,
                              bytes(cloud.data)))
    return flows


def test_node_and_replay_stamp_alike(harness_factory, model_path, tmp_path):
    """Same packets (jittered header stamps) through the node and replay: same stamps."""
    from veckm_flow_ros.eventio.bag import EventBagWriter
    from veckm_flow_ros.eventio.packets import encode_packets
    events, _, _ = moving_edges(duration_s=0.25)
    packets = encode_packets(events, 'evt3', packet_duration_ns=1_000_000)
    rng = np.random.default_rng(3)
    stamps = [p.first_t_ns + 7_000_000_000 + int(rng.integers(0, 300_000)) for p in packets]
    stamps = np.maximum.accumulate(stamps)
    bag_path = tmp_path / 'in_bag'
    with EventBagWriter(bag_path) as writer:
        for seq, (packet, stamp_ns) in enumerate(zip(packets, stamps)):
            writer.write('/event_camera/events', int(stamp_ns), encoding='evt3',
                         events=packet.data, width=640, height=480, seq=seq)
    replay_stamps = [stamp for stamp, _, _ in _replayed_flow(bag_path, model_path, tmp_path)]
    # Both at their default block length; every packet through (no age limit).
    harness = harness_factory(target_stride=4, max_queue_delay_ms=0.0)
    for seq, (packet, stamp_ns) in enumerate(zip(packets, stamps)):
        harness.publish('evt3', packet.data, int(stamp_ns), seq=seq)
        harness.spin_for(0.0005)
    assert harness.wait_idle()
    node_stamps = [stamp_to_ns(c.header.stamp) for c in harness.clouds]
    assert len(node_stamps) > 5
    # Replay flushes the tail at the end of the bag; the node waits for more events.
    assert node_stamps == replay_stamps[:len(node_stamps)]


def test_node_and_replay_give_the_same_flow_through_restarts(harness_factory, model_path,
                                                             tmp_path):
    """
    One packet sequence through the node (DDS) and replay (bag): identical ~/flow messages.

    The sequence holds a seq gap, a sensor time jump back by > 100 ms with header stamps and
    seq going on (a camera restarted under its driver) and a bag loop (stamps and seq back):
    both drive the one stream front end, so stamps, frame ids and point bytes agree.
    """
    from veckm_flow_ros.eventio.bag import EventBagWriter
    from veckm_flow_ros.eventio.packets import encode_packets
    from veckm_flow_ros.stream.frontend import RESTART_TOLERANCE_NS
    edges, _, _ = moving_edges(duration_s=0.3)
    # With background activity: both leave out the same low-validity flows (the default).
    events, _ = merged(edges, background_noise(duration_s=0.3))
    packets = encode_packets(events, 'mono', packet_duration_ns=5_000_000)
    stamp0 = 9_000_000_000
    sequence = []  # (packet, seq, stamp_ns, frame_id)
    for index, packet in enumerate(packets[:40]):
        if not 20 <= index < 23:  # seq gap: three packets lost upstream
            sequence.append((packet, index, stamp0 + index * 5_000_000, 'camera_a'))
    for index, packet in enumerate(packets[:20]):  # sensor time back, stamps and seq go on
        sequence.append((packet, 40 + index, stamp0 + (40 + index) * 5_000_000, 'camera_b'))
    assert packets[39].first_t_ns - packets[0].first_t_ns > RESTART_TOLERANCE_NS
    for index, packet in enumerate(packets[:30]):  # bag loop: stamps and seq go back
        sequence.append((packet, index, stamp0 + index * 5_000_000, 'camera_c'))
    bag_path = tmp_path / 'in_bag'
    with EventBagWriter(bag_path) as writer:
        for index, (packet, seq, stamp_ns, frame_id) in enumerate(sequence):
            writer.write('/event_camera/events', stamp_ns, encoding='mono', events=packet.data,
                         width=640, height=480, seq=seq, time_base=packet.time_base,
                         frame_id=frame_id, log_time_ns=stamp0 + index * 5_000_000)
    replayed = _replayed_flow(bag_path, model_path, tmp_path)
    # The second look at slow flows also while the node is behind (a loaded machine): the
    # flows equal replay's under any load.
    harness = harness_factory(target_stride=4, max_queue_delay_ms=0.0,
                              long_context_when_behind=True)
    for packet, seq, stamp_ns, frame_id in sequence:
        harness.publish('mono', packet.data, stamp_ns, time_base=packet.time_base, seq=seq,
                        frame_id=frame_id)
        harness.spin_for(0.001)
    assert harness.wait_idle()
    totals = harness.node.pipeline.stats.totals
    assert totals['estimator_resets'] == 2 and totals['seq_gaps'] >= 1
    assert totals['low_validity_flows'] > 1000
    node = [(stamp_to_ns(c.header.stamp), c.header.frame_id, bytes(c.data))
            for c in harness.clouds]
    assert {frame for _, frame, _ in node} == {'camera_a', 'camera_b', 'camera_c'}
    # The output bag is in stamp order and the loop repeats stamps: order by segment, stamp.
    replayed.sort(key=lambda message: (message[1], message[0]))
    # Replay flushes the tail at the end of the bag; the node waits for more events.
    assert len(node) >= 10 and node == replayed[:len(node)]


# ------------------------------------------------------------------------------------------
# Parameters, diagnostics and stamps


# A value other than the default for every parameter that can differ on this machine (device:
# test_cuda_without_a_gpu_fails_at_start_up; cuda runs in test_cuda).
NON_DEFAULT = {
    'model': 'veckm_r8_tau16ms', 'pixel_radius': 8, 'tau_ms': 16.0, 'block_ms': 4.0,
    'causal': True, 'target_stride': 3, 'max_flows_per_block': 777,
    'max_queued_events': 123_456, 'max_queue_delay_ms': 150.0, 'max_buffered_events': 234_567,
    'torch_threads': 1, 'compute_threads': 2, 'image_rate_hz': 8.0,
    'image_max_speed_px_s': 321.0, 'publish_confidence': True, 'rotation_mean_flow': True,
    'diagnostics_period_s': 0.5, 'max_sensor_width_px': 1000, 'max_sensor_height_px': 900,
    'time_sync_max_jump_ms': 250.0, 'min_validity': 0.25, 'long_context_below_px_s': 80.0,
    'long_context_when_behind': True}


def test_every_parameter_reaches_the_pipeline(harness_factory):
    """
    Each ROS parameter arrives where it acts: the pipeline's config and what it built from it.

    What each one then changes is shown on the ROS-free pipeline (test_pipeline), the image
    and diagnostics parameters on the graph below.
    """
    names = {spec.name for spec in flow_node.PARAMETERS}
    assert set(NON_DEFAULT) == names - {'device'}
    node = harness_factory(**NON_DEFAULT).node
    pipeline = node.pipeline
    assert pipeline.config == {**NON_DEFAULT, 'device': 'cpu'}
    assert node.model.name == 'veckm_r8_tau16ms' and pipeline.model is node.model
    assert (node.model.pixel_radius, node.model.tau_s) == (8, 0.016)
    assert pipeline.block_ms == 4.0
    assert pipeline.queue.max_events == 123_456
    assert pipeline.front_end.max_sensor_size == (1000, 900)
    assert pipeline.front_end.max_jump_ns == pipeline.max_jump_ns == 250_000_000
    assert (pipeline.compute_threads, pipeline._inline_threads) == (2, 1)
    estimator = pipeline.estimator_for(640, 480)
    assert estimator.block_ns == 4_000_000 and estimator.causal
    assert (estimator.target_stride, estimator.max_flows_per_block,
            estimator.max_buffered_events) == (3, 777, 234_567)
    assert estimator.confidence and estimator.rotation_mean
    assert estimator.min_validity == 0.25
    assert estimator.long_context_below_px_s == 80.0
    assert node._diagnostics_timer.timer_period_ns == 500_000_000
    assert node._image_timer.timer_period_ns == 125_000_000
    assert harness_factory(image_rate_hz=0.0).node._image_timer is None


def _image_brightness(image):
    """Mean brightness of the pixels with flow, in the upper-left edge's disk."""
    bgr = np.frombuffer(bytes(image.data), np.uint8).reshape(image.height, image.width, 3)
    value = bgr[70:171, 110:211].max(axis=2).astype(float)
    return value[value > 0].mean() if (value > 0).any() else 0.0


def test_image_parameters_set_rate_and_brightness(harness_factory):
    """image_rate_hz sets how often ~/flow_image comes; image_max_speed_px_s its scale."""
    harness = harness_factory(image_rate_hz=20.0, image_max_speed_px_s=5000.0)
    harness.subscribe_images()
    assert harness.spin_until(lambda: harness.node._image_wanted, 5.0)
    events, _, _ = moving_edges(duration_s=0.12)
    _publish_events(harness, events)
    harness.wait_idle()
    harness.spin_for(0.1)  # the flows of the last blocks reach an image
    # Each image shows the flows since the one before: 200-350 px/s against 5000: dark.
    dim = [_image_brightness(image) for image in harness.images]
    harness.images.clear()
    harness.spin_for(1.0)
    assert 12 <= len(harness.images) <= 24  # 20 Hz (the executor is spun by the test)
    assert harness.node.set_parameters(
        [Parameter('image_max_speed_px_s', value=100.0)])[0].successful
    harness.images.clear()
    more, _, _ = moving_edges(duration_s=0.12, t0_ns=events.t_ns[-1] + 1_000_000)
    _publish_events(harness, more)
    harness.wait_idle()
    harness.spin_for(0.1)
    # Against 100 px/s: saturated.
    bright = [_image_brightness(image) for image in harness.images]
    assert 0 < max(dim) < 60 and max(bright) > 200, (dim, bright)
    harness.unsubscribe_images()
    # image_rate_hz 0: no image, also while subscribed.
    quiet = harness_factory(image_rate_hz=0.0)
    quiet.subscribe_images()
    _publish_events(quiet, events)
    quiet.spin_for(0.5)
    assert quiet.images == [] and quiet.node.pipeline.stats.totals['images'] == 0


def _diagnostic_values(array):
    (status,) = array.status
    return {item.key: item.value for item in status.values}


def test_diagnostics_report_what_the_input_did(harness_factory):
    """
    /diagnostics over DDS, each counter against what the test sent.

    Moving edges (events in, flows out), a seq gap of 5, a packet of unknown encoding, a
    restart (header stamps back), then three packets each larger than the queue (dropped),
    every diagnostics_period_s = 0.2 s.
    """
    from veckm_flow_ros.eventio.packets import encode_packets
    harness = harness_factory(diagnostics_period_s=0.2, max_queued_events=5000,
                              max_queue_delay_ms=0.0, block_ms=5.0)
    arrays = []
    harness.probe.create_subscription(DiagnosticArray, '/diagnostics', arrays.append,
                                      flow_node.OUTPUT_QOS)
    assert harness.spin_until(lambda: len(arrays) >= 2, 10.0), 'no /diagnostics'
    idle = arrays[-1].status[0]
    assert (idle.level, idle.message) == (DiagnosticStatus.OK, 'no input')
    assert idle.name == 'veckm_flow: normal flow'
    first = len(arrays) - 1  # the rates after this one count the test's events
    events, _, _ = moving_edges(duration_s=0.1)
    _publish_events(harness, events)
    assert harness.wait_idle()
    harness.publish('evt3', b'', 1_200_000_000, seq=harness.seq + 5)  # 5 lost upstream
    harness.publish('no_such_encoding', b'\x00' * 64, 1_201_000_000)
    again, _, _ = moving_edges(duration_s=0.05)
    _publish_events(harness, again, stamp_offset_ns=-500_000_000)  # stamps back: a restart
    assert harness.wait_idle()
    burst, _, _ = moving_edges(duration_s=0.15, t0_ns=3_000_000_000)
    big = encode_packets(burst, 'evt3', packet_duration_ns=50_000_000)
    assert len(big) == 3 and all(len(p.data) // 2 > 5000 for p in big)
    for packet in big:  # each alone above max_queued_events: dropped on arrival
        harness.publish('evt3', packet.data, packet.first_t_ns)
        harness.spin_for(0.05)  # best effort: large messages back to back may be lost
    assert harness.wait_idle()
    totals = harness.node.pipeline.stats.totals
    received_flows = sum(cloud.width for cloud in harness.clouds)
    harness.spin_until(
        lambda: _diagnostic_values(arrays[-1])['dropped packets (total)'] == '3'
        and _diagnostic_values(arrays[-1])['flows (total)'] == str(received_flows), 10.0)
    values = _diagnostic_values(arrays[-1])
    assert values['flows (total)'] == str(received_flows), (values, totals)
    assert values == {**values, 'seq gaps (total)': '1', 'packets lost upstream (total)': '5',
                      'bad packets (total)': '1', 'stream resets (total)': '1',
                      'dropped packets (total)': '3', 'decode problems (total)': '0',
                      'failed block computations (total)': '0', 'queued events': '0',
                      'estimator dropped events (total)': '0'}
    assert received_flows > 0.5 * (len(events) + len(again))
    assert values['flows left out, validity below min_validity (total)'] == \
        str(totals['low_validity_flows'])
    # The node's default long context: the edges' slow flows were estimated again.
    from veckm_flow_ros.stream.parameters import parameter_default
    assert harness.node.pipeline.estimator.long_context_below_px_s == \
        parameter_default('long_context_below_px_s') == 150.0
    assert values['flows estimated again with the long context, slower than '
                  'long_context_below_px_s (total)'] == str(totals['long_context_flows'])
    assert values['blocks computed without the long context while the node was behind '
                  '(total)'] == str(totals['long_context_skipped_blocks'])
    # (blocks computed while the node was behind skip it: on a loaded machine, all may)
    assert totals['long_context_flows'] > 0 or totals['long_context_skipped_blocks'] > 0
    assert arrays[-1].status[0].hardware_id == 'event_camera'
    # Events in: the rates times the periods (header stamps) add up to the events sent.
    stamps_s = np.array([stamp_to_ns(a.header.stamp) for a in arrays[first:]]) * 1e-9
    rates = np.array([float(_diagnostic_values(a)['input events/s']) for a in arrays[first:]])
    sent_events = len(events) + len(again)
    assert np.sum(rates[1:] * np.diff(stamps_s)) == pytest.approx(sent_events, rel=0.03)
    assert totals['events'] == sent_events
    flow_rates = np.array([float(_diagnostic_values(a)['flows/s']) for a in arrays[first:]])
    assert np.sum(flow_rates[1:] * np.diff(stamps_s)) == pytest.approx(received_flows, rel=0.03)
    # The period with the drops and the bad packet warns; the period is 0.2 s.
    warnings = {a.status[0].message for a in arrays[first:]
                if a.status[0].level == DiagnosticStatus.WARN}
    assert 'dropping input (over capacity or bad)' in warnings
    assert np.median(np.diff(stamps_s)) == pytest.approx(0.2, abs=0.05)


def test_node_stamps_follow_the_time_sync(harness_factory):
    """
    Header stamps with arrival jitter, a camera restart and a bag loop: stamp residuals.

    stamped_sequence explains the oracle: the offset is set by each stream's first packet and
    then moves by 1 % of each packet's deviation; an inverted blend or a missing reset fails.
    """
    from stamped_sequence import block_residuals_ms, check_residuals, stamped_packets
    harness = harness_factory(block_ms=5.0, target_stride=2, max_queue_delay_ms=0.0)
    for packet, seq, stamp_ns, frame_id in stamped_packets():
        harness.publish('mono', packet.data, stamp_ns, time_base=packet.time_base, seq=seq,
                        frame_id=frame_id)
        harness.spin_for(0.002)
    assert harness.wait_idle()
    assert harness.node.pipeline.stats.totals['estimator_resets'] == 2
    clouds = [(stamp_to_ns(c.header.stamp), c.header.frame_id,
               points_from_pointcloud2([f.name for f in c.fields], c.point_step, c.data))
              for c in harness.clouds]
    check_residuals(block_residuals_ms(clouds))
