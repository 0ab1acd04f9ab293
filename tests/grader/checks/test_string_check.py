"""string_check: seed 003's truth tables, its traps, and the definitions validation refuses."""

from __future__ import annotations

from typing import Any

import pytest

from grader.checks import CheckDefinitionError, build_check
from tests.support.checks import call, run, wire


def check(
    operation: str, reference: str = "{{item.expected_route}}", **extra: Any
) -> dict[str, Any]:
    return {
        "type": "string_check",
        "name": "route",
        "operation": operation,
        "input": "{{sample.output_text}}",
        "reference": reference,
        **extra,
    }


ROUTES = {"expected_route": "BILLING"}


@pytest.mark.parametrize(
    ("output", "route", "passed"),
    [
        pytest.param("BILLING", "BILLING", True, id="billing_allowed_token"),
        pytest.param("CANCEL", "CANCEL", True, id="cancel_allowed_token"),
        pytest.param("TECHNICAL", "TECHNICAL", True, id="technical_allowed_token"),
        pytest.param("billing", "BILLING", False, id="case_is_part_of_the_contract"),
        pytest.param(" BILLING", "BILLING", False, id="leading_whitespace"),
        pytest.param("BILLING\n", "BILLING", False, id="trailing_newline"),
        pytest.param("BILLING\r", "BILLING", False, id="carriage_return"),
        pytest.param("Route to BILLING", "BILLING", False, id="prose_is_not_a_token"),
        pytest.param("SALES", "BILLING", False, id="unsupported_token"),
        pytest.param("CANCEL", "BILLING", False, id="other_allowed_token"),
        pytest.param("", "BILLING", False, id="empty_output"),
    ],
)
def test_eq_routing_truth_table(output: str, route: str, passed: bool) -> None:
    result = run(check("eq"), output, {"expected_route": route})
    assert result.passed is passed
    assert result.reason_code == ("string_match" if passed else "string_mismatch")


PHRASE = "may produce inaccurate results"


@pytest.mark.parametrize(
    ("operation", "output", "reference", "passed"),
    [
        pytest.param("like", f"This tool {PHRASE}.", PHRASE, True, id="like_contains_phrase"),
        pytest.param(
            "like", f"It is false that this {PHRASE}", PHRASE, True, id="like_negation_trap_passes"
        ),
        pytest.param(
            "like",
            f"The statement that this {PHRASE} is incorrect.",
            PHRASE,
            True,
            id="like_contradiction_trap_passes",
        ),
        pytest.param("like", "This May Produce Inaccurate Results", PHRASE, False, id="like_case"),
        pytest.param("like", "The request is not APPROVED", "APPROVED", True, id="like_not_trap"),
        pytest.param("like", PHRASE[:-1], PHRASE, False, id="like_shorter_input"),
        pytest.param("like", "anything", "", True, id="like_empty_reference_always_passes"),
        pytest.param("ilike", "Account Recovery", "account recovery", True, id="ilike_title"),
        pytest.param("ilike", "ACCOUNT RECOVERY", "account recovery", True, id="ilike_upper"),
        pytest.param(
            "ilike", "See the account recovery page.", "account recovery", True, id="ilike_prose"
        ),
        pytest.param("ilike", "password reset", "account recovery", False, id="ilike_synonym"),
        pytest.param("ilike", "STRASSE", "straße", True, id="ilike_case_folds_unicode"),
        pytest.param("ne", "the secret is 123", "secret", True, id="ne_secret_trap_passes"),
        pytest.param("ne", "secret", "secret", False, id="ne_exact_reference_fails"),
        pytest.param("ne", " ", "", True, id="ne_empty_reference_whitespace_passes"),
        pytest.param("ne", "Secret", "secret", True, id="ne_is_case_sensitive"),
        pytest.param("eq", "é", "e\u0301", False, id="eq_no_unicode_normalisation"),
    ],
)
def test_operation_semantics(operation: str, output: str, reference: str, passed: bool) -> None:
    assert run(check(operation, reference), output).passed is passed


@pytest.mark.parametrize(
    ("definition", "message"),
    [
        pytest.param(check("neq"), "use 'ne'", id="neq_hint"),
        pytest.param(check("contains"), "use 'like'", id="contains_hint"),
        pytest.param(check("EQ"), "must be one of eq, ne, like, ilike", id="operation_case"),
        pytest.param({**check("eq"), "operation": None}, "must be one of", id="missing_operation"),
        pytest.param(
            {**check("eq"), "input": "{{item.expected_route}}"},
            "never read the model's answer",
            id="both_sides_item",
        ),
        pytest.param(
            check("eq", "{{ sample.output_text }}"),
            "compares the answer with itself",
            id="both_sample",
        ),
        pytest.param(
            {**check("eq", "BILLING"), "input": "BILLING"},
            "never read the model's answer",
            id="both_literal",
        ),
        pytest.param({**check("eq"), "input": 3}, "'input' must be a string", id="input_not_text"),
        pytest.param({**check("eq"), "operaton": "eq"}, "'operaton' unknown field", id="typo"),
        pytest.param({**check("eq"), "name": " padded"}, "'name' must be", id="leading_space"),
        pytest.param({**check("eq"), "name": "tab\there"}, "'name' must be", id="control_char"),
        pytest.param({**check("eq"), "name": "x" * 129}, "'name' must be", id="name_too_long"),
        pytest.param({**check("eq"), "name": ""}, "'name' must be", id="empty_name"),
    ],
)
def test_refused_definitions(definition: dict[str, Any], message: str) -> None:
    with pytest.raises(CheckDefinitionError, match=message):
        build_check(definition)


@pytest.mark.parametrize(
    ("definition", "answer"),
    [
        pytest.param(check("eq"), "BILLING", id="item_field_missing"),
        pytest.param(
            check("eq", "{{item.nested.missing}}"),
            "BILLING",
            id="nested_item_field_missing",
        ),
    ],
)
def test_unresolved_item_template_is_an_infrastructure_error(
    definition: dict[str, Any], answer: str
) -> None:
    result = run(definition, answer, {})
    assert (result.passed, result.reason_code) == (None, "template_unresolved")
    assert result.error is not None


@pytest.mark.parametrize(
    ("template", "answer"),
    [
        pytest.param(
            "{{sample.output_tools[0].function.arguments.queue}}", "BILLING", id="prose_no_call"
        ),
        pytest.param(
            "{{sample.output_tools[0].function.arguments.queue}}",
            '{"tool_calls": [{"function": {"name": "route", "arguments": "{}"}}]}',
            id="call_without_the_argument",
        ),
        pytest.param("{{sample.output_json.queue}}", "BILLING", id="answer_not_json"),
    ],
)
def test_sample_side_path_the_answer_lacks_is_the_models_fail(template: str, answer: str) -> None:
    """Seed 003: only a missing *dataset* field is infrastructure; a missing answer value is
    the model's failure, so a prose answer to a tool template fails instead of erroring."""
    result = run(check("eq", "BILLING", input=template), answer, {})
    assert (result.passed, result.reason_code, result.error) == (
        False,
        "sample_value_missing",
        None,
    )


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        pytest.param("{{sample.output_tool[0].function.name}}", "must read one of", id="typo"),
        pytest.param("{{sample.output_tools.function.name}}", "index it first", id="no_index"),
        pytest.param(
            "{{sample.output_tools[0].arguments.queue}}", "not 'arguments'", id="no_function"
        ),
        pytest.param(
            "{{sample.output_tools[0].function.argument.queue}}", "not 'argument'", id="argument"
        ),
        pytest.param(
            "{{sample.output_tools[0].function.name.first}}", "name is a string", id="name_deep"
        ),
    ],
)
def test_sample_path_that_can_never_resolve_is_refused_at_build(
    template: str, problem: str
) -> None:
    with pytest.raises(CheckDefinitionError, match=problem):
        build_check(check("eq", "BILLING", input=template))


def test_item_and_sample_mixed_on_one_side_is_connected() -> None:
    definition = check("eq", "{{item.prefix}}-{{sample.output_text}}", input="{{item.full}}")
    assert run(definition, "B", {"prefix": "A", "full": "A-B"}).passed is True


def test_tool_argument_checked_from_wire_answer() -> None:
    definition = check("eq", input="{{ sample.output_tools[0].function.arguments.queue }}")
    assert run(definition, wire(call("route_ticket", queue="BILLING")), ROUTES).passed is True
    assert run(definition, wire(call("route_ticket", queue="billing")), ROUTES).passed is False


def test_reason_shows_invisible_characters() -> None:
    assert "'BILLING\\n'" in run(check("eq"), "BILLING\n", ROUTES).reason


def test_openai_free_text_names_are_accepted() -> None:
    assert build_check(check("eq", name="Example string check grader")).name == (
        "Example string check grader"
    )
