"""Capture rows in a results file change nothing the verdict commands say: ``compare`` (table,
``--json``), ``compare --gate`` and ``regrade`` give the same answers with or without them (they
grade nothing), and ``export`` keeps them as rows of their own kind."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from grader.capture import capture_row
from grader.json import loads_exact
from tests.support.rowcommands import answers
from tests.support.rowsets import jsonl, live_rows


def captures(count: int) -> list[dict[str, Any]]:
    return [
        capture_row(
            request={"messages": [{"role": "user", "content": f"q{n}"}], "tools": []},
            route="chat_completions",
            answer={"tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]},
            text="{}",
            mode="keep",
            max_answer_chars=100,
            live={"request_id": f"cap-{n}", "time": f"2026-12-02T10:00:0{n}.000000Z"},
            choice=0,
        )
        for n in range(count)
    ]


def unread(answer: Any) -> Any:
    """An answer with the count of rows read left out (the capture rows are read), and no
    problem row anywhere."""
    if isinstance(answer, dict):
        given = answer.get("input")
        if isinstance(given, dict):
            assert given["problem_rows"] == 0
        return {k: unread(v) for k, v in answer.items() if k != "input"}
    if isinstance(answer, str) and answer.startswith("{"):
        return unread(loads_exact(answer))
    if isinstance(answer, str):
        return re.sub(r"input: \d+ rows?", "input: N rows", answer)
    return answer


def test_capture_rows_change_no_verdict_command(
    tmp_path: Path, tasks_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    graded = live_rows(12)
    plain = tmp_path / "plain.jsonl"
    plain.write_bytes(jsonl(graded))
    mixed = tmp_path / "mixed.jsonl"
    extra = captures(4)
    mixed.write_bytes(jsonl(graded[:5] + extra[:2] + graded[5:] + extra[2:]))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    without = answers([str(plain)], tmp_path / "a", tasks_file, capsys)
    with_captures = answers([str(mixed)], tmp_path / "b", tasks_file, capsys)
    for name in ("compare_json", "gate_live", "gate_runs", "regrade", "regrade_diff"):
        assert unread(with_captures[name]) == unread(without[name]), name
    assert with_captures["compare_json"]["input"]["rows"] == len(graded) + 4  # read, not bad
    assert with_captures["compare"]["code"] == without["compare"]["code"] == 0
    kinds = [row["kind"] for row in with_captures["export_rows"]]
    assert kinds.count("capture") == 4
    assert len(kinds) == len(graded) + 4
