"""json_schema: literal schemas, the request's own tool schemas, and who is to blame."""

from __future__ import annotations

from typing import Any

import pytest

from grader.checks import CheckContext, CheckDefinitionError, build_check
from tests.support.checks import call, run, wire

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
    "required": ["city"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_forecast", "parameters": SCHEMA}},
    {"type": "function", "function": {"name": "ping"}},  # no parameters: any object
]
LITERAL = {"type": "json_schema", "name": "shape", "schema": SCHEMA}
FROM_REQUEST = {"type": "json_schema", "name": "shape", "schema": "from_request"}


@pytest.mark.parametrize(
    ("definition", "answer", "tools", "passed", "code"),
    [
        pytest.param(
            LITERAL,
            wire(call("any", city="Lisbon", days=3)),
            None,
            True,
            "schema_valid",
            id="literal_valid",
        ),
        pytest.param(
            LITERAL,
            wire(call("any", days=3)),
            None,
            False,
            "schema_invalid",
            id="literal_missing_required",
        ),
        pytest.param(
            LITERAL,
            wire(call("any", city="L", days=0)),
            None,
            False,
            "schema_invalid",
            id="literal_minimum",
        ),
        pytest.param(
            LITERAL,
            wire(call("a", city="L"), call("b", city=3)),
            None,
            False,
            "schema_invalid",
            id="every_call_is_validated",
        ),
        pytest.param(LITERAL, "no call", None, False, "no_call", id="no_call"),
        pytest.param(
            LITERAL,
            '{"tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}',
            None,
            False,
            "invalid_arguments",
            id="arguments_not_object",
        ),
        pytest.param(
            LITERAL,
            'Here: {"name": "f", "arguments": {"city": "L"}}',
            None,
            True,
            "schema_valid",
            id="call_in_prose",
        ),
        pytest.param(
            FROM_REQUEST,
            wire(call("get_forecast", city="Lisbon")),
            TOOLS,
            True,
            "schema_valid",
            id="request_valid",
        ),
        pytest.param(
            FROM_REQUEST,
            wire(call("get_forecast", town="Lisbon")),
            TOOLS,
            False,
            "schema_invalid",
            id="request_stale_field",
        ),
        pytest.param(
            FROM_REQUEST,
            wire(call("get_weather", city="Lisbon")),
            TOOLS,
            False,
            "undeclared_tool",
            id="undeclared_tool_is_model_fail",
        ),
        pytest.param(
            FROM_REQUEST,
            wire(call("ping", anything=1)),
            TOOLS,
            True,
            "schema_valid",
            id="tool_without_parameters",
        ),
        pytest.param(
            FROM_REQUEST,
            wire(call("get_forecast", city="L")),
            None,
            None,
            "no_request_tools",
            id="request_without_tools_is_infra_error",
        ),
        pytest.param(
            FROM_REQUEST,
            wire(call("get_forecast", city="L")),
            [],
            None,
            "no_request_tools",
            id="empty_tools_is_infra_error",
        ),
        pytest.param(
            FROM_REQUEST,
            wire(call("bad", x=1)),
            [{"type": "function", "function": {"name": "bad", "parameters": {"type": 12}}}],
            None,
            "request_schema_invalid",
            id="invalid_request_schema",
        ),
        pytest.param(
            FROM_REQUEST,
            wire(call("legacy", city="L")),
            [{"name": "legacy", "parameters": SCHEMA}],
            True,
            "schema_valid",
            id="legacy_functions_shape",
        ),
    ],
)
def test_validation(
    definition: dict[str, Any],
    answer: str,
    tools: list[dict[str, Any]] | None,
    passed: bool | None,
    code: str,
) -> None:
    result = run(definition, answer, context=CheckContext(request_tools=tools))
    assert (result.passed, result.reason_code) == (passed, code)


def test_failure_reason_names_the_path() -> None:
    result = run(LITERAL, wire(call("f", city="L", days="3")))
    assert "arguments.days" in result.reason


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        pytest.param({"type": "nonsense"}, "not a valid JSON Schema", id="invalid_schema"),
        pytest.param("from_requests", "from_request", id="misspelt_from_request"),
        pytest.param(None, "must be a JSON Schema", id="missing_schema"),
    ],
)
def test_refused_definitions(schema: Any, message: str) -> None:
    with pytest.raises(CheckDefinitionError, match=message):
        build_check({"type": "json_schema", "name": "s", "schema": schema})
