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
Textures of the 2D simulator: (S, S) log-intensity rasters in [-1, 1] (make_texture).

The kinds are listed in simulate.TEXTURES; blur() is the periodic FFT Gaussian that the
simulator also uses for the outlines of its objects.
"""

import math

import cv2
import numpy as np

TEXTURES = ('noise', 'edges', 'checker', 'polygons', 'bars', 'pink', 'gratings', 'blobs',
            'fine')


def blur(image, sigma_px):
    """Periodic Gaussian blur through the FFT (no scipy needed)."""
    fy = np.fft.fftfreq(image.shape[0])[:, None]
    fx = np.fft.rfftfreq(image.shape[1])[None, :]
    kernel = np.exp(-2.0 * (math.pi * sigma_px) ** 2 * (fx ** 2 + fy ** 2))
    return np.fft.irfft2(np.fft.rfft2(image) * kernel, s=image.shape)


def _normalise(image):
    image = image - image.mean()
    return image / max(float(np.abs(image).max()), 1e-9)


def _standardise(image):
    return (image - image.mean()) / max(float(image.std()), 1e-9)


def coords(size):
    return np.meshgrid(np.arange(size, dtype=np.float64), np.arange(size, dtype=np.float64))


def make_texture(kind, size, rng):
    """
    Return a (size, size) float32 raster in [-1, 1] of texture `kind` (one of TEXTURES).

    Every texture is finally blurred by a random optics blur (sigma 0..1.5 px; 0..0.6 px for
    'fine', whose grain would not survive more, and which keeps 15..50 % of the contrast).
    """
    xx, yy = coords(size)
    if kind == 'noise':
        # Band-limited noise, two octaves with random weights.
        sigma = rng.uniform(1.5, 6.0)
        image = _standardise(blur(rng.standard_normal((size, size)), sigma))
        image += rng.uniform(0.0, 0.7) * _standardise(blur(rng.standard_normal((size, size)),
                                                           sigma * 4))
        image = np.tanh(image / 2.5)
    elif kind == 'fine':
        # Fine-grained band-limited noise: grain of 0.5..1.5 px, so a moving texture makes
        # many events per pixel (dense scenes).
        sigma = rng.uniform(0.5, 1.5)
        image = _standardise(blur(rng.standard_normal((size, size)), sigma))
        image += rng.uniform(0.0, 0.5) * _standardise(blur(rng.standard_normal((size, size)),
                                                           sigma * 3))
        image = np.tanh(image / rng.uniform(0.8, 2.0))
    elif kind == 'edges':
        # Piecewise-constant regions cut by random straight edges.
        image = np.zeros((size, size))
        for _ in range(rng.integers(6, 20)):
            angle = rng.uniform(0, 2 * math.pi)
            offset = rng.uniform(0, size)
            side = (xx - size / 2) * math.cos(angle) + (yy - size / 2) * math.sin(angle) \
                + size / 2 - offset
            image += rng.uniform(-1, 1) * np.tanh(side / 0.7)
    elif kind == 'checker':
        cell = rng.uniform(6, 40)
        angle = rng.uniform(0, math.pi / 2)
        xr = xx * math.cos(angle) + yy * math.sin(angle)
        yr = -xx * math.sin(angle) + yy * math.cos(angle)
        image = np.tanh(np.sin(math.pi * xr / cell) / 0.15) * np.tanh(
            np.sin(math.pi * yr / cell) / 0.15)
    elif kind == 'polygons':
        image = np.full((size, size), rng.uniform(-1, 1))
        for _ in range(int(rng.uniform(0.5, 2.0) * size * size / 2000)):
            centre = rng.uniform(0, size, 2)
            radius = rng.uniform(4, max(size / 8, 6))
            angles = np.sort(rng.uniform(0, 2 * math.pi, rng.integers(3, 8)))
            radii = radius * rng.uniform(0.5, 1.0, len(angles))
            poly = np.stack([centre[0] + radii * np.cos(angles),
                             centre[1] + radii * np.sin(angles)], 1)
            cv2.fillPoly(image, [np.round(poly * 16).astype(np.int32)], rng.uniform(-1, 1),
                         lineType=cv2.LINE_8, shift=4)
        image = blur(image, 0.6)
    elif kind == 'bars':
        # Parallel bars of random widths and intensities (not periodic).
        angle = rng.uniform(0, math.pi)
        along = xx * math.cos(angle) + yy * math.sin(angle)
        widths = rng.uniform(2, 30, int(3 * size / 2) + 2)
        boundaries = np.cumsum(widths) - size
        values = rng.uniform(-1, 1, len(boundaries) + 1)
        image = blur(values[np.searchsorted(boundaries, along)], 0.6)
    elif kind == 'pink':
        # 1/f^beta noise, like natural images.
        beta = rng.uniform(0.8, 1.6)
        fy = np.fft.fftfreq(size)[:, None]
        fx = np.fft.rfftfreq(size)[None, :]
        spectrum = np.maximum(np.hypot(fx, fy), 1.0 / size) ** -beta
        white = np.fft.rfft2(rng.standard_normal((size, size)))
        image = np.tanh(_standardise(np.fft.irfft2(white * spectrum, s=(size, size)))
                        * rng.uniform(0.5, 2.0))
    elif kind == 'gratings':
        image = np.zeros((size, size))
        for _ in range(rng.integers(1, 3)):
            period = rng.uniform(6, 40)
            angle = rng.uniform(0, math.pi)
            phase = 2 * math.pi * (xx * math.cos(angle) + yy * math.sin(angle)) / period
            square = rng.uniform() < 0.5
            image += np.tanh(np.sin(phase) / 0.2) if square else np.sin(phase)
    elif kind == 'blobs':
        image = np.zeros((size, size))
        for _ in range(int(rng.uniform(0.5, 2.0) * size * size / 1000)):
            centre = rng.uniform(0, size, 2)
            axes = rng.uniform(2, max(size / 12, 4), 2)
            cv2.ellipse(image, (int(centre[0] * 16), int(centre[1] * 16)),
                        (int(axes[0] * 16), int(axes[1] * 16)), rng.uniform(0, 180), 0, 360,
                        rng.uniform(-1, 1), thickness=-1, lineType=cv2.LINE_8, shift=4)
        image = blur(image, 0.6)
    else:
        raise ValueError(f'unknown texture {kind!r}; choose one of {", ".join(TEXTURES)}')
    optics_sigma = rng.uniform(0.0, 0.6 if kind == 'fine' else 1.5)
    if optics_sigma > 0.1:
        image = blur(image, optics_sigma)
    image = _normalise(image)
    if kind == 'fine':
        # Optics pass fine grain at a fraction of the contrast of coarse structure; at full
        # contrast a 1 px grain moving at 2000 px/s makes thousands of events per pixel and
        # second, beyond a real sensor's bandwidth.
        image *= rng.uniform(0.15, 0.5)
    return image.astype(np.float32)
