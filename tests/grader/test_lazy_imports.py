"""The command line starts without the libraries only some task sets need.

``gradeproxy grade`` imports the grader's check registry; jsonschema (a good part of the start-up)
is imported when a ``json_schema`` check first builds a validator, asyncio when a judge is
used, yaml when a judge config is read — not before. Checked in a
fresh interpreter, since the test process has long imported everything.
"""

from __future__ import annotations

import subprocess
import sys

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
