"""The live row: one schema in one order (the offline row, then the sample, then the live
fields), the stored answer cut at its cap, and the row built once whatever the outcome."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from grader import parse_task
from grader.engine import Result, grade
from grader.rows import LIVE_FIELDS, OFFLINE_FIELDS, TOOL_CALL_FIELDS, Live, answer_row, live_row
from tests.support.rows import without_row_id

TASK = parse_task({"id": "t", "expected": {"name": "f", "arguments": {"x": 1}}})
WITH_CHECKS = parse_task(
    {
        "id": "c",
        "expected": {"name": "f", "arguments": {"x": 1}},
        "checks": [
            {
                "type": "string_check",
                "name": "says_f",
                "operation": "ilike",
                "input": "{{ sample.output_text }}",
                "reference": "f",
            }
        ],
    }
)
ANSWER = '{"name": "f", "arguments": {"x": 1}}'


def live(answer: str | None, cap: int | None, tools: list[dict[str, Any]] | None = None) -> Live:
    return Live(
        request_id="r",
        time="2026-12-02T00:00:00.000000Z",
        model="m",
        upstream="http://u/v1",
        stream=False,
        variant="primary",
        pair_id=None,
        choice=0,
        finish_reason="tool_calls",
        run=None,
        meta={"team": "a"},
        timings={"duration_s": 0.001},
        answer=answer,
        answer_cap=cap,
        tools=tools,
    )


@pytest.mark.parametrize(
    ("answer", "cap", "stored", "truncated"),
    [
        pytest.param(ANSWER, None, ANSWER, False, id="no_cap_keeps_it_whole"),
        pytest.param(ANSWER, len(ANSWER), ANSWER, False, id="exactly_at_the_cap"),
        pytest.param(ANSWER, 5, ANSWER[:5], True, id="past_the_cap_is_cut"),
        pytest.param(ANSWER, 0, "", True, id="a_zero_cap_keeps_nothing"),
        pytest.param(None, 5, None, None, id="capture_off_leaves_both_fields_out"),
    ],
)
def test_the_stored_answer_is_cut_at_its_cap(
    answer: str | None, cap: int | None, stored: str | None, truncated: bool | None
) -> None:
    row = live_row(TASK, grade(TASK, ANSWER), "sha256:x", live(answer, cap))
    assert row.get("answer") == stored
    assert row.get("truncated") == truncated
    assert ("answer" in row) is (answer is not None)


@pytest.mark.parametrize("task", [TASK, WITH_CHECKS], ids=["tool_call_task", "task_with_checks"])
@pytest.mark.parametrize("tools", [None, [{"type": "function"}]], ids=["no_tools", "tools_kept"])
def test_a_live_row_is_the_offline_row_then_the_sample_then_the_live_fields(
    task: Any, tools: list[dict[str, Any]] | None
) -> None:
    outcome = grade(task, ANSWER)
    row = live_row(task, outcome, "sha256:x", live(ANSWER, 100, tools))
    offline = answer_row(task, outcome, "sha256:x")
    sample = ["sample_id", "answer", "truncated"] + (["tools"] if tools is not None else [])
    assert list(row) == list(offline) + sample + list(LIVE_FIELDS)
    assert {k: row[k] for k in offline if k != "row_id"} == without_row_id(offline)
    top_level_call = [f for f in TOOL_CALL_FIELDS if f in row]
    assert top_level_call == ([] if task.has_checks else list(TOOL_CALL_FIELDS))
    assert [f for f in OFFLINE_FIELDS if f in row] == list(offline)
    assert row["meta"] == {"team": "a"}
    assert row["timings"] == {"duration_s": 0.001}
    assert row["passed"] is (row["result"] == "pass")
    assert row["staleSchemaUsed"] is (row["result"] == "stale")


@pytest.mark.parametrize("task", [TASK, WITH_CHECKS], ids=["tool_call_task", "task_with_checks"])
@pytest.mark.parametrize("result", ["pass", "fail", "stale", "error"])
def test_a_rows_passed_and_stale_flag_are_its_outcomes(task: Any, result: Result) -> None:
    """The row derives both from ``result`` itself: they must read as the outcome's do."""
    outcome = replace(grade(task, ANSWER), result=result)
    row = answer_row(task, outcome, "sha256:x")
    assert (row["result"], row["passed"], row["staleSchemaUsed"]) == (
        result,
        outcome.passed,
        outcome.stale_schema_used,
    )
    assert type(row["passed"]) is type(outcome.passed)
