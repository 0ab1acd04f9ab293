"""``gradeproxy import bfcl`` on every category file bfcl-eval ships, BFCL's checker the oracle.

For each imported category the importer's own reference answer (the task's ``reference``
fixture) is graded by BFCL's checker (``ast_checker``; ``is_empty_output`` for relevance and
irrelevance) and by the task: both pass it, except on the entries the importer flags
``bfcl_reference_fails`` — BFCL's checker fails exactly those, whatever the answer. Every task
keeps its category, id and question. Refused categories exit 2 with one line naming the
category, no traceback, nothing written. Data is read offline from the installed package;
without bfcl-eval the tests skip locally and fail under ``CI=true`` (scripts/install-bfcl.sh).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gradeproxy.cli import main
from grader.engine import grade
from grader.importers.bfcl import AST_CATEGORIES, CALL_CATEGORIES, NO_CALL_CATEGORIES, REFUSED
from grader.loader import load_tasks
from tests.support.bfcl_checker import MODEL, BfclMissingError, load_bfcl
from tests.support.tools import unavailable

IMPORTED = (*AST_CATEGORIES, *NO_CALL_CATEGORIES, *CALL_CATEGORIES)
# bfcl-eval 2026.3.23: the live entries whose own possible answer its checker cannot pass.
UNPASSABLE = {
    "live_simple_106-63-0",
    "live_simple_112-68-0",
    "live_multiple_507-149-4",
    "live_multiple_862-181-3",
    "live_multiple_964-207-0",
}


@pytest.fixture(scope="module")
def bfcl() -> tuple[Any, Any, Any, Path]:
    try:
        return load_bfcl()
    except BfclMissingError as exc:
        unavailable(f"the BFCL checker: {exc}")


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _import(data: Path, category: str, out: Path) -> int:
    argv = ["import", "bfcl", "--questions", str(data / f"BFCL_v4_{category}.json")]
    answers = data / "possible_answer" / f"BFCL_v4_{category}.json"
    if answers.exists():
        argv += ["--answers", str(answers)]
    return main([*argv, "--out", str(out)])


def _decode(wire: str) -> list[dict[str, Any]]:
    """BFCL's OpenAI FC decode of an answer; a text answer is no call."""
    try:
        value = json.loads(wire)
    except ValueError:
        return []
    return [
        {c["function"]["name"]: json.loads(c["function"]["arguments"])} for c in value["tool_calls"]
    ]


def test_every_shipped_category_is_covered(bfcl: tuple[Any, Any, Any, Path]) -> None:
    data = bfcl[3]
    shipped = {p.name.removeprefix("BFCL_v4_").removesuffix(".json") for p in data.glob("*.json")}
    assert shipped == {*IMPORTED, *REFUSED, "format_sensitivity"}


@pytest.mark.parametrize("category", IMPORTED)
def test_reference_answers_agree_with_bfcl(
    category: str,
    bfcl: tuple[Any, Any, Any, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    checker, language, is_empty, data = bfcl
    out = tmp_path / "tasks.jsonl"
    assert _import(data, category, out) == 0
    summary = capsys.readouterr().out
    questions = {q["id"]: q for q in _jsonl(data / f"BFCL_v4_{category}.json")}
    answers_path = data / "possible_answer" / f"BFCL_v4_{category}.json"
    truths = (
        {a["id"]: a["ground_truth"] for a in _jsonl(answers_path)} if answers_path.exists() else {}
    )
    tasks = load_tasks(out)
    assert len(tasks) == len(questions)
    assert f"({category}: {len(questions)})" in summary
    flagged = set()
    for task in tasks.tasks.values():
        question = questions[task.id]
        assert task.metadata["category"] == category
        assert task.metadata["bfcl_id"] == task.id
        assert task.metadata["question"] == question["question"]
        (reference,) = task.metadata["fixtures"]
        decoded = _decode(reference["answer"])
        if category in NO_CALL_CATEGORIES:
            theirs = bool(is_empty(decoded))
        elif category in CALL_CATEGORIES:
            theirs = not is_empty(decoded)
        else:
            verdict = checker(
                question["function"], decoded, truths[task.id], language.PYTHON, category, MODEL
            )
            theirs = bool(verdict["valid"])
        assert grade(task, reference["answer"]).result == "pass", task.id
        if "bfcl_reference_fails" in task.metadata:
            flagged.add(task.id)
            assert not theirs, f"{task.id} is flagged but BFCL's checker passes its reference"
        else:
            assert theirs, f"BFCL's checker fails the reference of {task.id}"
    assert flagged == {i for i in UNPASSABLE if i.startswith(f"{category}_")}
    if flagged:
        assert f"{len(flagged)} flagged bfcl_reference_fails" in summary


@pytest.mark.parametrize("category", [*REFUSED, "format_sensitivity"])
def test_unsupported_category_exits_2_with_one_line(
    category: str,
    bfcl: tuple[Any, Any, Any, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "tasks.jsonl"
    assert _import(bfcl[3], category, out) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err
    assert "not supported" in lines[0]
    assert category in lines[0]
    assert not out.exists()
