"""``gradeproxy grade --jobs N``: the rows, report, printout and exit code of one process.

Run through the console script (``python -m gradeproxy``), as a user runs it: the grading
processes are forked from a process of its own, not from a test worker. The slicing itself
(gradeproxy/cli/_jobs.py) is driven directly below, with real forked children.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gradeproxy.cli._jobs import sliced, split
from grader.json import dumps
from tests.support.files import write_jsonl

TASKS = [
    {
        "id": "a",
        "expected": {"name": "f", "arguments": {"x": 1}},
        "metadata": {"stale": {"name": "f", "arguments": {"y": 1}}, "mutationKind": "renamed"},
    },
    {"id": "b", "expected": {"name": "g", "arguments": {}}, "metadata": {"category": "c1"}},
    {
        "id": "c",
        "checks": [
            {"type": "tool_call", "name": "call", "expected": {"name": "h", "arguments": {"q": 2}}},
            {
                "type": "string_check",
                "name": "polite",
                "operation": "ilike",
                "input": "{{sample.output_text}}",
                "reference": "please",
            },
        ],
    },
]

CALLS = [
    ("a", '{"name": "f", "arguments": {"x": 1}}'),
    ("a", '{"name": "f", "arguments": {"y": 1}}'),
    ("a", "no call"),
    ("b", '{"name": "g", "arguments": {}}'),
    ("b", '{"name": "f", "arguments": {}}'),
    ("c", 'please {"name": "h", "arguments": {"q": 2}}'),
    ("c", '{"name": "h", "arguments": {"q": 3}}'),
]


def graded(n: int) -> list[bytes]:
    """``n`` answers rows cycling through every task and outcome above."""
    return [
        dumps({"task_id": task, "answer": answer, "sample_id": i})
        for i, (task, answer) in ((i, CALLS[i % len(CALLS)]) for i in range(n))
    ]


BAD = [
    b'{"task_id": "zzz", "answer": "x"}',  # unknown task
    b'{"task_id": "a", "answer": "cut',  # cut off
    b"[1, 2]",  # not an object
    b'{"task_id": "a"}',  # no answer
]


def mixed(n: int) -> list[bytes]:
    """Graded rows with the bad ones spread among them (error rows in every slice)."""
    lines = graded(n)
    for i, bad in enumerate(BAD):
        lines.insert(1 + i * n // len(BAD), bad)
    return lines


CASES = [
    pytest.param(graded(40), 2, True, id="rows_and_report_of_two_processes"),
    pytest.param(graded(41), 3, True, id="uneven_slices_in_three"),
    pytest.param(mixed(60), 4, True, id="error_rows_in_every_slice"),
    pytest.param(mixed(30), 3, False, id="report_only_without_out"),
    pytest.param(graded(2), 8, True, id="more_jobs_than_rows"),
    pytest.param(graded(25), 0, True, id="one_per_cpu"),
]

_ROW_ID = re.compile(rb'"row_id":"[0-9a-f-]{36}"')


def _run(folder: Path, answers: Path, jobs: int, out: bool) -> dict[str, Any]:
    folder.mkdir()
    command = [
        sys.executable, "-m", "gradeproxy", "grade", "--tasks", str(folder.parent / "tasks.jsonl"),
        "--answers", str(answers), "--report", str(folder / "report.json"), "--jobs", str(jobs),
    ]  # fmt: skip
    if out:
        command += ["--out", str(folder / "rows.jsonl")]
    done = subprocess.run(command, capture_output=True, timeout=120, check=False)
    rows = folder / "rows.jsonl"
    return {
        "exit": done.returncode,
        "stdout": done.stdout,
        "stderr": done.stderr,
        "rows": _ROW_ID.sub(b"", rows.read_bytes()) if rows.exists() else None,
        "report": (folder / "report.json").read_bytes(),
        "left": sorted(p.name for p in folder.iterdir()),
    }


@pytest.mark.parametrize(("lines", "jobs", "out"), CASES)
def test_jobs_write_what_one_process_writes(
    tmp_path: Path, lines: list[bytes], jobs: int, out: bool
) -> None:
    write_jsonl(tmp_path / "tasks.jsonl", list(TASKS))
    answers = tmp_path / "answers.jsonl"
    answers.write_bytes(b"\n".join(lines) + b"\n")
    one = _run(tmp_path / "one", answers, 1, out)
    many = _run(tmp_path / "many", answers, jobs, out)
    assert many == one
    assert one["exit"] == (1 if any(line in BAD for line in lines) else 0)
    if out:  # no scratch file is left beside the output
        assert one["rows"] is not None
        assert one["rows"].count(b"\n") == len(lines)
        assert many["left"] == ["report.json", "rows.jsonl"]


def test_a_bad_row_under_strict_refuses_the_run_before_any_fork(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "tasks.jsonl", list(TASKS))
    answers = tmp_path / "answers.jsonl"
    answers.write_bytes(b"\n".join(mixed(20)) + b"\n")
    done = subprocess.run(
        [sys.executable, "-m", "gradeproxy", "grade", "--tasks", str(tmp_path / "tasks.jsonl"),
         "--answers", str(answers), "--out", str(tmp_path / "rows.jsonl"), "--jobs", "3",
         "--strict"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "unknown task id 'zzz'" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["answers.jsonl", "tasks.jsonl"]


@pytest.mark.parametrize(
    ("given_jobs", "message"),
    [
        pytest.param("-1", "must be 0 (one per CPU) or more", id="negative"),
        pytest.param("two", "'two' is not a whole number", id="not_a_number"),
    ],
)
def test_a_bad_jobs_count_is_a_usage_error(tmp_path: Path, given_jobs: str, message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gradeproxy", "grade", "--tasks", "t", "--answers", "a",
         f"--jobs={given_jobs}"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert message in done.stderr


@given(st.lists(st.integers(), max_size=40), st.integers(min_value=1, max_value=12))
def test_split_keeps_every_item_in_order_in_nearly_equal_slices(
    items: list[int], jobs: int
) -> None:
    parts = split(items, jobs)
    assert [item for part in parts for item in part] == items
    assert len(parts) == max(1, min(jobs, len(items)))
    assert all(parts) or items == []
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


# --- the slicing, driven directly -------------------------------------------------------------


class Counted:
    """What each process counts of its slice: the sum of its items."""

    def __init__(self) -> None:
        self.total = 0

    def grade(self, part: Sequence[int]) -> Iterator[bytes]:
        for item in part:
            if item < 0:
                raise (OSError if item == -1 else KeyError)(f"item {item}")
            self.total += item
            yield b"%d\n" % item


def _drive(items: list[int], jobs: int, output: Path | None) -> tuple[bytes, int, list[int]]:
    counted = Counted()
    seen: list[int] = []

    def absorb(theirs: int) -> None:
        counted.total += theirs

    chunks = sliced(
        items,
        jobs,
        counted.grade,
        counted.grade,
        lambda: counted.total,
        absorb,
        output,
        lambda part: seen.append(len(part)),
    )
    return b"".join(chunks), counted.total, seen


@pytest.mark.parametrize(("jobs", "keep"), [(2, True), (5, True), (3, False)])
def test_slices_come_back_in_order_with_their_counts(tmp_path: Path, jobs: int, keep: bool) -> None:
    items = list(range(1, 24))
    data, total, seen = _drive(items, jobs, tmp_path / "out.jsonl" if keep else None)
    written = items if keep else split(items, jobs)[0]  # without an output: this process's own
    assert data == b"".join(b"%d\n" % i for i in written)
    assert total == sum(items)
    assert seen == [len(part) for part in split(items, jobs)[1:]]
    assert list(tmp_path.iterdir()) == []  # every scratch file removed


@pytest.mark.parametrize(
    ("bad", "raised", "message"),
    [
        pytest.param(-1, OSError, "item -1", id="a_child_s_os_error_is_the_parent_s"),
        pytest.param(-2, RuntimeError, "KeyError: 'item -2'", id="a_child_s_bug_names_it"),
    ],
)
def test_a_failing_child_fails_the_run_and_leaves_nothing(
    tmp_path: Path, bad: int, raised: type[Exception], message: str
) -> None:
    items = [1, 2, 3, 4, bad, 6]
    with pytest.raises(raised, match=re.escape(message)):
        _drive(items, 2, tmp_path / "out.jsonl")
    assert list(tmp_path.iterdir()) == []


def _children() -> set[str]:
    """The pids of this process's children (every thread's), from /proc."""
    found: set[str] = set()
    for task in Path("/proc/self/task").iterdir():
        found.update((task / "children").read_text().split())
    return found


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads /proc (Linux)")
def test_a_run_abandoned_early_reaps_its_children(tmp_path: Path) -> None:
    before = _children()
    chunks = sliced(
        list(range(10)), 3, Counted().grade, Counted().grade, lambda: 0, lambda _: None,
        tmp_path / "out.jsonl", lambda _: None,
    )  # fmt: skip
    assert next(chunks) == b"0\n"
    assert len(_children() - before) == 2
    chunks.close()
    assert list(tmp_path.iterdir()) == []
    assert _children() - before == set()  # both reaped: none left running or a zombie
