"""``gradeproxy import bfcl``: BFCL entries become tasks whose checks read the possible answer
as BFCL's checker does, and whose reference fixtures pass validate-tasks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gradeproxy.cli import main
from grader.checks import CheckContext, Sample
from grader.engine import checks_of
from grader.importers.bfcl import BfclImportError, convert, openai_schema, tool_name
from grader.loader import load_tasks, parse_task
from tests.support.checks import call, wire

FUNCTION = {
    "name": "math.hypot",
    "description": "Hypotenuse.",
    "parameters": {
        "type": "dict",
        "properties": {
            "x": {"type": "integer"},
            "y": {"type": "integer"},
            "z": {"type": "float"},
            "unit": {"type": "string"},
        },
        "required": ["x", "y"],
    },
}
QUESTION = {"id": "simple_python_1", "question": [[]], "function": [FUNCTION]}
ANSWER = {
    "id": "simple_python_1",
    "ground_truth": [{"math.hypot": {"x": [3], "y": [4, ""], "z": ["", 0.0], "unit": ["cm", "m"]}}],
}


def grade(task: dict[str, Any], answer: str) -> bool | None:
    (check,) = checks_of(parse_task(task))
    return check.run(Sample.from_answer(answer), {}, CheckContext()).passed


def hypot(**arguments: Any) -> str:
    return wire(call("math_hypot", **arguments))


@pytest.mark.parametrize(
    ("answer", "passed"),
    [
        pytest.param(hypot(x=3, y=4, unit="cm"), True, id="reference"),
        pytest.param(hypot(x=3, y=4, unit="M"), True, id="other_acceptable_value_bfcl_case"),
        pytest.param(hypot(x=3, y=4, z=0, unit="cm"), True, id="optional_float_given_as_int"),
        pytest.param(hypot(x=3, unit="cm"), False, id="required_by_doc_despite_empty_string"),
        pytest.param(hypot(x=3.0, y=4, unit="cm"), False, id="integer_strict"),
        pytest.param(hypot(x=3, y=4, unit="km"), False, id="wrong_value"),
        pytest.param(wire(call("math.hypot", x=3, y=4, unit="cm")), False, id="dotted_name"),
        pytest.param(
            wire(call("math_hypot", x=3, y=4, unit="cm"), call("math_hypot", x=3, y=4, unit="cm")),
            False,
            id="exactly_one_call",
        ),
    ],
)
def test_simple_entry(answer: str, passed: bool) -> None:
    assert grade(convert(QUESTION, ANSWER), answer) is passed


def test_tools_are_openai_tools_with_rewritten_names() -> None:
    task = convert(QUESTION, ANSWER)
    (tool,) = task["metadata"]["tools"]
    assert tool["function"]["name"] == "math_hypot"
    assert tool["function"]["parameters"]["type"] == "object"
    assert tool["function"]["parameters"]["properties"]["z"] == {"type": "number"}


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        pytest.param(
            {"type": "tuple", "items": {"type": "float"}},
            {"type": "array", "items": {"type": "number"}},
            id="tuple",
        ),
        pytest.param({"type": "any"}, {"type": "string"}, id="any"),
        pytest.param(
            {"type": "dict", "properties": {"a": {"type": "dict"}}},
            {"type": "object", "properties": {"a": {"type": "object"}}},
            id="nested",
        ),
    ],
)
def test_openai_schema(schema: dict[str, Any], expected: dict[str, Any]) -> None:
    assert openai_schema(schema) == expected


def test_tool_name_refuses_what_openai_refuses() -> None:
    with pytest.raises(BfclImportError):
        tool_name("a b")


PARALLEL_Q = {
    "id": "parallel_9",
    "function": [
        {
            "name": "play",
            "parameters": {
                "type": "dict",
                "properties": {"artist": {"type": "string"}, "loud": {"type": "boolean"}},
                "required": ["artist"],
            },
        }
    ],
}
PARALLEL_A = {
    "id": "parallel_9",
    "ground_truth": [{"play": {"artist": ["A"], "loud": [True, ""]}}, {"play": {"artist": ["B"]}}],
}


@pytest.mark.parametrize(
    ("calls", "passed"),
    [
        pytest.param(
            [call("play", artist="B"), call("play", artist="a", loud=True)], True, id="any_order"
        ),
        pytest.param(
            [call("play", artist="A"), call("play", artist="B")], True, id="optional_absent"
        ),
        pytest.param(
            [call("play", artist="A"), call("play", artist="B", loud=True)], False, id="no_leak"
        ),
        pytest.param(
            [call("play", artist="A"), call("play", artist="B"), call("play", artist="B")],
            False,
            id="duplicate",
        ),
    ],
)
def test_parallel_entry(calls: list[dict[str, Any]], passed: bool) -> None:
    assert grade(convert(PARALLEL_Q, PARALLEL_A), wire(*calls)) is passed


def test_irrelevance_entry_expects_no_call() -> None:
    task = convert({"id": "irrelevance_3", "function": [FUNCTION]}, None)
    assert grade(task, "I cannot help with that.") is True
    assert grade(task, hypot(x=1, y=2)) is False


def test_cli_writes_tasks_validate_tasks_accepts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    questions = tmp_path / "q.json"
    answers = tmp_path / "a.json"
    questions.write_text("\n".join(json.dumps(q) for q in (QUESTION, PARALLEL_Q)) + "\n")
    answers.write_text("\n".join(json.dumps(a) for a in (ANSWER, PARALLEL_A)) + "\n")
    out = tmp_path / "tasks.jsonl"
    argv = ["import", "bfcl", "--questions", str(questions), "--answers", str(answers)]
    assert main([*argv, "--out", str(out)]) == 0
    assert len(load_tasks(out)) == 2
    assert main(["validate-tasks", str(out), "--quiet"]) == 0
    assert "2 column(s): 0 problem(s)" in capsys.readouterr().err


def test_cli_refuses_unusable_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    questions = tmp_path / "q.json"
    questions.write_text("{not json\n")
    out = tmp_path / "tasks.jsonl"
    assert main(["import", "bfcl", "--questions", str(questions), "--out", str(out)]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    assert not out.exists()
