#!/usr/bin/env bash
# Set up everything veckm_flow_ros needs in .venv/ at the repository root, from the package
# registries only: torch (CPU build), the ROS 2 Kilted wheels (rclpy with Fast DDS),
# event_camera_msgs built from its interface definition, and this package with its compiled
# extension. With --with-jazzy, also .venv-jazzy/: the ROS 2 Jazzy wheels (rclpy 7.1, Fast DDS
# 2.14, requirements-jazzy.txt), event_camera_msgs built with Jazzy's rosidl toolchain, and this
# package on its path (the extension built for .venv: both pin the same torch). `make test` runs
# the tests marked `ros` there too.
# Idempotent: each step is skipped when what it installs has not changed (hash stamps).
# On aarch64 (Raspberry Pi 5, Jetson Orin) the ROS 2 wheels do not exist: .venv/ gets
# requirements-aarch64.txt instead (the CPU-only torch of PyPI, no CUDA libraries) and the
# extension; the nodes run from the robot's ROS 2 install (colcon build). With
# VECKM_TORCH=system the venv sees the system's packages and uses the torch already installed
# there (JetPack's CUDA torch on a Jetson) instead of installing one; the extension is then built
# with CUDA when that torch has it.
#
#   scripts/setup.sh                 # creates or updates .venv/
#   scripts/setup.sh --with-jazzy    # ... and .venv-jazzy/
#   VECKM_VENV=/path VECKM_JAZZY_VENV=/path2 scripts/setup.sh --with-jazzy
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VECKM_VENV:-$ROOT/.venv}"
JAZZY_VENV="${VECKM_JAZZY_VENV:-$VENV-jazzy}"
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
WITH_JAZZY=0
for argument in "$@"; do
  case "$argument" in
    --with-jazzy) WITH_JAZZY=1 ;;
    *) echo "error: unknown argument '$argument' (known: --with-jazzy)" >&2; exit 2 ;;
  esac
done
PIP_FLAGS=(--disable-pip-version-check --quiet --no-warn-script-location)
# pip warns once per package about this machine's optional local indexes; keep real errors only.
pip_install() { "$PY" -m pip install "${PIP_FLAGS[@]}" "$@" 2> >(grep -v "is ignored: it is neither" >&2); }

say() { printf '[setup %5ss] %s\n' "$SECONDS" "$*"; }
content_hash() {  # hash of the given files' paths and contents
  (cd "$ROOT" && find "$@" -type f ! -name '*.so' ! -path '*/__pycache__/*' -print0 | sort -z \
     | xargs -0 sha256sum) | sha256sum | cut -c1-16
}
stamp_ok() { [ -f "$ENV_DIR/.stamp_$1" ] && [ "$(cat "$ENV_DIR/.stamp_$1")" = "$2" ]; }
stamp_set() { echo "$2" > "$ENV_DIR/.stamp_$1"; }
build_dirs=()
trap 'rm -rf "${build_dirs[@]}"' EXIT

# A Python 3.11 venv at $1 with the packages of requirements file $2 and event_camera_msgs
# built with that venv's ROS toolchain; sets ENV_DIR and PY to it.
setup_ros_env() {
  ENV_DIR="$1"
  local requirements="$2"
  if [ ! -x "$ENV_DIR/bin/python" ]; then
    say "creating $ENV_DIR with $($PYTHON --version)"
    "$PYTHON" -m venv "$ENV_DIR"
  fi
  PY="$ENV_DIR/bin/python"
  "$PY" -c 'import sys; assert sys.version_info[:2] == (3, 11)' 2>/dev/null \
    || { echo "error: $ENV_DIR uses $("$PY" --version); the ROS 2 wheels need Python 3.11:" \
              "delete $ENV_DIR and run again with python3.11 on PATH" >&2; exit 1; }

  # 1. Python packages.
  local req_hash
  req_hash="$(content_hash "$requirements")"
  if ! stamp_ok requirements "$req_hash"; then
    say "installing Python packages of $requirements into $ENV_DIR"
    pip_install --upgrade pip
    pip_install -r "$ROOT/$requirements"
    # Ten of the message wheels' CMake configs carry include paths of the machine that built
    # them.
    local py_include np_include
    py_include="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
    np_include="$("$PY" -c 'import numpy; print(numpy.get_include())')"
    sed -i -e "s#/opt/python/cp311-cp311/lib/python3.11/site-packages/numpy/_core/include#$np_include#g" \
           -e "s#/opt/python/cp311-cp311/include/python3.11#$py_include#g" \
           "$ENV_DIR"/share/*/cmake/*.cmake
    stamp_set requirements "$req_hash"
    rm -f "$ENV_DIR"/.stamp_event_camera_msgs "$ENV_DIR"/.stamp_package
  fi

  # 2. event_camera_msgs, built from its interface definition with the ROS toolchain in the venv.
  local msgs_hash build_dir
  msgs_hash="$(content_hash interfaces/event_camera_msgs)"
  if ! stamp_ok event_camera_msgs "$msgs_hash"; then
    say "building event_camera_msgs from interfaces/event_camera_msgs for $ENV_DIR"
    build_dir="$(mktemp -d)"
    build_dirs+=("$build_dir")
    (
      export AMENT_PREFIX_PATH="$ENV_DIR" PATH="$ENV_DIR/bin:$PATH"
      cmake -S "$ROOT/interfaces/event_camera_msgs" -B "$build_dir" \
        -DCMAKE_PREFIX_PATH="$ENV_DIR" -DCMAKE_INSTALL_PREFIX="$ENV_DIR" \
        -DPython3_EXECUTABLE="$PY" -DBUILD_TESTING=OFF > "$build_dir/configure.log" 2>&1 \
        && cmake --build "$build_dir" -j"$(nproc)" > "$build_dir/build.log" 2>&1 \
        && cmake --install "$build_dir" > "$build_dir/install.log" 2>&1
    ) || { tail -n 40 "$build_dir"/*.log >&2
           echo "error: event_camera_msgs build failed for $ENV_DIR (log above)" >&2; exit 1; }
    stamp_set event_camera_msgs "$msgs_hash"
  fi
}

# aarch64: a Python 3.11 venv with requirements-aarch64.txt (torch: the CPU-only wheel of PyPI;
# the CUDA torch wheels of PyPI would pull the CUDA libraries onto a CPU-only board). With
# VECKM_TORCH=system: a venv over the system's site-packages and the torch found there (e.g.
# JetPack's on a Jetson), checked against the versions the extension is built and tested with.
setup_aarch64_env() {
  ENV_DIR="$VENV"
  PY="$ENV_DIR/bin/python"
  local requirements=requirements-aarch64.txt venv_flags=() req_hash
  if [ "${VECKM_TORCH:-pypi}" = system ]; then
    venv_flags=(--system-site-packages)
    "$PYTHON" -c 'import torch' 2>/dev/null \
      || { echo "error: VECKM_TORCH=system but $PYTHON does not import torch" >&2; exit 1; }
    # Tested: 2.10 (aarch64, emulated), 2.13 (x86-64); other versions are built but untested.
    "$PYTHON" -c 'import torch; v = torch.__version__; v.split(".")[:2] in (["2", "10"], ["2", "13"]) or print(f"note: the system torch {v} is not one the extension is tested with (2.10, 2.13); building against it anyway")' >&2
  fi
  if [ ! -x "$PY" ]; then
    say "creating $ENV_DIR with $($PYTHON --version) (aarch64${venv_flags:+, system site-packages})"
    "$PYTHON" -m venv "${venv_flags[@]}" "$ENV_DIR"
  fi
  req_hash="$(content_hash "$requirements")-${VECKM_TORCH:-pypi}"
  if ! stamp_ok requirements "$req_hash"; then
    say "installing $requirements into $ENV_DIR (aarch64: no ROS 2 wheels; torch ${VECKM_TORCH:-from PyPI, CPU-only})"
    pip_install --upgrade pip
    if [ "${VECKM_TORCH:-pypi}" = system ]; then
      pip_install -r <(grep -vE '^torch\b' "$ROOT/$requirements")
    else
      pip_install -r "$ROOT/$requirements"
    fi
    stamp_set requirements "$req_hash"
    rm -f "$ENV_DIR"/.stamp_package
  fi
}

# 0. xmllint for the ament_xmllint test (Debian's libxml2-utils), when we may install packages.
if ! command -v xmllint >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    say "installing xmllint (Debian libxml2-utils)"
    { apt-get install -y -q libxml2-utils || { apt-get update -q && apt-get install -y -q libxml2-utils; }; } \
      > /dev/null 2>&1 || echo "warning: could not install libxml2-utils; the xmllint test will skip" >&2
  else
    echo "note: xmllint missing (sudo apt-get install libxml2-utils); the xmllint test will skip" >&2
  fi
fi

MACHINE="$(uname -m)"
if [ "$MACHINE" = aarch64 ] || [ "$MACHINE" = arm64 ]; then
  setup_aarch64_env
else
  # 1-2. Kilted: packages and event_camera_msgs.
  setup_ros_env "$VENV" requirements.txt
fi

# 3. This package (editable) and its two extensions.
EXTENSIONS='veckm_flow_ros._C, veckm_flow_ros._egomotion'
pkg_hash="$(content_hash setup.py setup.cfg csrc)"
if ! stamp_ok package "$pkg_hash" || ! "$PY" -c "import torch, $EXTENSIONS" 2>/dev/null; then
  say "building the veckm_flow_ros extension (csrc/) and installing the package"
  pip_install --no-build-isolation --no-deps -e "$ROOT"
  stamp_set package "$pkg_hash"
fi
ros_imports="rclpy, event_camera_msgs.msg, "
[ "$MACHINE" = x86_64 ] || ros_imports=""
"$PY" -c "import torch, $ros_imports$EXTENSIONS" \
  || { echo "error: the environment in $VENV does not import; delete it and run again" >&2; exit 1; }
say "ready: $VENV ($(du -sh "$VENV" | cut -f1), torch $("$PY" -c 'import torch; print(torch.__version__)'))"

[ "$WITH_JAZZY" = 1 ] || exit 0
[ "$MACHINE" = x86_64 ] || { echo "error: --with-jazzy needs the ROS 2 wheels of PyPI, which" \
                                  "exist for x86-64 only (this machine: $MACHINE)" >&2; exit 1; }
# The extensions of step 3 (built in place, veckm_flow_ros/*.so) serve Jazzy too: same torch
# and Python.
torch_pin() { grep -E '^torch==' "$ROOT/$1" || echo "(no torch== line)"; }
if [ "$(torch_pin requirements.txt)" != "$(torch_pin requirements-jazzy.txt)" ]; then
  echo "error: requirements.txt pins $(torch_pin requirements.txt) but requirements-jazzy.txt" \
       "$(torch_pin requirements-jazzy.txt); the Jazzy venv loads the extension built for" \
       ".venv, so pin the same torch in both" >&2
  exit 1
fi

# 4-5. Jazzy: packages and event_camera_msgs (Jazzy's rosidl generators and type support).
setup_ros_env "$JAZZY_VENV" requirements-jazzy.txt

# 6. This package on the Jazzy venv's path (the checkout itself, as the editable install of 3).
site_packages="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$ROOT" > "$site_packages/veckm_flow_ros_checkout.pth"
"$PY" -c "import torch, rclpy, event_camera_msgs.msg, $EXTENSIONS" \
  || { echo "error: the environment in $JAZZY_VENV does not import (above); delete it and" \
            "run again" >&2; exit 1; }
say "ready: $JAZZY_VENV ($(du -sh "$JAZZY_VENV" | cut -f1), rclpy" \
    "$("$PY" -c 'from importlib.metadata import version as v; print(v("ros-rclpy"), "Fast DDS", v("ros-fastrtps"))'))"
