"""The command line starts without the libraries only some task sets need.

``gradeproxy grade`` imports the grader's check registry; jsonschema (a good part of the start-up)
is imported when a ``json_schema`` check first builds a validator, asyncio when a judge is
used, yaml when a judge config is read — not before. Checked in a
fresh interpreter, since the test process has long imported everything.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

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
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(setup=setup)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert done.stdout.strip() == loaded


# What ``gradeproxy grade`` on a task set of tool-call checks has no use for: the other
# commands, the other check kinds, the episodes and the analyses.
UNNEEDED = (
    "gradeproxy.cli.calibrate",
    "gradeproxy.cli.mcp",
    "gradeproxy.cli.regrade",
    "grader.analysis.calibration",
    "grader.checks.multi",
    "grader.checks.policy",
    "grader.checks.similarity",
    "grader.episodes.values",
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
    done = subprocess.run(
        [sys.executable, "-c", GRADE_PROBE.format(argv=argv, unneeded=UNNEEDED)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert done.stdout.splitlines()[-1] == f"loaded:{loaded}"
