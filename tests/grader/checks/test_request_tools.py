"""Request tools in either API's shape: the Responses API's flat function tools are read as
chat completions' nested ones, so a ``from_request`` schema and a template give one verdict
whichever endpoint the request came through."""

from __future__ import annotations

from typing import Any

import pytest

from grader.checks import CheckContext
from grader.checks._base import chat_tools
from tests.support.checks import call, run, wire

PARAMETERS = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
NESTED = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": PARAMETERS, "strict": True},
}
FLAT = {"type": "function", "name": "get_weather", "parameters": PARAMETERS, "strict": True}


@pytest.mark.parametrize(
    ("tools", "expected"),
    [
        pytest.param([FLAT], [NESTED], id="flat_function_is_nested"),
        pytest.param([NESTED], [NESTED], id="chat_function_kept"),
        pytest.param([{"type": "web_search"}], [{"type": "web_search"}], id="built_in_kept"),
        pytest.param(
            [{"type": "custom", "name": "grammar"}],
            [{"type": "custom", "name": "grammar"}],
            id="custom_tool_kept",
        ),
        pytest.param(
            [{"type": "function", "parameters": {}}],
            [{"type": "function", "parameters": {}}],
            id="nameless_flat_kept",
        ),
        pytest.param(["junk", FLAT], ["junk", NESTED], id="non_objects_kept_in_place"),
        pytest.param([], [], id="empty"),
    ],
)
def test_chat_tools(tools: list[Any], expected: list[Any]) -> None:
    assert chat_tools(tools) == expected


def test_context_normalises_on_construction() -> None:
    assert CheckContext(request_tools=[FLAT]).request_tools == [NESTED]
    assert CheckContext(request_tools=None).request_tools is None


@pytest.mark.parametrize(
    ("answer", "passed", "code"),
    [
        pytest.param(wire(call("get_weather", city="Bern")), True, "schema_valid", id="valid"),
        pytest.param(wire(call("get_weather", town="Bern")), False, "schema_invalid", id="stale"),
        pytest.param(wire(call("get_time", city="Bern")), False, "undeclared_tool", id="other"),
    ],
)
@pytest.mark.parametrize("tools", [[FLAT], [NESTED]], ids=["responses_tools", "chat_tools"])
def test_from_request_schema_gives_one_verdict_for_both_shapes(
    answer: str, passed: bool, code: str, tools: list[dict[str, Any]]
) -> None:
    definition = {"type": "json_schema", "name": "schema", "schema": "from_request"}
    result = run(definition, answer, context=CheckContext(request_tools=tools))
    assert (result.passed, result.reason_code) == (passed, code)
