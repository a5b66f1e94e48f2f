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
The node's parameters: the one table of names, defaults, ranges and descriptions.

The node declares each as a ROS parameter (with a descriptor built from its range and
read_only flag); the pipeline reads the same names from a plain dict, so that it runs
without ROS (default_config()); config/veckm_flow.yaml and the README's table are checked
against this table by the tests.
"""

from dataclasses import dataclass
from typing import Any, Optional


@dataclass(frozen=True)
class ParameterSpec:
    """
    One ROS parameter: name, default (its type is the parameter's type), range, text.

    `description` is the descriptor's full text; `unit` and `summary` (one sentence) make the
    README's one-line row (scripts/parameter_table.py), the summary defaulting to the text.
    """

    name: str
    default: Any
    description: str
    value_range: Optional[tuple] = None  # (min, max), inclusive
    read_only: bool = False
    unit: str = ''
    summary: str = ''


def sensor_size_parameters(refused: str, memory: str, note: str = '') -> tuple:
    """
    Return the specs of max_sensor_width_px and max_sensor_height_px (both nodes have them).

    `refused` says what happens to input claiming a larger sensor, `memory` what the bound
    sizes; `note` is added to the width's description.
    """
    width = ParameterSpec(
        'max_sensor_width_px', 2048, f'Largest sensor width accepted [px]: {refused}, so that '
        f'memory ({memory}) is bounded by this, not by the input. {note}'.strip(), (1, 65535),
        read_only=True, unit='px', summary=f'Largest sensor width accepted; {refused}.')
    height = ParameterSpec(
        'max_sensor_height_px', 2048, 'Largest sensor height accepted [px] (see '
        'max_sensor_width_px).', (1, 65535), read_only=True, unit='px',
        summary='Largest sensor height accepted (see max_sensor_width_px).')
    return width, height


# The single source of the node's parameters.
PARAMETERS = (
    ParameterSpec('model', '', 'Model: a checkpoint path, a shipped model name, or a published '
                  'VecKM_flow_cpp folder; empty = the default shipped model.', read_only=True,
                  summary='A checkpoint path, a shipped model name or a published VecKM_flow_cpp '
                          'folder; empty = the default shipped model.'),
    ParameterSpec('device', 'cpu', 'Torch device for encoding and MLP: cpu or cuda.',
                  read_only=True),
    ParameterSpec('pixel_radius', 0, 'Expected pixel radius r of the model [px] (window '
                  '2r+1); 0 = take it from the model, otherwise start-up fails unless it '
                  "equals the model's.", (0, 64), read_only=True, unit='px',
                  summary="Expected pixel radius r of the model; 0 = the model's."),
    ParameterSpec('tau_ms', 0.0, 'Expected temporal radius tau of the model [ms] (half the '
                  'context slice); 0 = take it from the model, otherwise start-up fails unless '
                  "it equals the model's.", (0.0, 1000.0), read_only=True, unit='ms',
                  summary="Expected temporal radius tau of the model; 0 = the model's."),
    ParameterSpec('block_ms', 0.0, 'Length of a target block [ms]: events are encoded and '
                  'published in blocks of this duration (centred: at most 2 tau; latency of a '
                  "block's newest flow ~ tau - block / 2, of its oldest tau + block / 2). 0 = "
                  'automatic: 2 tau of the model centred (each event is encoded once: the most '
                  'events/s), tau causal.',
                  (0.0, 100.0), read_only=True, unit='ms',
                  summary='Length of a target block; 0 = automatic (2 tau centred, tau causal).'),
    ParameterSpec('causal', False, 'Use only past context (latency ~ block instead of tau + '
                  'block, lower accuracy).', read_only=True),
    ParameterSpec('target_stride', 1, 'Estimate flow for every k-th event [events] (context '
                  'always uses all events).', (1, 1000), read_only=True, unit='events',
                  summary='Estimate the flow of every k-th event (the context uses all).'),
    ParameterSpec('max_flows_per_block', 0, 'Cap on flows per block [flows], targets '
                  'subsampled evenly; 0 = no cap.', (0, 100_000_000), read_only=True, unit='flows',
                  summary='Cap on flows per block, targets subsampled evenly; 0 = no cap.'),
    ParameterSpec('min_validity', 0.5, 'Publish only flows whose validity is at least this '
                  '[0..1]: validity = rate / (rate + 1 Hz), rate = events per pixel and second '
                  "in the event's (2r+1)^2 window over the 2 tau context, not counting its own "
                  'pixel (docs/validity.md); 0.5 = 1 Hz per pixel. Drops isolated background '
                  'activity and hot pixels (counted); 0 = publish every flow.', (0.0, 1.0),
                  read_only=True, unit='0..1',
                  summary='Publish only flows of at least this validity (0.5 = 1 Hz per pixel of '
                          'neighbouring activity).'),
    ParameterSpec('long_context_below_px_s', 150.0, 'Kept flows slower than this [px/s] '
                  'are estimated again by the same model on a context twice as long (the 4 tau '
                  "before the end of the block's context: no extra latency; tau x 2, flow "
                  'scale / 2) and replaced (counted); held-out %Pos 96.0 vs 95.1 off for the '
                  'default model. 0 = off. Costs CPU (1.3-1.9x per event on slow real scenes); '
                  'blocks prepared while the node is behind skip it (counted), so the '
                  'throughput stays that of 0.',
                  (0.0, 1.0e6), read_only=True, unit='px/s',
                  summary='Flows slower than this are estimated again on a context twice as '
                          'long; 0 = off.'),
    ParameterSpec('long_context_when_behind', False, 'Take the second look of '
                  'long_context_below_px_s also for blocks prepared while the node is behind '
                  '(input waiting, every compute thread busy). false: those blocks skip it '
                  '(counted), so an overloaded node catches up at the plain cost; true: the '
                  "flows equal replay's under any load, and the node drops input instead.",
                  read_only=True,
                  summary='Take that second look also while the node is behind (else those '
                          'blocks skip it).'),
    ParameterSpec('max_queued_events', 10_000_000, 'Capacity of the input packet queue '
                  '[events, estimated from payload bytes]; when full the oldest whole packets '
                  'are dropped and counted.', (1000, 1_000_000_000), read_only=True, unit='events',
                  summary='Capacity of the input packet queue; the oldest whole packets are '
                          'dropped beyond it.'),
    ParameterSpec('max_queue_delay_ms', 200.0, 'Longest a received packet may wait for the '
                  'worker [ms]; older whole packets are dropped and counted, so the output '
                  'never falls behind by more than this (plus the latency of a block, '
                  'block_ms); 0 = no limit.',
                  (0.0, 60_000.0), read_only=True, unit='ms',
                  summary='Longest a packet may wait for the worker before it is dropped; 0 = no '
                          'limit.'),
    ParameterSpec('max_buffered_events', 4_000_000, 'Cap on events the estimator keeps in '
                  'its sliding window [events].', (1000, 1_000_000_000), read_only=True,
                  unit='events',
                  summary="Cap on events in the estimator's sliding window."),
    *sensor_size_parameters('a packet claiming more is counted as bad and dropped',
                            'estimator tables, ~/flow_image', 'The default covers the sensors '
                            'on the market (1280x720 IMX636, 1280x800 CeleX-V, 1280x960 '
                            'Samsung Gen4) with margin.'),
    ParameterSpec('time_sync_max_jump_ms', 500.0, 'A packet whose sensor time disagrees with '
                  'its header stamp by more than this against the sensor -> ROS offset so far '
                  '[ms] is off the clock (corrupt time words, a sensor or host clock that '
                  'jumped): alone it is dropped; when the next packet follows it, the offset '
                  'is re-synchronised (not blended), the estimator restarts and the jump is '
                  'counted. Events further than this from the median time of their packet are '
                  'dropped. Stamps stay within about this of the input header stamps (the '
                  'offset of clean recordings moves < 10 ms).', (1.0, 3_600_000.0),
                  read_only=True, unit='ms',
                  summary='Sensor time jumps larger than this re-synchronise the sensor -> ROS '
                          'clock offset.'),
    ParameterSpec('torch_threads', 0, 'Torch intra-op threads per block computation; 0 = '
                  'automatic (the CPU cores / compute_threads; all cores for a block computed '
                  'while the node keeps up).', (0, 256), read_only=True, unit='threads',
                  summary='Torch intra-op threads per block computation; 0 = automatic.'),
    ParameterSpec('compute_threads', 0, 'Blocks computed at once on the CPU when the node '
                  'falls behind, each by its own thread; ~/flow keeps block order. 0 = '
                  'automatic (min(CPU cores, 4) on cpu, 1 on cuda); 1 = one block at a time.',
                  (0, 64), read_only=True, unit='threads',
                  summary='Blocks computed at once when the node falls behind; 0 = automatic.'),
    ParameterSpec('image_rate_hz', 25.0, 'Rate of ~/flow_image [Hz] while subscribed; 0 = '
                  'never publish images.', (0.0, 200.0), read_only=True, unit='Hz',
                  summary='Rate of ~/flow_image while subscribed; 0 = never.'),
    ParameterSpec('image_max_speed_px_s', 0.0, 'Flow speed shown at full brightness in '
                  '~/flow_image [px/s]; 0 = automatic (a round number above the 95th '
                  'percentile of the shown speeds).', (0.0, 1.0e6), unit='px/s',
                  summary='Flow speed at full brightness in ~/flow_image; 0 = automatic.'),
    ParameterSpec('publish_confidence', False, 'Add a float32 confidence field [0..1] to '
                  '~/flow (agreement of an ensemble of views: mirrored and time-reversed copies '
                  'for rotation-equivariant models, 4 rotations for others; 2-4x the encoding '
                  'cost).', read_only=True,
                  summary='Add a float32 confidence field [0..1] to ~/flow (2-4x the encoding '
                          'cost).'),
    ParameterSpec('rotation_mean_flow', False, "Publish the mean of the ensemble's flows "
                  '(turned back) instead of the plain prediction (held-out %Pos 95.97 vs '
                  '95.12 for the default model; cost shared with publish_confidence).',
                  read_only=True,
                  summary="Publish the mean of the confidence ensemble's flows instead of the "
                          'plain prediction.'),
    ParameterSpec('diagnostics_period_s', 1.0, 'Period of /diagnostics and of the status log '
                  'line [s].', (0.1, 60.0), read_only=True, unit='s',
                  summary='Period of /diagnostics and of the status log line.'),
)


def parameter_default(name: str):
    """Return the default of parameter `name` (replay and predict share the node's)."""
    for spec in PARAMETERS:
        if spec.name == name:
            return spec.default
    raise KeyError(f'unknown parameter {name!r}')


def default_config(**overrides) -> dict:
    """Return the default parameters as a dict, with `overrides` (unknown names: KeyError)."""
    return config_of(PARAMETERS, **overrides)


def config_of(specs, **overrides) -> dict:
    """Return the defaults of `specs` as a dict, with `overrides` (unknown names: KeyError)."""
    config = {spec.name: spec.default for spec in specs}
    for name, value in overrides.items():
        if name not in config:
            raise KeyError(f'unknown parameter {name!r}; parameters: {", ".join(config)}')
        config[name] = value
    return config
