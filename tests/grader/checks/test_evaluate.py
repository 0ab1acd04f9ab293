"""grade() and grade_async(): columns, the pass rule, digests, and task loading with checks."""

from __future__ import annotations

from collections import ChainMap, OrderedDict
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from grader import TaskHasChecksError, TaskLoadError, load_tasks, parse_task, score
from grader.checks import (
    CheckContext,
    CheckResult,
    Sample,
    build_check,
    check_digest,
)
from grader.engine import checks_of, grade, grade_async, overall
from grader.json import dumps
from grader.version import GRADER_RULES_VERSION
from tests.support.checks import call, wire
from tests.support.files import write_jsonl


def result(name: str, passed: bool | None) -> CheckResult:
    return CheckResult(name, "t", passed, None, "", "match", None, "d")


@pytest.mark.parametrize(
    ("states", "rule", "passed"),
    [
        pytest.param([True, True], "all", True, id="all_pass"),
        pytest.param([True, False], "all", False, id="all_one_fails"),
        pytest.param([True, None], "all", None, id="all_infra_error_is_none"),
        pytest.param([False, None], "all", None, id="infra_error_beats_fail"),
        pytest.param([False, True], "any", True, id="any_one_passes"),
        pytest.param([False, False], "any", False, id="any_none_pass"),
        pytest.param([True, None], "any", None, id="any_infra_error_is_none"),
        pytest.param([False, True], "c0", False, id="named_column_only"),
        pytest.param([None, True], "c1", True, id="named_column_ignores_other_errors"),
        pytest.param([], "all", None, id="no_columns"),
    ],
)
def test_overall(states: list[bool | None], rule: str, passed: bool | None) -> None:
    assert overall([result(f"c{i}", s) for i, s in enumerate(states)], rule) is passed


def test_pass_rule_naming_a_policy_reads_all_its_columns() -> None:
    results = [result("p.authority_ok", True), result("p.links_ok", False), result("x", True)]
    assert overall(results, "p") is False
    assert overall(results, "p.authority_ok") is True


EXPECTED = call("route_ticket", queue="BILLING")
QUEUE = {
    "type": "string_check",
    "name": "queue",
    "operation": "eq",
    "input": "{{sample.output_tools[0].function.arguments.queue}}",
    "reference": "{{item.queue}}",
}
POLICY = {
    "type": "policy",
    "name": "pol",
    "forbidden_calls": ["close_ticket"],
    "allowed_actions": {"route_ticket": {}},
}


def task(**extra: Any) -> Any:
    return parse_task(
        {
            "id": "t",
            "prompt": "Route it.",
            "expected": EXPECTED,
            "item": {"queue": "BILLING"},
            **extra,
        }
    )


@pytest.mark.parametrize(
    ("answer", "columns", "passed"),
    [
        pytest.param(
            wire(EXPECTED),
            {"queue": True, "pol.authority_ok": True, "pol.no_forbidden_call": True},
            True,
            id="all_pass",
        ),
        pytest.param(
            wire(call("route_ticket", queue="billing")),
            {"queue": False, "pol.authority_ok": True, "pol.no_forbidden_call": True},
            False,
            id="one_column_fails",
        ),
        pytest.param(
            wire(EXPECTED, call("close_ticket")),
            {"queue": True, "pol.authority_ok": False, "pol.no_forbidden_call": False},
            False,
            id="policy_columns_fail",
        ),
        pytest.param(
            "Done!",
            {"queue": False, "pol.authority_ok": True, "pol.no_forbidden_call": True},
            False,
            id="prose_has_no_tool_value_so_the_sample_side_fails",
        ),
    ],
)
async def test_evaluate_columns(
    answer: str, columns: dict[str, bool | None], passed: bool | None
) -> None:
    graded = task(checks=[QUEUE, POLICY])
    for outcome in (grade(graded, answer), await grade_async(graded, answer)):
        assert {r.name: r.passed for r in outcome.checks} == columns
        assert outcome.passed is passed
        assert outcome.to_dict()["passed"] is passed


async def test_task_without_checks_grades_like_score() -> None:
    plain = task()
    for answer in (wire(EXPECTED), wire(call("route_ticket", queue="X")), "prose"):
        outcome = await grade_async(plain, answer)
        (column,) = outcome.checks
        verdict = score(plain, answer)
        assert (column.name, column.reason_code) == ("tool_call", verdict.reason_code)
        assert outcome.passed is (verdict.score == 1)


@pytest.mark.parametrize("answer", [None, 42, {"tool_calls": []}], ids=["none", "int", "dict"])
def test_non_string_answer_fails_every_column(answer: object) -> None:
    outcome = grade(task(checks=[QUEUE, POLICY]), answer)
    assert [r.reason_code for r in outcome.checks] == ["not_a_string"] * 3
    assert outcome.passed is False


def test_a_crashing_check_is_an_infrastructure_error(monkeypatch: pytest.MonkeyPatch) -> None:
    graded = task(checks=[QUEUE])

    def boom(*args: object) -> CheckResult:
        raise RuntimeError("bug")

    monkeypatch.setattr(type(checks_of(graded)[0]), "run", boom)
    outcome = grade(graded, wire(EXPECTED))
    assert (outcome.passed, outcome.checks[0].reason_code) == (None, "check_error")


def test_explicit_item_overrides_the_task_item() -> None:
    graded = task(checks=[QUEUE])
    assert grade(graded, wire(EXPECTED), item={"queue": "CANCEL"}).passed is False


def test_context_reaches_checks() -> None:
    graded = task(checks=[{"type": "json_schema", "name": "s", "schema": "from_request"}])
    tools = [
        {"type": "function", "function": {"name": "route_ticket", "parameters": {"type": "object"}}}
    ]
    assert grade(graded, wire(EXPECTED)).passed is None
    assert grade(graded, wire(EXPECTED), context=CheckContext(tools)).passed is True


def test_digest_is_sha256_of_canonical_definition_and_rules_version() -> None:
    a = build_check(QUEUE)
    b = build_check(dict(reversed(list(QUEUE.items()))))
    c = build_check({**QUEUE, "operation": "ne"})
    assert a.digest == b.digest == check_digest(QUEUE)
    assert a.digest != c.digest
    assert a.digest.startswith("sha256:")
    assert len(a.digest) == 7 + 64
    import hashlib

    from grader.toolcall.canon import canonical_json

    text = GRADER_RULES_VERSION + "\n" + canonical_json(QUEUE)
    assert a.digest == "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def test_results_carry_their_check_digest() -> None:
    graded = task(checks=[QUEUE, POLICY])
    outcome = grade(graded, wire(EXPECTED))
    assert [r.digest for r in outcome.checks] == [graded.checks[0].digest] + [
        graded.checks[1].digest
    ] * 2


@pytest.mark.parametrize(
    ("definition", "message"),
    [
        pytest.param(
            {"id": "a", "checks": [{**QUEUE, "operation": "neq"}]},
            "tasks.jsonl:1: task 'a': checks\\[0\\]: check 'queue': 'operation'",
            id="bad_check_names_file_line_and_field",
        ),
        pytest.param({"id": "a", "checks": []}, "non-empty list", id="empty_checks"),
        pytest.param(
            {"id": "a", "checks": [QUEUE, QUEUE]},
            "two checks yield the column 'queue'",
            id="duplicate_names",
        ),
        pytest.param(
            {"id": "a", "checks": [{"type": "python", "name": "p"}]},
            "is not supported: runs model-written code",
            id="code_execution_refused",
        ),
        pytest.param(
            {"id": "a", "checks": [{"type": "grader", "name": "p"}]},
            "unknown check type 'grader'",
            id="unknown_type",
        ),
        pytest.param(
            {"id": "a", "checks": [{"type": "tool_call", "name": "c"}]},
            "'expected' is missing",
            id="tool_call_needs_expected",
        ),
        pytest.param(
            {"id": "a", "checks": [QUEUE], "pass_rule": "most"},
            "'pass_rule' must be",
            id="bad_pass_rule",
        ),
        pytest.param(
            {"id": "a", "checks": [QUEUE], "metadata": {"stale": EXPECTED}},
            "'metadata.stale' needs an 'expected'",
            id="stale_without_expected",
        ),
        pytest.param({"id": "a"}, "task 'a' has no 'expected' call", id="no_checks_no_expected"),
    ],
)
def test_task_loading_errors(tmp_path: Path, definition: dict[str, Any], message: str) -> None:
    with pytest.raises(TaskLoadError, match=message):
        load_tasks(write_jsonl(tmp_path / "tasks.jsonl", [definition]))


def test_task_without_expected_loads_when_its_checks_need_none(tmp_path: Path) -> None:
    loaded = load_tasks(
        write_jsonl(
            tmp_path / "t.jsonl",
            [{"id": "a", "item": {"queue": "X"}, "checks": [QUEUE], "pass_rule": "queue"}],
        )
    )
    (only,) = loaded
    assert only.expected_call is None
    with pytest.raises(TaskHasChecksError, match=r"grade it with grader\.grade\(\)"):
        score(only, wire(call("f", queue="X")))
    assert grade(only, wire(call("f", queue="X"))).passed is True


def test_sample_round_trips_through_answer() -> None:
    answer = wire(EXPECTED)
    assert Sample.from_answer(answer).answer == answer
    rebuilt = Sample(output_text="", output_tools=Sample.from_answer(answer).output_tools)
    assert score(task(), rebuilt.answer).score == 1


@pytest.mark.parametrize(
    "details",
    [
        pytest.param({"path": "a"}, id="a_dict"),
        pytest.param(MappingProxyType({"path": "a"}), id="a_view_of_a_dict"),
        pytest.param(MappingProxyType(OrderedDict(path="a")), id="a_view_of_an_ordered_dict"),
        pytest.param(MappingProxyType(ChainMap({"path": "a"})), id="a_view_of_a_chain_map"),
    ],
)
def test_a_results_details_are_a_plain_dict_of_its_own_in_the_row(
    details: Mapping[str, Any],
) -> None:
    """Whatever mapping a result holds, its row gets a plain dict (JSON data) the row's reader
    may change without changing the result."""
    column = CheckResult("c", "t", True, None, "", "match", None, "d", details=details)
    row = column.to_dict()
    assert type(row["details"]) is dict
    assert row["details"] == {"path": "a"}
    row["details"]["path"] = "b"
    assert dict(details) == {"path": "a"}
    assert dumps(row)
