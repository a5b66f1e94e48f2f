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
The `veckm-flow` command: one subcommand per module in this package (veckm_flow_ros/cli/).

Each command module defines `register(subparsers)`, which adds its parser with add_command
(its `run(args)` -> exit status runs the command). Commands are imported lazily by name so that a
command's heavy imports (torch, rosbags) cost nothing to the others, and so that main() sets
OMP_WAIT_POLICY before torch is first imported.
"""

import argparse
import importlib
import sys

from veckm_flow_ros.runtime import set_omp_wait_policy


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Show an option's default unless its help already says it or there is none."""

    def _get_help_string(self, action):
        help_text = action.help or ''
        if 'default' in help_text or action.default in (None, False, argparse.SUPPRESS):
            return help_text
        return super()._get_help_string(action)


def add_command(subparsers, name: str, run, summary: str, description: str):
    """Add and return the parser of command `name`: one-line `summary`, `run(args)` runs it."""
    parser = subparsers.add_parser(name, help=summary, description=description,
                                   formatter_class=HelpFormatter)
    parser.set_defaults(func=run)
    return parser


# Order shown in `veckm-flow --help`.
COMMANDS = ('info', 'predict', 'replay', 'evaluate', 'simulate', 'train', 'bench', 'demo',
            'egomotion', 'evaluate-egomotion')


def build_parser():
    parser = argparse.ArgumentParser(
        prog='veckm-flow',
        description='Per-event normal flow for event cameras (VecKM encoding + MLP).')
    subparsers = parser.add_subparsers(dest='command', metavar='COMMAND')
    for name in COMMANDS:
        module = name.replace('-', '_')  # evaluate-egomotion -> evaluate_egomotion.py
        importlib.import_module(f'veckm_flow_ros.cli.{module}').register(subparsers)
    return parser


def main(argv=None):
    set_omp_wait_policy()
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, 'func', None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print('interrupted', file=sys.stderr)
        return 130
    except (OSError, ValueError) as error:
        # Expected user errors (bad path, bad bag, bad checkpoint, an output that cannot be
        # written): a message, not a traceback.
        print(f'veckm-flow {args.command}: error: {error}', file=sys.stderr)
        return 1


if __name__ == '__main__':
    sys.exit(main())
