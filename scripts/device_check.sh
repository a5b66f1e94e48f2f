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


# The checks that need a GPU, as one prepared call on a lent GPU machine (x86-64, Python 3.12
# with CUDA torch, numpy, pytest; nvcc, cmake; no package registry, nothing outside reachable).
#
#   bash scripts/device_check.sh --prepare    here, with network: fills .device/ (git-ignored)
#       with the ROS 2 Kilted wheels for Python 3.12 (wheel files), the published estimator's
#       sources and weights and the evt3 recording (from ../shared/data), and checks that the
#       tree that travels stays under the device tool's 64 MiB.
#   bash scripts/device_check.sh --rehearse   here, without GPU: every step on the CPU (the
#       carried wheels installed into a prefix and event_camera_msgs built for a Python 3.12,
#       REHEARSE_ROS_PYTHON, that holds what the GPU image holds: numpy, pyparsing,
#       python-dateutil, pyyaml, typing_extensions, setuptools; the peer benchmark's workloads;
#       the streaming benchmark and the node over DDS on the CPU, in the project's venv).
#   OUT=out/device bash scripts/device_check.sh   on the GPU machine (the device tool: carry
#       .device; its $OUT comes back): about 5-8 minutes (the build took 36 s and the tests
#       22 s on an H100), each step under its own time limit; ONLY="stream node" reruns steps.
#
# GPU steps: build the CUDA extension in place; the CUDA tests (encode's dense and sparse paths
# against the CPU; test_device_sync.py: the streaming estimator and encode under torch's sync
# debug mode 'error', so any host synchronisation but the read of each block's flows fails);
# the published estimator side by side (benchmarks/bench_peer.py, 640x480
# and 1280x720); the streaming estimator (benchmarks/bench_estimator.py, 640x480 and 1280x720,
# every event and every 8th); the real node over DDS with device:=cuda (benchmarks/bench_node.py:
# the evt3 recording at 640x480, the synthetic grating at 1280x720; every event and every 8th).
# The ROS environment (wheels into /tmp/ros, event_camera_msgs built with cmake) is prepared
# in the background while the GPU steps run. $OUT/summary.txt holds the tables.

set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
MODE=${1:-gpu}
CARRY=.device
OUT=${OUT:-out/device}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"  # benchmarks/ import the in-place build
step() { echo "== $(date +%T) $*"; }
# ONLY="peer node" runs just those steps (of: build tests peer stream node).
want() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }
DATA="$ROOT/../shared/data"
MODEL_DIR=640x480_24ms_C64_k10
# The device tool's limit on the tree that travels (tracked and untracked-not-ignored files
# plus the carried folder).
LIMIT_BYTES=$((64 * 1024 * 1024))

carried_bytes() {
  local tree carry
  tree=$(git ls-files --cached --others --exclude-standard -z | xargs -0 stat -c %s 2>/dev/null \
         | awk '{s += $1} END {print s + 0}')
  carry=$(find "$CARRY" -type f -printf '%s\n' 2>/dev/null | awk '{s += $1} END {print s + 0}')
  echo $((tree + carry))
}

if [ "$MODE" = --prepare ]; then
  step "wheels: the Kilted ROS 2 wheels (cp312) and their pure-Python needs into $CARRY/whl"
  mkdir -p "$CARRY/whl" "$CARRY/data"
  # The packages the node needs beyond the GPU image's own (KINDS.md lists those).
  VENV=${VENV:-$ROOT/.venv}  # the project's Kilted venv (scripts/setup.sh)
  PKGS=$("$VENV/bin/python" -m pip freeze 2>/dev/null \
         | grep -E '^(ros-|catkin-pkg|lark-parser|docutils|rosbags|ruamel|lz4|backports.zstd|distlib|apsw)' \
         | grep -vE 'cppcheck|cpplint|uncrustify|flake8|pep257')
  [ -n "$PKGS" ] || { echo "no ROS packages found in $VENV (set VENV=...)" >&2; exit 1; }
  platforms=""
  for n in 1 2014 2_17 2_24 2_27 2_28 2_31 2_34 2_35; do
    case $n in 1|2014) platforms+=" --platform manylinux${n}_x86_64";;
               *) platforms+=" --platform manylinux_${n}_x86_64";; esac
  done
  # shellcheck disable=SC2086
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp $platforms -d "$CARRY/whl" $PKGS || exit 1
  # empy has no wheel: its source archive (pure Python) installs there too.
  python3 -m pip download -q --no-deps --no-binary :all: -d "$CARRY/whl" empy==4.2.1 || exit 1
  step "data: published sources and weights, the evt3 recording into $CARRY/data"
  for path in veckm_flow_cpp_src "veckm_flow_cpp_models/$MODEL_DIR" recordings/py_test_events_1; do
    if [ -d "$DATA/$path" ]; then cp -r "$DATA/$path" "$CARRY/data/"; chmod -R u+w "$CARRY/data"
    else echo "missing $DATA/$path: that step will skip on the GPU machine"; fi
  done
  bytes=$(carried_bytes)
  echo "carried: $((bytes / 1024 / 1024)) MiB of the limit $((LIMIT_BYTES / 1024 / 1024)) MiB" \
       "($(du -sh "$CARRY/whl" | cut -f1) wheels)"
  [ "$bytes" -lt "$LIMIT_BYTES" ] || { echo "over the device tool's limit" >&2; exit 1; }
  exit 0
fi

REHEARSE=0
if [ "$MODE" = --rehearse ]; then REHEARSE=1; fi
PY=python3
[ $REHEARSE = 1 ] && PY=${REHEARSE_PYTHON:-/work/main/.venv/bin/python}
[ -d "$CARRY/whl" ] || echo "no $CARRY/whl: run --prepare first (the node step will skip)"

# ---- The ROS environment, prepared in the background (CPU only) ------------------------------
# Wheels into the prefix /tmp/ros (their data files: lib/, share/, include/), then
# event_camera_msgs from interfaces/ with cmake, for the interpreter ROS_PY.
ROS_PY=python3
[ $REHEARSE = 1 ] && ROS_PY=${REHEARSE_ROS_PYTHON:-$(command -v python3.12 || echo python3)}
ROS_PREFIX=/tmp/ros
ros_env() {
  local site
  site=$("$ROS_PY" -c 'import sys; print(f"lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages")')
  export AMENT_PREFIX_PATH=$ROS_PREFIX CMAKE_PREFIX_PATH=$ROS_PREFIX
  export PYTHONPATH="$ROOT:$ROS_PREFIX/$site"
  # What ros_wheels_bootstrapper would set (it re-execs from a venv; here it is a prefix).
  LD_LIBRARY_PATH="$ROS_PREFIX/lib$(printf ':%s' "$ROS_PREFIX/$site"/ros_*.libs)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export LD_LIBRARY_PATH _ROS_WHEELS_BOOTSTRAP_COMPLETE=1 PATH="$ROS_PREFIX/bin:$PATH"
}
setup_ros() {
  set -e
  rm -rf "$ROS_PREFIX" /tmp/ros_build
  "$ROS_PY" -m pip install -q --no-index --no-deps --no-compile --no-build-isolation \
    --prefix "$ROS_PREFIX" "$CARRY"/whl/*
  ros_env
  local py_include np_include
  py_include=$("$ROS_PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  np_include=$("$ROS_PY" -c 'import numpy; print(numpy.get_include())')
  # The message wheels' CMake configs carry the include paths of the machine that built them.
  sed -i -e "s#/opt/python/cp312-cp312/lib/python3.12/site-packages/numpy/_core/include#$np_include#g" \
         -e "s#/opt/python/cp312-cp312/include/python3.12#$py_include#g" \
         "$ROS_PREFIX"/share/*/cmake/*.cmake
  cmake -S interfaces/event_camera_msgs -B /tmp/ros_build -DCMAKE_PREFIX_PATH="$ROS_PREFIX" \
    -DCMAKE_INSTALL_PREFIX="$ROS_PREFIX" -DPython3_EXECUTABLE="$(command -v "$ROS_PY")" \
    -DBUILD_TESTING=OFF > /tmp/ros_build.log 2>&1
  cmake --build /tmp/ros_build -j"$(nproc)" >> /tmp/ros_build.log 2>&1
  cmake --install /tmp/ros_build >> /tmp/ros_build.log 2>&1
  "$ROS_PY" -c 'import rclpy, event_camera_msgs.msg; print("ROS ready:", rclpy.__file__)'
}
if want node && [ -d "$CARRY/whl" ] && command -v cmake > /dev/null; then
  ( setup_ros > "$OUT/ros_setup.log" 2>&1; echo "exit $?" >> "$OUT/ros_setup.log" ) &
  ROS_SETUP_PID=$!
fi

step machine
{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1 | head -3
  "$PY" -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda)'
  echo "cpus: $(nproc)"; nvcc --version 2>/dev/null | tail -1
} 2>&1 | tee "$OUT/machine.txt"

step build
if [ $REHEARSE = 0 ] && want build; then
  # The GPU image's default compiler (/opt/gcc/bin/g++, a wrapper) links libstdc++ statically
  # into the extension; its private ostream then crashes as soon as a TORCH_CHECK message
  # formats an integer. Build with the system compiler, which links it dynamically.
  if [ -x /usr/bin/g++ ]; then export CC=/usr/bin/gcc CXX=/usr/bin/g++ LDSHARED='/usr/bin/g++ -shared'; fi
  start=$(date +%s)
  FORCE_CUDA=1 TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 timeout 240 \
    python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1
  rc=$?
  echo "build exit $rc in $(( $(date +%s) - start )) s"
  if [ $rc -ne 0 ]; then grep -E 'error' "$OUT/build.log" | head -30; exit 1; fi
else
  echo "not built here (rehearsal, or not in ONLY): the in-place build of this tree is used"
fi

step tests
want tests && timeout 150 "$PY" -m pytest -q -p no:cacheprovider --maxfail=20 test/test_encode_ops.py \
  test/test_cuda.py test/test_estimator.py test/test_device_sync.py 2>&1 | tee "$OUT/tests.log" | tail -15

step peer
# The published estimator side by side (its sources and weights travel in .device/data).
want peer && timeout 170 "$PY" benchmarks/bench_peer.py --peer "$CARRY/data/veckm_flow_cpp_src" \
  --weights "$CARRY/data/$MODEL_DIR" --repeats 5 $([ $REHEARSE = 1 ] && echo --rehearse) \
  2>&1 | tee "$OUT/peer.txt"

step stream
# The scene tiled over each sensor: speed 33 gives ~70 M events/s at 640x480 and ~200 M at
# 1280x720, speed 100 three times that; 30 M events are 0.15-0.4 s of sensor time per case.
DEVICE=cuda; EVENTS=30000000
[ $REHEARSE = 1 ] && { DEVICE=cpu; EVENTS=100000; }
want stream && timeout 130 "$PY" benchmarks/bench_estimator.py --device $DEVICE --size 640x480 1280x720 \
  --speed 33 100 --stride 1 8 --block-ms 24 --events $EVENTS --cpu-events $EVENTS \
  --long-context-below-px-s 150 2>&1 | tee "$OUT/stream.txt"
# Host synchronisations per block, counted by torch's sync debug mode (slower: its own run).
SYNC_CASES="--size 640x480 --stride 1 8 --long-context-below-px-s 0 150 --events 3000000
  --cuda-forms sync-free compacting"
# Rehearsal: one case of the scene's own size (the CPU has no device form to count).
[ $REHEARSE = 1 ] && SYNC_CASES="--stride 8 --long-context-below-px-s 150 --cpu-events 50000"
# shellcheck disable=SC2086
want stream && timeout 60 "$PY" benchmarks/bench_estimator.py --device $DEVICE --speed 33 \
  --block-ms 24 $SYNC_CASES --count-syncs 2>&1 | tee "$OUT/syncs.txt"

step node
if [ -n "${ROS_SETUP_PID:-}" ]; then
  wait "$ROS_SETUP_PID"
  tail -3 "$OUT/ros_setup.log"
  if grep -q '^ROS ready' "$OUT/ros_setup.log"; then
    (
      # Rehearsal: the node runs in the project's own 3.11 venv (torch and ROS are there; the
      # 3.12 prefix above only proves that the carried wheels install and build the messages).
      NODE_PY=$PY
      [ $REHEARSE = 0 ] && { ros_env; NODE_PY=$ROS_PY; }
      SPEEDS="10 33"; WALL=3
      [ $REHEARSE = 1 ] && { SPEEDS=1; WALL=2; }
      timeout 100 "$NODE_PY" benchmarks/bench_node.py --model veckm_r10_tau12ms --device $DEVICE \
        --configs every stride8 --sources real --speeds $SPEEDS --wall-s $WALL \
        --recording "$CARRY/data/py_test_events_1" 2>&1 | tee "$OUT/node_640x480.txt" | tail -12
      timeout 70 "$NODE_PY" benchmarks/bench_node.py --model veckm_r10_tau12ms --device $DEVICE \
        --configs every stride8 --sources synthetic --size 1280x720 --synthetic-rate 2e6 \
        --speeds $SPEEDS --wall-s $WALL 2>&1 | tee "$OUT/node_1280x720.txt" | tail -12
    )
  else
    echo "the ROS environment failed (ros_setup.log): node step skipped"; tail -20 /tmp/ros_build.log 2>/dev/null
  fi
elif want node; then
  echo "no wheels or no cmake: node step skipped"
fi

step summary
{
  cat "$OUT/machine.txt"; echo
  grep -E 'passed|failed|error' "$OUT/tests.log" | tail -3; echo
  cat "$OUT/peer.txt" "$OUT/stream.txt" "$OUT/syncs.txt"
  for f in "$OUT"/node_*.txt; do [ -f "$f" ] && { echo "$f"; tail -n 14 "$f"; }; done
} > "$OUT/summary.txt" 2>&1
step done
