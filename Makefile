# The two commands of the README. Both set everything up first (scripts/setup.sh, idempotent).
#   make demo   replay the bundled recording through the estimator: pictures + evaluation table
#   make test   the full test suite (real rclpy, real bags, compiled extension) on ROS 2 Kilted,
#               and the ROS-facing tests (marker `ros`) on ROS 2 Jazzy too, as CI runs it
#   make test-aarch64   the package built for aarch64, every CPU test module without ROS run under
#                       emulation (make test runs a subset)
.PHONY: setup setup-jazzy demo test test-aarch64 bench clean

setup:
	bash scripts/setup.sh

# .venv/ (Kilted) and .venv-jazzy/ (Jazzy, requirements-jazzy.txt).
setup-jazzy:
	bash scripts/setup.sh --with-jazzy

demo: setup
	.venv/bin/veckm-flow demo --out-dir out/demo

test: setup-jazzy
	bash scripts/test.sh

# Emulated aarch64 (qemu-user, Debian arm64 Python, PyPI wheels): every CPU test module that needs
# no ROS, and the ops against this machine's build (scripts/check_aarch64.sh; `make test` runs
# its --subset).
test-aarch64: setup
	bash scripts/check_aarch64.sh

bench: setup
	.venv/bin/veckm-flow bench

clean:
	rm -rf build out veckm_flow_ros/*.so *.egg-info
