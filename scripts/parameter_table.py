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
Print a node's parameter table as Markdown, from its table of ParameterSpec.

    python3 scripts/parameter_table.py               # veckm_flow_node, one line each: README.md
    python3 scripts/parameter_table.py flow --long   # the full descriptions: docs/parameters.md
    python3 scripts/parameter_table.py egomotion --long   # docs/egomotion_node.md

test/test_docs.py checks that the README's table is this script's, and that
docs/parameters.md's and docs/egomotion_node.md's tables have these names and defaults.
"""

import sys

from veckm_flow_ros.stream.egomotion_parameters import EGOMOTION_PARAMETERS
from veckm_flow_ros.stream.parameters import PARAMETERS

TABLES = {'flow': PARAMETERS, 'egomotion': EGOMOTION_PARAMETERS}


def format_value(value) -> str:
    """Return a default or range bound as written in config/veckm_flow.yaml."""
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, str):
        return f"'{value}'"
    return repr(value)


def format_bound(value) -> str:
    """Return a range bound with thousands separators (1,000,000)."""
    if isinstance(value, float) and not value.is_integer():
        return f'{value:g}'
    return f'{int(value):,}'


def value_range_text(spec) -> str:
    """Return the range cell: 'low – high', or '–' without a range."""
    if spec.value_range is None:
        return '–'
    low, high = spec.value_range
    return f'{format_bound(low)} – {format_bound(high)}'


def parameter_table(specs=PARAMETERS, long: bool = False) -> str:
    """
    Return the Markdown table of `specs`.

    Short (the README): name | default | range | unit | one-sentence summary. Long (docs/):
    name | default | range | unit and description, the descriptor's full text.
    """
    if long:
        lines = ['| name | default | range | unit and description |', '|---|---|---|---|']
    else:
        lines = ['| name | default | range | unit | description |', '|---|---|---|---|---|']
    for spec in specs:
        note = '' if spec.read_only else ' Settable at run time.'
        cells = [f'`{spec.name}`', f'`{format_value(spec.default)}`', value_range_text(spec)]
        if long:
            cells.append(f'{spec.description}{note}')
        else:
            cells += [spec.unit or '–', f'{spec.summary or spec.description}{note}']
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


if __name__ == '__main__':
    arguments = [argument for argument in sys.argv[1:] if argument != '--long']
    name = arguments[0] if arguments else 'flow'
    if name not in TABLES:
        sys.exit(f'unknown table {name!r}; choose one of {", ".join(TABLES)}')
    print(parameter_table(TABLES[name], long='--long' in sys.argv[1:]))
