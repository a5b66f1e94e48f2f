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
Print the node's parameter table as Markdown, from veckm_flow_ros.stream.parameters.

    python3 scripts/parameter_table.py     # paste the output into README.md

test/test_docs.py checks that the README's table has these names and defaults.
"""

from veckm_flow_ros.stream.parameters import PARAMETERS


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


def parameter_table() -> str:
    """Return the Markdown table: name | default | range | unit and description."""
    lines = ['| name | default | range | unit and description |', '|---|---|---|---|']
    for spec in PARAMETERS:
        value_range = '–'
        if spec.value_range is not None:
            low, high = spec.value_range
            value_range = f'{format_bound(low)} – {format_bound(high)}'
        note = '' if spec.read_only else ' Settable at run time.'
        lines.append(f'| `{spec.name}` | `{format_value(spec.default)}` | {value_range} | '
                     f'{spec.description}{note} |')
    return '\n'.join(lines)


if __name__ == '__main__':
    print(parameter_table())
