"""tool_call's BFCL-parity options: per-call rules in parallel, exact counts, string modes,
strict numbers, index paths (grader/checks/call_match.py, grader/checks/call_rules.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grader.checks import CheckContext, CheckDefinitionError, build_check
from grader.checks.call_rules import MEMO_CHARS, bfcl_standardize, canon_in, parse_path, path_text
from tests.support.checks import call, run, wire

PLAY_A = call("play", artist="Taylor Swift", minutes=20)
PLAY_B = call("play", artist="Maroon 5", minutes=15)


def check(**options: Any) -> dict[str, Any]:
    return {"type": "tool_call", "name": "c", **options}


@pytest.mark.parametrize(
    ("definition", "answer", "passed", "code"),
    [
        # Per-call acceptable/optional inside parallel: one call's rules never widen another's.
        pytest.param(
            check(
                parallel=[
                    {**PLAY_A, "acceptable": {"arguments.artist": ["Taylor Swift", "TS"]}},
                    PLAY_B,
                ]
            ),
            wire(call("play", artist="TS", minutes=20), PLAY_B),
            True,
            "match",
            id="per_call_acceptable_applies_to_its_call",
        ),
        pytest.param(
            check(
                parallel=[
                    {**PLAY_A, "acceptable": {"arguments.artist": ["Taylor Swift", "TS"]}},
                    PLAY_B,
                ]
            ),
            wire(PLAY_A, call("play", artist="TS", minutes=15)),
            False,
            "parallel_unmatched",
            id="per_call_acceptable_does_not_leak_to_sibling",
        ),
        pytest.param(
            check(parallel=[{**PLAY_A, "optional": ["arguments.minutes"]}, PLAY_B]),
            wire(call("play", artist="Taylor Swift"), PLAY_B),
            True,
            "match",
            id="per_call_optional_absent",
        ),
        pytest.param(
            check(parallel=[{**PLAY_A, "optional": ["arguments.minutes"]}, PLAY_B]),
            wire(PLAY_A, call("play", artist="Maroon 5")),
            False,
            "parallel_unmatched",
            id="per_call_optional_does_not_leak_to_sibling",
        ),
        pytest.param(
            check(parallel=[{**PLAY_A, "acceptable": {"arguments.loud": [True]}}, PLAY_B]),
            wire(PLAY_A, call("play", artist="Maroon 5", minutes=15, loud=True)),
            False,
            "parallel_unmatched",
            id="argument_one_call_accepts_is_unexpected_in_another",
        ),
        # Exact count.
        pytest.param(
            check(parallel=[PLAY_A, PLAY_B]),
            wire(PLAY_A, PLAY_B, PLAY_B),
            False,
            "duplicate_call",
            id="parallel_duplicate_fails",
        ),
        pytest.param(
            check(parallel=[PLAY_A, PLAY_B]),
            wire(PLAY_B, PLAY_A),
            True,
            "match",
            id="parallel_any_order",
        ),
        pytest.param(
            check(expected=PLAY_A, count="exactly_one"),
            wire(PLAY_A, PLAY_A),
            False,
            "duplicate_call",
            id="exactly_one_refuses_a_repeat",
        ),
        pytest.param(
            check(expected=PLAY_A, count="exactly_one"),
            wire(PLAY_B, PLAY_A),
            False,
            "extra_call",
            id="exactly_one_refuses_another_call",
        ),
        pytest.param(
            check(expected=PLAY_A), wire(PLAY_B, PLAY_A), True, "match", id="last_call_default"
        ),
        pytest.param(
            check(expected=PLAY_A, count="exactly_one"),
            wire(PLAY_A),
            True,
            "match",
            id="exactly_one_single_call",
        ),
        # String modes.
        pytest.param(
            check(expected=PLAY_A),
            wire(call("play", artist="taylor swift", minutes=20)),
            False,
            "value_mismatch",
            id="exact_default_keeps_case",
        ),
        pytest.param(
            check(expected=PLAY_A, strings="casefold"),
            wire(call("play", artist="TAYLOR SWIFT", minutes=20)),
            True,
            "match",
            id="casefold_ignores_case",
        ),
        pytest.param(
            check(expected=PLAY_A, strings="casefold"),
            wire(call("play", artist="TaylorSwift", minutes=20)),
            False,
            "value_mismatch",
            id="casefold_keeps_spaces",
        ),
        pytest.param(
            check(expected=PLAY_A, strings="bfcl"),
            wire(call("play", artist="taylor-swift", minutes=20)),
            True,
            "match",
            id="bfcl_drops_punctuation",
        ),
        pytest.param(
            check(expected=call("plot", f="3x**2 + 2x - 1"), strings="bfcl"),
            wire(call("plot", f="3x**2+2x1")),
            True,
            "match",
            id="bfcl_over_accepts_a_dropped_minus",
        ),
        pytest.param(
            check(expected=PLAY_A, strings={"arguments.artist": "casefold"}),
            wire(call("play", artist="taylor swift", minutes=20)),
            True,
            "match",
            id="mode_per_path",
        ),
        pytest.param(
            check(expected=call("f", a="X", b="Y"), strings={"arguments.a": "casefold"}),
            wire(call("f", a="x", b="y")),
            False,
            "value_mismatch",
            id="mode_per_path_only_there",
        ),
        # Strict numbers.
        pytest.param(
            check(expected=PLAY_A),
            wire(call("play", artist="Taylor Swift", minutes=20.0)),
            True,
            "match",
            id="loose_by_default_4550_is_4550_0",
        ),
        pytest.param(
            check(expected=PLAY_A, numbers={"arguments.minutes": "integer"}),
            wire(call("play", artist="Taylor Swift", minutes=20.0)),
            False,
            "numeric_type_mismatch",
            id="integer_rejects_a_float",
        ),
        pytest.param(
            check(expected=PLAY_A, numbers={"arguments.minutes": "integer"}),
            wire(PLAY_A),
            True,
            "match",
            id="integer_accepts_an_integer",
        ),
        pytest.param(
            check(expected=call("f", x=2.0), numbers={"arguments.x": "number"}),
            wire(call("f", x=2)),
            True,
            "match",
            id="number_accepts_an_integer",
        ),
        pytest.param(
            check(expected=call("f", x=2.0), numbers={"arguments.x": "number"}),
            wire(call("f", x="2")),
            False,
            "numeric_type_mismatch",
            id="number_rejects_a_string",
        ),
        # Index paths.
        pytest.param(
            check(
                expected=call("order", items=[{"sku": "a", "qty": 1}]),
                acceptable={"arguments.items[0].qty": [1, 2]},
            ),
            wire(call("order", items=[{"sku": "a", "qty": 2}])),
            True,
            "match",
            id="index_path_acceptable",
        ),
        pytest.param(
            check(
                expected=call("order", items=[{"sku": "a", "qty": 1}]),
                numbers={"arguments.items[0].qty": "integer"},
            ),
            wire(call("order", items=[{"sku": "a", "qty": 1.0}])),
            False,
            "numeric_type_mismatch",
            id="index_path_strict_number",
        ),
        pytest.param(
            check(expected=call("f", xs=[1, 2]), numbers={"arguments.xs[*]": "integer"}),
            wire(call("f", xs=[1, 2.0])),
            False,
            "numeric_type_mismatch",
            id="every_element_integer",
        ),
        pytest.param(
            check(expected=call("f", xs=[1.5, 2.0]), numbers={"arguments.xs[*]": "float"}),
            wire(call("f", xs=[1.5, 2])),
            False,
            "numeric_type_mismatch",
            id="every_element_float_rejects_an_int",
        ),
        pytest.param(
            check(
                expected=call("f", xs=[1.5, 2.0]),
                numbers={"arguments.xs[*]": "float"},
                acceptable={"arguments.xs": [[1.5, 2.0], [3.0]]},
            ),
            wire(call("f", xs=[1.5, 2])),
            False,
            "numeric_type_mismatch",
            id="element_types_checked_before_acceptable",
        ),
        pytest.param(
            check(expected=call("f", xs=[1.5, 2.0]), numbers={"arguments.xs[*]": "float"}),
            wire(call("f", xs=[1.5, 2.0])),
            True,
            "match",
            id="every_element_float_accepts_floats",
        ),
        pytest.param(
            check(
                expected=call("order", items=[{"sku": "a", "qty": 1}]),
                optional=["arguments.items[0].qty"],
            ),
            wire(call("order", items=[{"sku": "a"}])),
            True,
            "match",
            id="index_path_optional",
        ),
    ],
)
def test_options(definition: dict[str, Any], answer: str, passed: bool, code: str) -> None:
    result = run(definition, answer)
    assert (result.passed, result.reason_code) == (passed, code)


def test_first_differing_path_uses_index_syntax() -> None:
    definition = check(
        expected=call("order", items=[{"sku": "a", "qty": 1}]),
        numbers={"arguments.items[0].qty": "integer"},
    )
    result = run(definition, wire(call("order", items=[{"sku": "b", "qty": 1}])))
    assert result.details is not None
    assert result.details["path"] == "arguments.items[0].sku"


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "play",
            "parameters": {
                "type": "object",
                "properties": {"minutes": {"type": "integer"}, "artist": {"type": "string"}},
            },
        },
    }
]


@pytest.mark.parametrize(
    ("answer", "tools", "passed", "code"),
    [
        pytest.param(wire(PLAY_A), TOOLS, True, "match", id="integer_written_as_integer"),
        pytest.param(
            wire(call("play", artist="Taylor Swift", minutes=20.0)),
            TOOLS,
            False,
            "numeric_type_mismatch",
            id="integer_written_as_float",
        ),
        pytest.param(wire(PLAY_A), None, None, "no_request_tools", id="no_tools_is_ungraded"),
    ],
)
def test_numbers_from_request(
    answer: str, tools: list[Any] | None, passed: bool | None, code: str
) -> None:
    definition = check(expected=PLAY_A, numbers="from_request")
    result = run(definition, answer, context=CheckContext(request_tools=tools))
    assert (result.passed, result.reason_code) == (passed, code)


@pytest.mark.parametrize(
    ("definition", "message"),
    [
        pytest.param(check(expected=PLAY_A, strings="upper"), "strings", id="unknown_mode"),
        pytest.param(
            check(expected=PLAY_A, numbers={"arguments.x": "int"}), "numbers", id="bad_type"
        ),
        pytest.param(check(expected=PLAY_A, count="first"), "count", id="unknown_count"),
        pytest.param(
            check(parallel=[PLAY_A], count="exactly_one"), "count", id="count_in_parallel"
        ),
        pytest.param(
            check(expected=PLAY_A, optional=["arguments.a[x]"]), "optional", id="bad_index"
        ),
        pytest.param(
            check(parallel=[{**PLAY_A, "optional": "arguments.a"}]),
            "parallel\\[0\\].optional",
            id="per_call_rule_named",
        ),
        pytest.param(
            check(expected=PLAY_A, optional=["arguments.xs[*]"]),
            "numbers path",
            id="every_in_optional",
        ),
        pytest.param(
            check(expected=PLAY_A, numbers={"arguments.xs[*].n": "integer"}),
            "numbers path",
            id="every_not_last",
        ),
        pytest.param(
            check(parallel=[{**PLAY_A, "optionals": ["arguments.minutes"]}]),
            "unknown field 'optionals'",
            id="per_call_typo_refused",
        ),
    ],
)
def test_invalid_definitions(definition: dict[str, Any], message: str) -> None:
    with pytest.raises(CheckDefinitionError, match=message):
        build_check(definition)


KEYS = st.text(alphabet=st.characters(blacklist_characters=".[]"), min_size=1, max_size=8)
STEPS = st.lists(st.one_of(KEYS, st.integers(0, 999)), min_size=0, max_size=5)


@given(first=KEYS, rest=STEPS)
def test_path_text_round_trips(first: str, rest: list[str | int]) -> None:
    path = (first, *rest)
    assert parse_path(path_text(path)) == path


@given(st.text(max_size=2 * MEMO_CHARS))
def test_bfcl_standardize_is_bfcls_definition_remembered_or_not(text: str) -> None:
    """Short strings are remembered: the first and the second answer are BFCL's, and so is a
    string argument's canonical value under the ``bfcl`` mode (which reads the table itself)."""
    expected = re.sub(r"[ \,\.\/\-\_\*\^]", "", text).lower().replace("'", '"')
    assert bfcl_standardize(text) == expected
    assert bfcl_standardize(text) == expected
    if "," not in text and not text.startswith("P"):  # no comma list, no duration
        assert canon_in(text, "bfcl") == expected
