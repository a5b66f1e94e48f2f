#!/usr/bin/env bash
# The package on aarch64 (Raspberry Pi 5, Jetson Orin) under user-mode emulation, from the
# package registries only: Debian bookworm's arm64 Python 3.11 unpacked into a sysroot (a private
# apt state: the host's apt configuration is not touched), the aarch64 wheels of
# requirements-aarch64.txt from PyPI (torch: the CPU-only wheel), qemu-aarch64 as a Cortex-A76
# and Debian's aarch64-linux-gnu cross compiler. Builds both extensions with setup.py (its flags;
# the emulated Python runs it, the cross compiler compiles), runs the CPU test modules that need
# no ROS under emulation, and compares the ops' outputs with the x86 build's on the same saved
# inputs (relative error <= 1e-5).
#
#   scripts/check_aarch64.sh                 # every module of AARCH64_MODULES below
#   scripts/check_aarch64.sh --subset        # a representative subset (SUBSET_TESTS; make test)
#   scripts/check_aarch64.sh --optional ...  # exit 0 ("skipped: <reason>") when a prerequisite
#                                            # cannot be installed
# Downloads and the sysroot are cached under ~/.cache/veckm_flow_ros/aarch64 and rebuilt only when
# what they are made of changes (hash stamps); the cross build is cached by the hash of setup.py
# and csrc/. Environment: VECKM_VENV (the x86 venv, default .venv), XDG_CACHE_HOME.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VECKM_VENV:-$ROOT/.venv}"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/veckm_flow_ros/aarch64"
SYSROOT="$CACHE/sysroot"
SUITE=bookworm
# Debian packages of the sysroot (apt adds their dependencies): Python 3.11 and its headers,
# the C++ runtime the wheels link against.
DEBIAN_PACKAGES="python3.11 libpython3.11-dev libstdc++6 libgomp1 zlib1g"
# Test modules run under emulation (no ROS), and the representative subset of --subset (what
# `make test` runs, chosen for a few CPU-minutes cold): encode's dense, per-target and naive
# kernels against the closed form and each other, flow_mlp and the C4 Fourier MLP (NEON
# micro-kernels) against the float64 reference and the dense MLP, a real recording decoded to
# its upstream checksums, the compiled egomotion estimator on exact flows (the true motion).
AARCH64_MODULES="test_encode_ops test_model test_estimator test_decode test_decode_robustness
  test_egomotion_compiled test_egomotion_stream test_fuzz"
SUBSET_TESTS="
  test/test_encode_ops.py::test_encode_matches_closed_form[40-30-8-1000-cpu-encode]
  test/test_encode_ops.py::test_encode_matches_closed_form[40-30-8-1000-cpu-encode_sparse]
  test/test_encode_ops.py::test_encode_matches_closed_form[9-5-10-300-cpu-encode_naive]
  test/test_encode_ops.py::test_sparse_path_equals_dense_path
  test/test_encode_ops.py::test_flow_mlp_matches_reference[3001-128-cpu]
  test/test_model.py::test_c4_fourier_mlp_equals_the_dense_mlp[25]
  test/test_model.py::test_c4_fourier_mlp_equals_the_dense_mlp[1000]
  test/test_model.py::test_c4_fourier_form_only_for_models_it_reproduces
  test/test_decode.py::test_evt3_recording_checksums[cpp]
  test/test_egomotion_compiled.py::test_exact_flows_give_the_true_motion"
# A Cortex-A76 (Raspberry Pi 5); the Jetson Orin's Cortex-A78AE has the same ISA (ARMv8.2-A).
QEMU_CPU_MODEL=cortex-a76
MIDR_EL1=0x00000000414fd0b1  # implementer 0x41 (Arm), variant 4, part 0xd0b (A76), revision 1

OPTIONAL=0
TESTS="$(for module in $AARCH64_MODULES; do echo "test/$module.py"; done)"
for argument in "$@"; do
  case "$argument" in
    --optional) OPTIONAL=1 ;;
    --subset) TESTS="$SUBSET_TESTS" ;;
    *) echo "error: unknown argument '$argument' (known: --optional, --subset)" >&2; exit 2 ;;
  esac
done
start=$SECONDS
# Wall seconds and the CPU seconds of everything this script waited for (a shared machine's wall
# time says little): user + system of this shell and its children, from /proc.
cpu_s() { awk -v tick="$(getconf CLK_TCK)" '{printf "%d", ($14 + $15 + $16 + $17) / tick}' /proc/$$/stat; }
say() { printf '[aarch64 %4ss, %4s CPU-s] %s\n' "$((SECONDS - start))" "$(cpu_s)" "$*"; }
skip() {  # a prerequisite is missing: one line, then exit 0 (--optional) or 1
  if [ "$OPTIONAL" = 1 ]; then echo "[aarch64] skipped: $*"; exit 0; fi
  echo "[aarch64] FAILED: $*" >&2
  exit 1
}
stamp_ok() { [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; }

# 1. Host tools: qemu-aarch64 (Debian qemu-user) and the cross compiler.
if ! command -v qemu-aarch64 >/dev/null || ! command -v aarch64-linux-gnu-g++ >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing qemu-user and g++-aarch64-linux-gnu (Debian)"
    { apt-get install -y -q qemu-user g++-aarch64-linux-gnu \
      || { apt-get update -q && apt-get install -y -q qemu-user g++-aarch64-linux-gnu; }; } \
      > /dev/null 2>&1 || skip "could not install qemu-user and g++-aarch64-linux-gnu with apt-get"
  else
    skip "qemu-aarch64 or aarch64-linux-gnu-g++ missing (apt-get install qemu-user" \
         "g++-aarch64-linux-gnu, as root)"
  fi
fi
[ -x "$VENV/bin/python" ] || skip "no x86 venv at $VENV to compare with (run scripts/setup.sh)"
command -v dpkg-deb >/dev/null || skip "dpkg-deb missing (a Debian host is needed for the sysroot)"

# 2. The sysroot: Debian arm64 packages with their dependencies (a private apt state), the
#    aarch64 wheels, a Cortex-A76's /proc/cpuinfo and MIDR_EL1 registers (qemu passes the host's
#    x86 /proc/cpuinfo through, and torch's CPU detection fails on it). -L makes qemu look for
#    absolute paths in the sysroot first.
wheel_lines="$(grep -E '^(torch|numpy|opencv-python-headless|rosbags|pyyaml|pytest|hypothesis|setuptools|wheel)\b' \
  "$ROOT/requirements-aarch64.txt")"
sysroot_hash="$(printf '%s\n' "$SUITE $DEBIAN_PACKAGES $MIDR_EL1 $(nproc)" "$wheel_lines" \
  | sha256sum | cut -c1-16)"
if ! stamp_ok "$SYSROOT/.stamp" "$sysroot_hash"; then
  say "making the arm64 sysroot $SYSROOT (Debian $SUITE: $DEBIAN_PACKAGES; wheels)"
  apt_dir="$CACHE/apt"
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial"
  echo "deb [arch=arm64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]" \
       "http://deb.debian.org/debian $SUITE main" > "$apt_dir/sources.list"
  : > "$apt_dir/status"  # nothing installed: apt downloads every dependency
  apt_options=(-o APT::Architecture=arm64 -o "APT::Architectures::=arm64"
               -o Dir::State="$apt_dir" -o Dir::State::Lists="$apt_dir/lists"
               -o Dir::State::status="$apt_dir/status" -o Dir::Cache="$apt_dir"
               -o Dir::Cache::archives="$apt_dir/archives" -o Dir::Etc::SourceList="$apt_dir/sources.list"
               -o Dir::Etc::SourceParts=/nonexistent -o Debug::NoLocking=1
               -o APT::Sandbox::User="$(id -un)")
  apt-get "${apt_options[@]}" -q update > "$CACHE/apt.log" 2>&1 \
    && apt-get "${apt_options[@]}" -q -y --no-install-recommends install --download-only \
         $DEBIAN_PACKAGES >> "$CACHE/apt.log" 2>&1 \
    || { tail -n 5 "$CACHE/apt.log" >&2; skip "apt could not download the arm64 packages" \
           "from deb.debian.org (log: $CACHE/apt.log)"; }
  rm -rf "$SYSROOT"
  mkdir -p "$SYSROOT"
  for deb in "$apt_dir"/archives/*_arm64.deb "$apt_dir"/archives/*_all.deb; do
    [ -f "$deb" ] && dpkg-deb -x "$deb" "$SYSROOT"
  done
  # Debian's usrmerge links (base-files makes them on a real system).
  for dir in bin sbin lib; do
    if [ -d "$SYSROOT/$dir" ] && [ ! -L "$SYSROOT/$dir" ]; then
      cp -a "$SYSROOT/$dir/." "$SYSROOT/usr/$dir/" && rm -rf "${SYSROOT:?}/$dir"
    fi
    ln -sfn "usr/$dir" "$SYSROOT/$dir"
  done
  [ -x "$SYSROOT/usr/bin/python3.11" ] || skip "no python3.11 in the arm64 packages"
  # Wheels: host pip resolves and installs them for the target platform.
  say "installing the aarch64 wheels ($(echo $wheel_lines))"
  wheel_cache="$CACHE/wheels"
  mkdir -p "$wheel_cache"
  printf '%s\n' "$wheel_lines" > "$CACHE/requirements.txt"
  export PIP_ROOT_USER_ACTION=ignore
  pip_options=(--disable-pip-version-check -q --only-binary=:all:
               --python-version 3.11
               --implementation cp --abi cp311 --platform manylinux_2_28_aarch64
               --platform manylinux2014_aarch64 --platform manylinux_2_17_aarch64)
  # pip evaluates environment markers for the host (x86_64): torch's CUDA requirements, marked
  # for x86_64 only, would be pulled in. So torch without dependencies, then its unmarked
  # requirements and the other packages with theirs. torch's wheel (no .data folder) is
  # unzipped: the same files, a sixth of pip's CPU time for its 560 MB.
  torch_line="$(grep -E '^torch\b' <<< "$wheel_lines")"
  grep -vE '^torch\b' <<< "$wheel_lines" > "$CACHE/requirements.txt"
  pip_download() { python3 -m pip download "${pip_options[@]}" -d "$wheel_cache" "$@" \
                     2> >(grep -v 'is ignored' >&2); }
  pip_download --no-deps "$torch_line" || skip "pip could not download $torch_line for aarch64"
  torch_wheel="$(ls "$wheel_cache"/torch-"${torch_line#torch==}"-*aarch64*.whl | head -n 1)"
  unzip -p "$torch_wheel" '*.dist-info/METADATA' | sed -n 's/^Requires-Dist: \([^;]*\)$/\1/p' \
    >> "$CACHE/requirements.txt"
  pip_download -r "$CACHE/requirements.txt" \
    && pip_target() { python3 -m pip install "${pip_options[@]}" --no-index \
                        --find-links "$wheel_cache" --target "$SYSROOT/site-packages" "$@" \
                        2> >(grep -vE 'is ignored|already exists' >&2); } \
    && unzip -q -o "$torch_wheel" -d "$SYSROOT/site-packages" \
    && pip_target -r "$CACHE/requirements.txt" \
    || skip "pip could not get the aarch64 wheels of: $(echo $wheel_lines)"
  # A Cortex-A76 per host CPU.
  mkdir -p "$SYSROOT/proc"
  : > "$SYSROOT/proc/cpuinfo"
  for ((cpu = 0; cpu < $(nproc); cpu++)); do
    printf '%s\n' "processor	: $cpu" "BogoMIPS	: 108.00" \
      "Features	: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp" \
      "CPU implementer	: 0x41" "CPU architecture: 8" "CPU variant	: 0x4" "CPU part	: 0xd0b" \
      "CPU revision	: 1" "" >> "$SYSROOT/proc/cpuinfo"
    mkdir -p "$SYSROOT/sys/devices/system/cpu/cpu$cpu/regs/identification"
    echo "$MIDR_EL1" > "$SYSROOT/sys/devices/system/cpu/cpu$cpu/regs/identification/midr_el1"
  done
  echo "$sysroot_hash" > "$SYSROOT/.stamp"
fi
export QEMU_LD_PREFIX="$SYSROOT" QEMU_CPU="$QEMU_CPU_MODEL"
PY_ARM=(qemu-aarch64 "$SYSROOT/usr/bin/python3.11")
"${PY_ARM[@]}" -c 'import platform; assert platform.machine() == "aarch64"' \
  || skip "the arm64 Python does not start under qemu-aarch64"

# 3. A copy of the checkout (tracked and new files) beside a link to ../shared, so the tests find
#    the shared recordings as from the checkout.
#    One directory per run (removed at exit): runs from several checkouts may overlap.
mkdir -p "$CACHE"
WORK="$(mktemp -d "$CACHE/work.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/repo"
(cd "$ROOT" && git ls-files --cached --others --exclude-standard -z \
   | xargs -0 cp --parents -t "$WORK/repo" 2>/dev/null || true)
if [ -d "$ROOT/../shared" ]; then ln -sfn "$(cd "$ROOT/../shared" && pwd)" "$WORK/shared"; fi

# 4. Both extensions, cross-compiled: setup.py run by the emulated Python (torch's flags for the
#    aarch64 torch), the compiler the x86 aarch64-linux-gnu one. Cached by the sources' hash.
#    Parsing torch's headers is most of each _C source's compile time: a wrapper around the
#    cross compiler precompiles them once per build, with the first _C source's own command line
#    (same flags; the machine code is byte-identical to a plain build's), and includes them first
#    in the _C sources compiled after it.
CROSS_CPPFLAGS="-fopt-info-vec-optimized"
build_hash="$(cd "$ROOT" && { git ls-files --cached --others --exclude-standard -z setup.py csrc \
  | xargs -0 sha256sum; echo "$SUITE $DEBIAN_PACKAGES $CROSS_CPPFLAGS"; grep -E '^torch\b' <<< "$wheel_lines"
  } | sha256sum | cut -c1-16)"
BUILT="$CACHE/build-$build_hash"
export PYTHONPATH="$SYSROOT/site-packages"
if [ ! -f "$BUILT/.complete" ]; then
  say "cross-compiling csrc/ for aarch64 ($(aarch64-linux-gnu-g++ --version | head -n 1)," \
      "$(nproc) jobs)"
  mkdir -p "$WORK/bin" "$WORK/pch"
  cat > "$WORK/bin/cxx" <<'SH'
#!/usr/bin/env bash
# aarch64-linux-gnu-g++, torch's headers precompiled for the _C sources (see check_aarch64.sh).
set -euo pipefail
compiler=aarch64-linux-gnu-g++
source_file=""
for argument in "$@"; do case "$argument" in *.cpp) source_file="$argument" ;; esac; done
case " $* " in *" -DTORCH_EXTENSION_NAME=_C "*) ;; *) exec "$compiler" "$@" ;; esac
# Python.h must come first where it is included (veckm_flow.cpp): no precompiled headers there.
if [ -z "$source_file" ] || grep -q '^#include <Python.h>' "$source_file"; then
  exec "$compiler" "$@"
fi
header="$VECKM_PCH_DIR/torch_headers.h"
# The first _C source makes the precompiled header; sources compiled meanwhile (ninja's other
# jobs) go without it rather than wait.
[ -f "$header.gch" ] || (
  flock -n 9 || exit 0
  if [ ! -f "$header.gch" ]; then
    arguments=() skip=0
    for argument in "$@"; do
      if [ "$skip" = 1 ]; then skip=0; continue; fi
      case "$argument" in
        -MF | -o) skip=1 ;;
        -MMD | -c | "$source_file") ;;
        *) arguments+=("$argument") ;;
      esac
    done
    printf '#include <%s>\n' ATen/ATen.h ATen/Parallel.h torch/library.h > "$header"
    "$compiler" "${arguments[@]}" -x c++-header "$header" -o "$header.gch.partial"
    mv "$header.gch.partial" "$header.gch"
  fi
) 9> "$VECKM_PCH_DIR/lock"
[ -f "$header.gch" ] || exec "$compiler" "$@"
exec "$compiler" -include "$header" -Winvalid-pch "$@"
SH
  chmod +x "$WORK/bin/cxx"
  # CPPFLAGS is added to setup.py's flags (CFLAGS would replace Python's -Wall -DNDEBUG ...);
  # -fopt-info-vec-optimized (no effect on the code): the vectorized loops, checked below.
  # The sysroot's Python headers come first (the host's may be another version or missing).
  build_start=$SECONDS
  (cd "$WORK/repo" && CC=aarch64-linux-gnu-gcc CXX="$WORK/bin/cxx" VECKM_PCH_DIR="$WORK/pch" \
     LDSHARED="aarch64-linux-gnu-g++ -shared" CPLUS_INCLUDE_PATH="$SYSROOT/usr/include" \
     CPPFLAGS="$CROSS_CPPFLAGS -I$SYSROOT/usr/include/python3.11" \
     MAX_JOBS="$(nproc)" "${PY_ARM[@]}" setup.py -q build_ext --inplace > "$WORK/build.log" 2>&1) \
    || { cp "$WORK/build.log" "$CACHE/build-failed.log"
         grep -E -B2 -A8 'error' "$WORK/build.log" | head -n 60 >&2
         echo "[aarch64] FAILED: the cross build does not compile (log: $CACHE/build-failed.log)" >&2
         exit 1; }
  rm -rf "$BUILT" && mkdir -p "$BUILT"
  cp "$WORK"/repo/veckm_flow_ros/*.so "$BUILT/"
  cp "$WORK/build.log" "$BUILT/"
  touch "$BUILT/.complete"
  say "built in $((SECONDS - build_start)) s: $(cd "$BUILT" && ls ./*.so | xargs -n1 basename \
    | tr '\n' ' ')"
else
  cp "$BUILT"/*.so "$WORK/repo/veckm_flow_ros/"
  say "built already (sources unchanged): $BUILT"
fi
# -Wall (Python's flags) clean: no warning in the package's sources. (torch 2.10's headers warn
# under -Wsign-compare in the precompiled-header build only: GCC 12 does not keep their
# `#pragma GCC diagnostic` in a precompiled header.)
warnings="$(grep 'warning:' "$BUILT/build.log" | grep -v '/torch/include/' || true)"
if [ -n "$warnings" ]; then
  head -n 10 <<< "$warnings" >&2
  echo "[aarch64] FAILED: $(wc -l <<< "$warnings") compiler warnings in the aarch64 build" \
       "(log: $BUILT/build.log)" >&2
  exit 1
fi
echo "[aarch64] no compiler warnings in the package's sources (-Wall)"
# encode's hot loops (VECKM_CPU_CLONES functions) vectorized for NEON: each has a vectorized loop.
python3 - "$ROOT/csrc/cpu/encode_cpu.cpp" "$BUILT/build.log" <<'PY' || exit 1
import re
import sys
source, log = (open(path).read() for path in sys.argv[1:])
lines = source.split('\n')
starts = [(number + 1, re.search(r'void (\w+)\(', line).group(1))
          for number, line in enumerate(lines) if line.startswith('VECKM_CPU_CLONES void')]
vectorized = {int(line) for line in re.findall(r'encode_cpu\.cpp:(\d+):\d+: optimized: loop vectorized', log)}
missing = []
for first, name in starts:
    end = lines.index('}', first) + 1  # the function's closing brace (column 0)
    if not any(first <= line <= end for line in vectorized):
        missing.append(name)
if missing or not starts:
    sys.exit(f'[aarch64] FAILED: encode loops not vectorized for aarch64 in {missing or "(none found)"}')
print(f'[aarch64] encode: a vectorized (NEON) loop in each of {", ".join(name for _, name in starts)}')
PY

# 5. The ops on aarch64 against the x86 build on the same inputs (the x86 build saves inputs and
#    outputs, the emulated one recomputes from the saved inputs), then the tests, in one emulated
#    process.
COMPARE_OPS="$(cat <<'PY'
import sys
import numpy as np
import torch
from veckm_flow_ros import ops
from veckm_flow_ros.core.model import load_model

mode, path = sys.argv[1], sys.argv[2]


def run(inputs):
    model = load_model(str(inputs['model']))
    encode_args = [torch.from_numpy(inputs[name]) for name in ('t_ns', 'x', 'y', 'targets')]
    features, count = ops.encode(*encode_args, 64, 48, model.freq_t, model.freq_x,
                                 model.freq_y, model.tau_s, model.pixel_radius)
    blocks, groups = model.c4_fourier_blocks
    mlp_in = torch.from_numpy(inputs['features'])
    return {
        'encode': features.numpy(), 'encode_count': count.numpy(),
        'flow_mlp': ops.flow_mlp(mlp_in, model.w1, model.w2, model.w3, 60.0).numpy(),
        'flow_mlp_c4': ops.flow_mlp_c4(mlp_in, blocks, model.w3, groups, 60.0).numpy(),
    }


if mode == 'save':
    generator = np.random.default_rng(36)
    n = 6000
    inputs = {
        'model': np.array('veckm_r8_tau16ms'),
        't_ns': np.sort(generator.integers(0, 30_000_000, n)).astype(np.int64),
        'x': generator.integers(0, 64, n).astype(np.int32),
        'y': generator.integers(0, 48, n).astype(np.int32),
        'targets': np.arange(0, n, 3, dtype=np.int64),
        'features': generator.standard_normal((997, 128)).astype(np.float32),
    }
    outputs = run(inputs)
    np.savez(path, **inputs, **{'out_' + key: value for key, value in outputs.items()})
    print(f'[aarch64] x86 outputs saved ({", ".join(outputs)})')
else:
    saved = np.load(path)
    outputs = run({key: saved[key] for key in saved.files if not key.startswith('out_')})
    worst = 0.0
    for key, value in outputs.items():
        reference = saved['out_' + key].astype(np.float64)
        error = np.abs(value - reference).max() / max(np.abs(reference).max(), 1e-30)
        worst = max(worst, error)
        print(f'[aarch64] {key:12s} {str(value.shape):12s} relative error to x86 {error:.2e}')
    if worst > 1e-5:
        sys.exit(f'[aarch64] FAILED: aarch64 op outputs differ from x86 by {worst:.2e} (relative) > 1e-5')
    # The tests in the same emulated process (importing torch under qemu takes ~40 CPU-s).
    import pytest
    sys.exit(pytest.main(sys.argv[3:]))
PY
)"
saved="$WORK/ops_x86.npz"
(cd "$ROOT" && PYTHONPATH="$ROOT" "$VENV/bin/python" -c "$COMPARE_OPS" save "$saved") \
  || { echo "[aarch64] FAILED: the x86 build (in place in $ROOT) did not run the ops" >&2; exit 1; }
cd "$WORK/repo"
set -f  # test ids with [parameters] are not file patterns
read -r -d '' -a test_ids <<< "$TESTS" || true
set +f
say "ops against x86, then pytest under qemu-aarch64 ($QEMU_CPU_MODEL): ${test_ids[*]}"
"${PY_ARM[@]}" -c "$COMPARE_OPS" compare "$saved" -q -p no:cacheprovider --durations=5 \
    "${test_ids[@]}" \
  || { echo "[aarch64] FAILED: op outputs or tests under emulation (above)" >&2; exit 1; }
say "ok: aarch64 build, the ops against x86 and the tests of ${#test_ids[@]} test ids"
