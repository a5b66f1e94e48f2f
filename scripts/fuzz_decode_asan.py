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
Fuzz the C++ EventPacket decoders under AddressSanitizer (and check them against numpy).

    ASAN=$(gcc -print-file-name=libasan.so)
    LD_PRELOAD=$ASAN ASAN_OPTIONS=detect_leaks=0 .venv/bin/python scripts/fuzz_decode_asan.py

Builds the CPU extension (csrc/*.cpp, csrc/cpu/*.cpp) with -fsanitize=address,undefined
into a scratch directory outside the repository (--build-dir), installs it as
veckm_flow_ros._C (so veckm_flow_ros.ops wraps the ASan-built ops),
then feeds the kernels random and mutated packets of every encoding: mutated packets of the
real recordings (../shared/data/recordings, when present), random bytes, odd lengths, valid
streams from packets.py with flipped bits, truncated cuts, extreme width/height/time_base,
and long vector words. Any out-of-bounds read or write aborts with an ASan report; every result is also
compared with the numpy reference. Without LD_PRELOAD the build still runs but ASan cannot
start (the script says so and exits 2).
"""

import argparse
import os
import pathlib
import sys
import tempfile
import time

import numpy as np
from torch.utils import cpp_extension

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Every CPU source: the one schema block (csrc/veckm_flow.cpp) names every op's schema.
SOURCES = sorted(ROOT.glob('csrc/*.cpp')) + sorted(ROOT.glob('csrc/cpu/*.cpp'))


def build(build_dir: pathlib.Path):
    """Compile the ASan build and return its module (registers the torch ops)."""
    flags = ['-O1', '-g', '-fno-omit-frame-pointer', '-fsanitize=address,undefined',
             '-fno-sanitize-recover=all',
             '-std=c++17']
    build_dir.mkdir(parents=True, exist_ok=True)
    # The module is named _C (its PyInit__C); it registers the torch ops, so the package's own
    # _C must not be imported in this process: main() puts this one in its place.
    return cpp_extension.load(name='_C', sources=[str(source) for source in SOURCES],
                       extra_cflags=flags, extra_ldflags=['-fsanitize=address,undefined'],
                       build_directory=str(build_dir), verbose=False)


def mutated_packets(rng, encoding):
    from veckm_flow_ros.eventio.events import EventArray, TriggerArray
    from veckm_flow_ros.eventio.packets import encode_packets, sort_for_vectors
    n = int(rng.integers(1, 3000))
    t_ns = np.sort(rng.integers(0, 50 * 10**9, n)) // 10**6 * 10**6
    events = sort_for_vectors(EventArray(t_ns, rng.integers(0, 2048, n),
                                         rng.integers(0, 2048, n), rng.integers(0, 2, n)))
    encodable = encoding if encoding != 'trigger' else 'mono'
    triggers = TriggerArray(t_ns[:5], np.arange(5), np.arange(5) % 2)
    duration_ns = int(rng.integers(10**6, 4 * 10**9))
    packets = encode_packets(events, encodable, packet_duration_ns=duration_ns,
                             triggers=triggers if encoding == 'evt3' else None)
    for packet in packets:
        data = bytearray(packet.data)
        for _ in range(int(rng.integers(0, 20))):
            if data:
                data[int(rng.integers(0, len(data)))] ^= 1 << int(rng.integers(0, 8))
        cut = int(rng.integers(0, len(data) + 1))
        yield bytes(data[:cut]) if rng.random() < 0.2 else bytes(data), packet.time_base


def real_packets():
    """Return (encoding, data, time_base) of every message of the real recordings, if any."""
    recordings = ROOT.parent / 'shared' / 'data' / 'recordings'
    if not recordings.is_dir():
        return []
    from veckm_flow_ros.eventio.bag import read_event_messages
    return [(item.msg.encoding, item.msg.events.tobytes(), int(item.msg.time_base))
            for bag in sorted(p for p in recordings.iterdir() if p.is_dir())
            for item in read_event_messages(bag)]


def mutated_real_packets(rng, real, encoding):
    """Yield a few consecutive real packets of `encoding`, with random bytes and cuts."""
    candidates = [k for k, packet in enumerate(real) if packet[0] == encoding]
    if not candidates:
        return
    start = candidates[int(rng.integers(0, len(candidates)))]
    for _, data, time_base in real[start:start + int(rng.integers(1, 6))]:
        data = bytearray(data)
        for _ in range(int(rng.integers(0, 30))):
            if data:
                data[int(rng.integers(0, len(data)))] = int(rng.integers(0, 256))
        if rng.random() < 0.3 and data:
            del data[int(rng.integers(0, len(data))):]
        yield bytes(data), time_base


def random_packets(rng):
    size = int(rng.choice([0, 1, 2, 3, 7, 8, 9, 15, 16, 17, int(rng.integers(0, 20000))]))
    data = rng.integers(0, 256, size, dtype=np.uint8)
    if rng.random() < 0.3:  # many vector words with full masks
        words = data[:size // 2 * 2].view('<u2')
        words[:] = np.where(rng.random(len(words)) < 0.5, 0x4FFF, words)
    yield data.tobytes(), int(rng.integers(0, 1 << 63))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--seconds', type=float, default=60.0, help='fuzzing time budget')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--build-dir', type=pathlib.Path,
                        default=pathlib.Path(tempfile.gettempdir()) / 'veckm_flow_asan_decode',
                        help='scratch build directory (outside the repository)')
    args = parser.parse_args()
    if 'asan' not in os.environ.get('LD_PRELOAD', ''):
        print('run with LD_PRELOAD=$(gcc -print-file-name=libasan.so) '
              'ASAN_OPTIONS=detect_leaks=0 (see the module docstring)', file=sys.stderr)
        return 2
    sys.modules['veckm_flow_ros._C'] = build(args.build_dir)
    sys.path.insert(0, str(ROOT))
    from veckm_flow_ros.eventio.decode import ENCODINGS, PacketDecoder

    rng = np.random.default_rng(args.seed)
    real = real_packets()
    deadline = time.monotonic() + args.seconds
    counts = dict.fromkeys(ENCODINGS, 0)
    while time.monotonic() < deadline:
        encoding = str(rng.choice(ENCODINGS))
        cpp, reference = PacketDecoder('cpp'), PacketDecoder('numpy')
        width = int(rng.choice([0, 1, 346, 640, 2048, 65535, 65536, 1 << 31]))
        height = int(rng.choice([0, 1, 260, 480, 2048, 65535, 65536, 1 << 31]))
        choice = rng.random()
        if choice < 0.4 and real:
            source = mutated_real_packets(rng, real, encoding)
        elif choice < 0.7:
            source = mutated_packets(rng, encoding)
        else:
            source = random_packets(rng)
        for data, time_base in source:
            a = cpp.decode(encoding, data, time_base, width, height)
            b = reference.decode(encoding, data, time_base, width, height)
            for name in ('t_ns', 'x', 'y', 'p'):
                if not np.array_equal(getattr(a.events, name), getattr(b.events, name)):
                    raise AssertionError(f'{encoding}: backends differ in {name} '
                                         f'(width {width}, height {height}, seed {args.seed})')
            assert a.problems == b.problems, (a.problems, b.problems)
            counts[encoding] += 1
    print('packets decoded under ASan, identical to numpy:', counts)
    return 0


if __name__ == '__main__':
    sys.exit(main())
