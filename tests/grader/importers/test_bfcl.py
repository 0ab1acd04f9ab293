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
from grader.engine import grade as engine_grade
from grader.engine import grade_async as engine_grade_async
from grader.importers.bfcl import (
    BfclImportError,
    category_of,
    convert,
    openai_schema,
    reference_fails,
    tool_name,
)
from grader.loader import load_tasks, parse_task
from grader.report import Report
from grader.tasks import TaskLoadError
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


# --- categories, relevance, flags (issue 38) -----------------------------------------------

RELEVANCE_Q = {
    "id": "live_relevance_4-4-0",
    "question": [[{"role": "user", "content": "Play some jazz."}]],
    "function": [PARALLEL_Q["function"][0], FUNCTION],
}


@pytest.mark.parametrize(
    ("answer", "passed"),
    [
        pytest.param(wire(call("play", artist="X")), True, id="a_call_passes"),
        pytest.param(wire(call("math_hypot")), True, id="any_function_any_arguments"),
        pytest.param(wire(call("play", artist="X"), call("play", artist="Y")), True, id="calls"),
        pytest.param("I would rather not.", False, id="a_refusal_fails"),
        pytest.param('{"tool_calls": []}', False, id="empty_tool_calls_fail"),
    ],
)
def test_relevance_entry_passes_only_when_the_answer_calls(answer: str, passed: bool) -> None:
    task = convert(RELEVANCE_Q, None)
    assert task["checks"] == [{"type": "tool_call", "name": "a_call", "expect_call": True}]
    assert grade(task, answer) is passed


@pytest.mark.parametrize("entry_id", ["irrelevance_3", "live_irrelevance_7-2-0"])
def test_irrelevance_entries_expect_no_call(entry_id: str) -> None:
    task = convert({"id": entry_id, "function": [FUNCTION]}, None)
    assert grade(task, "I cannot help with that.") is True
    assert grade(task, hypot(x=1, y=2)) is False


@pytest.mark.parametrize(
    ("entry_id", "category"),
    [
        ("simple_python_1", "simple_python"),
        ("parallel_multiple_12", "parallel_multiple"),
        ("live_simple_106-63-0", "live_simple"),
        ("live_parallel_multiple_3-2-1", "live_parallel_multiple"),
        ("multi_turn_miss_param_0", "multi_turn_miss_param"),
        ("memory_0-customer-0", "memory"),
        ("web_search_9", "web_search"),
    ],
)
def test_category_of_an_id(entry_id: str, category: str) -> None:
    assert category_of(entry_id) == category


def test_task_keeps_category_id_and_question() -> None:
    question = {**QUESTION, "question": [[{"role": "user", "content": "Hypotenuse of 3, 4?"}]]}
    metadata = convert(question, ANSWER)["metadata"]
    assert metadata["category"] == "simple_python"
    assert metadata["bfcl_id"] == "simple_python_1"
    assert metadata["question"] == question["question"]
    assert "bfcl_reference_fails" not in metadata


@pytest.mark.parametrize(
    ("category", "names"),
    [
        ("simple_java", "Java"),
        ("simple_javascript", "JavaScript"),
        ("multi_turn_base", "multi-turn"),
        ("multi_turn_long_context", "multi-turn"),
        ("multi_turn_miss_func", "multi-turn"),
        ("multi_turn_miss_param", "multi-turn"),
        ("memory", "memory"),
        ("web_search", "web-search"),
        ("exec_simple", "unknown"),
    ],
)
def test_unsupported_categories_are_refused_by_name(category: str, names: str) -> None:
    with pytest.raises(BfclImportError, match=f"'{category}' is (not supported|unknown)") as err:
        convert({"id": f"{category}_0", "function": [FUNCTION]}, ANSWER)
    assert names in str(err.value)


def _possible(**params: list[Any]) -> dict[str, Any]:
    return {"id": "live_simple_1-1-0", "ground_truth": [{"math.hypot": params}]}


@pytest.mark.parametrize(
    ("possible", "flag"),
    [
        pytest.param(_possible(x=[3], y=[4]), None, id="passable"),
        pytest.param(_possible(x=[3], y=[4], unit=["", "cm"]), None, id="optional_listed"),
        pytest.param(
            _possible(x=[3]), "required parameter 'y' has no possible value", id="req_absent"
        ),
        pytest.param(_possible(x=[3], y=[]), "required parameter 'y'", id="required_empty"),
        pytest.param(_possible(x=[3], y=[""]), "required parameter 'y'", id="required_only_empty"),
        pytest.param(
            _possible(x=[3], y=[4], w=[1]), "parameter 'w' is not in the function doc", id="undoc"
        ),
        pytest.param(_possible(x=[3], y=[4], w=["", 1]), None, id="undocumented_but_optional"),
    ],
)
def test_reference_fails_names_entries_bfcl_cannot_pass(
    possible: dict[str, Any], flag: str | None
) -> None:
    question = {"id": "live_simple_1-1-0", "function": [FUNCTION]}
    found = reference_fails(question, possible)
    assert (found is None) if flag is None else (found is not None and flag in found)
    task = convert(question, possible)
    assert task["metadata"].get("bfcl_reference_fails") == found
    assert grade(task, task["metadata"]["fixtures"][0]["answer"]) is True  # ours passes it


def test_cli_refuses_a_multi_turn_file_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    questions = tmp_path / "BFCL_v4_multi_turn_base.json"
    entry = {"id": "multi_turn_base_0", "question": [[{"role": "user", "content": "ls"}]]}
    questions.write_text(json.dumps(entry) + "\n")
    answers = tmp_path / "answers.json"
    answers.write_text(json.dumps({"id": "multi_turn_base_0", "ground_truth": [["ls()"]]}) + "\n")
    out = tmp_path / "tasks.jsonl"
    argv = ["import", "bfcl", "--questions", str(questions), "--answers", str(answers)]
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "Traceback" not in err
    assert "'multi_turn_base' is not supported" in err
    assert "multi-turn" in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        pytest.param({"id": "simple_python_0"}, "no possible answer", id="no_answer"),
        pytest.param(
            {"id": "parallel_0", "function": "not a list of docs"},
            "not a BFCL AST entry",
            id="odd_shape",
        ),
        pytest.param({"question": []}, "not a BFCL entry", id="no_id"),
    ],
)
def test_cli_refuses_odd_entries_in_one_line(
    entry: dict[str, Any], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    questions = tmp_path / "q.json"
    questions.write_text(json.dumps(entry) + "\n")
    out = tmp_path / "tasks.jsonl"
    assert main(["import", "bfcl", "--questions", str(questions), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert message in err
    assert "Traceback" not in err


def test_summary_counts_categories_and_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    live_q = {"id": "live_simple_1-1-0", "function": [FUNCTION]}
    live_a = _possible(x=[3])
    questions = tmp_path / "q.json"
    answers = tmp_path / "a.json"
    questions.write_text("\n".join(json.dumps(q) for q in (QUESTION, live_q)) + "\n")
    answers.write_text("\n".join(json.dumps(a) for a in (ANSWER, live_a)) + "\n")
    out = tmp_path / "tasks.jsonl"
    argv = ["import", "bfcl", "--questions", str(questions), "--answers", str(answers)]
    assert main([*argv, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "(live_simple: 1, simple_python: 1)" in printed
    assert "1 flagged bfcl_reference_fails" in printed
    assert "live_simple_1-1-0" in printed


def test_report_groups_by_category() -> None:
    tasks = [
        parse_task(convert(QUESTION, ANSWER)),
        parse_task(convert(PARALLEL_Q, PARALLEL_A)),
        parse_task(convert(RELEVANCE_Q, None)),
    ]
    answers = [hypot(x=3, y=4, unit="cm"), wire(call("play", artist="A")), "No."]
    report = Report.of("d", [(t, engine_grade(t, a)) for t, a in zip(tasks, answers, strict=True)])
    per = report.to_dict()["perCategory"]
    assert {k: (v["n"], v["passed"]) for k, v in per.items()} == {
        "simple_python": (1, 1),
        "parallel": (1, 0),
        "live_relevance": (1, 0),
    }
    assert "live_relevance" in report.render_table()
    assert "perCategory" not in Report.of("d", []).to_dict()


@pytest.mark.parametrize(
    ("answer", "code"),
    [
        pytest.param(hypot(x=3, y=4, unit="M"), "match", id="accepted_alternative_value"),
        pytest.param(hypot(x=3, y=4, z=0, unit="cm"), "match", id="optional_given"),
        pytest.param(hypot(x=3.0, y=4, unit="cm"), "type_mismatch", id="strict_integer"),
        pytest.param(hypot(x=3, y=4, unit="km"), "value_mismatch", id="wrong_value"),
    ],
)
def test_outcome_verdict_comes_from_the_checks_own_match(answer: str, code: str) -> None:
    """One match per answer: the verdict is the check's (options applied), so it agrees with
    the column; a second plain match said value_mismatch for an accepted value."""
    task = parse_task(convert(QUESTION, ANSWER))
    outcome = engine_grade(task, answer)
    assert outcome.verdict is not None
    assert outcome.verdict.reason_code == code
    assert (outcome.verdict.score == 1) is (outcome.result == "pass")


@pytest.mark.parametrize(
    "definition",
    [
        {"type": "tool_call", "name": "c", "expect_call": "yes"},
        {"type": "tool_call", "name": "c", "expect_call": True, "strings": "bfcl"},
        {"type": "tool_call", "name": "c", "expect_call": True, "expect_no_call": True},
    ],
)
def test_expect_call_takes_no_other_option(definition: dict[str, Any]) -> None:
    with pytest.raises(TaskLoadError, match="expect_call"):
        parse_task({"id": "t", "checks": [definition]})


class _Passes:
    """A judge client that always answers PASS."""

    async def complete(self, model: str, messages: list[dict[str, str]], temperature: float) -> str:
        return "PASS"


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(hypot(x=3, y=4, unit="M"), id="accepted_alternative_value"),
        pytest.param(hypot(x=3, y=4, unit="km"), id="wrong_value"),
        pytest.param(wire(call("math_hypot", x=3, y=4), call("math_hypot", x=3, y=4)), id="two"),
    ],
)
async def test_verdict_is_the_same_graded_with_a_judge(answer: str) -> None:
    """grade_async (a task with a judge check) gives the verdict grade gives: the check's."""
    task_dict = convert(QUESTION, ANSWER)
    judged = {
        "type": "label_model",
        "name": "polite",
        "model": "judge-2024-08-06",
        "criterion": "is polite",
        "pass_examples": ["Thanks!"],
        "fail_examples": ["Go away."],
    }
    task = parse_task({**task_dict, "checks": [*task_dict["checks"], judged]})
    sync = engine_grade(task, answer)
    judged_outcome = await engine_grade_async(task, answer, judge=_Passes())
    assert judged_outcome.verdict == sync.verdict
    assert sync.verdict is not None
