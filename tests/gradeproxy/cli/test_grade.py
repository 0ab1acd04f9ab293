"""``gradeproxy grade``: exit codes, outputs, and nothing half-written."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gradeproxy.cli import grade as grade_command
from gradeproxy.cli import main
from grader.engine import grade
from grader.json import dumps, loads_exact
from tests.support.files import write_jsonl

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


@pytest.fixture
def tasks_file(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "tasks.jsonl", list(TASKS))


def test_grade_writes_rows_and_report(
    tmp_path: Path, tasks_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    answers = write_jsonl(
        tmp_path / "answers.jsonl",
        [
            {"task_id": "a", "answer": '{"name": "f", "arguments": {"x": 1}}'},
            {"task_id": "a", "answer": '{"name": "f", "arguments": {"y": 1}}'},
            {"task_id": "b", "answer": "no call"},
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
    ]
    assert {"path", "reason", "mutationKind", "tasks_digest"} <= rows[0].keys()
    data = loads_exact(report.read_text())
    assert (
        data["n"],
        data["passed"],
        data["passRate"],
        data["staleSchemaUsed"],
        data["staleSchemaUsedRate"],
    ) == (3, 1, 1 / 3, 1, 1 / 3)
    assert data["perMutationKind"]["field_renamed"] == {
        "n": 2,
        "passed": 1,
        "passRate": 0.5,
        "staleSchemaUsed": 1,
        "staleSchemaUsedRate": 0.5,
        "errors": 0,
    }
    assert data["reasons"] == {"match": 1, "no_call": 1, "stale_schema": 1}
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
        pytest.param(
            [{"task_id": "a", "answer": "", "tools": {"type": "function"}}],
            "answers.jsonl:1: 'tools' must be a JSON list",
            id="tools_not_a_list",
        ),
    ],
)
@pytest.mark.parametrize(
    "good_rows_first",
    [
        pytest.param(0, id="bad_row_first"),
        # Streamed, the rows before the bad one are already being written when it is met.
        pytest.param(2, id="bad_row_after_graded_rows"),
    ],
)
def test_bad_answers_under_strict_exit_2_and_write_nothing(
    tmp_path: Path,
    tasks_file: Path,
    rows: list[object],
    message: str,
    good_rows_first: int,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--strict`` keeps the refusal that was the default before issue 37 (a bad row is an
    error row by default: tests/gradeproxy/cli/test_bad_rows.py). A non-string answer is no longer
    refused even so: rule 11 grades it (test_bad_rows.py's rule-11 table). Nothing is written:
    no output, no temporary file, not the folders the output would have gone in."""
    good = [{"task_id": "b", "answer": "no call"}] * good_rows_first
    answers = write_jsonl(tmp_path / "answers.jsonl", [*good, *rows])
    out = tmp_path / "new" / "folder" / "results.jsonl"
    args = ["grade", "--strict", "--tasks", str(tasks_file), "--answers", str(answers)]
    code = main([*args, "--out", str(out)])
    assert code == 2
    name, line, rest = message.split(":", 2)
    assert f"{name}:{int(line) + good_rows_first}:{rest}" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


def test_unparseable_answers_line_names_file_and_line(
    tmp_path: Path, tasks_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    answers = tmp_path / "answers.jsonl"
    answers.write_text('{"task_id": "a", "answer": ""}\n\n{broken\n')
    assert main(["grade", "--tasks", str(tasks_file), "--answers", str(answers)]) == 1
    assert (
        "answers.jsonl:3: not JSON at column 2: expected a key in double quotes or '}'"
        in capsys.readouterr().err
    )
    assert main(["grade", "--strict", "--tasks", str(tasks_file), "--answers", str(answers)]) == 2


@pytest.mark.parametrize(
    ("task", "message"),
    [
        pytest.param({"id": "a"}, "tasks.jsonl:1: task 'a' has no 'expected' call", id="no_call"),
        pytest.param(
            {**TASKS[0], "chekcs": []},
            "tasks.jsonl:1: task 'a': unknown key 'chekcs': did you mean 'checks'?",
            id="typo_gets_a_suggestion",
        ),
        pytest.param(
            {**TASKS[0], "target_state": {"table": "refunds"}},
            "'target_state' is a grader-record key (seed 001): it is graded inside the task's",
            id="known_but_not_graded_yet",
        ),
    ],
)
def test_bad_task_file_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], task: dict[str, object], message: str
) -> None:
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [task])
    answers = write_jsonl(tmp_path / "answers.jsonl", [])
    assert main(["grade", "--tasks", str(tasks), "--answers", str(answers)]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_checks_only_task_is_graded_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A task defined only by its checks (BFCL "expect no call") grades on the CLI."""
    task = {
        "id": "quiet",
        "checks": [{"type": "tool_call", "name": "none", "expect_no_call": True}],
    }
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [task])
    answers = write_jsonl(
        tmp_path / "answers.jsonl",
        [
            {"task_id": "quiet", "answer": "No tool is needed for that."},
            {"task_id": "quiet", "answer": '{"name": "f", "arguments": {}}'},
        ],
    )
    out = tmp_path / "rows.jsonl"
    args = ["grade", "--tasks", str(tasks), "--answers", str(answers), "--out", str(out)]
    assert main(args) == 0
    rows = [loads_exact(line) for line in out.read_text().splitlines()]
    assert [(r["result"], r["checks"][0]["reason_code"]) for r in rows] == [
        ("pass", "match"),
        ("fail", "unexpected_call"),
    ]
    assert all("score" not in r for r in rows)  # the tool-call fields live in the column


def test_progress_bar_on_request(
    tmp_path: Path, tasks_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    answers = write_jsonl(tmp_path / "answers.jsonl", [{"task_id": "b", "answer": "x"}] * 50)
    assert main(["grade", "--tasks", str(tasks_file), "--answers", str(answers), "--progress"]) == 0
    assert "100%" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("answers", "code", "summary"),
    [
        pytest.param(
            [{"task_id": "a", "answer": '{"name": "f", "arguments": {"x": 1}}'}],
            0,
            "1 graded, 1 passed",
            id="all_graded",
        ),
        pytest.param(
            [{"task_id": "a", "answer": "no call"}, {"task_id": "zzz", "answer": "x"}],
            1,
            "1 graded, 0 passed",
            id="an_error_row",
        ),
    ],
)
def test_the_console_script_leaves_with_its_output_whole(
    tmp_path: Path, tasks_file: Path, answers: list[dict[str, str]], code: int, summary: str
) -> None:
    """Run as a process, ``grade`` ends without the interpreter's teardown: its rows, report,
    printed table and exit code must all be there, through a pipe as on a terminal."""
    answers_file = write_jsonl(tmp_path / "answers.jsonl", answers)
    out, report = tmp_path / "rows.jsonl", tmp_path / "report.json"
    # stdout block-buffered, as a pipe makes it by default: what an exit skips unless flushed
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    done = subprocess.run(
        [sys.executable, "-m", "gradeproxy", "grade", "--tasks", str(tasks_file),
         "--answers", str(answers_file), "--out", str(out), "--report", str(report)],
        capture_output=True, text=True, timeout=60, check=False, env=env,
    )  # fmt: skip
    assert done.returncode == code
    assert summary in done.stdout
    assert done.stdout.rstrip().splitlines()[-1].startswith("tasks digest: sha256:")
    assert len(out.read_text().splitlines()) == len(answers)
    assert loads_exact(report.read_text())["input"]["rows"] == len(answers)


GOOD_CALL = '{"name": "f", "arguments": {"x": 1}}'
# Read problems and a grading problem, out of line order were they counted as they are met.
MIXED = [
    dumps({"task_id": "a", "answer": GOOD_CALL}),
    dumps({"task_id": "b", "answer": "boom"}),  # line 2: the grader breaks on it
    dumps({"task_id": "zzz", "answer": GOOD_CALL}),  # line 3: unknown task, refused on reading
    b'{"task_id": "a", "answer": "cut',  # line 4: unreadable
    dumps({"task_id": "b", "answer": "boom"}),  # line 5: the grader breaks again
    dumps({"task_id": "a", "answer": GOOD_CALL, "sample_id": 7}),
]


@pytest.mark.parametrize(
    "flags",
    [
        pytest.param([], id="graded_as_read"),
        pytest.param(["--progress"], id="read_whole_for_a_progress_bar"),
    ],
)
def test_rows_and_problems_come_in_line_order_however_the_file_is_read(
    tmp_path: Path,
    tasks_file: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
) -> None:
    """Graded row by row as it is read (the default) or read whole first (a progress bar
    needs the count), an answers file gives the same rows, and its problems, read and graded
    alike, are listed in line order."""

    def breaks_on_boom(task: Any, answer: object, context: Any) -> Any:
        if answer == "boom":
            raise RuntimeError("a grader bug")
        return grade(task, answer, context)

    monkeypatch.setattr(grade_command, "grade", breaks_on_boom)
    answers = tmp_path / "answers.jsonl"
    answers.write_bytes(b"\n".join(MIXED) + b"\n")
    out, report = tmp_path / "rows.jsonl", tmp_path / "report.json"
    code = main(
        ["grade", "--tasks", str(tasks_file), "--answers", str(answers), "--out", str(out),
         "--report", str(report), *flags]
    )  # fmt: skip
    assert code == 1
    problems = loads_exact(report.read_text())["input"]["problems"]
    assert [(p["line"], p["reason_code"]) for p in problems] == [
        (2, "cannot_grade"),
        (3, "unknown_task"),
        (4, "line_unreadable"),
        (5, "cannot_grade"),
    ]
    rows = [loads_exact(line) for line in out.read_text().splitlines()]
    assert [(r["result"], r.get("reason_code"), r["sample_id"]) for r in rows] == [
        ("pass", "match", None),
        ("error", "cannot_grade", None),
        ("error", "unknown_task", None),
        ("error", "line_unreadable", None),
        ("error", "cannot_grade", None),
        ("pass", "match", 7),
    ]
    assert "2 passed" in capsys.readouterr().out


@pytest.fixture
def collector_settings() -> Iterator[tuple[int, int, int]]:
    """CPython's default thresholds for the test, the process's own put back after it."""
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield gc.get_threshold()
    gc.set_threshold(*before)


# Two calls expected in any order: each answer's calls are parsed and remembered (call_sets.py),
# so some of what one answer builds outlives it, as in a real run.
PARALLEL_TASK = {
    "id": "p",
    "checks": [
        {
            "type": "tool_call",
            "name": "calls",
            "parallel": [
                {"name": "f", "arguments": {"x": 1}},
                {"name": "f", "arguments": {"x": 2}},
            ],
        }
    ],
}


def _parallel_answer(x: int) -> str:
    calls = [{"function": {"name": "f", "arguments": dumps({"x": v}).decode()}} for v in (x, 2)]
    return dumps({"tool_calls": calls}).decode()


@pytest.mark.parametrize(
    ("tasks_valid", "code"),
    [
        pytest.param(True, 0, id="graded"),
        pytest.param(False, 2, id="task_file_refused"),
    ],
)
def test_young_collections_are_rare_while_grading_and_thresholds_come_back(
    tmp_path: Path, collector_settings: tuple[int, int, int], tasks_valid: bool, code: int
) -> None:
    """3,000 answers at CPython's default threshold make a young collection every few hundred
    answers (13 when this was written); the command raises it for the run
    (grader/collector.py) and puts the process's own back, as in-process callers expect."""
    rows = [{"task_id": "p", "answer": _parallel_answer(x)} for x in range(3000)]
    answers = write_jsonl(tmp_path / "answers.jsonl", rows)
    task = PARALLEL_TASK if tasks_valid else {"id": "p"}
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [task])
    seen: list[int] = []

    def young(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 0:
            seen.append(1)

    out = tmp_path / "rows.jsonl"
    gc.callbacks.append(young)
    try:
        command = ["grade", "--tasks", str(tasks), "--answers", str(answers), "--out", str(out)]
        assert main(command) == code
    finally:
        gc.callbacks.remove(young)
    assert gc.get_threshold() == collector_settings
    assert len(seen) <= 3
