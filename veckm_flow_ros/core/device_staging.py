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
buffer is pinned host memory and the copy is asynchronous on a copy stream of its own (no host
synchronisation; it overlaps the kernels already queued). Results come back through
HostReader, the one place that waits for the device. On the CPU the same packing and unpacking
run without a copy, so the CPU tests exercise the code the GPU runs.
"""

from typing import Callable, Tuple

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
    Copies batches of host arrays to `device`, one transfer a batch, without a host wait.

    On CUDA each batch is packed into pinned memory from torch's caching host allocator (a
    block returns to it only once its copy has finished, so nothing here waits for a copy)
    and copied on a stream of its own, which the current stream then waits for: the copy
    overlaps the kernels already queued. The returned tensors are ordered on the current
    stream, like any later kernel. On the CPU the packing round trip runs without a copy.
    """

    def __init__(self, device: torch.device):
        self.device = torch.device(device)
        self._cuda = self.device.type == 'cuda'
        self._copy_stream = torch.cuda.Stream(self.device) if self._cuda else None
        self._host_buffer = None  # CPU: one reused buffer (nothing reads it after unpacking)
        self.uploads = 0
        self.bytes_uploaded = 0

    def _staging(self, size: int) -> torch.Tensor:
        if self._cuda:
            return torch.empty(size, dtype=torch.uint8, pin_memory=True)
        if self._host_buffer is None or self._host_buffer.numel() < size:
            self._host_buffer = torch.empty(max(size, 1 << 16), dtype=torch.uint8)
        return self._host_buffer

    def _copy(self, staging: torch.Tensor) -> torch.Tensor:
        """Return `staging` (a pinned host tensor) on the device, ordered on the current stream."""
        self.uploads += 1
        self.bytes_uploaded += staging.numel() * staging.element_size()
        if not self._cuda:
            return staging
        current = torch.cuda.current_stream(self.device)
        with torch.cuda.stream(self._copy_stream):
            on_device = staging.to(self.device, non_blocking=True)
        current.wait_stream(self._copy_stream)
        on_device.record_stream(current)  # freed only after the current stream's uses
        return on_device

    def upload(self, t_ns: np.ndarray, x: np.ndarray, y: np.ndarray
               ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(t_ns int64, x int32, y int32) on the device for host arrays of one batch."""
        count = len(t_ns)
        staging = self._staging(packed_bytes(count))
        used, narrow, base = pack_events(t_ns, x, y, staging.numpy())
        return unpack_events(self._copy(staging[:used]), count, narrow, base)

    def upload_index(self, index: np.ndarray) -> torch.Tensor:
        """int64 [M] on the device for host integers (target positions; asynchronous)."""
        index = np.ascontiguousarray(index, dtype=np.int64)
        if not self._cuda:  # no copy, as torch.from_numpy
            self.uploads += 1
            self.bytes_uploaded += index.nbytes
            return torch.from_numpy(index)
        staging = torch.empty(len(index), dtype=torch.int64, pin_memory=True)
        staging.numpy()[:] = index
        return self._copy(staging)


class HostReader:
    """
    Reads device results back into host memory: the one host wait per result on a GPU.

    On CUDA the copy goes into pinned memory on the current stream and the host waits for
    that copy's event (only the work queued before it); on the CPU the tensor's own memory is
    returned. `reads` counts the calls on every device, so tests on the CPU can count the
    host waits per block that a GPU would have.
    """

    def __init__(self, device: torch.device):
        self.device = torch.device(device)
        self.reads = 0

    def read_later(self, tensor: torch.Tensor) -> Callable[[], np.ndarray]:
        """
        Start copying `tensor` to the host; return a callable that waits and returns it.

        On CUDA the copy and its event are queued now, so work queued after this call (the
        next block) does not delay the wait; the callable returns a numpy array in pinned
        memory. On the CPU it returns the tensor's own memory.
        """
        if tensor.device.type == 'cpu':
            def values():
                self.reads += 1
                return tensor.numpy()
            return values
        host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
        host.copy_(tensor, non_blocking=True)
        done = torch.cuda.Event()
        done.record(torch.cuda.current_stream(tensor.device))

        def copied():
            self.reads += 1
            done.synchronize()  # an event, not a stream sync: torch's sync debug mode allows it
            return host.numpy()
        return copied

    def read(self, tensor: torch.Tensor) -> np.ndarray:
        """Return the values of `tensor` as a numpy array (a copy on CUDA, a view on the CPU)."""
        return self.read_later(tensor)()


def read_block_results(reader, flow, confidence, validity, slow):
    """
    Start reading a block's results back; return a callable giving them as numpy arrays.

    The callable returns (flow [M, 2], confidence [M] or None, validity [M], number of slow
    flows looked at again or None). With `reader` None (the CPU's own path) the tensors'
    memory is used as it is; otherwise the columns travel packed, in one copy, and the host
    waits once, when the callable is called (core/device_staging.HostReader).
    """
    if reader is None:
        return lambda: (flow.numpy(), None if confidence is None else confidence.numpy(),
                        validity.numpy(), None)
    columns = [flow.float(), validity.float()[:, None]]
    for column in (confidence, slow):
        if column is not None:
            columns.append(column.float()[:, None])
    ready = reader.read_later(torch.cat(columns, dim=1))

    def results():
        packed = ready()
        confidence_host = None if confidence is None else packed[:, 3].copy()
        again = None if slow is None else int(np.count_nonzero(packed[:, -1]))
        return packed[:, :2], confidence_host, packed[:, 2].copy(), again
    return results
