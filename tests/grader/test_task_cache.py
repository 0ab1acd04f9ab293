"""The task-set cache (grader/task_cache.py) gives what a fresh load gives, or nothing.

A cached task set must grade every answer exactly as the freshly loaded one does; an entry is
read only while the task files and the grader's code are what they were, only from a private
folder, and a damaged entry is a miss. Task sets that depend on something outside the key
(another check kind, a calibration record) are never stored.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest

import grader
from gradeproxy.cli import main
from grader.task_cache import _pickler, cache_key, code_digest, load_tasks_cached

RULES: dict[str, Any] = {
    "type": "tool_call",
    "name": "call",
    "strings": {"default": "bfcl"},
    "count": "exactly_one",
    "optional": ["arguments.unit"],
    "numbers": {"arguments.base": "integer"},
    "acceptable": {"arguments.unit": ["cm", "centimetres"]},
}
TASKS: list[dict[str, Any]] = [
    {
        "id": "single",
        "expected": {"name": "area", "arguments": {"base": 10, "unit": "cm"}},
        "checks": [RULES],
        "metadata": {"category": "simple_python", "question": "a triangle's area?"},
    },
    {
        "id": "parallel",
        "checks": [
            {
                "type": "tool_call",
                "name": "calls",
                "strings": "bfcl",
                "parallel": [
                    {"name": "weather", "arguments": {"city": "Paris", "days": 3.0}},
                    {"name": "weather", "arguments": {"city": "Rome", "days": 3}},
                ],
            }
        ],
    },
    {"id": "none", "checks": [{"type": "tool_call", "name": "no_call", "expect_no_call": True}]},
    {"id": "plain", "expected": {"name": "f", "arguments": {"x": "PT1H"}}},
]


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def _answer(*calls: dict[str, Any]) -> str:
    return json.dumps({"tool_calls": list(calls)})


ROME = _call("weather", {"city": "rome", "days": 3})
ANSWERS: list[tuple[str, str]] = [
    ("single", _answer(_call("area", {"base": 10, "unit": "centimetres"}))),
    ("single", _answer(_call("area", {"base": 10.0}))),
    ("single", _answer(_call("area", {"base": 10}), _call("area", {"base": 10}))),
    ("parallel", _answer(ROME, _call("weather", {"city": "Paris", "days": 3}))),
    ("parallel", _answer(_call("weather", {"city": "Paris", "days": 3}))),
    ("none", "I cannot help with that."),
    ("none", _answer(_call("f", {}))),
    ("plain", '{"name": "f", "arguments": {"x": "PT60M"}}'),
    ("plain", "no call here"),
]  # fmt: skip


def _write(path: Path, tasks: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(task) + "\n" for task in tasks))
    return path


def _graded(tasks: grader.TaskSet) -> list[dict[str, Any]]:
    rows = grader.grade_run(tasks, ANSWERS).to_dict()["results"]
    return [{k: v for k, v in row.items() if k != "row_id"} for row in rows]


@pytest.fixture
def task_file(tmp_path: Path) -> Path:
    return _write(tmp_path / "tasks.jsonl", TASKS)


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def _entries(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.pickle")) if cache.exists() else []


def test_a_cached_task_set_grades_as_a_fresh_load(task_file: Path, cache: Path) -> None:
    fresh = grader.load_tasks(task_file)
    stored = load_tasks_cached(task_file, cache)  # a miss: loaded, then stored
    assert len(_entries(cache)) == 1
    read = load_tasks_cached(task_file, cache)  # a hit
    assert [t.raw for t in read] == [t.raw for t in fresh]
    assert read.digest == stored.digest == fresh.digest
    assert [t.checks for t in read] == [t.checks for t in fresh]
    assert _graded(read) == _graded(fresh)


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda text: text.replace('"base": 10', '"base": 12'), id="a_value"),
        pytest.param(lambda text: text.replace('"Rome"', '"Roma"'), id="a_parallel_call"),
        pytest.param(lambda text: text + "\n", id="a_blank_line"),
    ],
)
def test_an_edited_task_file_is_loaded_again(task_file: Path, cache: Path, edit: Any) -> None:
    load_tasks_cached(task_file, cache)
    task_file.write_text(edit(task_file.read_text()))
    read = load_tasks_cached(task_file, cache)
    fresh = grader.load_tasks(task_file)
    assert [t.raw for t in read] == [t.raw for t in fresh]
    assert _graded(read) == _graded(fresh)
    assert len(_entries(cache)) == 2  # the old entry is left, never read for this content


def test_the_same_content_at_another_path_is_another_entry(
    task_file: Path, cache: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other.jsonl"
    shutil.copy(task_file, other)
    load_tasks_cached(task_file, cache)
    read = load_tasks_cached(other, cache)
    assert {t.source.rpartition(":")[0] for t in read} == {str(other)}
    assert len(_entries(cache)) == 2


def test_a_changed_grader_source_changes_the_key(tmp_path: Path) -> None:
    copy = tmp_path / "grader"
    shutil.copytree(Path(grader.__file__).parent, copy, ignore=shutil.ignore_patterns("*.pyc"))
    assert code_digest(copy) == code_digest()
    version = copy / "version.py"
    version.write_text(version.read_text() + "\n# an edit\n")
    assert code_digest(copy) != code_digest()


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"not a pickle at all", id="garbage"),
        pytest.param(pickle.dumps(("gradeproxy-task-cache-0", "x", None, [])), id="old_format"),
    ],
)
def test_a_damaged_entry_is_a_miss_and_is_written_again(
    task_file: Path, cache: Path, damage: bytes
) -> None:
    load_tasks_cached(task_file, cache)
    (entry,) = _entries(cache)
    entry.write_bytes(damage)
    read = load_tasks_cached(task_file, cache)
    assert _graded(read) == _graded(grader.load_tasks(task_file))
    assert entry.read_bytes() != damage


@pytest.mark.parametrize(
    ("folder_mode", "entry_mode"),
    [
        pytest.param(0o777, 0o600, id="a_folder_others_can_write"),
        pytest.param(0o700, 0o666, id="an_entry_others_can_write"),
    ],
)
def test_an_entry_others_could_have_written_is_never_read(
    task_file: Path, cache: Path, tmp_path: Path, folder_mode: int, entry_mode: int
) -> None:
    # The entry holds another task set under this file's key: read, it would give wrong tasks.
    other = _write(tmp_path / "other.jsonl", [{"id": "x", "expected": {"name": "g"}}])
    load_tasks_cached(other, cache)
    (foreign,) = _entries(cache)
    form, _, tasks, built = pickle.loads(foreign.read_bytes())
    key = cache_key([task_file])
    entry = cache / f"{key}.pickle"
    with entry.open("wb") as handle:
        _pickler(handle).dump((form, key, tasks, built))
    os.chmod(entry, 0o600)
    assert [t.id for t in load_tasks_cached(task_file, cache)] == ["x"]  # the forged entry
    os.chmod(entry, entry_mode)
    os.chmod(cache, folder_mode)
    read = load_tasks_cached(task_file, cache)
    assert [t.id for t in read] == [t["id"] for t in TASKS]


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param(
            {"id": "schema", "checks": [{"type": "json_schema", "name": "j", "target": "answer",
             "schema": {"type": "object"}}]},
            id="another_check_kind",
        ),
        pytest.param(
            {"id": "text", "expected": {"name": "f"}, "checks": [
                {"type": "tool_call", "name": "call"},
                {"type": "string_check", "name": "s", "input": "{{ sample.output_text }}",
                 "reference": "x", "operation": "eq"}]},
            id="a_string_check_beside",
        ),
    ],
)  # fmt: skip
def test_a_task_set_with_other_checks_is_never_stored(
    tmp_path: Path, cache: Path, extra: dict[str, Any]
) -> None:
    path = _write(tmp_path / "tasks.jsonl", [*TASKS, extra])
    assert len(load_tasks_cached(path, cache)) == len(TASKS) + 1
    assert _entries(cache) == []


def test_the_command_writes_the_same_rows_with_the_cache(
    task_file: Path, cache: Path, tmp_path: Path
) -> None:
    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(json.dumps({"task_id": t, "answer": a}) + "\n" for t, a in ANSWERS))
    outputs = []
    for run, extra in enumerate([[], ["--task-cache", str(cache)], ["--task-cache", str(cache)]]):
        out, report = tmp_path / f"rows{run}.jsonl", tmp_path / f"report{run}.json"
        argv = ["grade", "--tasks", str(task_file), "--answers", str(answers)]
        assert main([*argv, "--out", str(out), "--report", str(report), *extra]) == 0
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        outputs.append(
            ([{k: v for k, v in r.items() if k != "row_id"} for r in rows], report.read_text())
        )
    assert outputs[0] == outputs[1] == outputs[2]
    assert len(_entries(cache)) == 1
