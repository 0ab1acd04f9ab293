"""Task loading: all or nothing, with errors that name file and line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from grader import TaskLoadError, load_tasks
from grader.json import dumps
from tests.support.paths import REPO

GOOD = {
    "id": "a",
    "expected": {"name": "f", "arguments": {"x": 1}},
    "metadata": {"mutationKind": "k"},
}


def write(path: Path, *lines: object) -> Path:
    path.write_text(
        "".join((line if isinstance(line, str) else dumps(line).decode()) + "\n" for line in lines)
    )
    return path


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        pytest.param(
            [GOOD, GOOD], "tasks.jsonl:2: duplicate task id 'a' (first at", id="duplicate_id"
        ),
        pytest.param([GOOD, "{not json"], "tasks.jsonl:2: not valid JSON", id="invalid_json_line"),
        pytest.param([[1]], "tasks.jsonl:1: a task must be a JSON object", id="not_an_object"),
        pytest.param(
            [{"expected": GOOD["expected"]}],
            "tasks.jsonl:1: 'id' must be a non-empty string",
            id="missing_id",
        ),
        pytest.param(
            [{"id": "a"}], "tasks.jsonl:1: task 'a' has no 'expected' call", id="missing_expected"
        ),
        pytest.param(
            [{"id": "a", "expected": {"tool": "f"}}],
            "'expected' is not a usable call",
            id="expected_without_name",
        ),
        pytest.param(
            [{"id": "a", "expected": {"name": "f", "arguments": [1]}}],
            "'expected' is not a usable call",
            id="expected_arguments_array",
        ),
        pytest.param(
            [{"id": "a", "expected": "prose only"}],
            "'expected' is not a usable call",
            id="expected_string_without_call",
        ),
        pytest.param(
            [{**GOOD, "metadata": {"stale": GOOD["expected"]}}],
            "'metadata.stale' equals 'expected'",
            id="stale_equals_expected",
        ),
        pytest.param(
            [
                {
                    "id": "a",
                    "expected": {"name": "f", "arguments": {"t": "a,b", "d": "PT1H"}},
                    "metadata": {"stale": {"arguments": {"d": "PT60M", "t": "a , b"}, "name": "f"}},
                }
            ],
            "'metadata.stale' equals 'expected'",
            id="stale_equals_expected_after_canon",
        ),
        pytest.param(
            [{**GOOD, "metadata": {"stale": {"name": 1}}}],
            "'metadata.stale' is not a usable call",
            id="stale_unusable",
        ),
        pytest.param(
            [{**GOOD, "metadata": {"mutationKind": 3}}],
            "'metadata.mutationKind' must be a string",
            id="mutation_kind_not_string",
        ),
        pytest.param(
            [{**GOOD, "metadata": []}], "'metadata' must be an object", id="metadata_not_object"
        ),
        pytest.param([], "no tasks defined", id="empty_file"),
    ],
)
def test_bad_task_files_fail_with_file_and_line(
    tmp_path: Path, lines: list[object], message: str
) -> None:
    path = write(tmp_path / "tasks.jsonl", *lines)
    with pytest.raises(TaskLoadError) as caught:
        load_tasks(path)
    assert message in str(caught.value)
    assert str(tmp_path) in str(caught.value)


LINE_A = dumps(GOOD)
LINE_B = dumps({**GOOD, "id": "b"})


@pytest.mark.parametrize(
    ("data", "outcome"),
    [
        pytest.param(LINE_A + b"\r\n" + LINE_B + b"\r\n", ["a", "b"], id="crlf_line_ends"),
        pytest.param(LINE_A + b"\r" + LINE_B + b"\n", ["a", "b"], id="a_lone_cr_ends_a_line"),
        pytest.param(LINE_A + b"\n" + LINE_B + b"\n\n", ["a", "b"], id="final_blank_line"),
        pytest.param(b"\n  \n" + LINE_A + b"\n\t\n", ["a"], id="blank_lines_skipped"),
        pytest.param(LINE_A + b"\n" + LINE_B, ["a", "b"], id="no_final_newline"),
        pytest.param(
            dumps({**GOOD, "metadata": {"note": "one\u2028two\u2029three\x85"}}),
            ["a"],
            id="raw_unicode_line_separators_inside_a_string",
        ),
        pytest.param(
            LINE_A + b"\n" + b'{"id": "\xff"}\n',
            "tasks.jsonl: cannot read task file: 'utf-8' codec can't decode byte 0xff in "
            f"position {len(LINE_A) + 9}",
            id="not_utf8_names_the_file_offset",
        ),
        pytest.param(
            LINE_A + b"\n\n" + b'{"id": 1}\n', "tasks.jsonl:3: 'id' must be", id="line_numbers"
        ),
        pytest.param(LINE_A + b"\n{oops\n", "tasks.jsonl:2: not valid JSON", id="bad_json"),
        pytest.param(
            dumps({**GOOD, "metadata": {"big": 12345678901234567890123}}),
            ["a"],
            id="long_integer_read_exactly",
        ),
    ],
)
def test_task_file_lines_are_read_as_json_lines(
    tmp_path: Path, data: bytes, outcome: list[str] | str
) -> None:
    """JSON Lines: a line ends at "\\n", "\\r\\n" or "\\r" (never at U+2028, which a JSON
    string may hold raw), blank lines are skipped, and errors name the file and line (or the
    byte offset)."""
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(data)
    if isinstance(outcome, str):
        with pytest.raises(TaskLoadError) as caught:
            load_tasks(path)
        assert outcome in str(caught.value)
    else:
        tasks = load_tasks(path)
        assert list(tasks.tasks) == outcome
        if "big" in str(data):
            assert tasks.tasks["a"].metadata["big"] == 12345678901234567890123


def test_expected_may_be_a_json_string_or_wrapped(tmp_path: Path) -> None:
    path = write(
        tmp_path / "t.jsonl",
        {"id": "s", "expected": '{"name": "f", "arguments": {"x": 1}}'},
        {
            "id": "w",
            "expected": {"type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}},
        },
    )
    tasks = load_tasks(path)
    assert tasks.tasks["s"].expected.canonical == tasks.tasks["w"].expected.canonical


def test_folder_loads_every_jsonl_file_sorted(tmp_path: Path) -> None:
    write(tmp_path / "b.jsonl", {**GOOD, "id": "b"})
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub" / "a.jsonl", GOOD)
    (tmp_path / "notes.txt").write_text("ignored")
    tasks = load_tasks(tmp_path)
    assert list(tasks.tasks) == ["b", "a"]
    assert len(tasks.sources) == 2


@pytest.mark.parametrize(
    ("path_name", "message"),
    [("missing.jsonl", "no such task file or folder"), ("empty_dir", "no *.jsonl task files")],
)
def test_missing_sources(tmp_path: Path, path_name: str, message: str) -> None:
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(TaskLoadError, match=re.escape(message)):
        load_tasks(tmp_path / path_name)


def test_digest_ignores_order_and_formatting_but_not_content(tmp_path: Path) -> None:
    other = {**GOOD, "id": "b"}
    first = load_tasks(write(tmp_path / "1.jsonl", GOOD, other)).digest
    reordered = load_tasks(
        write(
            tmp_path / "2.jsonl",
            other,
            '{"metadata":{"mutationKind":"k"},'
            ' "expected": {"arguments": {"x": 1}, "name": "f"}, "id": "a"}',
        )
    ).digest
    changed = load_tasks(
        write(tmp_path / "3.jsonl", GOOD, {**other, "expected": {"name": "g"}})
    ).digest
    assert first == reordered
    assert first != changed
    assert first.startswith("sha256:")


def test_sample_suite_loads() -> None:
    tasks = load_tasks(REPO / "config" / "tasks")
    assert len(tasks) >= 60
    assert len({task.mutation_kind for task in tasks}) >= 6


def test_configmap_folder_loads_each_task_once(tmp_path: Path) -> None:
    """A ConfigMap volume: files in ``..<timestamp>/``, ``..data`` linking to it, and links at
    the top. The hidden copies must not load every task twice."""
    stamped = tmp_path / "..2026_11_30_02_00_00.123"
    stamped.mkdir()
    write(stamped / "tasks.jsonl", GOOD, {**GOOD, "id": "b"})
    (tmp_path / "..data").symlink_to(stamped.name)
    (tmp_path / "tasks.jsonl").symlink_to("..data/tasks.jsonl")
    tasks = load_tasks(tmp_path)
    assert sorted(tasks.tasks) == ["a", "b"]
    assert tasks.sources == (str(tmp_path / "tasks.jsonl"),)
