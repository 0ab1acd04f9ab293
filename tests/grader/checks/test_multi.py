"""multi: sub-checks combined by a whitelisted arithmetic formula, never eval."""

from __future__ import annotations

from typing import Any

import pytest

from grader.checks import CheckDefinitionError, build_check
from grader.checks.multi import FormulaError, evaluate_formula, parse_formula
from tests.support.checks import run

NAMES = frozenset({"a", "b", "c"})
VALUES = {"a": 1.0, "b": 0.0, "c": 0.5}


@pytest.mark.parametrize(
    ("formula", "value"),
    [
        pytest.param("a", 1.0, id="name"),
        pytest.param("0.5 * a + 0.5 * b", 0.5, id="weighted_sum"),
        pytest.param("(a + b + c) / 3", 0.5, id="mean_with_parentheses"),
        pytest.param("min(a, c)", 0.5, id="min"),
        pytest.param("max(b, c, 0.25)", 0.5, id="max_three_args"),
        pytest.param("-b + a - c", 0.5, id="unary_minus"),
        pytest.param("+a", 1.0, id="unary_plus"),
        pytest.param("a * (b + 2) / 4", 0.5, id="precedence"),
        pytest.param("1e-1 * 5", 0.5, id="float_literal"),
        pytest.param("  a  ", 1.0, id="surrounding_space"),
    ],
)
def test_formula_values(formula: str, value: float) -> None:
    assert evaluate_formula(parse_formula(formula, NAMES), VALUES) == pytest.approx(value)


@pytest.mark.parametrize(
    ("formula", "message"),
    [
        pytest.param("__import__('os').system('x')", "calls a function other", id="import_call"),
        pytest.param("a.real", "Attribute", id="attribute"),
        pytest.param("a ** 2", "Pow", id="power"),
        pytest.param("a // 2", "FloorDiv", id="floor_division"),
        pytest.param("a % 2", "Mod", id="modulo"),
        pytest.param("d + a", "'d'", id="unknown_name"),
        pytest.param("min + 1", "'min'", id="function_as_value"),
        pytest.param("abs(a)", "other than min or max", id="other_function"),
        pytest.param("min()", "one or more", id="min_without_args"),
        pytest.param("max(a, key=b)", "one or more positional", id="keyword"),
        pytest.param("'a'", "only numbers", id="string_constant"),
        pytest.param("True", "only numbers", id="bool_constant"),
        pytest.param("lambda: 1", "Lambda", id="lambda"),
        pytest.param("a if b else c", "IfExp", id="conditional"),
        pytest.param("a < b", "Compare", id="comparison"),
        pytest.param("[a][0]", "Subscript", id="subscript"),
        pytest.param("a +", "not an arithmetic expression", id="syntax_error"),
        pytest.param("(" * 300 + "a" + ")" * 300, "longer than", id="too_long"),
        pytest.param("a; b", "not an arithmetic expression", id="two_statements"),
    ],
)
def test_formula_refused(formula: str, message: str) -> None:
    with pytest.raises(FormulaError, match=message):
        parse_formula(formula, NAMES)


def multi(formula: str = "0.5 * exact + 0.5 * close", **extra: Any) -> dict[str, Any]:
    return {
        "type": "multi",
        "name": "combined",
        "graders": {
            "exact": {
                "type": "string_check",
                "name": "exact",
                "operation": "eq",
                "input": "{{sample.output_text}}",
                "reference": "{{item.answer}}",
            },
            "close": {
                "type": "text_similarity",
                "name": "close",
                "input": "{{sample.output_text}}",
                "reference": "{{item.answer}}",
                "evaluation_metric": "fuzzy_match",
                "pass_threshold": 0.5,
            },
        },
        "calculate_output": formula,
        **extra,
    }


@pytest.mark.parametrize(
    ("definition", "answer", "item", "passed", "score", "code"),
    [
        pytest.param(multi(), "kitten", {"answer": "kitten"}, True, 1.0, "formula", id="both"),
        pytest.param(
            multi(),
            "sitting",
            {"answer": "kitten"},
            False,
            0.5 * 8 / 13,
            "formula",
            id="graded_partially",
        ),
        pytest.param(
            multi(pass_threshold=0.3),
            "sitting",
            {"answer": "kitten"},
            True,
            0.5 * 8 / 13,
            "formula",
            id="custom_threshold",
        ),
        pytest.param(multi(), "x", {}, None, None, "sub_check_error", id="sub_check_ungraded"),
        pytest.param(
            multi("exact / (close - close)"),
            "kitten",
            {"answer": "kitten"},
            None,
            None,
            "formula_error",
            id="division_by_zero",
        ),
        pytest.param(
            multi("1e308 * 1e308 * exact"),
            "kitten",
            {"answer": "kitten"},
            None,
            None,
            "formula_error",
            id="not_finite",
        ),
    ],
)
def test_multi_check(
    definition: dict[str, Any],
    answer: str,
    item: dict[str, Any],
    passed: bool | None,
    score: float | None,
    code: str,
) -> None:
    result = run(definition, answer, item)
    assert (result.passed, result.reason_code) == (passed, code)
    assert result.score == (pytest.approx(score) if score is not None else None)
    assert result.details is not None
    assert set(result.details["graders"]) == {"exact", "close"}


@pytest.mark.parametrize(
    ("definition", "message"),
    [
        pytest.param(multi("exact + missing"), "'missing'", id="formula_unknown_name"),
        pytest.param({**multi(), "graders": {}}, "must map names", id="no_graders"),
        pytest.param(
            {**multi(), "graders": {"not-id": multi()["graders"]["exact"]}},
            "identifier",
            id="key_not_identifier",
        ),
        pytest.param(
            {**multi(), "graders": {"min": multi()["graders"]["exact"]}},
            "other than min/max",
            id="key_shadows_function",
        ),
        pytest.param(
            {**multi(), "graders": {"p": {"type": "policy", "forbidden_calls": ["x"]}}},
            "cannot be a multi or policy",
            id="policy_inside",
        ),
        pytest.param(
            {
                **multi(),
                "graders": {
                    "x": {
                        "type": "string_check",
                        "operation": "neq",
                        "input": "{{sample.output_text}}",
                        "reference": "a",
                    }
                },
            },
            "use 'ne'",
            id="sub_check_validated",
        ),
    ],
)
def test_refused_definitions(definition: dict[str, Any], message: str) -> None:
    with pytest.raises(CheckDefinitionError, match=message):
        build_check(definition)
