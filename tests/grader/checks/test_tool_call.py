"""tool_call: the default check is grading.md's grader; BFCL-style options widen it exactly."""

from __future__ import annotations

from typing import Any

import pytest

from grader import parse_task, score
from grader.checks import CheckDefinitionError, build_check, build_checks, call_sets
from grader.engine import checks_of, grade
from grader.toolcall.extract import call_from_value
from tests.support.checks import call, run, wire

EXPECTED = call("create_event", summary="Retro", duration="PT1H", attendees=["a@x.io"])
STALE = call("create_event", summary="Retro", duration=60, attendees=["a@x.io"])
TASK = parse_task(
    {"id": "t", "expected": EXPECTED, "metadata": {"stale": STALE, "mutationKind": "k"}}
)


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(wire(EXPECTED), id="match_wire"),
        pytest.param(
            wire({**EXPECTED, "arguments": {**EXPECTED["arguments"], "duration": "PT60M"}}),
            id="match_duration_equivalence",
        ),
        pytest.param(wire(STALE), id="stale"),
        pytest.param(wire(call("delete_event", id=1)), id="name_mismatch"),
        pytest.param("I cannot do that.", id="no_call"),
        pytest.param(
            'Sure: {"name": "create_event", "arguments": {"summary": "Retro"}}', id="prose"
        ),
        pytest.param("", id="empty"),
    ],
)
def test_default_check_agrees_with_score(answer: str) -> None:
    (check,) = checks_of(TASK)
    verdict = score(TASK, answer)
    result = run(check, answer)
    assert (result.name, result.type) == ("tool_call", "tool_call")
    assert result.passed is (verdict.score == 1)
    assert result.reason_code == verdict.reason_code
    assert result.details is not None
    assert result.details["staleSchemaUsed"] is verdict.stale_schema_used


def options(**extra: Any) -> Any:
    (check,) = build_checks(
        {"id": "t", "expected": EXPECTED, "checks": [{"type": "tool_call", "name": "c", **extra}]}
    )
    return check


def args(**changes: Any) -> dict[str, Any]:
    arguments = {**EXPECTED["arguments"], **changes}
    return {k: v for k, v in arguments.items() if v is not None}


ACCEPT = {"arguments.summary": ["Retro", "Sprint retro", "Retrospective"]}


@pytest.mark.parametrize(
    ("extra", "arguments", "passed", "code"),
    [
        pytest.param(
            {"acceptable": ACCEPT},
            args(summary="Sprint retro"),
            True,
            "match",
            id="acceptable_alternative",
        ),
        pytest.param(
            {"acceptable": ACCEPT},
            args(summary="Standup"),
            False,
            "value_mismatch",
            id="acceptable_other_value_fails",
        ),
        pytest.param(
            {"acceptable": {"arguments.duration": ["PT2H"]}},
            args(duration="PT120M"),
            True,
            "match",
            id="acceptable_compared_canonically",
        ),
        pytest.param(
            {"optional": ["arguments.attendees"]},
            args(attendees=None),
            True,
            "match",
            id="optional_absent",
        ),
        pytest.param(
            {"optional": ["arguments.attendees"]},
            args(attendees=["b@x.io"]),
            False,
            "value_mismatch",
            id="optional_present_is_graded",
        ),
        pytest.param({}, args(attendees=None), False, "missing", id="without_optional_missing"),
        pytest.param(
            {"optional": ["arguments.attendees"], "acceptable": ACCEPT},
            args(attendees=None, summary="Retrospective"),
            True,
            "match",
            id="optional_and_acceptable_together",
        ),
        pytest.param(
            {"acceptable": {"arguments.room": ["A", "B"]}},
            args(room="A"),
            True,
            "match",
            id="acceptable_listed_value_for_key_expected_lacks",
        ),
        pytest.param(
            {"acceptable": {"arguments.room": ["A", "B"]}},
            args(room="C"),
            False,
            "unexpected",
            id="acceptable_unlisted_value_for_key_expected_lacks",
        ),
    ],
)
def test_acceptable_and_optional(
    extra: dict[str, Any], arguments: dict[str, Any], passed: bool, code: str
) -> None:
    result = run(options(**extra), wire(call("create_event", **arguments)))
    assert (result.passed, result.reason_code) == (passed, code)


def test_stale_still_flagged_with_options() -> None:
    check = build_checks(
        {
            "id": "t",
            "expected": EXPECTED,
            "metadata": {"stale": STALE},
            "checks": [{"type": "tool_call", "name": "c", "optional": ["arguments.attendees"]}],
        }
    )[0]
    assert run(check, wire(STALE)).reason_code == "stale_schema"


A = call("get_weather", city="Lisbon")
B = call("get_weather", city="Porto")
C = call("get_time", city="Lisbon")


@pytest.mark.parametrize(
    ("expected", "answer", "passed", "code"),
    [
        pytest.param([A, B], wire(A, B), True, "match", id="in_order"),
        pytest.param([A, B], wire(B, A), True, "match", id="any_order"),
        pytest.param([A, B], wire(A), False, "parallel_count_mismatch", id="one_missing"),
        pytest.param([A, B], wire(A, B, C), False, "extra_call", id="one_extra"),
        pytest.param([A, B], wire(A, B, A), False, "duplicate_call", id="one_repeated"),
        pytest.param([A, A], wire(A, B), False, "parallel_unmatched", id="duplicate_needs_two"),
        pytest.param([A, B], wire(A, A), False, "parallel_unmatched", id="one_answer_used_once"),
        pytest.param(
            [A],
            json_text := '{"name": "get_weather", "arguments": {"city": "Lisbon"}}',
            True,
            "match",
            id="text_answer_single_call",
        ),
        pytest.param([A, B], "no calls here", False, "parallel_count_mismatch", id="no_calls"),
        pytest.param(
            [A],
            '{"tool_calls": [{"function": {"name": "get_weather", "arguments": "[1]"}}]}',
            False,
            "parallel_unmatched",
            id="unusable_arguments_never_match",
        ),
    ],
)
def test_parallel(expected: list[Any], answer: str, passed: bool, code: str) -> None:
    check = build_check({"type": "tool_call", "name": "p", "parallel": expected})
    result = run(check, answer)
    assert (result.passed, result.reason_code) == (passed, code)


def test_parallel_needs_augmenting_match() -> None:
    """A greedy matcher would pair expected #0 with the first answer and strand expected #1."""
    wide = {"acceptable": {"arguments.city": ["Lisbon", "Porto"]}}
    check = build_check({"type": "tool_call", "name": "p", "parallel": [A, B], **wide})
    # Expected A (accepting Lisbon or Porto) fits both answers; expected B fits only "Porto".
    assert run(check, wire(B, A)).passed is True
    assert run(check, wire(A, call("get_weather", city="Faro"))).passed is False


LISBON_TIME = call("get_time", city="Lisbon")  # A's arguments, written the same, another name


@pytest.mark.parametrize(
    ("first", "earlier", "then", "answer", "passed"),
    [
        pytest.param([A, B], wire(A, B), None, wire(B, A), True, id="same_calls_reordered"),
        pytest.param([A], wire(A), None, wire(LISBON_TIME), False, id="same_text_other_name"),
        pytest.param([A], wire(B), None, wire(A), True, id="after_a_miss"),
        pytest.param([A, B], wire(A, B), [A, C], wire(A, B), False, id="other_expected_calls"),
        pytest.param([C], wire(B), [B], wire(B), True, id="a_miss_is_the_old_checks_alone"),
        pytest.param([B], wire(B), [C], wire(B), False, id="a_fit_is_the_old_checks_alone"),
    ],
)
def test_a_parallel_call_written_as_before_matches_as_it_would_afresh(
    first: list[Any], earlier: str, then: list[Any] | None, answer: str, passed: bool
) -> None:
    """Parallel answer calls are remembered across answers by name and arguments text: an
    answer graded after another that wrote the same calls (to the same check, or ``then``'s)
    gets the result its own calls earn."""
    check = build_check({"type": "tool_call", "name": "p", "parallel": first})
    run(check, earlier)
    if then is not None:
        check = build_check({"type": "tool_call", "name": "p", "parallel": then})
    assert run(check, answer).passed is passed


def test_remembered_calls_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(call_sets, "_REMEMBERED", {})
    monkeypatch.setattr(call_sets, "_REMEMBERED_MAX", 3)
    check = build_check({"type": "tool_call", "name": "p", "parallel": [A]})
    for city in ("Faro", "Braga", "Évora", "Lisbon"):
        run(check, wire(call("get_weather", city=city)))
        assert len(call_sets._REMEMBERED) <= 3
    assert run(check, wire(A)).passed is True


@pytest.mark.parametrize("reloads", [1, 3, 40], ids=lambda n: f"{n}_task_sets")
def test_a_remembered_call_holds_few_expected_calls_however_often_tasks_reload(
    monkeypatch: pytest.MonkeyPatch, reloads: int
) -> None:
    """A call met by each reload's new checks keeps its fit to each: a proxy reloading its
    task file must not keep every replaced task set's expected calls alive through it."""
    monkeypatch.setattr(call_sets, "_REMEMBERED", {})
    monkeypatch.setattr(call_sets, "FITS_MAX", 8)
    for _ in range(reloads):
        check = build_check({"type": "tool_call", "name": "p", "parallel": [A, B]})
        assert run(check, wire(B, A)).passed is True
    remembered = list(call_sets._REMEMBERED.values())
    assert len(remembered) == 2
    assert all(len(c.fits) <= min(2 * reloads, 8) for c in remembered)
    assert run(check, wire(A, B)).passed is True


@pytest.mark.parametrize(
    ("extra", "kept"),
    [
        pytest.param(0, True, id="a_short_call_is_remembered"),
        pytest.param(call_sets.REMEMBERED_CHARS, False, id="a_long_call_never_is"),
    ],
)
def test_only_short_calls_are_remembered(
    monkeypatch: pytest.MonkeyPatch, extra: int, kept: bool
) -> None:
    monkeypatch.setattr(call_sets, "_REMEMBERED", {})
    check = build_check({"type": "tool_call", "name": "p", "parallel": [A]})
    answer = call("get_weather", city="Faro" + "o" * extra)
    assert run(check, wire(answer)).passed is False
    assert bool(call_sets._REMEMBERED) is kept


def test_a_single_call_verdict_holds_its_own_arguments() -> None:
    """Calls are shared across answers only where none is handed out: the single-call form's
    verdict carries the graded call, so each answer's is its own."""
    definition = {"type": "tool_call", "name": "c", "count": "exactly_one"}  # options: rules
    task = parse_task({"id": "s", "expected": A, "checks": [definition]})
    first, second = (grade(task, wire(A)).verdict for _ in range(2))
    assert first is not None
    assert second is not None
    assert first.call is not None
    assert second.call is not None
    assert first.call == second.call
    assert first.call["arguments"] is not second.call["arguments"]


@pytest.mark.parametrize(
    ("answer", "passed"),
    [
        pytest.param("Hello! How can I help?", True, id="prose"),
        pytest.param("", True, id="empty"),
        pytest.param(wire(A), False, id="tool_call"),
        pytest.param('Calling {"name": "get_weather", "arguments": {}}', False, id="call_in_text"),
        pytest.param(
            '{"tool_calls": [{"function": {"name": "f", "arguments": "oops"}}]}',
            False,
            id="unusable_call_is_still_a_call",
        ),
    ],
)
def test_expect_no_call(answer: str, passed: bool) -> None:
    result = run({"type": "tool_call", "name": "quiet", "expect_no_call": True}, answer)
    assert result.passed is passed
    assert result.reason_code == ("match" if passed else "unexpected_call")


def test_check_level_expected_overrides_task() -> None:
    check = build_checks(
        {
            "id": "t",
            "expected": EXPECTED,
            "checks": [{"type": "tool_call", "name": "c", "expected": A}],
        }
    )[0]
    assert run(check, wire(A)).passed is True
    assert run(check, wire(EXPECTED)).passed is False


@pytest.mark.parametrize(
    ("definition", "message"),
    [
        pytest.param({"type": "tool_call", "name": "c"}, "'expected' is missing", id="no_expected"),
        pytest.param(
            {"type": "tool_call", "name": "c", "expected": {"tool": "f"}},
            "not a usable call",
            id="bad_expected",
        ),
        pytest.param(
            {"type": "tool_call", "name": "c", "expected": A, "optional": ["city"]},
            "must look like 'arguments.<key>",
            id="path_without_prefix",
        ),
        pytest.param(
            {"type": "tool_call", "name": "c", "expected": A, "acceptable": {"arguments.city": []}},
            "non-empty list",
            id="empty_acceptable",
        ),
        pytest.param(
            {
                "type": "tool_call",
                "name": "c",
                "expected": A,
                "acceptable": {"arguments..city": ["x"]},
            },
            "must look like",
            id="empty_key",
        ),
        pytest.param(
            {"type": "tool_call", "name": "c", "parallel": []}, "1 to 64", id="empty_parallel"
        ),
        pytest.param(
            {"type": "tool_call", "name": "c", "parallel": [A, "prose"]},
            "parallel\\[1\\]",
            id="bad_parallel_call",
        ),
        pytest.param(
            {"type": "tool_call", "name": "c", "expect_no_call": True, "expected": A},
            "cannot be combined",
            id="no_call_with_expected",
        ),
        pytest.param(
            {"type": "tool_call", "name": "c", "expect_no_call": "yes"},
            "true or false",
            id="no_call_not_bool",
        ),
    ],
)
def test_refused_definitions(definition: dict[str, Any], message: str) -> None:
    with pytest.raises(CheckDefinitionError, match=message):
        build_check(definition)


def test_expected_may_be_a_json_string() -> None:
    check = build_check({"type": "tool_call", "name": "c", "expected": wire(A)})
    assert run(check, wire(A)).passed is True
    assert call_from_value(A) is not None
