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
Arrays in .npz / .npy files, read without pickles, and events stored in them.

read_npz and read_npy are the one way the package reads these files (model checkpoints,
`veckm-flow predict` events, evaluation sequences): a file that is not an npz / npy, a
truncated or corrupt one, or one holding pickled objects gives a ValueError naming the file,
never numpy's own exception. event_times_ns is the one rule for per-event times read from
files: float seconds or integer nanoseconds, finite, in time order (unsorted times are
rejected with the first out-of-order index, never sorted silently).
"""

import pathlib
from typing import Tuple
import zipfile
import zlib

import numpy as np

from veckm_flow_ros.eventio.events import EventArray

# What np.load raises for a damaged file: a truncated zip, a bad CRC, a cut-off array.
READ_ERRORS = (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error)
ZIP_MAGIC = (b'PK\x03\x04', b'PK\x05\x06')  # a zip with members, an empty zip
NPY_MAGIC = (b'\x93NUMPY',)
# The encoder's bound on the sensor (csrc/encode.cpp: width * height <= 2^30 pixels).
MAX_SENSOR_PIXELS = 1 << 30
MAX_SENSOR_SIDE = 65536
# Float seconds beyond this overflow int64 nanoseconds.
MAX_ABS_TIME_S = 9.2e9


def npz_path(path) -> pathlib.Path:
    """Return `path` with the .npz suffix numpy appends when saving (the name really written)."""
    path = pathlib.Path(path)
    return path if path.suffix == '.npz' else path.with_name(path.name + '.npz')


def read_npz(path, what: str = '.npz file') -> dict:
    """
    Read every array of a .npz file into a dict (no pickled objects are ever loaded).

    what: what the file should be, for messages ('model checkpoint', ...). Raises
    FileNotFoundError for a missing file and ValueError, naming the file and saying what is
    wrong, for a file that is not a readable npz.
    """
    path = _check_magic(path, what, ZIP_MAGIC, '.npz (a zip archive of arrays)')
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except READ_ERRORS as error:
        raise ValueError(_read_failure(path, what, error)) from None


def read_npy(path, what: str = '.npy file') -> np.ndarray:
    """Read one array from a .npy file; errors as read_npz."""
    path = _check_magic(path, what, NPY_MAGIC, '.npy array')
    try:
        return np.load(path, allow_pickle=False)
    except READ_ERRORS as error:
        raise ValueError(_read_failure(path, what, error)) from None


def _check_magic(path, what, magic, kind) -> pathlib.Path:
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f'{what} {path} does not exist'
                                + (' (it is a directory)' if path.is_dir() else ''))
    with open(path, 'rb') as stream:
        head = stream.read(8)
    if not head:
        raise ValueError(f'{path}: not a readable {what}: the file is empty (0 bytes); write '
                         'it again')
    if not any(head.startswith(prefix) for prefix in magic):
        raise ValueError(f'{path}: not a readable {what}: not a {kind}, it starts with bytes '
                         f'{head[:4]!r}; pass a file written by numpy or this package')
    return path


def _read_failure(path, what, error) -> str:
    if 'allow_pickle' in str(error):
        return (f'{path}: not a readable {what}: it holds pickled Python objects, which are '
                'never loaded (data only); save plain numeric arrays')
    return (f'{path}: not a readable {what}: truncated or corrupt ({type(error).__name__}: '
            f'{error}); write or copy it again')


def event_times_ns(t: np.ndarray, where: str) -> Tuple[np.ndarray, str]:
    """
    Return (int64 ns, unit description) of per-event times read from a file.

    t: 1-D float seconds or integer nanoseconds (told apart by dtype). Raises ValueError,
    naming `where`, for another shape or dtype, NaN/Inf, times out of the int64 ns range, and
    times out of order (the first out-of-order index is named; sort the events first).
    """
    t = np.asarray(t)
    if t.ndim != 1:
        raise ValueError(f'{where}: t must be a 1-D array of event times, got shape {t.shape}')
    if np.issubdtype(t.dtype, np.floating):
        _check_finite(where, 't', t, 'a time')
        if len(t) and np.abs(t).max() > MAX_ABS_TIME_S:
            raise ValueError(f'{where}: t reaches {np.abs(t).max():g} s, beyond the int64 '
                             f'nanosecond range (|t| <= {MAX_ABS_TIME_S:g} s)')
        t_ns = np.round(t.astype(np.float64) * 1e9).astype(np.int64)
        unit = f'float seconds ({t.dtype})'
    elif np.issubdtype(t.dtype, np.integer):
        if len(t) and int(t.max()) > np.iinfo(np.int64).max:  # uint64
            raise ValueError(f'{where}: t reaches {int(t.max())} ns, beyond int64 nanoseconds')
        t_ns = t.astype(np.int64)
        unit = f'integer nanoseconds ({t.dtype})'
    else:
        raise ValueError(f'{where}: t has dtype {t.dtype}; expected float seconds or integer '
                         'nanoseconds')
    backwards = np.flatnonzero(t_ns[1:] < t_ns[:-1])
    if len(backwards):
        index = int(backwards[0]) + 1
        raise ValueError(f'{where}: t is not in time order: event {index} ({t_ns[index]} ns) '
                         f'is older than event {index - 1} ({t_ns[index - 1]} ns), '
                         f'{len(backwards)} such steps; sort the events by time first')
    return t_ns, unit


def load_events(path) -> Tuple[EventArray, int, int, str]:
    """
    Read an events .npz; return (EventArray, width, height, time unit description).

    The file holds t (float seconds or integer nanoseconds, told apart by dtype; finite, in
    time order), x, y (pixel coordinates in 0..65535), optional p, and optional width and
    height (integers, else max + 1; width * height <= 2^30). Raises FileNotFoundError for a
    missing file and ValueError, naming the file and the array, for anything it cannot use.
    """
    path = pathlib.Path(path)
    data = read_npz(path, 'events file')
    missing = [name for name in ('t', 'x', 'y') if name not in data]
    if missing:
        raise ValueError(f'{path}: missing arrays {missing} (needs t, x, y)')
    columns = {name: data[name] for name in ('t', 'x', 'y', 'p') if name in data}
    for name, values in columns.items():
        if values.ndim != 1:
            raise ValueError(f'{path}: {name} must be a 1-D array (one value per event), got '
                             f'shape {values.shape}')
    lengths = {name: len(values) for name, values in columns.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f'{path}: the event arrays differ in length ({lengths})')
    t_ns, unit = event_times_ns(data['t'], str(path))
    x, y = (_pixels(path, name, data[name]) for name in ('x', 'y'))
    p = data['p'].astype(np.uint8) if 'p' in data else np.zeros(len(t_ns), np.uint8)
    width = _sensor_side(path, 'width', data.get('width'), x)
    height = _sensor_side(path, 'height', data.get('height'), y)
    if width * height > MAX_SENSOR_PIXELS:
        raise ValueError(f'{path}: sensor {width}x{height} has {width * height} pixels, more '
                         f'than the encoder handles (2^30 = {MAX_SENSOR_PIXELS}); check width '
                         'and height')
    return EventArray(t_ns, x, y, p), width, height, unit


def _check_finite(where, name, values, needs):
    """Raise ValueError naming the count and the first index of NaN/Inf in `values`."""
    finite = np.isfinite(values)
    if not finite.all():
        index = int(np.argmin(finite))
        raise ValueError(f'{where}: {name} holds {int(np.count_nonzero(~finite))} NaN/Inf '
                         f'values (the first at index {index}); every event needs {needs}')


def _pixels(path, name, values) -> np.ndarray:
    """Return pixel coordinates (integers or integer-valued floats) as uint16."""
    if not (np.issubdtype(values.dtype, np.integer) or np.issubdtype(values.dtype, np.floating)):
        raise ValueError(f'{path}: {name} has dtype {values.dtype}; expected integers')
    if np.issubdtype(values.dtype, np.floating):
        _check_finite(path, name, values, 'a pixel')
    if len(values) and (values.min() < 0 or values.max() > MAX_SENSOR_SIDE - 1):
        raise ValueError(f'{path}: {name} must be pixel coordinates in [0, '
                         f'{MAX_SENSOR_SIDE - 1}], found [{values.min()}, {values.max()}]')
    return np.round(values).astype(np.uint16)


def _sensor_side(path, name, value, pixels) -> int:
    """Return the width or height stored in the file (one integer), else max pixel + 1."""
    if value is None:
        return int(pixels.max()) + 1 if len(pixels) else 1
    whole = value.ndim == 0 and (np.issubdtype(value.dtype, np.integer) or (
        np.issubdtype(value.dtype, np.floating) and np.isfinite(value) and value == round(value)))
    if not whole or not 1 <= int(value) <= MAX_SENSOR_SIDE:
        shown = value.tolist() if value.size <= 4 else f'an array of shape {value.shape}'
        raise ValueError(f'{path}: {name} must be one integer in [1, {MAX_SENSOR_SIDE}] '
                         f'(pixels), got {shown}')
    return int(value)
