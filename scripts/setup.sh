#!/usr/bin/env bash
# Set up everything veckm_flow_ros needs in .venv/ at the repository root, from the package
# registries only: torch (CPU build), the ROS 2 wheels (rclpy with Fast DDS), event_camera_msgs
# built from its interface definition, and this package with its compiled extension.
# Idempotent: each step is skipped when what it installs has not changed (hash stamps).
#
#   scripts/setup.sh            # creates or updates .venv/
#   VECKM_VENV=/path scripts/setup.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VECKM_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
PIP_FLAGS=(--disable-pip-version-check --quiet --no-warn-script-location)
# pip warns once per package about this machine's optional local indexes; keep real errors only.
pip_install() { "$PY" -m pip install "${PIP_FLAGS[@]}" "$@" 2> >(grep -v "is ignored: it is neither" >&2); }

say() { printf '[setup %5ss] %s\n' "$SECONDS" "$*"; }
content_hash() {  # hash of the given files' paths and contents
  (cd "$ROOT" && find "$@" -type f ! -name '*.so' ! -path '*/__pycache__/*' -print0 | sort -z \
     | xargs -0 sha256sum) | sha256sum | cut -c1-16
}
stamp_ok() { [ -f "$VENV/.stamp_$1" ] && [ "$(cat "$VENV/.stamp_$1")" = "$2" ]; }
stamp_set() { echo "$2" > "$VENV/.stamp_$1"; }

if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV with $($PYTHON --version)"
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
"$PY" -c 'import sys; assert sys.version_info[:2] == (3, 11), "the ROS 2 wheels need Python 3.11"' \
  || { echo "error: $VENV uses $("$PY" --version); the ROS 2 wheels need Python 3.11" >&2; exit 1; }

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

# 1. Python packages.
req_hash="$(content_hash requirements.txt)"
if ! stamp_ok requirements "$req_hash"; then
  say "installing Python packages (torch CPU, ROS 2 wheels, rosbags, test tools)"
  pip_install --upgrade pip
  pip_install -r "$ROOT/requirements.txt"
  # Ten of the message wheels' CMake configs carry include paths of the machine that built them.
  py_include="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
  np_include="$("$PY" -c 'import numpy; print(numpy.get_include())')"
  sed -i -e "s#/opt/python/cp311-cp311/lib/python3.11/site-packages/numpy/_core/include#$np_include#g" \
         -e "s#/opt/python/cp311-cp311/include/python3.11#$py_include#g" \
         "$VENV"/share/*/cmake/*.cmake
  stamp_set requirements "$req_hash"
  rm -f "$VENV"/.stamp_event_camera_msgs "$VENV"/.stamp_package
fi

# 2. event_camera_msgs, built from its interface definition with the ROS toolchain in the venv.
msgs_hash="$(content_hash interfaces/event_camera_msgs)"
if ! stamp_ok event_camera_msgs "$msgs_hash"; then
  say "building event_camera_msgs from interfaces/event_camera_msgs"
  build_dir="$(mktemp -d)"
  trap 'rm -rf "$build_dir"' EXIT
  (
    export AMENT_PREFIX_PATH="$VENV" PATH="$VENV/bin:$PATH"
    cmake -S "$ROOT/interfaces/event_camera_msgs" -B "$build_dir" \
      -DCMAKE_PREFIX_PATH="$VENV" -DCMAKE_INSTALL_PREFIX="$VENV" \
      -DPython3_EXECUTABLE="$PY" -DBUILD_TESTING=OFF > "$build_dir/configure.log" 2>&1 \
      && cmake --build "$build_dir" -j"$(nproc)" > "$build_dir/build.log" 2>&1 \
      && cmake --install "$build_dir" > "$build_dir/install.log" 2>&1
  ) || { tail -n 40 "$build_dir"/*.log >&2; echo "error: event_camera_msgs build failed" >&2; exit 1; }
  stamp_set event_camera_msgs "$msgs_hash"
fi

# 3. This package (editable) and its extension.
pkg_hash="$(content_hash setup.py setup.cfg csrc)"
if ! stamp_ok package "$pkg_hash" || ! "$PY" -c 'import torch, veckm_flow_ros._C' 2>/dev/null; then
  say "building the veckm_flow_ros extension (csrc/) and installing the package"
  pip_install --no-build-isolation --no-deps -e "$ROOT"
  stamp_set package "$pkg_hash"
fi
"$PY" -c 'import torch, rclpy, event_camera_msgs.msg, veckm_flow_ros._C' \
  || { echo "error: the environment in $VENV does not import; delete it and run again" >&2; exit 1; }
say "ready: $VENV ($(du -sh "$VENV" | cut -f1))"
