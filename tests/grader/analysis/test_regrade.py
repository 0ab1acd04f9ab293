"""``gradeproxy regrade``: stored answers graded by a new task set, every changed column
classified, rows that cannot be graded again counted with their reason, no improvement number."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gradeproxy.cli import main
from grader.analysis.regrade import CHANGES, classify
from grader.json import dumps, loads_exact
from tests.support.files import write_jsonl


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def text(value: dict[str, Any]) -> str:
    return dumps(value).decode()


def string(name: str, op: str, reference: str) -> dict[str, Any]:
    return {
        "type": "string_check",
        "name": name,
        "operation": op,
        "input": "{{ sample.output_text }}",
        "reference": reference,
    }


SCHEMA = {"type": "json_schema", "name": "args", "schema": "from_request"}
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
OLD = [
    {"id": "word", "checks": [string("eq", "eq", "yes")]},
    {"id": "call", "expected": call("f", x=1), "metadata": {"mutationKind": "field_renamed"}},
    {"id": "gone", "checks": [string("ok", "eq", "ok")]},
    {"id": "schema", "checks": [SCHEMA]},
    {"id": "stale", "expected": call("f", x=1), "metadata": {"stale": call("f", y=1)}},
    {"id": "name", "expected": call("f", x=1)},
]
NEW = [
    {"id": "word", "checks": [string("eq", "ilike", "yes"), string("nonempty", "ne", "")]},
    {"id": "call", "expected": call("f", y=1), "metadata": {"mutationKind": "field_renamed"}},
    {"id": "schema", "checks": [SCHEMA]},
    {"id": "stale", "expected": call("f", x=1)},
    {"id": "name", "expected": call("g", x=1)},
]
ANSWERS: list[dict[str, Any]] = [
    {"task_id": "word", "answer": "YES", "sample_id": "w1"},
    {"task_id": "word", "answer": "yes", "sample_id": "w2"},
    {"task_id": "call", "answer": text(call("f", x=1)), "sample_id": "c1"},
    {"task_id": "call", "answer": text(call("f", y=1)), "sample_id": "c2"},
    {"task_id": "gone", "answer": "ok", "sample_id": "g1"},
    {"task_id": "schema", "answer": text(call("f", x=1)), "sample_id": "s1", "tools": TOOLS},
    {"task_id": "stale", "answer": text(call("f", y=1)), "sample_id": "st1"},
    {"task_id": "name", "answer": text(call("g", z=9)), "sample_id": "n1"},
]
EXPECTED_LINES = {
    ("w1", "eq", "newly_accepted"),
    ("w1", "nonempty", "check_added"),
    ("w2", "nonempty", "check_added"),
    ("c1", "tool_call", "newly_rejected"),
    ("c2", "tool_call", "newly_accepted"),
    ("g1", None, "task_missing"),
    ("st1", "tool_call", "stale_changed"),
    ("n1", "tool_call", "reason_changed"),
}


@pytest.fixture
def stored(tmp_path: Path) -> Path:
    """Rows graded by the old task set, plus three that cannot be graded again."""
    old = write_jsonl(tmp_path / "old.jsonl", OLD)
    answers = write_jsonl(tmp_path / "answers.jsonl", ANSWERS)
    rows_file = tmp_path / "rows.jsonl"
    args = ["grade", "--tasks", str(old), "--answers", str(answers), "--out", str(rows_file)]
    assert main(args) == 0
    rows = [loads_exact(line) for line in rows_file.read_text().splitlines()]
    no_answer = {k: v for k, v in rows[0].items() if k not in ("answer", "truncated")}
    truncated = {**rows[1], "truncated": True}
    no_tools = {k: v for k, v in rows[5].items() if k != "tools"}
    return write_jsonl(rows_file, [*rows, no_answer, truncated, no_tools])


def test_every_changed_column_is_one_classified_line(
    tmp_path: Path, stored: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    new = write_jsonl(tmp_path / "new.jsonl", NEW)
    out = tmp_path / "diff.jsonl"
    args = ["regrade", "--results", str(stored), "--tasks", str(new), "--out", str(out)]
    assert main([*args, "--json"]) == 0
    lines = [loads_exact(line) for line in out.read_text().splitlines()]
    assert {(x["sample_id"], x["check"], x["change"]) for x in lines} == EXPECTED_LINES
    assert len(lines) == len(EXPECTED_LINES)
    summary = loads_exact(capsys.readouterr().out)
    assert summary["not_regradable"] == {"no_answer": 1, "no_request_tools": 1, "truncated": 1}
    assert summary["missing_tasks"] == {"gone": 1}
    assert (summary["rows"], summary["regraded"]) == (11, 7)
    assert summary["by_check"]["tool_call"] == {
        "newly_accepted": 1,
        "newly_rejected": 1,
        "reason_changed": 1,
        "stale_changed": 1,
    }
    assert summary["by_mutation_kind"]["field_renamed"] == {
        "newly_accepted": 1,
        "newly_rejected": 1,
    }
    assert set(summary["by_change"]) <= set(CHANGES)
    [accepted] = [x for x in lines if x["sample_id"] == "w1" and x["check"] == "eq"]
    assert accepted["before"]["passed"] is False
    assert accepted["after"]["passed"] is True
    assert accepted["digest_before"] != accepted["digest_after"]
    [renamed] = [x for x in lines if x["sample_id"] == "c1"]
    assert renamed["path"] == "arguments.x"
    assert renamed["mutationKind"] == "field_renamed"


def test_the_text_report_counts_per_task_check_and_kind_without_a_net_number(
    tmp_path: Path, stored: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    new = write_jsonl(tmp_path / "new.jsonl", NEW)
    args = ["regrade", "--results", str(stored), "--tasks", str(new)]
    assert main([*args, "--out", str(tmp_path / "d.jsonl")]) == 0
    report = capsys.readouterr().out
    for heading in ("per task:", "per check:", "per mutation kind:"):
        assert heading in report
    assert "  call: newly_accepted 1, newly_rejected 1" in report
    assert "improvement" in report  # says it is never netted; no such figure is printed
    assert "%" not in report


def test_the_same_task_set_changes_nothing(tmp_path: Path, stored: Path) -> None:
    old = write_jsonl(tmp_path / "old2.jsonl", OLD)
    out = tmp_path / "diff.jsonl"
    assert main(["regrade", "--results", str(stored), "--tasks", str(old), "--out", str(out)]) == 0
    assert out.read_text() == ""


@pytest.mark.parametrize(
    ("before", "after", "change"),
    [
        ({"passed": False}, {"passed": True}, "newly_accepted"),
        ({"passed": True}, {"passed": False}, "newly_rejected"),
        ({"passed": True}, {"passed": None}, "now_error"),
        ({"passed": None}, {"passed": False}, "no_longer_error"),
        ({"passed": None}, {"passed": None, "reason_code": "x"}, "reason_changed"),
        ({"passed": False, "reason_code": "stale_schema"}, {"passed": False}, "stale_changed"),
        (None, {"passed": True}, "check_added"),
        ({"passed": True}, None, "check_removed"),
        ({"passed": True, "reason_code": "a"}, {"passed": True, "reason_code": "a"}, None),
    ],
)
def test_classify(
    before: dict[str, Any] | None, after: dict[str, Any] | None, change: str | None
) -> None:
    assert classify(before, after) == change


def test_unreadable_rows_exit_1_with_file_line_and_2_under_strict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"task_id": "word", "checks": []}\n[1]\n')
    new = write_jsonl(tmp_path / "new.jsonl", NEW)
    out = tmp_path / "diff.jsonl"
    args = ["regrade", "--results", str(rows), "--tasks", str(new), "--out", str(out)]
    assert main(args) == 1
    assert "rows.jsonl:2: expected a result row" in capsys.readouterr().err
    lines = [loads_exact(line) for line in out.read_text().splitlines()]
    assert [(d["change"], d.get("reason_code")) for d in lines if d["change"] == "input_error"] == [
        ("input_error", "not_an_object")
    ]
    out.unlink()
    assert main([*args, "--strict"]) == 2
    assert "rows.jsonl:2:" in capsys.readouterr().err
    assert not out.exists()
