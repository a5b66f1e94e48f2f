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

"""The user documentation agrees with the code and the repository, and reads as a manual."""

import importlib.util
import pathlib
import re

import pytest
from veckm_flow_ros.stream.egomotion_parameters import EGOMOTION_PARAMETERS
from veckm_flow_ros.stream.parameters import PARAMETERS
import yaml

REPO = pathlib.Path(__file__).resolve().parents[1]
README = REPO / 'README.md'
RESULTS = REPO / 'benchmarks' / 'RESULTS.md'
EGOMOTION_NODE_DOC = REPO / 'docs' / 'egomotion_node.md'
PARAMETERS_DOC = REPO / 'docs' / 'parameters.md'
# A front door and a readable record; room is left for rows and dated entries to come.
MAX_LINES = {README: 200, RESULTS: 800}
# Generated or installed folders: never part of the repository's own files.
NOT_IN_REPOSITORY = {'.venv', 'out', 'build', 'install', 'log', 'dist'}
# A single-token code span ending in one of these names a file of the repository.
SOURCE_SUFFIXES = ('py', 'md', 'sh', 'yaml', 'xml', 'cpp', 'h', 'cu', 'cfg', 'toml', 'npz',
                   'mcap', 'msg')
PATH_TOKEN = re.compile(r'^[\w.\-]+(/[\w.\-]*)*$')
BARE_FILE = re.compile(r'^[\w\-]+(\.[\w\-]+)*\.(' + '|'.join(SOURCE_SUFFIXES) + r')$')
CODE_SPAN = re.compile(r'(`+)(.+?)\1')
MARKDOWN_LINK = re.compile(r'\[[^\]]*\]\(([^)\s]+)\)')
FIRST_PERSON = re.compile(r"\bI\b(?!/)|\bI'm\b|\bI've\b|(?i:\b(my|we|our)\b)")
SESSION = re.compile(r'\bsessions?\b', re.IGNORECASE)
# The project's own work history means nothing to a user: issue numbers, who did what when.
WORK_HISTORY = re.compile(r'\bissues? *#?\d+|\bissues \d+/\d+|\bthis time\b|\bthe team\b|'
                          r'\bengineers?\b', re.IGNORECASE)
# Written split so that this file does not match itself.
DESIGN_NOTES = re.compile(r'\bDESIGN' + r'(\.md|\s*§)')
CODE_SUFFIXES = ('.py', '.cpp', '.h', '.cu', '.md', '.sh', '.yaml')


def user_docs():
    """Return the Markdown files a user reads."""
    docs = [README, REPO / 'veckm_flow_ros' / 'models' / 'MODEL_CARD.md']
    docs += sorted((REPO / 'docs').glob('*.md'))
    docs += sorted((REPO / 'benchmarks').glob('*.md'))
    docs += sorted((REPO / 'benchmarks' / 'results').glob('*.md'))
    return [doc for doc in docs if doc.is_file()]


def repository_files():
    """Yield the repository's own files (no virtual environment, build or output folders)."""
    for top in sorted(REPO.iterdir()):
        if top.name.startswith('.') or top.name in NOT_IN_REPOSITORY:
            continue
        if top.is_file():
            yield top
            continue
        for path in top.rglob('*'):
            parts = path.relative_to(REPO).parts
            if path.is_file() and not any(part.startswith('.') or part == '__pycache__'
                                          for part in parts):
                yield path


def strip_fenced_blocks(text: str) -> str:
    """Return the text without fenced code blocks (commands, not references)."""
    return re.sub(r'^```.*?^```', '', text, flags=re.MULTILINE | re.DOTALL)


def markdown_table(text: str, header_start: str):
    """Return the rows (lists of cells) of the first table whose header starts so."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if line.replace(' ', '').startswith(header_start.replace(' ', '')):
            rows = []
            for row in lines[index + 2:]:
                if not row.startswith('|'):
                    break
                rows.append([cell.strip() for cell in row.strip().strip('|').split('|')])
            return rows
    raise AssertionError(f'no table with header {header_start!r} in the README')


def parse_default(cell: str, like):
    """Return the README's written default converted to the type of `like`."""
    text = cell.strip('`').strip()
    if isinstance(like, bool):
        assert text in ('true', 'false'), f'boolean default written as {cell!r}'
        return text == 'true'
    if isinstance(like, str):
        return text.strip('\'"')
    if isinstance(like, list):
        return yaml.safe_load(text)
    number = text.replace(',', '').replace('_', '')
    return int(number) if isinstance(like, int) else float(number)


@pytest.mark.parametrize('doc', list(MAX_LINES), ids=lambda doc: doc.name)
def test_document_is_short(doc):
    """Keep the README a front door and the measurement record readable."""
    lines = doc.read_text(encoding='utf-8').count('\n')
    assert lines <= MAX_LINES[doc], f'{doc.name} has {lines} lines (limit {MAX_LINES[doc]})'


def parameter_table_script():
    """Return scripts/parameter_table.py as a module (it prints the documents' tables)."""
    spec = importlib.util.spec_from_file_location('parameter_table',
                                                  REPO / 'scripts' / 'parameter_table.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_parameter_table_is_the_generated_one():
    """Check the README's and docs/parameters.md's tables: scripts/parameter_table.py's."""
    script = parameter_table_script()
    assert script.parameter_table(PARAMETERS) in README.read_text(encoding='utf-8'), (
        'the README parameter table differs from PARAMETERS; paste the output of '
        'scripts/parameter_table.py')
    assert script.parameter_table(PARAMETERS, long=True) in PARAMETERS_DOC.read_text(
        encoding='utf-8'), ('docs/parameters.md differs from PARAMETERS; paste the output of '
                            'scripts/parameter_table.py flow --long')
    for spec in PARAMETERS:
        summary = spec.summary or spec.description
        assert summary.count('. ') == 0 and len(summary) <= 120, (
            f'{spec.name}: the README row should be one short sentence, got {summary!r}')


@pytest.mark.parametrize('doc, specs', [(PARAMETERS_DOC, PARAMETERS),
                                        (EGOMOTION_NODE_DOC, EGOMOTION_PARAMETERS)],
                         ids=['parameters.md', 'egomotion_node.md'])
def test_parameter_table_matches_the_code(doc, specs):
    """Check a document's full parameter table against its ParameterSpec table."""
    rows = markdown_table(doc.read_text(encoding='utf-8'), '| name | default |')
    written = [(row[0].strip('`'), row[1]) for row in rows]
    assert [name for name, _ in written] == [spec.name for spec in specs], (
        f'{doc.name}: parameter names differ from the code; regenerate the table with '
        'scripts/parameter_table.py --long')
    for (name, cell), spec in zip(written, specs):
        assert parse_default(cell, spec.default) == spec.default, (
            f'{doc.name}: default of {name} is {cell}, the code says {spec.default!r}')


def test_config_yaml_matches_the_code():
    """Check that config/veckm_flow.yaml holds exactly the PARAMETERS defaults."""
    config = yaml.safe_load((REPO / 'config' / 'veckm_flow.yaml').read_text(encoding='utf-8'))
    values = config['/**']['ros__parameters']
    assert list(values) == [spec.name for spec in PARAMETERS]
    for spec in PARAMETERS:
        value = values[spec.name]
        assert type(value) is type(spec.default) and value == spec.default, (
            f'config/veckm_flow.yaml: {spec.name} = {value!r}, the code says {spec.default!r}')


@pytest.mark.parametrize('doc', user_docs(), ids=lambda doc: str(doc.relative_to(REPO)))
def test_docs_are_written_in_the_third_person(doc):
    """Reject first-person words, issue numbers and the team's work history."""
    problems = []
    for number, line in enumerate(doc.read_text(encoding='utf-8').splitlines(), 1):
        for pattern in (FIRST_PERSON, SESSION, WORK_HISTORY):
            for match in pattern.finditer(line):
                problems.append(f'{doc.name}:{number}: {match.group(0)!r} in {line.strip()!r}')
    assert not problems, '\n'.join(problems)


def referenced_paths(doc: pathlib.Path):
    """Yield (path text, resolved path) for each repository path the document names."""
    top_level = {path.name for path in REPO.iterdir()
                 if not path.name.startswith('.') and path.name not in NOT_IN_REPOSITORY}
    text = strip_fenced_blocks(doc.read_text(encoding='utf-8'))
    for match in CODE_SPAN.finditer(text):
        token = match.group(2).strip()
        if not PATH_TOKEN.match(token):
            continue  # commands, topics (~/flow, /diagnostics), globs, placeholders
        if '/' in token:
            if token.split('/')[0] in top_level:
                yield token, REPO / token
        elif BARE_FILE.match(token):
            yield token, None  # a file name: it must exist somewhere in the repository
    for match in MARKDOWN_LINK.finditer(text):
        target = match.group(1).split('#')[0]
        if target and '://' not in target and not target.startswith('mailto:'):
            yield target, (doc.parent / target)


def test_paths_in_docs_exist():
    """Check that every repository path written in the user docs exists."""
    names = {path.name for path in repository_files()}
    missing = []
    for doc in user_docs():
        for token, path in referenced_paths(doc):
            found = token in names if path is None else path.exists()
            if not found:
                missing.append(f'{doc.relative_to(REPO)}: {token}')
    assert not missing, 'paths named in the docs that do not exist:\n' + '\n'.join(missing)


def test_no_file_cites_the_internal_design_notes():
    """The team's design notes are not shipped: cite docs/ instead."""
    citing = []
    for path in repository_files():
        if path.suffix in CODE_SUFFIXES and path.name != pathlib.Path(__file__).name:
            for number, line in enumerate(path.read_text(encoding='utf-8',
                                                         errors='replace').splitlines(), 1):
                if DESIGN_NOTES.search(line):
                    citing.append(f'{path.relative_to(REPO)}:{number}: {line.strip()}')
    assert not citing, 'files citing the internal design notes:\n' + '\n'.join(citing)
