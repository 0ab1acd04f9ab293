"""json_schema on the answer's text (seed 002's schema compliance of a structured reply)."""

from __future__ import annotations

from typing import Any

import pytest

from grader.checks import CheckDefinitionError, build_check
from tests.support.checks import call, run, wire

# Seed 002's RESPONSE_SCHEMA, verbatim.
RESPONSE_SCHEMA = {
    "type": "object",
    "required": ["action", "arguments"],
    "properties": {
        "action": {"type": "string"},
        "arguments": {"type": "object"},
    },
    "additionalProperties": False,
}
REPLY = '{"action": "refund", "arguments": {"order": 42}}'


def schema_check(**extra: Any) -> dict[str, Any]:
    return {
        "type": "json_schema",
        "name": "reply",
        "schema": RESPONSE_SCHEMA,
        "target": "answer",
        **extra,
    }


@pytest.mark.parametrize(
    ("extra", "answer", "passed", "code"),
    [
        pytest.param({}, REPLY, True, "schema_valid", id="seed_reply_passes"),
        pytest.param(
            {}, f"  {REPLY}\n", True, "schema_valid", id="surrounding_whitespace_as_json_loads"
        ),
        pytest.param(
            {}, f"```json\n{REPLY}\n```", False, "not_json", id="fenced_fails_as_in_the_seed"
        ),
        pytest.param({}, f"Here: {REPLY}", False, "not_json", id="prose_fails"),
        pytest.param({}, '{"action": "refund"}', False, "schema_invalid", id="missing_required"),
        pytest.param(
            {},
            '{"action": "refund", "arguments": {}, "x": 1}',
            False,
            "schema_invalid",
            id="extra_key",
        ),
        pytest.param(
            {}, '{"action": 1, "arguments": {}}', False, "schema_invalid", id="wrong_type"
        ),
        pytest.param(
            {}, wire(call("refund", order=42)), False, "not_json", id="a_tool_call_is_not_a_reply"
        ),
        pytest.param(
            {"extract": True}, f"```json\n{REPLY}\n```", True, "schema_valid", id="extract_fenced"
        ),
        pytest.param(
            {"extract": True},
            f'{{"draft": 1}} then {REPLY}',
            True,
            "schema_valid",
            id="extract_takes_the_last",
        ),
        pytest.param(
            {"extract": True}, "no json here", False, "not_json", id="extract_finds_nothing"
        ),
    ],
)
def test_answer_target(extra: dict[str, Any], answer: str, passed: bool, code: str) -> None:
    result = run(schema_check(**extra), answer)
    assert (result.passed, result.reason_code) == (passed, code)


def test_default_target_still_validates_call_arguments() -> None:
    definition = {
        "type": "json_schema",
        "name": "args",
        "schema": {"type": "object", "required": ["order"]},
    }
    assert run(definition, wire(call("refund", order=42))).passed is True
    assert run(definition, REPLY).reason_code == "no_call"


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        pytest.param({"target": "text"}, "target", id="unknown_target"),
        pytest.param({"extract": "yes"}, "extract", id="extract_not_bool"),
        pytest.param(
            {"target": "calls", "extract": True}, "extract", id="extract_needs_answer_target"
        ),
        pytest.param({"schema": "from_request"}, "schema", id="from_request_describes_calls"),
    ],
)
def test_invalid_definitions(extra: dict[str, Any], field: str) -> None:
    with pytest.raises(CheckDefinitionError, match=f"'{field}'"):
        build_check(schema_check(**extra))
