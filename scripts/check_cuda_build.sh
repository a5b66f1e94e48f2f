#!/usr/bin/env bash
# Compile the CUDA extension (csrc/cuda/*.cu) so that a broken .cu file cannot land unnoticed on
# a machine without GPU: a CUDA torch in a cached venv outside the clone, FORCE_CUDA=1,
# TORCH_CUDA_ARCH_LIST="8.7;9.0" (Jetson Orin; H100). Then load the module and check that every op that has a CPU
# kernel also registered a CUDA kernel. Skips (exit 0) when nvcc is absent.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Prefer the toolkit directory (/usr/local/bin/nvcc may be a wrapper script outside it).
if [ -x /usr/local/cuda/bin/nvcc ]; then NVCC="${NVCC:-/usr/local/cuda/bin/nvcc}"; fi
NVCC="${NVCC:-$(command -v nvcc || true)}"
if [ -z "$NVCC" ] || [ ! -x "$NVCC" ]; then
  echo "[cuda-build] nvcc not found: skipping the CUDA compile check"
  exit 0
fi
CUDA_HOME="${CUDA_HOME:-$(cd "$(dirname "$NVCC")/.." && pwd)}"
TORCH_SPEC="torch==2.14.1"   # the CUDA 13.0 build; matches nvcc 13.0
ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-8.7;9.0}"  # sm_87: Jetson AGX Orin / Orin NX / Orin Nano
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/veckm_flow_ros"
VENV="$CACHE/cuda-venv-$(echo "$TORCH_SPEC numpy setuptools wheel" | sha256sum | cut -c1-12)"
say() { printf '[cuda-build %4ss] %s\n' "$SECONDS" "$*"; }

if [ ! -f "$VENV/.complete" ]; then
  say "creating the cached CUDA-torch build venv $VENV (once; several GB)"
  rm -rf "$VENV"
  mkdir -p "$CACHE"
  python3.11 -m venv "$VENV" 2>/dev/null || python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install --disable-pip-version-check -q "$TORCH_SPEC" numpy setuptools \
    wheel 2> >(grep -v 'is ignored: it is neither' >&2)
  touch "$VENV/.complete"
fi

# A successful check is remembered by the hash of what it compiled (csrc/, setup.py, torch).
SOURCES_HASH="$(cd "$ROOT" && { git ls-files --cached --others --exclude-standard -z setup.py csrc \
  | xargs -0 sha256sum; echo "$TORCH_SPEC $ARCH_LIST"; } | sha256sum | cut -c1-16)"
if [ -f "$CACHE/cuda-build-ok-$SOURCES_HASH" ]; then
  say "ok: these CUDA sources already compiled and loaded ($CACHE/cuda-build-ok-$SOURCES_HASH)"
  exit 0
fi

BUILD="$(mktemp -d)"
trap 'rm -rf "$BUILD"' EXIT
(cd "$ROOT" && git ls-files --cached --others --exclude-standard -z setup.py setup.cfg csrc \
   veckm_flow_ros resource package.xml | xargs -0 cp --parents -t "$BUILD")
mkdir -p "$BUILD/launch" "$BUILD/config"
say "compiling csrc/ with nvcc ($("$NVCC" --version | tail -n 1)) for compute capabilities $ARCH_LIST"
(cd "$BUILD" && FORCE_CUDA=1 TORCH_CUDA_ARCH_LIST="$ARCH_LIST" \
   CUDA_HOME="$CUDA_HOME" MAX_JOBS="$(nproc)" "$VENV/bin/python" setup.py -q build_ext --inplace \
   > "$BUILD/build.log" 2>&1) || { grep -E -B2 -A8 'error' "$BUILD/build.log" | head -n 80 >&2;
   echo "[cuda-build] FAILED: the CUDA extension does not compile (log above)" >&2; exit 1; }
(cd "$BUILD" && "$VENV/bin/python" - <<'PY'
import torch
import veckm_flow_ros._C  # noqa: F401  (registers the ops)
import veckm_flow_ros._egomotion  # noqa: F401  (the plain extension, built by the same setup.py)

ops = [name for name in torch._C._dispatch_get_all_op_names() if name.startswith('veckm_flow::')]
assert ops, 'no veckm_flow ops registered'
cpu_ops = [op for op in ops if torch._C._dispatch_has_kernel_for_dispatch_key(op, 'CPU')]
cuda_ops = [op for op in ops if torch._C._dispatch_has_kernel_for_dispatch_key(op, 'CUDA')]
print(f'[cuda-build] ops: {sorted(ops)}')
print(f'[cuda-build] CUDA kernels: {sorted(cuda_ops)}')
missing = sorted(set(cpu_ops) - set(cuda_ops))
# Host-side ops (packet decoding) have no CUDA kernel on purpose; say which ones.
print(f'[cuda-build] CPU-only ops: {missing}')
assert cuda_ops, 'the CUDA build registered no CUDA kernel'
PY
)
# Every requested architecture was compiled (nvcc's command lines in the build log).
for arch in ${ARCH_LIST//;/ }; do
  grep -q "code=sm_${arch//./}" "$BUILD/build.log" \
    || { echo "[cuda-build] FAILED: nvcc was not asked for sm_${arch//./} code" >&2; exit 1; }
done
touch "$CACHE/cuda-build-ok-$SOURCES_HASH"
say "ok: CUDA extension compiled and loaded (GPU kernels cannot run on this machine)"
