#!/usr/bin/env bash
# The test suite as CI runs it (after scripts/setup.sh --with-jazzy): pytest over test/ with the
# Kilted venv's Python (real rclpy + Fast DDS, real bags, the compiled extension, the colcon
# check), then the tests marked `ros` (rclpy, DDS, message types, Fast DDS profile) again in the
# Jazzy venv, then the CUDA compile check when nvcc exists and the aarch64 subset under emulation.
# Arguments go to both pytest runs.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VECKM_VENV:-$ROOT/.venv}"
JAZZY_VENV="${VECKM_JAZZY_VENV:-$VENV-jazzy}"
cd "$ROOT"
start=$SECONDS
if [ ! -x "$JAZZY_VENV/bin/python" ]; then
  echo "error: no Jazzy venv at $JAZZY_VENV; run 'bash scripts/setup.sh --with-jazzy'" \
       "(or 'make test', which does)" >&2
  exit 1
fi
echo "[test] ROS 2 Kilted ($VENV): the whole suite"
"$VENV/bin/python" -m pytest test/ -q --durations=15 "$@"
kilted_s=$((SECONDS - start))
echo "[test] Kilted pytest finished in ${kilted_s} s"
echo "[test] ROS 2 Jazzy ($JAZZY_VENV): the tests marked ros"
# Exit status 5 (no test selected) is fine only when arguments narrowed the selection.
"$JAZZY_VENV/bin/python" -m pytest test/ -q -m ros --durations=10 "$@" \
  || { status=$?; [ "$status" = 5 ] && [ $# -gt 0 ] || exit "$status"; }
echo "[test] Jazzy pytest finished in $((SECONDS - start - kilted_s)) s"
bash scripts/check_cuda_build.sh
# aarch64 under emulation: both extensions cross-built, a representative subset of the CPU tests
# and the ops against this build (`make test-aarch64` runs every CPU module); skipped, saying
# why, only where the registries cannot provide qemu, the cross compiler or the arm64 packages.
bash scripts/check_aarch64.sh --subset --optional
echo "[test] all checks passed in $((SECONDS - start)) s"
