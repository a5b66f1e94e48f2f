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
Events to a device in one host->device copy: packed, through pinned staging buffers.

A batch of events (t_ns int64, x, y) is packed into one byte buffer: the times as int32
offsets from the batch's first time when its span allows (exact: 8 bytes an event instead of
16), else as int64 (12 bytes), then the coordinates as 16-bit values. On a CUDA device the
buffer is pinned host memory and the copy is asynchronous (no host synchronisation); two
staging buffers alternate, and a buffer is refilled only once its previous copy has finished.
On the CPU the same packing and unpacking run without a copy, so the CPU tests exercise the
code the GPU runs.
"""

from typing import Tuple

import numpy as np
import torch

# The largest span of a batch whose times travel as int32 offsets [ns] (about 2.1 s).
MAX_INT32_SPAN_NS = 2**31 - 1


def pack_events(t_ns: np.ndarray, x: np.ndarray, y: np.ndarray, out: np.ndarray
                ) -> Tuple[int, bool, int]:
    """
    Pack events into the uint8 buffer `out`; return (bytes used, int32 times?, base t_ns).

    t_ns int64 [N] ns (time order not required); x, y [N] in [0, 65535]; out: uint8, at least
    packed_bytes(N) long. Layout: times (int32 offsets from base, or int64 absolute), then x,
    then y as uint16.
    """
    count = len(t_ns)
    base = int(t_ns.min()) if count else 0
    narrow = count == 0 or int(t_ns.max()) - base <= MAX_INT32_SPAN_NS
    time_bytes = 4 * count if narrow else 8 * count
    if narrow:
        np.subtract(t_ns, base, out=out[:time_bytes].view(np.int32), casting='unsafe')
    else:
        out[:time_bytes].view(np.int64)[:] = t_ns
    out[time_bytes:time_bytes + 2 * count].view(np.uint16)[:] = x
    out[time_bytes + 2 * count:time_bytes + 4 * count].view(np.uint16)[:] = y
    return time_bytes + 4 * count, narrow, base


def packed_bytes(count: int) -> int:
    """Return the most bytes pack_events uses for `count` events."""
    return 12 * count


def unpack_events(packed: torch.Tensor, count: int, narrow: bool, base: int
                  ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """
    Return (t_ns int64, x int32, y int32) [count] from a packed uint8 tensor (any device).

    The inverse of pack_events, computed where `packed` lives (a few elementwise kernels).
    """
    time_bytes = (4 if narrow else 8) * count
    if narrow:
        t_ns = packed[:time_bytes].view(torch.int32).to(torch.int64) + base
    else:
        t_ns = packed[:time_bytes].view(torch.int64).clone()
    # uint16 read as int16, widened, and the sign bits masked off: 0..65535.
    x = packed[time_bytes:time_bytes + 2 * count].view(torch.int16).to(torch.int32) & 0xFFFF
    y = packed[time_bytes + 2 * count:time_bytes + 4 * count].view(torch.int16) \
        .to(torch.int32) & 0xFFFF
    return t_ns, x, y


class EventUploader:
    """
    Copies batches of events to `device`, one transfer a batch; upload() returns tensors there.

    On CUDA the copies are asynchronous on the current stream (pinned staging, two buffers
    alternating; a buffer is reused only after its last copy completed, an event wait that
    normally finds it done). The returned tensors are ordered on that stream, like any later
    kernel. On the CPU the packing round trip runs without a copy.
    """

    def __init__(self, device: torch.device):
        self.device = torch.device(device)
        self._cuda = self.device.type == 'cuda'
        self._staging = [None, None]   # pinned uint8 tensors
        self._done = [None, None]      # CUDA events of their last copies
        self._turn = 0
        self.uploads = 0
        self.bytes_uploaded = 0

    def _buffer(self, size: int) -> torch.Tensor:
        turn = self._turn
        self._turn = 1 - turn
        if self._done[turn] is not None:
            self._done[turn].synchronize()  # its copy of two uploads ago
        staging = self._staging[turn]
        if staging is None or staging.numel() < size:
            staging = torch.empty(max(size, 1 << 16), dtype=torch.uint8,
                                  pin_memory=self._cuda)
            self._staging[turn] = staging
        return staging, turn

    def upload(self, t_ns: np.ndarray, x: np.ndarray, y: np.ndarray
               ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(t_ns int64, x int32, y int32) on the device for host arrays of one batch."""
        count = len(t_ns)
        staging, turn = self._buffer(packed_bytes(count))
        used, narrow, base = pack_events(t_ns, x, y, staging.numpy())
        packed = staging[:used]
        if self._cuda:
            packed = packed.to(self.device, non_blocking=True)
            done = torch.cuda.Event()
            done.record()
            self._done[turn] = done
        self.uploads += 1
        self.bytes_uploaded += used
        return unpack_events(packed, count, narrow, base)
