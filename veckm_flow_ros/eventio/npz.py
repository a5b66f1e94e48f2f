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

"""Events stored in .npz files (t, x, y[, p, width, height]), read by `veckm-flow predict`."""

import pathlib
from typing import Tuple

import numpy as np

from veckm_flow_ros.eventio.events import EventArray


def load_events(path) -> Tuple[EventArray, int, int, str]:
    """
    Read an events .npz; return (EventArray, width, height, time unit description).

    The file holds t (float seconds or integer nanoseconds, told apart by dtype), x, y (pixel
    coordinates in 0..65535), optional p, and optional width and height (else max + 1). Raises
    FileNotFoundError for a missing file and ValueError, naming the file and the array, for
    anything it cannot use.
    """
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f'events file {path} does not exist')
    try:
        with np.load(path, allow_pickle=False) as archive:
            data = {name: archive[name] for name in archive.files}
    except (OSError, ValueError) as error:
        raise ValueError(f'{path}: not a readable .npz ({error})') from None
    missing = [name for name in ('t', 'x', 'y') if name not in data]
    if missing:
        raise ValueError(f'{path}: missing arrays {missing} (needs t, x, y)')
    t, x, y = data['t'], data['x'], data['y']
    if not (len(t) == len(x) == len(y)):
        raise ValueError(f'{path}: t, x, y differ in length ({len(t)}, {len(x)}, {len(y)})')
    if np.issubdtype(t.dtype, np.floating):
        if not np.isfinite(t).all():
            raise ValueError(f'{path}: t holds NaN/Inf values')
        t_ns = np.round(t.astype(np.float64) * 1e9).astype(np.int64)
        unit = f'float seconds ({t.dtype})'
    elif np.issubdtype(t.dtype, np.integer):
        t_ns = t.astype(np.int64)
        unit = f'integer nanoseconds ({t.dtype})'
    else:
        raise ValueError(f'{path}: t has dtype {t.dtype}; expected float64 s or int64 ns')
    for name, values in (('x', x), ('y', y)):
        if not (np.issubdtype(values.dtype, np.integer)
                or np.issubdtype(values.dtype, np.floating)):
            raise ValueError(f'{path}: {name} has dtype {values.dtype}; expected integers')
        if len(values) and (values.min() < 0 or values.max() > 65535):
            raise ValueError(f'{path}: {name} must be pixel coordinates in [0, 65535], found '
                             f'[{values.min()}, {values.max()}]')
    x = np.round(x).astype(np.uint16)
    y = np.round(y).astype(np.uint16)
    p = data['p'].astype(np.uint8) if 'p' in data else np.zeros(len(t), np.uint8)
    width = int(data['width']) if 'width' in data else int(x.max()) + 1 if len(x) else 1
    height = int(data['height']) if 'height' in data else int(y.max()) + 1 if len(y) else 1
    if len(t_ns) > 1 and (np.diff(t_ns) < 0).any():
        raise ValueError(f'{path}: t is not sorted in time; sort the events first')
    return EventArray(t_ns, x, y, p), width, height, unit
