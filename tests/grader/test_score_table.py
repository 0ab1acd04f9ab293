"""grading.md's failure modes and GRADING-DECISIONS.md's decisions, one row per behaviour.

Every answer is graded against the same task (:func:`ticket_task`): expected call with
a comma list, a duration, an exact integer, a 23-digit id, an ordered array and a nested object.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from grader import Task, parse_task, score
from grader.json import dumps

EXPECTED: dict[str, Any] = {
    "name": "create_ticket",
    "arguments": {
        "title": "Printer jam",
        "priority": "high",
        "labels": ["hw", "office"],
        "tags": "web,hero",
        "eta": "PT45M",
        "amount": 4550,
        "customer": {"id": 12345678901234567890123, "tier": "gold"},
    },
}
STALE: dict[str, Any] = {
    "name": "create_ticket",
    "arguments": {
        "title": "Printer jam",
        "severity": "high",
        "labels": ["hw", "office"],
        "tags": "web,hero",
        "eta": "PT45M",
        "amount": 4550,
        "customer": {"id": 12345678901234567890123, "tier": "gold"},
    },
}


@pytest.fixture(scope="session")
def ticket_task() -> Task:
    return parse_task(
        {
            "id": "tickets.field_renamed.01",
            "expected": EXPECTED,
            "metadata": {"stale": STALE, "mutationKind": "field_renamed"},
        }
    )


CALL = dumps(EXPECTED).decode()
BIG_ID = "12345678901234567890123"


def with_args(**changes: Any) -> str:
    """The expected call with some arguments replaced (None deletes), as raw JSON text."""
    call = copy.deepcopy(EXPECTED)
    for key, value in changes.items():
        if value is None:
            del call["arguments"][key]
        else:
            call["arguments"][key] = value
    return dumps(call).decode()


def raw_args(fragment_from: str, fragment_to: str) -> str:
    """The expected call's JSON text with one literal fragment rewritten (for number forms)."""
    assert fragment_from in CALL, fragment_from
    return CALL.replace(fragment_from, fragment_to)


def wire(arguments: str, name: str = "create_ticket") -> str:
    return dumps(
        {
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            ]
        }
    ).decode()


ARGS_TEXT = dumps(EXPECTED["arguments"]).decode()
DEEP = "[" * 200 + "]" * 200

# (id, answer, reason_code, score, staleSchemaUsed, path)
CASES: list[tuple[str, object, str, int, bool, str | None]] = [
    # What scores 1
    ("exact_call", CALL, "match", 1, False, None),
    (
        "keys_shuffled_and_pretty",
        json.dumps(  # stdlib: pretty-printing with an exact 23-digit integer
            {
                "arguments": dict(reversed(list(EXPECTED["arguments"].items()))),
                "name": "create_ticket",
            },
            indent=2,
        ),
        "match",
        1,
        False,
        None,
    ),
    # 2. fences and prose
    ("markdown_fence", f"Here you go:\n```json\n{CALL}\n```\n", "match", 1, False, None),
    (
        "prose_before_and_after",
        f"I will call the tool now. {CALL} Let me know!",
        "match",
        1,
        False,
        None,
    ),
    # 4. number forms and value equivalences
    ("integer_as_float", raw_args('"amount":4550', '"amount":4550.0'), "match", 1, False, None),
    ("integer_as_exponent", raw_args('"amount":4550', '"amount":4.55e3'), "match", 1, False, None),
    ("negative_zero_is_zero", None, "match", 1, False, None),  # replaced below with its own task
    (
        "number_as_string_is_type_error",
        with_args(amount="4550"),
        "type_mismatch",
        0,
        False,
        "arguments.amount",
    ),
    (
        "big_id_off_by_one_not_rounded_equal",
        raw_args(BIG_ID, "12345678901234567890124"),
        "value_mismatch",
        0,
        False,
        "arguments.customer.id",
    ),
    (
        "big_id_as_double_not_equal",
        raw_args(BIG_ID, "1.2345678901234568e22"),
        "value_mismatch",
        0,
        False,
        "arguments.customer.id",
    ),
    ("comma_list_spaces_trimmed", with_args(tags="web, hero"), "match", 1, False, None),
    ("comma_list_outer_spaces_trimmed", with_args(tags=" web ,hero\t"), "match", 1, False, None),
    (
        "comma_list_inner_space_kept",
        with_args(tags="web,he ro"),
        "value_mismatch",
        0,
        False,
        "arguments.tags",
    ),
    (
        "string_without_comma_not_stripped",
        with_args(title=" Printer jam"),
        "value_mismatch",
        0,
        False,
        "arguments.title",
    ),
    ("duration_zero_hours", with_args(eta="PT0H45M"), "match", 1, False, None),
    ("duration_in_seconds", with_args(eta="PT2700S"), "match", 1, False, None),
    (
        "duration_lowercase_is_plain_string",
        with_args(eta="pt45m"),
        "value_mismatch",
        0,
        False,
        "arguments.eta",
    ),
    (
        "duration_fraction_is_plain_string",
        with_args(eta="PT0.75H"),
        "value_mismatch",
        0,
        False,
        "arguments.eta",
    ),
    ("duration_other_length", with_args(eta="PT46M"), "value_mismatch", 0, False, "arguments.eta"),
    # 5. key order never matters, array order does
    (
        "array_order_matters",
        with_args(labels=["office", "hw"]),
        "value_mismatch",
        0,
        False,
        "arguments.labels[0]",
    ),
    (
        "array_extra_element",
        with_args(labels=["hw", "office", "x"]),
        "unexpected",
        0,
        False,
        "arguments.labels[2]",
    ),
    ("array_missing_element", with_args(labels=["hw"]), "missing", 0, False, "arguments.labels[1]"),
    # 6. stale and near-stale
    ("stale_call_flagged", dumps(STALE).decode(), "stale_schema", 0, True, None),
    (
        "stale_call_in_wire_format",
        wire(dumps(STALE["arguments"]).decode()),
        "stale_schema",
        0,
        True,
        None,
    ),
    (
        "near_stale_is_plain_mismatch",
        with_args(severity="critical", priority=None),
        "missing",
        0,
        False,
        "arguments.priority",
    ),
    # diff reasons
    ("field_missing", with_args(tags=None), "missing", 0, False, "arguments.tags"),
    ("field_unexpected", with_args(zzz=1), "unexpected", 0, False, "arguments.zzz"),
    (
        "nested_value",
        with_args(customer={"id": int(BIG_ID), "tier": "silver"}),
        "value_mismatch",
        0,
        False,
        "arguments.customer.tier",
    ),
    (
        "boolean_is_not_number",
        with_args(amount=True),
        "type_mismatch",
        0,
        False,
        "arguments.amount",
    ),
    (
        "wrong_tool_same_arguments",
        CALL.replace('"create_ticket"', '"open_ticket"'),
        "name_mismatch",
        0,
        False,
        "name",
    ),
    (
        "tool_name_not_normalised",
        CALL.replace('"create_ticket"', '" create_ticket"'),
        "name_mismatch",
        0,
        False,
        "name",
    ),
    # 3. envelopes
    ("tool_calls_wire_format", wire(ARGS_TEXT), "match", 1, False, None),
    (
        "function_wrapper_alone",
        dumps({"type": "function", "function": EXPECTED}).decode(),
        "match",
        1,
        False,
        None,
    ),
    (
        "arguments_as_json_string",
        dumps({"name": "create_ticket", "arguments": ARGS_TEXT}).decode(),
        "match",
        1,
        False,
        None,
    ),
    (
        "tool_calls_last_usable_wins",
        dumps(
            {
                "tool_calls": [
                    {"function": {"name": "x", "arguments": "{}"}},
                    {"function": EXPECTED},
                    {"function": {"name": "y", "arguments": "[1]"}},
                ]
            }
        ).decode(),
        "match",
        1,
        False,
        None,
    ),
    (
        "envelope_drift_tool_args",
        dumps({"tool": "create_ticket", "args": EXPECTED["arguments"]}).decode(),
        "no_call",
        0,
        False,
        None,
    ),
    ("bare_arguments_object", ARGS_TEXT, "no_call", 0, False, None),
    ("bare_array_of_calls", f"[{CALL}]", "no_call", 0, False, None),
    ("call_inside_non_json_braces", "{note: " + CALL + "}", "no_call", 0, False, None),
    (
        "other_envelope_keys_ignored",
        dumps({**EXPECTED, "id": "abc", "extra": [1]}).decode(),
        "match",
        1,
        False,
        None,
    ),
    (
        "arguments_null_means_empty",
        dumps({"name": "create_ticket", "arguments": None}).decode(),
        "missing",
        0,
        False,
        "arguments.amount",
    ),
    (
        "arguments_empty_string_means_empty",
        dumps({"name": "create_ticket", "arguments": ""}).decode(),
        "missing",
        0,
        False,
        "arguments.amount",
    ),
    (
        "arguments_absent_means_empty",
        '{"name": "create_ticket"}',
        "missing",
        0,
        False,
        "arguments.amount",
    ),
    (
        "arguments_array_unusable",
        '{"name": "create_ticket", "arguments": [1]}',
        "no_call",
        0,
        False,
        None,
    ),
    (
        "arguments_number_unusable",
        '{"name": "create_ticket", "arguments": 3}',
        "no_call",
        0,
        False,
        None,
    ),
    (
        "arguments_string_not_object_unusable",
        '{"name": "create_ticket", "arguments": "[1]"}',
        "no_call",
        0,
        False,
        None,
    ),
    ("name_not_a_string_unusable", '{"name": 7, "arguments": {}}', "no_call", 0, False, None),
    # 1. echoes and several objects: the last usable candidate wins
    (
        "schema_echo_without_name_ignored",
        CALL + ' {"tools": [{"type": "function", "function": '
        '{"name": "create_ticket", "parameters": {"type": "object"}}}]}',
        "match",
        1,
        False,
        None,
    ),
    ("two_calls_last_graded", dumps(STALE).decode() + "\n" + CALL, "match", 1, False, None),
    ("unusable_later_object_does_not_hide", CALL + ' {"name": 42}', "match", 1, False, None),
    (
        "later_call_with_bad_arguments_does_not_hide",
        CALL + ' {"name": "x", "arguments": [1]}',
        "match",
        1,
        False,
        None,
    ),
    (
        "echoed_record_with_name_is_graded",  # a different tool name: the reason names `name`
        CALL + ' {"name": "Ada", "role": "customer"}',
        "name_mismatch",
        0,
        False,
        "name",
    ),
    # 8. duplicate keys: last value wins
    (
        "duplicate_keys_last_wins",
        CALL.replace('{"name":"create_ticket"', '{"name":"nope","name":"create_ticket"'),
        "match",
        1,
        False,
        None,
    ),
    # 9. unicode: escapes equal, normal forms not
    ("unicode_escape_equals_code_point", None, "match", 1, False, None),  # own task below
    # 10. non-JSON answers
    ("empty_answer", "", "no_call", 0, False, None),
    ("refusal", "I'm sorry, I can't help with that.", "no_call", 0, False, None),
    (
        "python_syntax_call",
        'create_ticket(title="Printer jam", priority="high")',
        "no_call",
        0,
        False,
        None,
    ),
    ("nan_is_not_json", CALL.replace("4550", "NaN"), "no_call", 0, False, None),
    # GRADING-DECISIONS: an overflowing literal is a number, kept exactly, equal to nothing else
    (
        "overflowing_literal_is_a_number_not_no_call",
        CALL.replace("4550", "1e400"),
        "value_mismatch",
        0,
        False,
        "arguments.amount",
    ),
    (
        "negative_overflow_is_a_number_too",
        CALL.replace("4550", "-4.55e400"),
        "value_mismatch",
        0,
        False,
        "arguments.amount",
    ),
    # GRADING-DECISIONS: a different tool names `name` first, whatever its arguments
    (
        "other_tool_with_other_arguments_names_name_first",
        dumps({"name": "close_ticket", "arguments": {"a": 1}}).decode(),
        "name_mismatch",
        0,
        False,
        "name",
    ),
    # 11. non-string answers
    ("answer_none", None, "not_a_string", 0, False, None),
    ("answer_number", 4550, "not_a_string", 0, False, None),
    ("answer_object", EXPECTED, "not_a_string", 0, False, None),
    ("answer_list", [CALL], "not_a_string", 0, False, None),
    # 12. pathological nesting
    (
        "arguments_too_deep",
        '{"name": "create_ticket", "arguments": {"a": ' + DEEP + "}}",
        "too_deep",
        0,
        False,
        None,
    ),
    (
        "arguments_string_too_deep",
        dumps(
            {"name": "create_ticket", "arguments": '{"a": ' + "[" * 5000 + "]" * 5000 + "}"}
        ).decode(),
        "too_deep",
        0,
        False,
        None,
    ),
    ("deep_prose_span_then_call", "[" * 300 + "]" * 300 + CALL, "match", 1, False, None),
    # never-closed openers are prose
    ("unclosed_brace_before_call", "{ oops " + CALL, "match", 1, False, None),
    ("unclosed_brace_with_quote_before_call", "{it's \"a draft " + CALL, "match", 1, False, None),
    ("many_unclosed_braces_before_call", "{" * 5000 + CALL, "match", 1, False, None),
    ("stray_closers_before_call", "}]) " * 100 + CALL, "match", 1, False, None),
    ("unclosed_brace_after_call", CALL + " {", "match", 1, False, None),
]
SPECIAL = {"negative_zero_is_zero", "unicode_escape_equals_code_point", "answer_none"}


@pytest.mark.parametrize(
    ("answer", "code", "score_", "stale", "path"),
    [pytest.param(*row[1:], id=row[0]) for row in CASES if row[0] not in SPECIAL - {"answer_none"}],
)
def test_verdict(
    ticket_task: Task, answer: object, code: str, score_: int, stale: bool, path: str | None
) -> None:
    verdict = score(ticket_task, answer)
    assert (verdict.reason_code, verdict.score, verdict.stale_schema_used, verdict.path) == (
        code,
        score_,
        stale,
        path,
    ), verdict.reason


def test_negative_zero_equals_zero() -> None:
    from grader import parse_task

    task = parse_task({"id": "t", "expected": {"name": "f", "arguments": {"offset": 0}}})
    assert score(task, '{"name": "f", "arguments": {"offset": -0}}').score == 1
    assert score(task, '{"name": "f", "arguments": {"offset": -0.0}}').score == 1
    assert score(task, '{"name": "f", "arguments": {"offset": 1e-300}}').score == 0


@pytest.mark.parametrize(
    ("answer_city", "passes"),
    [
        pytest.param("\\u00e9vry", True, id="escape_of_same_code_point"),
        pytest.param("évry", True, id="literal_code_point"),
        pytest.param("e\\u0301vry", False, id="nfd_form_differs"),
    ],
)
def test_unicode_code_points(answer_city: str, passes: bool) -> None:
    from grader import parse_task

    task = parse_task({"id": "t", "expected": {"name": "f", "arguments": {"city": "évry"}}})
    verdict = score(task, '{"name": "f", "arguments": {"city": "' + answer_city + '"}}')
    assert verdict.score == int(passes), verdict.reason


def test_reason_names_no_call_exactly(ticket_task: Task) -> None:
    assert (
        score(ticket_task, "nothing").reason
        == 'answer has no parseable {"name","arguments"} object'
    )


def test_stale_reason_says_stale_schema_used(ticket_task: Task) -> None:
    assert "staleSchemaUsed" in score(ticket_task, dumps(STALE).decode()).reason


def test_diff_reason_names_path_and_values(ticket_task: Task) -> None:
    verdict = score(ticket_task, with_args(priority="low"))
    assert verdict.reason == 'arguments.priority: value mismatch (expected "high", got "low")'


def test_graded_call_is_reported(ticket_task: Task) -> None:
    verdict = score(ticket_task, wire(ARGS_TEXT))
    assert verdict.call is not None
    assert verdict.call["name"] == "create_ticket"
    assert verdict.call["arguments"]["customer"]["id"] == int(BIG_ID)


@pytest.mark.parametrize(
    ("verdict_code", "result"),
    [("match", "pass"), ("stale_schema", "stale"), ("value_mismatch", "fail"), ("no_call", "fail")],
)
def test_result_label(ticket_task: Task, verdict_code: str, result: str) -> None:
    answers = {
        "match": CALL,
        "stale_schema": dumps(STALE).decode(),
        "value_mismatch": with_args(priority="low"),
        "no_call": "",
    }
    verdict = score(ticket_task, answers[verdict_code])
    assert verdict.reason_code == verdict_code
    assert verdict.result == result
