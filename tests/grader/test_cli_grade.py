"""``gradeproxy grade``: exit codes, outputs, and nothing half-written."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader._json import dumps, loads_exact
from grader.cli import main

TASKS = [
    {
        "id": "a",
        "expected": {"name": "f", "arguments": {"x": 1}},
        "metadata": {
            "stale": {"name": "f", "arguments": {"y": 1}},
            "mutationKind": "field_renamed",
        },
    },
    {
        "id": "b",
        "expected": {"name": "g", "arguments": {}},
        "metadata": {"mutationKind": "enum_value_changed"},
    },
]


def jsonl(path: Path, rows: list[object]) -> Path:
    path.write_bytes(b"".join(dumps(row) + b"\n" for row in rows))
    return path


@pytest.fixture
def tasks_file(tmp_path: Path) -> Path:
    return jsonl(tmp_path / "tasks.jsonl", list(TASKS))


def test_grade_writes_rows_and_report(
    tmp_path: Path, tasks_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    answers = jsonl(
        tmp_path / "answers.jsonl",
        [
            {"task_id": "a", "answer": '{"name": "f", "arguments": {"x": 1}}'},
            {"task_id": "a", "answer": '{"name": "f", "arguments": {"y": 1}}'},
            {"task_id": "b", "answer": "no call"},
            {"task_id": "b", "answer": None},
        ],
    )
    out, report = tmp_path / "out" / "results.jsonl", tmp_path / "report.json"
    code = main(
        [
            "grade",
            "--tasks",
            str(tasks_file),
            "--answers",
            str(answers),
            "--out",
            str(out),
            "--report",
            str(report),
        ]
    )
    assert code == 0
    rows = [loads_exact(line) for line in out.read_text().splitlines()]
    assert [(r["task_id"], r["score"], r["staleSchemaUsed"], r["reason_code"]) for r in rows] == [
        ("a", 1, False, "match"),
        ("a", 0, True, "stale_schema"),
        ("b", 0, False, "no_call"),
        ("b", 0, False, "not_a_string"),
    ]
    assert {"path", "reason", "mutationKind", "tasks_digest"} <= rows[0].keys()
    data = loads_exact(report.read_text())
    assert (
        data["n"],
        data["passed"],
        data["passRate"],
        data["staleSchemaUsed"],
        data["staleSchemaUsedRate"],
    ) == (4, 1, 0.25, 1, 0.25)
    assert data["perMutationKind"]["field_renamed"] == {
        "n": 2,
        "passed": 1,
        "passRate": 0.5,
        "staleSchemaUsed": 1,
        "staleSchemaUsedRate": 0.5,
    }
    assert data["reasons"] == {"match": 1, "no_call": 1, "not_a_string": 1, "stale_schema": 1}
    assert data["tasks_digest"] == rows[0]["tasks_digest"]
    printed = capsys.readouterr().out
    assert "field_renamed" in printed
    assert "TOTAL" in printed


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        pytest.param(
            [{"task_id": "a", "answer": ""}, {"task_id": "zzz", "answer": ""}],
            "answers.jsonl:2: unknown task id 'zzz'",
            id="unknown_task",
        ),
        pytest.param(
            [{"task_id": "a"}], "answers.jsonl:1: no 'answer' field", id="no_answer_field"
        ),
        pytest.param(
            [{"task_id": 1, "answer": ""}],
            "answers.jsonl:1: 'task_id' must be a string",
            id="task_id_not_string",
        ),
        pytest.param(["x"], "answers.jsonl:1: expected an object", id="row_not_object"),
    ],
)
def test_bad_answers_exit_2_and_write_nothing(
    tmp_path: Path,
    tasks_file: Path,
    rows: list[object],
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    answers = jsonl(tmp_path / "answers.jsonl", rows)
    out = tmp_path / "results.jsonl"
    code = main(["grade", "--tasks", str(tasks_file), "--answers", str(answers), "--out", str(out)])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not out.exists()
    assert list(tmp_path.glob(".results.jsonl.*")) == []


def test_unparseable_answers_line_names_file_and_line(
    tmp_path: Path, tasks_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    answers = tmp_path / "answers.jsonl"
    answers.write_text('{"task_id": "a", "answer": ""}\n\n{broken\n')
    assert main(["grade", "--tasks", str(tasks_file), "--answers", str(answers)]) == 2
    assert "answers.jsonl:3: not valid JSON" in capsys.readouterr().err


def test_bad_task_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tasks = jsonl(tmp_path / "tasks.jsonl", [{"id": "a"}])
    answers = jsonl(tmp_path / "answers.jsonl", [])
    assert main(["grade", "--tasks", str(tasks), "--answers", str(answers)]) == 2
    assert "tasks.jsonl:1:" in capsys.readouterr().err


def test_progress_bar_on_request(
    tmp_path: Path, tasks_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    answers = jsonl(tmp_path / "answers.jsonl", [{"task_id": "b", "answer": "x"}] * 50)
    assert main(["grade", "--tasks", str(tasks_file), "--answers", str(answers), "--progress"]) == 0
    assert "100%" in capsys.readouterr().err
