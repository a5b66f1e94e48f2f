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
A VecKM normal-flow model: encoding frequencies, MLP weights, and how to load and save them.

Three sources, one class (`VecKMFlowModel`):

- our own checkpoints: a `.npz` with the arrays below plus a JSON `config` string, read with
  `allow_pickle=False` (checkpoints are data, never code);
- the published VecKM_flow_cpp text folders `<W>x<H>_<slice ms>ms_C<D>_k<r>` (At/Ax/Ay/w1/w2/w3
  .txt, CC BY-NC: loaded from a user path, never bundled);
- the models shipped with the package in `veckm_flow_ros/models/<name>.npz`.

Every loader checks shapes, finiteness and parameters, and raises `ModelError` with a message
that says what is wrong and where.
"""

import dataclasses
import functools
import json
import math
import os
import pathlib
import re
from typing import Optional, Union

import numpy as np
import torch

from veckm_flow_ros.eventio.npz import npz_path, read_npz

MODELS_DIR = pathlib.Path(__file__).resolve().parents[1] / 'models'
# A text file in MODELS_DIR naming the default model; without it a lone shipped model is used.
DEFAULT_MODEL_FILE = 'DEFAULT'
CHECKPOINT_FORMAT = 'veckm_flow_ros.checkpoint'
CHECKPOINT_VERSION = 1
PUBLISHED_WEIGHT_FILES = ('At.txt', 'Ax.txt', 'Ay.txt', 'w1.txt', 'w2.txt', 'w3.txt')
PUBLISHED_FOLDER_PATTERN = re.compile(
    r'^(?P<width>\d+)x(?P<height>\d+)_(?P<slice_ms>\d+(?:\.\d+)?)ms_C(?P<features>\d+)'
    r'_k(?P<radius>\d+)$')
# The published MLP predicts pixels per 1/60 s.
PUBLISHED_FLOW_SCALE_PX_S = 60.0
MAX_PIXEL_RADIUS = 64
# tau bounds [s]: the automatic block (2 tau) must fit the estimator's longest block (1 s);
# event-camera models use milliseconds (the shipped ones 12 and 16 ms).
MIN_TAU_S = 1e-6
MAX_TAU_S = 0.5


class ModelError(ValueError):
    """A checkpoint or model is missing, malformed or inconsistent."""


@dataclasses.dataclass
class VecKMFlowModel:
    """
    Encoding parameters and MLP weights of one normal-flow model.

    Fields:
        num_features: D, the number of complex features (64 for the published models).
        pixel_radius: r; the context window is (2r+1) x (2r+1) pixels.
        tau_s: t_radius in seconds (half the time slice the model was trained on).
        freq_t, freq_x, freq_y: float32 tensors [D], the fixed random frequencies T, X, Y.
        w1 [2D, H], w2 [H, H], w3 [H, 2]: float32 MLP weights, no biases:
            flow = relu(relu(X @ w1) @ w2) @ w3 with X = concat(Re f, Im f).
        flow_scale_px_s: MLP output times this is flow in px/s (60 for the published weights).
        metadata: free-form provenance (name, trained_sensor_size, output_unit, training recipe).
    """

    num_features: int
    pixel_radius: int
    tau_s: float
    freq_t: torch.Tensor
    freq_x: torch.Tensor
    freq_y: torch.Tensor
    w1: torch.Tensor
    w2: torch.Tensor
    w3: torch.Tensor
    flow_scale_px_s: float
    metadata: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        for name in ('freq_t', 'freq_x', 'freq_y', 'w1', 'w2', 'w3'):
            value = getattr(self, name)
            if not isinstance(value, torch.Tensor):
                value = torch.as_tensor(np.asarray(value))
            setattr(self, name, value.detach().to(torch.float32).contiguous())
        self.metadata = dict(self.metadata or {})
        self.validate()

    @property
    def name(self) -> str:
        return str(self.metadata.get('name', 'unnamed'))

    @functools.cached_property
    def equivariance(self) -> str:
        """'d4', 'c4' or 'none': the symmetry group the model is exactly equivariant to."""
        from veckm_flow_ros.core.symmetry import model_equivariance
        return model_equivariance(self)

    @property
    def hidden_size(self) -> int:
        return int(self.w1.shape[1])

    def validate(self):
        """Raise ModelError if shapes, values or parameters are inconsistent."""
        where = f'model {self.name!r}'
        if 'path' in self.metadata:  # a loaded file: name it
            where += f' ({self.metadata["path"]})'
        d = self.num_features
        if not isinstance(d, (int, np.integer)) or d <= 0:
            raise ModelError(f'{where}: num_features must be a positive integer, got {d!r}')
        if (not isinstance(self.pixel_radius, (int, np.integer))
                or isinstance(self.pixel_radius, bool)
                or not 1 <= self.pixel_radius <= MAX_PIXEL_RADIUS):
            raise ModelError(f'{where}: pixel_radius must be an integer in [1, '
                             f'{MAX_PIXEL_RADIUS}], got {self.pixel_radius!r}')
        if not (isinstance(self.tau_s, (int, float)) and not isinstance(self.tau_s, bool)
                and math.isfinite(self.tau_s) and MIN_TAU_S <= self.tau_s <= MAX_TAU_S):
            raise ModelError(f'{where}: tau_s must be a time in seconds in [{MIN_TAU_S:g}, '
                             f'{MAX_TAU_S:g}] (tau = {MIN_TAU_S * 1e3:g} to '
                             f'{MAX_TAU_S * 1e3:g} ms), got {self.tau_s!r}')
        if not (isinstance(self.flow_scale_px_s, (int, float))
                and math.isfinite(self.flow_scale_px_s) and self.flow_scale_px_s > 0):
            raise ModelError(f'{where}: flow_scale_px_s must be a positive number, '
                             f'got {self.flow_scale_px_s!r}')
        for name in ('freq_t', 'freq_x', 'freq_y'):
            _check_shape(where, name, getattr(self, name), (d,))
        hidden = self.w1.shape[1] if self.w1.dim() == 2 else -1
        _check_shape(where, 'w1', self.w1, (2 * d, hidden))
        _check_shape(where, 'w2', self.w2, (hidden, hidden))
        _check_shape(where, 'w3', self.w3, (hidden, 2))
        for name in ('freq_t', 'freq_x', 'freq_y', 'w1', 'w2', 'w3'):
            value = getattr(self, name)
            if not bool(torch.isfinite(value).all()):
                bad = int((~torch.isfinite(value)).sum())
                raise ModelError(f'{where}: {name} holds {bad} NaN/Inf values')

    def to(self, device: Union[str, torch.device]) -> 'VecKMFlowModel':
        """Return a copy with all tensors on `device` (the same object if already there)."""
        device = torch.device(device)
        if self.w1.device == device:
            return self
        tensors = {name: getattr(self, name).to(device)
                   for name in ('freq_t', 'freq_x', 'freq_y', 'w1', 'w2', 'w3')}
        return dataclasses.replace(self, **tensors)

    def predict_flow_px_s(self, features: torch.Tensor) -> torch.Tensor:
        """
        Run the MLP on encoded features and scale to px/s.

        features: float32 [M, 2D] (Re f then Im f). Returns float32 [M, 2] (u, v) in px/s,
        image axes (x right, y down).
        """
        from veckm_flow_ros import ops
        if features.device.type == 'cpu' and self.c4_fourier_blocks is not None:
            blocks, groups = self.c4_fourier_blocks
            return ops.flow_mlp_c4(features, blocks, self.w3, groups, self.flow_scale_px_s)
        return ops.flow_mlp(features, self.w1, self.w2, self.w3, self.flow_scale_px_s)

    @functools.cached_property
    def c4_fourier_blocks(self):
        """
        Return the C4 Fourier form of the MLP (symmetry.c4_fourier_blocks), or None.

        Used on the CPU for 'c4' models: the same flows with 6/16 of the multiply-adds.
        VECKM_FLOW_MLP=dense (or =blas) in the environment keeps the dense kernel.
        """
        if os.environ.get('VECKM_FLOW_MLP') in ('dense', 'blas'):
            return None
        from veckm_flow_ros import ops
        if not ops.has_flow_mlp_c4():
            return None
        from veckm_flow_ros.core.symmetry import c4_fourier_blocks
        return c4_fourier_blocks(self)


def _check_shape(where, name, tensor, expected):
    found = tuple(tensor.shape)
    if len(found) != len(expected) or any(e >= 0 and f != e for f, e in zip(found, expected)):
        shown = tuple('H' if e < 0 else e for e in expected)
        raise ModelError(f'{where}: {name} must have shape {shown}, found {found}')
    if 0 in found:
        raise ModelError(f'{where}: {name} is empty (shape {found})')


def list_shipped_models() -> list:
    """Names of the models shipped in veckm_flow_ros/models/ (load them with load_model(name))."""
    if not MODELS_DIR.is_dir():
        return []
    return sorted(path.stem for path in MODELS_DIR.glob('*.npz'))


def default_model_name() -> str:
    """Name of the shipped default model; ModelError when none is installed."""
    names = list_shipped_models()
    marker = MODELS_DIR / DEFAULT_MODEL_FILE
    if marker.is_file():
        name = marker.read_text().strip()
        if name not in names:
            raise ModelError(f'{marker} names the default model {name!r}, but '
                             f'{MODELS_DIR} holds only {names or "no models"}')
        return name
    if len(names) == 1:
        return names[0]
    if not names:
        raise ModelError(
            f'no shipped model is installed yet in {MODELS_DIR}; pass a checkpoint (.npz) or a '
            'published VecKM_flow_cpp folder (e.g. .../640x480_24ms_C64_k8) as the model path')
    raise ModelError(f'{MODELS_DIR} holds several models {names} and no {DEFAULT_MODEL_FILE} '
                     'file naming the default; pass the model name explicitly')


def load_model(path_or_name: Optional[Union[str, os.PathLike]] = None, *,
               pixel_radius: Optional[int] = None, tau_s: Optional[float] = None,
               flow_scale_px_s: Optional[float] = None) -> VecKMFlowModel:
    """
    Load a model from a checkpoint, a published folder or a shipped name.

    path_or_name: None (the package default shipped model), a directory holding the published
    VecKM_flow_cpp text files, a `.npz` checkpoint written by save_model, or the bare name of
    a shipped model (see list_shipped_models()). The keyword overrides replace the values
    found in (or, for published folders, parsed from the name of) the checkpoint.
    """
    if path_or_name is None:
        path = MODELS_DIR / (default_model_name() + '.npz')
    else:
        path = pathlib.Path(path_or_name).expanduser()
        if not path.exists() and path.suffix == '' and os.sep not in str(path_or_name):
            shipped = MODELS_DIR / (str(path_or_name) + '.npz')
            if not shipped.is_file():
                raise ModelError(
                    f'model {str(path_or_name)!r} is neither an existing path nor a shipped '
                    f'model (shipped: {list_shipped_models() or "none"})')
            path = shipped
    if path.is_dir():
        model = load_published_model(path, pixel_radius=pixel_radius, tau_s=tau_s,
                                     flow_scale_px_s=flow_scale_px_s)
        return model
    if not path.is_file():
        raise ModelError(f'model file {path} does not exist')
    if path.suffix != '.npz':
        raise ModelError(f'{path}: unknown model format (expected a .npz checkpoint or a '
                         'published VecKM_flow_cpp folder)')
    model = _load_checkpoint(path)
    overrides = {key: value for key, value in (
        ('pixel_radius', pixel_radius), ('tau_s', tau_s), ('flow_scale_px_s', flow_scale_px_s))
        if value is not None}
    if overrides:
        model = dataclasses.replace(model, **overrides)
    return model


def load_published_model(directory: Union[str, os.PathLike], *,
                         pixel_radius: Optional[int] = None, tau_s: Optional[float] = None,
                         flow_scale_px_s: Optional[float] = None) -> VecKMFlowModel:
    """
    Parse a published VecKM_flow_cpp model folder (six text files of numbers).

    tau_s (half the slice) and pixel_radius come from the folder name
    `<W>x<H>_<slice ms>ms_C<D>_k<r>` unless given; a folder with another name needs both.
    """
    directory = pathlib.Path(directory)
    match = PUBLISHED_FOLDER_PATTERN.match(directory.name)
    if match is None and (pixel_radius is None or tau_s is None):
        raise ModelError(
            f'{directory}: folder name does not match <W>x<H>_<slice ms>ms_C<D>_k<r> '
            '(e.g. 640x480_24ms_C64_k8); pass pixel_radius and tau_s explicitly')
    missing = [name for name in PUBLISHED_WEIGHT_FILES if not (directory / name).is_file()]
    if missing:
        raise ModelError(f'{directory}: missing weight files {missing} '
                         f'(expected {list(PUBLISHED_WEIGHT_FILES)})')
    arrays = {}
    for name in PUBLISHED_WEIGHT_FILES:
        try:
            arrays[name[:-4]] = np.loadtxt(directory / name, dtype=np.float64, ndmin=1)
        except ValueError as error:
            raise ModelError(f'{directory / name}: not a list of numbers ({error})') from None
    d = arrays['At'].size
    if match is not None and int(match['features']) != d:
        raise ModelError(f'{directory}: folder name says C{match["features"]} but At.txt '
                         f'holds {d} frequencies')
    for name in ('Ax', 'Ay'):
        if arrays[name].size != d:
            raise ModelError(f'{directory}: {name}.txt holds {arrays[name].size} values, '
                             f'At.txt holds {d}; all three must hold D values')
    expected = {'w1': (2 * d) * (2 * d), 'w2': (2 * d) * (2 * d), 'w3': (2 * d) * 2}
    for name, size in expected.items():
        if arrays[name].size != size:
            raise ModelError(f'{directory}: {name}.txt holds {arrays[name].size} values, '
                             f'expected {size} for D = {d}')
    metadata = {
        'name': directory.name,
        'source': 'VecKM_flow_cpp published weights (CC BY-NC 4.0, not bundled)',
        'path': str(directory.resolve()),
        'output_unit': 'px/s (MLP output in px per 1/60 s, times flow_scale_px_s)',
    }
    if match is not None:
        metadata['trained_sensor_size'] = [int(match['width']), int(match['height'])]
        metadata['slice_ms'] = float(match['slice_ms'])
    return VecKMFlowModel(
        num_features=d,
        pixel_radius=int(pixel_radius if pixel_radius is not None else match['radius']),
        tau_s=float(tau_s if tau_s is not None else float(match['slice_ms']) / 2000.0),
        freq_t=torch.from_numpy(arrays['At']),
        freq_x=torch.from_numpy(arrays['Ax']),
        freq_y=torch.from_numpy(arrays['Ay']),
        # Row-major (2D, 2D) as written by the reference code: no transpose.
        w1=torch.from_numpy(arrays['w1'].reshape(2 * d, 2 * d)),
        w2=torch.from_numpy(arrays['w2'].reshape(2 * d, 2 * d)),
        w3=torch.from_numpy(arrays['w3'].reshape(2 * d, 2)),
        flow_scale_px_s=float(flow_scale_px_s if flow_scale_px_s is not None
                              else PUBLISHED_FLOW_SCALE_PX_S),
        metadata=metadata,
    )


def save_model(model: VecKMFlowModel, path: Union[str, os.PathLike]) -> pathlib.Path:
    """
    Write `model` as a self-describing `.npz` checkpoint (arrays + JSON config).

    Returns the path written (`.npz` appended when missing).
    """
    model.validate()
    path = npz_path(path)
    config = {
        'format': CHECKPOINT_FORMAT,
        'version': CHECKPOINT_VERSION,
        'num_features': int(model.num_features),
        'pixel_radius': int(model.pixel_radius),
        'tau_s': float(model.tau_s),
        'flow_scale_px_s': float(model.flow_scale_px_s),
        'metadata': model.metadata,
    }
    try:
        config_json = json.dumps(config)
    except TypeError as error:
        raise ModelError(f'model metadata must be JSON-serialisable: {error}') from None
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {name: getattr(model, name).detach().cpu().numpy()
              for name in ('freq_t', 'freq_x', 'freq_y', 'w1', 'w2', 'w3')}
    with open(path, 'wb') as stream:
        np.savez(stream, config=np.array(config_json), **arrays)
    return path


def _load_checkpoint(path: pathlib.Path) -> VecKMFlowModel:
    try:
        contents = read_npz(path, 'model checkpoint')
    except ValueError as error:
        raise ModelError(str(error)) from None
    names = ('config', 'freq_t', 'freq_x', 'freq_y', 'w1', 'w2', 'w3')
    missing = [name for name in names if name not in contents]
    if missing:
        raise ModelError(f'{path}: checkpoint lacks arrays {missing}')
    try:
        config = json.loads(str(contents['config']))
    except ValueError as error:
        raise ModelError(f'{path}: config is not valid JSON ({error})') from None
    if not isinstance(config, dict) or config.get('format') != CHECKPOINT_FORMAT:
        raise ModelError(f'{path}: not a {CHECKPOINT_FORMAT} file')
    if config.get('version') != CHECKPOINT_VERSION:
        raise ModelError(f'{path}: checkpoint version {config.get("version")!r} is not '
                         f'supported (this package reads version {CHECKPOINT_VERSION})')
    for key in ('num_features', 'pixel_radius', 'tau_s', 'flow_scale_px_s'):
        if key not in config:
            raise ModelError(f'{path}: config lacks {key!r}')
    for name in names[1:]:
        if not np.issubdtype(contents[name].dtype, np.floating):
            raise ModelError(f'{path}: {name} has dtype {contents[name].dtype}, expected float')
    metadata = dict(config.get('metadata') or {})
    metadata.setdefault('name', path.stem)
    metadata['path'] = str(path.resolve())
    return VecKMFlowModel(
        num_features=config['num_features'],
        pixel_radius=config['pixel_radius'],
        tau_s=config['tau_s'],
        freq_t=torch.from_numpy(contents['freq_t']),
        freq_x=torch.from_numpy(contents['freq_x']),
        freq_y=torch.from_numpy(contents['freq_y']),
        w1=torch.from_numpy(contents['w1']),
        w2=torch.from_numpy(contents['w2']),
        w3=torch.from_numpy(contents['w3']),
        flow_scale_px_s=config['flow_scale_px_s'],
        metadata=metadata,
    )
