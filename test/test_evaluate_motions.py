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

"""The motion suite's windows of given flows (offline/evaluate_motions.flow_windows)."""

import numpy as np

from veckm_flow_ros.eventio.events import EventArray
from veckm_flow_ros.learning import motion_suite
from veckm_flow_ros.learning.simulate3d import SimulatedSequence3D
from veckm_flow_ros.offline import evaluate_motions


def test_flow_windows_cut_by_the_flows_times_with_their_events_truth():
    """Flows go to the window of their event's time; depth, twist, TTC and gyro are its truth."""
    scene = motion_suite.make_motion_scene('approach', 1)  # v_z > 0: a time-to-contact grid
    rng = np.random.default_rng(5)
    count, duration_s = 3000, 0.09
    t_ns = np.sort(rng.integers(0, int(duration_s * 1e9), count))
    index = rng.integers(0, scene.width * scene.height, count)
    depth, _ = scene.cast(t_ns * 1e-9, index)
    flow = scene.event_flow(t_ns * 1e-9, index, depth)
    x, y = index % scene.width, index // scene.width
    events = EventArray(t_ns, x.astype(np.uint16), y.astype(np.uint16),
                        np.ones(count, np.uint8))
    sequence = SimulatedSequence3D(events, flow.astype(np.float32), np.zeros(count, bool),
                                   scene.width, scene.height, scene.description, scene.camera,
                                   depth.astype(np.float32), np.zeros(count, bool))
    flows = (t_ns * 1e-9, x, y, flow[:, 0], flow[:, 1], None)
    data = evaluate_motions.flow_windows(scene, sequence, flows, duration_s, 0.03)

    np.testing.assert_allclose(data['t0_s'], [0.0, 0.03, 0.06])
    expected = np.histogram(t_ns * 1e-9, [0.0, 0.03, 0.06, 0.09])[0]
    np.testing.assert_array_equal(data['counts'], expected)
    np.testing.assert_array_equal(data['x_px'], x)
    np.testing.assert_array_equal(data['flow_px_s'], flow)
    np.testing.assert_array_equal(data['weight'], np.ones(count))
    assert str(data['kind']) == 'approach' and int(data['seed']) == 1
    # Truth of the middle window: the mean twist and median Z / v_z of its events per region.
    middle = (t_ns >= 30_000_000) & (t_ns < 60_000_000)
    v, _ = scene.trajectory.twist(np.linspace(0.03, 0.06, 9))
    np.testing.assert_allclose(data['v_m_s'][1], v.mean(0))
    rows, cols = data['ttc_s'].shape[1:]
    region = (y * rows // scene.height) * cols + x * cols // scene.width
    busiest = np.bincount(region[middle], minlength=rows * cols).argmax()
    inside = middle & (region == busiest) & np.isfinite(depth)
    assert inside.sum() >= 10
    np.testing.assert_allclose(data['ttc_s'][1].flat[busiest],
                               np.median(depth[inside]) / data['v_m_s'][1][2], rtol=1e-6)
    gyro_t, gyro_w, bias = motion_suite.gyro_samples(scene.trajectory, duration_s, 1)
    np.testing.assert_array_equal(data['gyro_rad_s'], gyro_w)
    assert 0 < data['ratio'][1] < np.inf


def test_a_models_flows_are_cached_under_its_name(tmp_path):
    """--motion-flow model --model M: M's flows, never the default model's from the cache."""
    np.savez(tmp_path / 'corridor-7-0.24-model.npz', marker=np.array(1))
    np.savez(tmp_path / 'corridor-7-0.24-model-my_model.npz', marker=np.array(2))
    load = evaluate_motions.load_sequence
    assert load('corridor', 7, 0.24, 'model', str(tmp_path))['marker'] == 1
    assert load('corridor', 7, 0.24, 'model', str(tmp_path),
                model='/models/my_model.npz')['marker'] == 2
    # The exact flows do not depend on the model.
    np.savez(tmp_path / 'corridor-7-0.24-normal.npz', marker=np.array(3))
    assert load('corridor', 7, 0.24, 'normal', str(tmp_path), model='my_model')['marker'] == 3
