"""``@value_type`` (grader/values.py): frozen where it is checked, a frozen dataclass's
equality and hash at run time, and every per-answer record built with it.

The immutability of an :class:`~grader.engine.Outcome` or a cached
:class:`~grader.checks.CheckResult` (the engine shares one column between rows) is a
type-checker guarantee: the first test runs mypy on assignments to each record's fields and
fails if any is accepted.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import cast

import pytest

from grader.values import value_type

ROOT = Path(__file__).resolve().parents[2]

# (module, record, field, a value of the field's type): one assignment mypy must refuse each.
RECORDS = [
    ("grader.engine", "Outcome", "result", '"pass"'),
    ("grader.verdict", "Verdict", "reason", '"x"'),
    ("grader.toolcall.extract", "Call", "name", '"x"'),
    ("grader.toolcall.extract", "Extraction", "too_deep", "True"),
    ("grader.toolcall.diff", "Difference", "path", '"x"'),
    ("grader.checks._base", "CheckResult", "reason", '"x"'),
    ("grader.checks.sample", "Sample", "answer", '"x"'),
    ("grader.checks.sample", "SampleCall", "name", '"x"'),
    ("grader.checks.sample", "CheckContext", "model", '"x"'),
    ("grader.rows", "Live", "request_id", '"x"'),
    ("proxy.pipeline.capture.chat", "CaptureResult", "model", '"x"'),
    ("proxy.pipeline.capture.sse", "SSEEvent", "data", '"x"'),
    ("grader.toolcall.canon", "CObject", "items", "()"),
    ("grader.toolcall.canon", "CArray", "items", "()"),
    ("grader.api", "GradedAnswer", "tasks_digest", '"x"'),
    ("grader.checks.call_match", "_Key", "want", "None"),
    ("grader.checks.call_match", "Rules", "strings", '"exact"'),
    ("grader.tasks", "CheckDefinition", "name", '"x"'),
    ("grader.tasks", "Task", "id", '"x"'),
    ("grader.tasks", "TaskSet", "digest", '"x"'),
    ("grader.advisory", "Advice", "names", "frozenset()"),
    ("grader.enforce", "Target", "check", '"x"'),
    ("grader.enforce", "EnforceSpec", "fail_closed", "True"),
    ("grader.checks.judge", "JudgeConfig", "retries", "1"),
    ("grader.checks.judge", "JudgeAnswer", "attempts", "1"),
    ("grader.toolcall.canon", "Duration", "seconds", "1"),
    ("grader.checks.tool_call", "ToolCallCheck", "count", '"x"'),
    ("grader.checks.json_schema", "JsonSchemaCheck", "digest", '"x"'),
    ("grader.checks._base", "BaseCheck", "name", '"x"'),
]


def test_mypy_refuses_an_assignment_to_any_field_of_a_value_type(tmp_path: Path) -> None:
    lines = ["from __future__ import annotations", ""]
    for number, (module, record, field, value) in enumerate(RECORDS):
        lines += [
            f"from {module} import {record} as R{number}",
            f"def set{number}(r: R{number}) -> None:",
            f"    r.{field} = {value}",
        ]
    snippet = tmp_path / "assigns.py"
    snippet.write_text("\n".join(lines) + "\n")
    # A process of its own: mypy's main raises the interpreter's recursion limit to 16,384 for
    # good, which would change what every later test's deep recursion does.
    cache = str(ROOT / ".mypy_cache")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-error-summary",
            "--cache-dir",
            cache,
            str(snippet),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    refused = {line.split(":")[1] for line in out.splitlines() if "is read-only" in line}
    # Each assignment is line 3 + 3 * number; every one must be refused, nothing else reported.
    assert refused == {str(5 + 3 * number) for number in range(len(RECORDS))}, out
    assert all("is read-only" in line for line in out.splitlines() if ": error:" in line), out


@pytest.mark.parametrize(("module", "record", "field", "value"), RECORDS)
def test_every_per_answer_record_is_a_slotted_value_type(
    module: str, record: str, field: str, value: str
) -> None:
    cls = getattr(__import__(module, fromlist=[record]), record)
    assert dataclasses.is_dataclass(cls)
    assert "__slots__" in vars(cls)  # no per-instance dict
    assert cls.__hash__ is not None  # hashable, as the frozen dataclass it replaced


@value_type
class Pair:
    left: int
    right: tuple[int, ...] = ()


@value_type
class Noted:
    value: float
    note: str = dataclasses.field(default="", compare=False, repr=False)


@dataclasses.dataclass(frozen=True)
class FrozenNoted:  # what a value type must behave as
    value: float
    note: str = dataclasses.field(default="", compare=False, repr=False)


@value_type
class Single:
    only: object


NAN = float("nan")


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        pytest.param(Pair(1, (2,)), Pair(1, (2,)), True, id="same_fields_equal_and_hash_alike"),
        pytest.param(Noted(1.0, "a"), Noted(1.0, "b"), True, id="a_field_not_compared_is_ignored"),
        pytest.param(Single(NAN), Single(NAN), True, id="the_same_nan_equal_as_in_a_tuple"),
        pytest.param(Single(1), Single(1.0), True, id="one_field_compares_by_value"),
        pytest.param(Pair(1), Pair(2), False, id="a_different_field_differs"),
        pytest.param(Pair(1, (2,)), Pair(1, (3,)), False, id="a_different_default_differs"),
    ],
)
def test_a_value_type_compares_and_hashes_by_its_fields(a: Pair, b: Pair, equal: bool) -> None:
    assert (a == b) is equal
    assert (hash(a) == hash(b)) is equal
    assert len({a, b}) == (1 if equal else 2)


@pytest.mark.parametrize(
    ("value", "frozen"),
    [
        pytest.param(Noted(1.5, "hidden"), FrozenNoted(1.5, "hidden"), id="a_field_not_shown"),
        pytest.param(Noted(NAN), FrozenNoted(NAN), id="a_nan"),
    ],
)
def test_a_value_type_reads_and_hashes_as_the_frozen_dataclass(
    value: Noted, frozen: FrozenNoted
) -> None:
    assert repr(value).replace("Noted", "FrozenNoted", 1) == repr(frozen)
    assert hash(value) == hash(frozen)
    assert (value == cast(object, frozen)) is False  # another class is never equal
    assert (value == value) is (frozen == frozen)


def test_a_value_type_has_no_instance_dict() -> None:
    with pytest.raises(AttributeError):
        Pair(1).other = 2  # type: ignore[attr-defined]
