# The two commands of the README. Both set everything up first (scripts/setup.sh, idempotent).
#   make demo   replay the bundled recording through the estimator: pictures + evaluation table
#   make test   the full test suite (real rclpy, real bags, compiled extension), as CI runs it
.PHONY: setup demo test bench clean

setup:
	bash scripts/setup.sh

demo: setup
	.venv/bin/veckm-flow demo --out-dir out/demo

test: setup
	bash scripts/test.sh

bench: setup
	.venv/bin/veckm-flow bench

clean:
	rm -rf build out veckm_flow_ros/*.so *.egg-info
