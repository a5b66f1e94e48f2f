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

"""
Fuzz the stream front end and the pipeline for minutes: the long profile of test/test_fuzz.py.

    .venv/bin/python scripts/fuzz_stream.py --minutes 30

Runs the properties of test/test_fuzz.py (no exception escapes, valid packets kept, stamps
near the input header stamps, no NaN/Inf, no estimator beyond the sensor bound) on fresh
hypothesis cases until the time is up: front-end streams (single hostile packets and
bursts) and, every --pipeline-every rounds, a stream through the pipeline with the shipped
model. Prints a line per minute (cases tried, cases per minute) and a table at the end;
exits 1 at the first failing case (hypothesis prints it, shrunk), 0 otherwise.
"""

import argparse
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / 'test'))

from hypothesis import given, HealthCheck, settings  # noqa: E402
import test_fuzz  # noqa: E402, I100

ROUND = settings(max_examples=50, deadline=None, database=None,
                 suppress_health_check=list(HealthCheck))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--minutes', type=float, default=30.0,
                        help='how long to fuzz [min] (default 30)')
    parser.add_argument('--pipeline-every', type=int, default=4,
                        help='run a pipeline round every this many front-end rounds '
                             '(0 = front end only; default 4)')
    options = parser.parse_args(argv)
    if not options.minutes > 0:
        parser.error(f'--minutes must be > 0, got {options.minutes}')
    counts = {'front end': 0, 'front end bursts': 0, 'pipeline': 0}
    model = None
    if options.pipeline_every:
        from veckm_flow_ros.core.model import load_model
        model = load_model()

    @ROUND
    @given(test_fuzz.hostile_stream())
    def front_end(stream):
        test_fuzz.check_front_end(stream)
        counts['front end'] += 1

    @ROUND
    @given(test_fuzz.hostile_stream(burst=4))
    def front_end_bursts(stream):
        test_fuzz.check_front_end(stream, valid_kept=False)
        counts['front end bursts'] += 1

    @settings(ROUND, max_examples=5)
    @given(test_fuzz.hostile_stream(packets=40))
    def pipeline(stream):
        test_fuzz.check_pipeline(model, stream)
        counts['pipeline'] += 1

    start = time.monotonic()
    end = start + options.minutes * 60.0
    next_report = start + 60.0
    rounds = 0
    while time.monotonic() < end:
        try:
            front_end()
            front_end_bursts()
            if model is not None and rounds % options.pipeline_every == 0:
                pipeline()
        except Exception:  # noqa: B902 - hypothesis printed the shrunk case: report and stop
            elapsed_min = (time.monotonic() - start) / 60.0
            print(f'FAILED after {elapsed_min:.1f} min, {sum(counts.values())} cases: '
                  f'{counts}', flush=True)
            raise
        rounds += 1
        now = time.monotonic()
        if now >= next_report:
            total = sum(counts.values())
            print(f'{(now - start) / 60.0:5.1f} min: {total} cases '
                  f'({total / ((now - start) / 60.0):.0f} per minute) {counts}', flush=True)
            next_report += 60.0
    minutes = (time.monotonic() - start) / 60.0
    print('\n| property set | cases | per minute |\n|---|---|---|')
    for name, count in counts.items():
        print(f'| {name} | {count} | {count / minutes:.0f} |')
    print(f'| all ({minutes:.1f} min, 0 escapes) | {sum(counts.values())} | '
          f'{sum(counts.values()) / minutes:.0f} |')
    return 0


if __name__ == '__main__':
    sys.exit(main())
