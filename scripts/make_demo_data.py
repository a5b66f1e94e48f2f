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
Regenerate the bundled demo recording in veckm_flow_ros/data/ with the project's simulator.

    .venv/bin/python scripts/make_demo_data.py [--out-dir veckm_flow_ros/data]

Writes demo_scene.npz (events + exact per-event ground-truth optical flow, simulator layout)
and demo_scene.mcap (the same events as evt3 EventPackets of 1 ms on /event_camera/events,
stamped like a driver would: host time = sensor time + a fixed epoch + 0.5 ms). Deterministic.
"""

import argparse
import pathlib
import sys

import numpy as np

# The scene: a slowly zooming textured background with four moving, spinning objects.
SCENE = {'motion': 'objects', 'texture': 'polygons', 'seed': 7, 'width': 346, 'height': 260,
         'speed_px_s': 250.0}
DURATION_S = 0.3
NOISE_RATE_HZ_PER_PX = 0.05
TOPIC = '/event_camera/events'
EPOCH_NS = 1_750_000_000 * 1_000_000_000
ARRIVAL_DELAY_NS = 500_000
PACKET_NS = 1_000_000


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    default_dir = pathlib.Path(__file__).resolve().parents[1] / 'veckm_flow_ros' / 'data'
    parser.add_argument('--out-dir', type=pathlib.Path, default=default_dir)
    args = parser.parse_args(argv)

    from veckm_flow_ros.eventio.bag import EventBagWriter
    from veckm_flow_ros.eventio.packets import encode_packets
    from veckm_flow_ros.learning import simulate

    sensor = simulate.SensorConfig(noise_rate_hz_per_px=NOISE_RATE_HZ_PER_PX)
    scene = simulate.make_scene(SCENE['motion'], SCENE['texture'], seed=SCENE['seed'],
                                width=SCENE['width'], height=SCENE['height'],
                                speed_px_s=SCENE['speed_px_s'], sensor=sensor)
    sequence = simulate.simulate(scene, DURATION_S, seed=SCENE['seed'])
    if np.any(sequence.events.t_ns % 1000):
        raise SystemExit('the simulator produced sub-microsecond times; evt3 cannot carry them')
    args.out_dir.mkdir(parents=True, exist_ok=True)
    npz_path = args.out_dir / 'demo_scene.npz'
    simulate.save_npz(sequence, npz_path)

    bag_path = args.out_dir / 'demo_scene'
    mcap_path = args.out_dir / 'demo_scene.mcap'
    for stale in (bag_path / 'metadata.yaml', bag_path / 'demo_scene.mcap', mcap_path):
        stale.unlink(missing_ok=True)
    if bag_path.exists():
        bag_path.rmdir()
    packets = encode_packets(sequence.events, 'evt3', packet_duration_ns=PACKET_NS)
    with EventBagWriter(bag_path, storage='mcap', frame_id='event_camera') as writer:
        for seq, packet in enumerate(packets):
            writer.write(TOPIC, EPOCH_NS + packet.last_t_ns + ARRIVAL_DELAY_NS,
                         encoding='evt3', events=packet.data, width=sequence.width,
                         height=sequence.height, seq=seq, time_base=packet.time_base)
    # Ship the bag as one .mcap file (readable by rosbags and `ros2 bag play FILE.mcap`).
    (bag_path / 'demo_scene.mcap').rename(mcap_path)
    (bag_path / 'metadata.yaml').unlink()
    bag_path.rmdir()
    print(f'{npz_path}: {len(sequence)} events ({int(sequence.is_noise.sum())} noise), '
          f'{sequence.width}x{sequence.height}, {DURATION_S} s, {npz_path.stat().st_size} B')
    print(f'{mcap_path}: {len(packets)} evt3 packets on {TOPIC}, '
          f'{mcap_path.stat().st_size} B')
    return 0


if __name__ == '__main__':
    sys.exit(main())
