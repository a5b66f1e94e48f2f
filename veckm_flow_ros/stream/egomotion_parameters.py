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
The egomotion node's parameters: names, defaults, ranges and descriptions, in one table.

veckm_egomotion_node declares each as a ROS parameter (descriptor built from its range and
read_only flag, as the flow node does with stream/parameters.py); the egomotion stream reads
the same names from a plain dict, so that it runs without ROS (default_egomotion_config()).
config/veckm_egomotion.yaml and the table in docs/egomotion_node.md are checked against this
table by the tests.
"""

import math

from veckm_flow_ros.stream.parameters import config_of, ParameterSpec, sensor_size_parameters

# The single source of the egomotion node's parameters.
EGOMOTION_PARAMETERS = (
    ParameterSpec('window_s', 0.03, 'Length of an estimation window [s] of flow sensor time '
                  '(header.stamp + t of ~/flow): one ~/twist per window.', (0.005, 1.0),
                  read_only=True),
    ParameterSpec('min_flows', 200, 'Fewest flows in a window for an estimate [flows]; '
                  'windows with fewer publish nothing (counted).', (10, 1_000_000),
                  read_only=True),
    ParameterSpec('max_flows', 4000, 'Flows per window given to the estimator [flows]: the '
                  'node keeps an even subsample of at most 2x this many while the window '
                  'fills, the estimator thins it evenly to this many.', (100, 1_000_000),
                  read_only=True),
    ParameterSpec('max_flow_age_s', 0.2, 'Oldest flow accepted [s before its header stamp]: '
                  "a flow whose t lies outside -max_flow_age_s..+window_s of its message's "
                  'stamp is refused (counted): one corrupt time would move the window or mix '
                  "old motion into it. The flow node's flows lie within one block (at most "
                  '0.1 s) before the stamp.', (0.001, 10.0), read_only=True),
    ParameterSpec('max_flows_per_message', 200_000, 'Largest ~/flow message used whole '
                  '[flows]: a larger cloud is thinned evenly to this many (the rest counted), '
                  'so that the work and memory per message are bounded (the flow node sends '
                  '~25,000 per message at 1 M flows/s).', (1000, 100_000_000),
                  read_only=True),
    ParameterSpec('min_validity', 0.0, 'Flows whose validity (or, without it, confidence) '
                  'field is below this are ignored [0..1]; the field also weights the flows.',
                  (0.0, 1.0), read_only=True),
    ParameterSpec('min_forward', 0.25, 'Smallest absolute z of the unit translation '
                  'direction for a valid focus of expansion and time to contact (below it the '
                  'motion is nearly parallel to the image plane).', (0.0, 1.0), read_only=True),
    ParameterSpec('ttc_rows', 6, 'Rows of the ~/time_to_contact image [cells].', (1, 64),
                  read_only=True),
    ParameterSpec('ttc_cols', 8, 'Columns of the ~/time_to_contact image [cells].', (1, 64),
                  read_only=True),
    ParameterSpec('ttc_neighbour_weight', 0.25, "Weight of the 8 neighbouring cells' flows in "
                  "a cell's time to contact (its own weigh 1) [0..1]: more averages the flow "
                  'errors, less keeps an obstacle that fills one cell; 0 = each cell alone.',
                  (0.0, 1.0), read_only=True),
    ParameterSpec('camera_yaml', '', 'ROS camera calibration YAML used until a valid '
                  '~/camera_info arrives (then ~/camera_info wins); empty = wait for '
                  '~/camera_info.', read_only=True),
    *sensor_size_parameters('a ~/camera_info claiming more is counted as bad and ignored (a '
                            'camera_yaml stops the start)',
                            "the estimator's per-pixel tables, 32 bytes per pixel"),
    ParameterSpec('use_imu', True, 'Use the gyroscope of ~/imu for the angular velocity '
                  'when its samples cover the window; false = always estimate it from the '
                  'flow.', read_only=True),
    ParameterSpec('imu_rotation_xyzw', [0.0, 0.0, 0.0, 1.0], 'Rotation of the IMU frame '
                  'into the camera optical frame (x right, y down, z forward) as a unit '
                  'quaternion x, y, z, w: omega_camera = R omega_imu. tf2 is not used (no '
                  'wheel for it): read it once with `ros2 run tf2_ros tf2_echo '
                  '<camera_optical_frame> <imu_frame>`.', read_only=True),
    ParameterSpec('imu_max_rate_rad_s', 34.9, "The gyroscope's full scale [rad/s] (34.9 = "
                  '2000 deg/s): samples with a rate at or beyond 0.98 of it (saturated, deg/s, '
                  "corrupt) are refused (counted); set it to the sensor's range.", (0.1, 1000.0),
                  read_only=True),
    ParameterSpec('imu_frame_id', '', 'frame_id of the gyroscope on ~/imu; samples of other '
                  'frames (a second IMU on the topic) are refused (counted). Empty = the '
                  'frame_id of the first accepted sample.', read_only=True),
    ParameterSpec('imu_time_offset_s', 0.0, 'Camera time = IMU header time + this [s] '
                  '(a constant delay between the two drivers).', (-1.0, 1.0), read_only=True),
    ParameterSpec('imu_max_wait_s', 0.05, 'Longest the estimator waits for ~/imu samples '
                  "that reach a window's end [s] (they may arrive after the flow that closes "
                  'the window), while ~/imu delivers; then the angular velocity comes from '
                  'the flow.', (0.0, 1.0), read_only=True),
    ParameterSpec('max_queued_windows', 2, 'Windows waiting for the estimator thread '
                  '[windows]; when full the oldest is dropped and counted.', (1, 100),
                  read_only=True),
    ParameterSpec('diagnostics_period_s', 1.0, 'Period of /diagnostics and of the status log '
                  'line [s].', (0.1, 60.0), read_only=True),
)


def default_egomotion_config(**overrides) -> dict:
    """Return the default parameters as a dict, with `overrides` (unknown names: KeyError)."""
    return config_of(EGOMOTION_PARAMETERS, **overrides)


def rotation_from_quaternion(xyzw) -> list:
    """
    Return the 3x3 rotation (nested lists) of a quaternion (x, y, z, w), normalised.

    Raises ValueError naming the value when it is not 4 finite numbers of non-zero length.
    """
    values = [float(value) for value in xyzw]
    if len(values) != 4 or not all(math.isfinite(value) for value in values):
        raise ValueError(f'imu_rotation_xyzw must be 4 finite numbers (x, y, z, w), got '
                         f'{values}')
    norm = math.sqrt(sum(value * value for value in values))
    if norm < 1e-6:
        raise ValueError(f'imu_rotation_xyzw has zero length: {values}')
    x, y, z, w = (value / norm for value in values)
    return [[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]]
