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
The egomotion estimator's per-pixel table, built in blocks of rows (bounded memory).

One row of 8 float32 per pixel (32 bytes): the undistorted normalized coordinates x, y,
M^T = J^T K2^T (4: the distortion Jacobian J at the pixel times the upper 2x2 of K,
transposed), its depth cell and its time-to-contact region (docs/egomotion.md). Built at
once, the float64 intermediates of the undistortion and the Jacobian took ~210 bytes per
pixel (872 MB at 2048 x 2048); block by block they take ~250 bytes per pixel of one block
(BLOCK_PIXELS) beside the 32 of the table.

The table lies on transparent huge pages where Linux offers them (huge_page_empty): a paced
window looks up a few thousand rows scattered over MBs of table, and with 4 KiB pages each
row also misses the TLB (2.9 MB of a 346 x 260 table are ~700 pages, ~2 huge pages).
"""

import mmap

import numpy as np

# Pixels per block of rows: ~16 MB of temporaries.
BLOCK_PIXELS = 1 << 16
# The huge page size of x86-64 and of aarch64 with 4 KiB pages.
HUGE_PAGE_BYTES = 2 << 20


def huge_page_empty(shape, dtype) -> np.ndarray:
    """
    np.empty(shape, dtype) aligned to HUGE_PAGE_BYTES on memory advised as huge pages.

    Where the OS offers no madvise(MADV_HUGEPAGE) (not Linux, or an mmap that refuses it), or
    the array is under half a huge page, a plain np.empty. The kernel backs the advised
    memory with huge pages when its transparent_hugepage setting is `madvise` or `always`
    and it finds free huge pages; otherwise with small ones (the same array, no error).
    The mapping spans the array rounded up to whole huge pages plus one for the alignment:
    untouched pages take no memory.
    """
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    advice = getattr(mmap, 'MADV_HUGEPAGE', None)
    if advice is None or nbytes < HUGE_PAGE_BYTES // 2:
        return np.empty(shape, dtype)
    try:
        # Private: shared anonymous memory is shmem, whose huge pages are a separate setting.
        buffer = mmap.mmap(-1, -(-nbytes // HUGE_PAGE_BYTES) * HUGE_PAGE_BYTES
                           + HUGE_PAGE_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        buffer.madvise(advice)
    except (OSError, ValueError):
        return np.empty(shape, dtype)
    raw = np.frombuffer(buffer, np.uint8)
    start = -raw.ctypes.data % HUGE_PAGE_BYTES
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def build_pixel_map(camera, cell_px: int, ttc_grid, block_pixels: int = BLOCK_PIXELS):
    """
    Return (table, num_cells) of a camera, built in blocks of block_pixels.

    table: (height * width, 8) float32 in row-major pixel order (x, y, M^T (4), cell,
    region); num_cells: the depth cells of cell_px (a pixel without normalized coordinates
    has cell num_cells); ttc_grid: (rows, cols) of the time-to-contact regions.
    """
    width, height = camera.width, camera.height
    cols = -(-width // cell_px)
    num_cells = cols * -(-height // cell_px)
    rows_ttc, cols_ttc = ttc_grid
    k2 = camera.K[:2, :2]
    table = huge_page_empty((width * height, 8), np.float32)
    step = max(1, block_pixels // width)
    for row0 in range(0, height, step):
        rows = slice(row0, min(row0 + step, height))
        x, y = camera.pixel_grid_normalized(rows)
        jac = camera.distortion_jacobian(np.nan_to_num(x), np.nan_to_num(y))
        mt = np.einsum('...ji,kj->...ik', jac, k2).reshape(-1, 4)  # J^T K2^T
        yi, xi = np.divmod(np.arange(rows.start * width, rows.stop * width), width)
        valid = np.isfinite(x.reshape(-1)) & np.isfinite(y.reshape(-1))
        cell = np.where(valid, (yi // cell_px) * cols + xi // cell_px, num_cells)
        region = ((yi * rows_ttc) // height) * cols_ttc + (xi * cols_ttc) // width
        block = table[rows.start * width:rows.stop * width]
        block[:, 0], block[:, 1] = x.reshape(-1), y.reshape(-1)
        block[:, 2:6] = mt
        block[:, 6], block[:, 7] = cell, region
    return table, num_cells
