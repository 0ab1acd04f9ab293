"""``call_from_value``: the usable call a parsed JSON value carries, bare or wrapped."""

from __future__ import annotations

from typing import Any

import pytest

from grader.toolcall.extract import call_from_value

A = {"name": "a", "arguments": {"x": 1}}
B = {"name": "b", "arguments": {"y": [1, 2]}}


@pytest.mark.parametrize(
    ("value", "found"),
    [
        pytest.param(A, ("a", {"x": 1}), id="a_bare_call"),
        pytest.param({"name": "a", "arguments": '{"x": 1}'}, ("a", {"x": 1}), id="text_arguments"),
        pytest.param({"name": "a"}, ("a", {}), id="no_arguments_are_empty"),
        pytest.param({"arguments": {"x": 1}}, None, id="no_name"),
        pytest.param({"name": 1, "arguments": {}}, None, id="a_name_not_a_string"),
        pytest.param({"name": "a", "arguments": [1]}, None, id="arguments_not_an_object"),
        pytest.param({"name": "a", "arguments": "{oops"}, None, id="arguments_not_json"),
        pytest.param({"function": A}, ("a", {"x": 1}), id="a_function_wrapper"),
        pytest.param(
            {"tool_calls": [{"function": A}, {"function": B}]}, ("b", {"y": [1, 2]}), id="last_call"
        ),
        pytest.param(
            {"tool_calls": [{"function": A}, {"function": {"name": 2}}]},
            ("a", {"x": 1}),
            id="an_unusable_last_call_hides_nothing",
        ),
        pytest.param({"tool_calls": []}, None, id="no_calls"),
        pytest.param(
            {**A, "function": "not an object"}, ("a", {"x": 1}), id="a_function_not_an_object"
        ),
        pytest.param(
            {**A, "tool_calls": "not a list"}, ("a", {"x": 1}), id="tool_calls_not_a_list"
        ),
        pytest.param([A], None, id="not_an_object"),
    ],
)
def test_the_call_a_value_carries(value: Any, found: tuple[str, Any] | None) -> None:
    call = call_from_value(value)
    assert (None if call is None else (call.name, call.arguments)) == found
