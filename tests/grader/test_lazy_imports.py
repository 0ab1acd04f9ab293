"""The command line starts without the libraries only some task sets need.

``gradeproxy grade`` imports the grader's check registry; jsonschema (a good part of the start-up)
is imported when a ``json_schema`` check first builds a validator, asyncio when a judge is
used, yaml when a judge config is read — not before. Checked in a
fresh interpreter, since the test process has long imported everything.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest


def _probe(code: str) -> str:
    """What a fresh interpreter running ``code`` prints (imports are per process)."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout


PROBE = """
import sys

LIBRARIES = ("asyncio", "jsonschema", "referencing", "yaml")
{setup}
print(",".join(sorted(m for m in LIBRARIES if m in sys.modules)))
"""


@pytest.mark.parametrize(
    ("setup", "loaded"),
    [
        pytest.param("import gradeproxy.cli", "", id="command_line"),
        pytest.param(
            "import grader\n"
            "grader.parse_task({'id': 't', 'checks': [{'type': 'tool_call', 'name': 'c', "
            "'expect_call': True}]})",
            "",
            id="tool_call_task",
        ),
        pytest.param(
            "import grader\n"
            "grader.parse_task({'id': 't', 'checks': [{'type': 'json_schema', 'name': 'j', "
            "'target': 'answer', 'schema': {'type': 'object'}}]})",
            "jsonschema,referencing",
            id="json_schema_task_loads_it",
        ),
    ],
)
def test_libraries_are_imported_only_when_needed(setup: str, loaded: str) -> None:
    assert _probe(PROBE.format(setup=setup)).strip() == loaded


# What ``gradeproxy grade`` on a task set of tool-call checks has no use for: the other
# commands, the other check kinds, the episodes and the analyses.
UNNEEDED = (
    "gradeproxy.cli._jobs",  # forking (and its pickle) only for --jobs 2 or more
    "gradeproxy.cli.calibrate",
    "gradeproxy.cli.mcp",
    "gradeproxy.cli.regrade",
    "grader.analysis.calibration",
    "grader.checks.multi",
    "grader.checks.policy",
    "grader.checks.similarity",
    "grader.enforce",  # a task's enforce entry: what the proxy acts on
    "grader.episodes.values",
    "pickle",
    "rapidfuzz",
    "tempfile",  # outputs are written beside their path without it (gradeproxy/cli/_io.py)
)
GRADE_PROBE = """
import sys
from gradeproxy.cli import main
main({argv!r})
print("loaded:" + ",".join(sorted(m for m in {unneeded!r} if m in sys.modules)))
"""


@pytest.mark.parametrize(
    ("kind", "loaded"),
    [
        pytest.param("tool_call", "", id="tool_call_tasks_load_no_other_kind"),
        pytest.param("text_similarity", "grader.checks.similarity,rapidfuzz", id="similarity"),
    ],
)
def test_the_grade_command_imports_only_what_its_tasks_use(
    tmp_path: Path, kind: str, loaded: str
) -> None:
    check = (
        {"type": "tool_call", "name": "c"}
        if kind == "tool_call"
        else {
            "type": "text_similarity",
            "name": "s",
            "input": "{{ sample.output_text }}",
            "reference": "hi",
            "evaluation_metric": "fuzzy_match",
            "pass_threshold": 0.5,
        }
    )
    task = {"id": "t", "expected": {"name": "f", "arguments": {}}, "checks": [check]}
    (tmp_path / "tasks.jsonl").write_text(json.dumps(task) + "\n")
    (tmp_path / "answers.jsonl").write_text(json.dumps({"task_id": "t", "answer": "hi"}) + "\n")
    argv = ["grade", "--tasks", str(tmp_path / "tasks.jsonl")]
    argv += ["--answers", str(tmp_path / "answers.jsonl"), "--out", str(tmp_path / "rows.jsonl")]
    printed = _probe(GRADE_PROBE.format(argv=argv, unneeded=UNNEEDED))
    assert printed.splitlines()[-1] == f"loaded:{loaded}"


# Patterns only some inputs reach, compiled on first use (grader/lazy_pattern.py): a start-up
# and a tool-call task's loading leave them uncompiled.
LAZY_PATTERNS = (
    ("grader.checks.judge", "_DATE"),
    ("grader.checks.judge", "_SNAPSHOT"),
    ("grader.checks.judge", "_REVISION"),
    ("grader.checks.judge", "_VENDOR_PREFIX"),
    ("grader.checks.call_rules", "_SEGMENT"),
    ("grader.checks.call_rules", "_INDEX"),
    ("grader.checks.call_rules", "_BFCL_DROP"),
    ("grader.intake", "_STRING_RUN"),
    ("grader.intake", "_NUMBER"),
    ("grader.intake", "_NUMBER_PREFIX"),
    ("grader.advisory", "_FILE_SOURCE"),
)

LAZY_PROBE = """
import importlib
import gradeproxy.cli.grade
import grader
grader.parse_task({{"id": "t", "expected": {{"name": "f", "arguments": {{"a": "B c"}}}},
    "checks": [{{"type": "tool_call", "name": "c", "strings": {{"default": "bfcl"}},
    "optional": ["arguments.a"]}}]}})
print(importlib.import_module({module!r}).{name}.compiled)
"""


@pytest.mark.parametrize(("module", "name"), LAZY_PATTERNS, ids=[n for _, n in LAZY_PATTERNS])
def test_a_pattern_no_tool_call_task_needs_is_not_compiled(module: str, name: str) -> None:
    assert _probe(LAZY_PROBE.format(module=module, name=name)).strip() == "False"


@pytest.mark.parametrize(
    ("module", "name", "text", "found"),
    [
        pytest.param("grader.checks.judge", "_DATE", "gpt-4o-2024-08-06", True, id="judge_date"),
        pytest.param("grader.checks.call_rules", "_INDEX", "[3]", True, id="path_index"),
        pytest.param("grader.intake", "_NUMBER", "x", False, id="intake_number"),
    ],
)
def test_a_lazy_pattern_matches_as_its_compiled_pattern(
    module: str, name: str, text: str, found: bool
) -> None:
    pattern = getattr(importlib.import_module(module), name)
    assert (pattern().search(text) is not None) is found
    assert pattern.compiled
