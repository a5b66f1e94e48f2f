#!/usr/bin/env bash
# The test suite as CI runs it (after scripts/setup.sh): pytest over test/ with the venv's
# Python (real rclpy + Fast DDS, real bags, the compiled extension, the colcon check), then the
# CUDA compile check when nvcc exists.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VECKM_VENV:-$ROOT/.venv}"
cd "$ROOT"
start=$SECONDS
"$VENV/bin/python" -m pytest test/ -q --durations=15 "$@"
echo "[test] pytest finished in $((SECONDS - start)) s"
bash scripts/check_cuda_build.sh
echo "[test] all checks passed in $((SECONDS - start)) s"
