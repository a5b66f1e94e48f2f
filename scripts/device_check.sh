#!/usr/bin/env bash
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


# The checks that need a GPU, as one script for the lent GPU machine (no ROS there, no package
# registry; its python3 already holds CUDA torch, numpy, pytest, hypothesis, opencv):
#   build the CUDA extension in place, run the device-parametrised tests (CUDA == CPU; the
#   op tests also run encode_naive, the paper's Algorithm 1 as a CUDA kernel, on the GPU),
#   `veckm-flow bench` (CUDA events; its 'cuda-naive' rows time that kernel on the same card in
#   the same run, and the 'x naive' column is the speed-up of the 'cuda' rows over it), the
#   streaming estimator benchmark at the node's block with and without the second look at slow
#   flows, and (PROFILE=1) a kernel profile.
# Every log goes to $OUT (default out/device). Each step has its own time limit, so one hang
# cannot eat the whole lease.
#     OUT=out/device bash scripts/device_check.sh

set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-out/device}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # benchmarks/ import the in-place build
step() { echo "== $(date +%T) $*"; }

step machine
{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  python3 -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda)'
  echo "cpus: $(nproc)"; nvcc --version | tail -2
} 2>&1 | tee "$OUT/machine.txt"

step build
# The GPU image's default compiler (/opt/gcc/bin/g++, a wrapper) links libstdc++ statically into
# the extension; its private ostream then crashes (SIGSEGV in num_put) as soon as a TORCH_CHECK
# message formats an integer. Build with the system compiler, which links it dynamically.
if [ -x /usr/bin/g++ ]; then
  export CC=/usr/bin/gcc CXX=/usr/bin/g++ LDSHARED='/usr/bin/g++ -shared'
fi
echo "compiler: ${CXX:-default}"; head -c 400 /opt/gcc/bin/g++ 2>/dev/null; echo
start=$(date +%s)
FORCE_CUDA=1 TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 timeout 240 \
  python3 setup.py build_ext --inplace >"$OUT/build.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ -n "${LDSHARED:-}" ]; then
  echo "build with the system compiler failed (exit $rc); retrying with the default one"
  grep -E 'error' "$OUT/build.log" | head -5
  unset CC CXX LDSHARED
  rm -rf build
  FORCE_CUDA=1 TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 timeout 240 \
    python3 setup.py build_ext --inplace >"$OUT/build.log" 2>&1
  rc=$?
fi
echo "build exit $rc in $(( $(date +%s) - start )) s"
if [ $rc -ne 0 ]; then grep -E 'error|Error' "$OUT/build.log" | head -40; tail -20 "$OUT/build.log"; exit 1; fi
ldd veckm_flow_ros/_C*.so | grep -E 'stdc\+\+|gomp|cudart'
python3 -c 'import torch, veckm_flow_ros.ops; print(torch.ops.veckm_flow.encode.default._schema); \
[print(op, "CUDA kernel:", torch._C._dispatch_has_kernel_for_dispatch_key(op, "CUDA")) \
 for op in ("veckm_flow::encode", "veckm_flow::encode_naive", "veckm_flow::flow_mlp")]'

step tests
timeout 200 python3 -m pytest -q -p no:cacheprovider --maxfail=10 --continue-on-collection-errors \
  test/test_encode_ops.py test/test_cuda.py test/test_estimator.py test/test_model.py \
  test/test_confidence.py 2>&1 | tee "$OUT/tests.log" | tail -25

step bench
timeout 120 python3 -m veckm_flow_ros.cli bench --device cuda --repeats 5 2>&1 | tee "$OUT/bench.txt"

step stream
# The node's automatic block for the default model (2 tau = 24 ms), with and without the second
# look at slow flows (the node's default long_context_below_px_s is 150 px/s).
timeout 200 python3 benchmarks/bench_estimator.py --device cpu cuda --speed 1 10 33 \
  --stride 1 8 --block-ms 24 --long-context-below-px-s 0 150 2>&1 | tee "$OUT/stream.txt"

if [ "${PROFILE:-0}" = 1 ]; then
  step profile
  timeout 60 python3 benchmarks/profile_cuda.py --radius 10 2>&1 | tee "$OUT/profile.txt" | head -45
fi
step done
