"""Templates: what each OpenAI-style reference reads, and what refuses to resolve."""

from __future__ import annotations

from typing import Any

import pytest

from grader.checks import CheckDefinitionError, Sample
from grader.checks.templates import TemplateError, parse_template
from tests.support.checks import call, wire

TOOLS = wire(call("route_ticket", queue="BILLING", meta={"n": 3, "tags": ["a", "b"]}), call("x"))
ITEM = {"route": "BILLING", "nested": {"k": [10, {"z": "deep"}]}, "odd key": "v", "nothing": None}


@pytest.mark.parametrize(
    ("template", "answer", "rendered"),
    [
        pytest.param("{{sample.output_text}}", "BILLING\n", "BILLING\n", id="output_text_raw"),
        pytest.param("{{  sample.output_text  }}", "x", "x", id="whitespace_inside_braces"),
        pytest.param("Route: {{ item.route }}!", "", "Route: BILLING!", id="literal_around_item"),
        pytest.param("{{item.nested.k[1].z}}", "", "deep", id="item_nested_path"),
        pytest.param('{{item["odd key"]}}', "", "v", id="item_quoted_key"),
        pytest.param("{{item.nested.k[0]}}", "", "10", id="number_rendered_as_json"),
        pytest.param("{{item.nested}}", "", '{"k":[10,{"z":"deep"}]}', id="object_canonical_json"),
        pytest.param(
            "{{sample.output_tools[0].function.name}}", TOOLS, "route_ticket", id="tool_name"
        ),
        pytest.param(
            "{{sample.output_tools[0].function.arguments.queue}}",
            TOOLS,
            "BILLING",
            id="arguments_json_string_is_read_through",
        ),
        pytest.param(
            "{{sample.output_tools[0].function.arguments.meta.tags[1]}}",
            TOOLS,
            "b",
            id="deep_argument_path",
        ),
        pytest.param("{{sample.output_json.a[0]}}", ' {"a": ["x"]} ', "x", id="output_json_path"),
        pytest.param("{{sample.output_text}}", TOOLS, "", id="tool_answer_has_empty_text"),
        pytest.param("{{not a template", "", "{{not a template", id="unclosed_braces_literal"),
    ],
)
def test_renders(template: str, answer: str, rendered: str) -> None:
    assert parse_template(template, "t").render(Sample.from_answer(answer), ITEM) == rendered


@pytest.mark.parametrize(
    ("template", "answer", "message"),
    [
        pytest.param("{{item.missing}}", "", "no 'missing'", id="missing_item_field"),
        pytest.param("{{item.nothing}}", "", "resolved to null", id="null_is_not_text"),
        pytest.param("{{item.nested.k[5]}}", "", "no 5", id="index_out_of_range"),
        pytest.param("{{sample.output_tools[0].function.name}}", "prose", "no 0", id="no_tools"),
        pytest.param(
            "{{sample.output_tools[1].function.arguments.queue}}",
            TOOLS,
            "no 'queue'",
            id="argument_absent",
        ),
        pytest.param("{{sample.output_json.a}}", "not json", "answer is not JSON", id="no_json"),
        pytest.param("{{item.route.x}}", "", "no 'x'", id="step_into_plain_string"),
    ],
)
def test_unresolved_raises(template: str, answer: str, message: str) -> None:
    with pytest.raises(TemplateError, match=message):
        parse_template(template, "t").render(Sample.from_answer(answer), ITEM)


@pytest.mark.parametrize(
    ("template", "message"),
    [
        pytest.param("{{ output_text }}", "unknown namespace", id="no_namespace"),
        pytest.param("{{ samples.output_text }}", "unknown namespace", id="misspelt_namespace"),
        pytest.param("{{ sample.text }}", "must read one of", id="unknown_sample_field"),
        pytest.param("{{ sample }}", "must read one of", id="bare_sample"),
        pytest.param("{{ item }}", "needs an item field", id="bare_item"),
        pytest.param("{{ item.a b }}", "malformed path", id="space_in_path"),
        pytest.param("{{ sample.output_text.x }}", "is a string", id="path_into_output_text"),
        pytest.param("{{ }}", "names no namespace", id="empty_braces"),
    ],
)
def test_malformed_templates_are_definition_errors(template: str, message: str) -> None:
    with pytest.raises(CheckDefinitionError, match=message):
        parse_template(template, "t")


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        pytest.param("BILLING", ("BILLING", None, 0), id="plain_text"),
        pytest.param('{"a": 1}', ('{"a": 1}', {"a": 1}, 0), id="json_text"),
        pytest.param("[1, 2]", ("[1, 2]", [1, 2], 0), id="json_array_text"),
        pytest.param(TOOLS, ("", None, 2), id="tool_calls"),
        pytest.param(
            '{"tool_calls": [{"name": "f", "arguments": {}}], "content": "hi"}',
            ("hi", None, 1),
            id="bare_call_wrapped_and_content_kept",
        ),
        pytest.param(
            '{"tool_calls": "nope"}',
            ('{"tool_calls": "nope"}', {"tool_calls": "nope"}, 0),
            id="tool_calls_not_a_list",
        ),
        pytest.param("{broken", ("{broken", None, 0), id="broken_json_is_text"),
    ],
)
def test_sample_from_answer(answer: str, expected: tuple[str, Any, int]) -> None:
    sample = Sample.from_answer(answer)
    assert (sample.output_text, sample.output_json, len(sample.output_tools)) == expected
    assert sample.answer == answer
    for tool in sample.output_tools:
        assert isinstance(tool["function"], dict)
