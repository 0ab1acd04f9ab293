"""Hypothesis properties of the parser, canonicaliser and extractor."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grader import parse_task, score
from grader.engine import grade
from grader.json import SEARCH_WINDOW, dumps, loads_exact
from grader.toolcall.canon import canon, to_plain
from grader.toolcall.extract import extract

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
arguments = st.dictionaries(st.text(max_size=8), json_values, max_size=5)
tool_names = st.text(min_size=1, max_size=20)
# Prose without brackets: braces in prose may legitimately enclose a call (then it is not one).
prose = st.text(alphabet=st.characters(blacklist_characters="{}[]"), max_size=80)
unquoted_prose = st.text(alphabet=st.characters(blacklist_characters='{}[]"'), max_size=80)


def shuffled(value: Any, rnd: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: shuffled(v, rnd) for k, v in items}
    if isinstance(value, list):
        return [shuffled(v, rnd) for v in value]
    return value


@given(json_values)
def test_canonicalisation_is_idempotent(value: Any) -> None:
    once = canon(value)
    assert canon(to_plain(once)) == once


@given(json_values, st.randoms(use_true_random=False))
def test_canonicalisation_ignores_key_order(value: Any, rnd: random.Random) -> None:
    assert canon(shuffled(value, rnd)) == canon(value)


@given(st.text())
def test_arbitrary_text_never_raises(text: str) -> None:
    task = parse_task({"id": "t", "expected": {"name": "f", "arguments": {}}})
    verdict = score(task, text)
    assert verdict.score in (0, 1)


@given(json_values)
def test_arbitrary_json_values_never_raise(value: Any) -> None:
    task = parse_task({"id": "t", "expected": {"name": "f", "arguments": {}}})
    assert score(task, value).score in (0, 1)
    assert score(task, dumps(value).decode()).score in (0, 1)


@given(tool_names, arguments, prose, prose)
def test_usable_call_in_prose_is_found(
    name: str, args: dict[str, Any], before: str, after: str
) -> None:
    call = {"name": name, "arguments": args}
    found = extract(before + dumps(call).decode() + after)
    assert found.call is not None
    assert found.call.name == name
    assert found.call.canonical == canon_call(call)


@given(
    tool_names, arguments, unquoted_prose, st.sampled_from(["{", "[", "{{[", "[{", "}", "]"]), prose
)
def test_never_closed_opener_does_not_hide_a_call(
    name: str, args: dict[str, Any], before: str, opener: str, after: str
) -> None:
    """An opener that never closes is prose (GRADING-DECISIONS.md). Prose quotes after such an
    opener could pair with the call's own quotes and close it for real, so they are left out."""
    call = {"name": name, "arguments": args}
    found = extract(opener + before + dumps(call).decode() + after)
    assert found.call is not None
    assert found.call.canonical == canon_call(call)


def canon_call(call: dict[str, Any]) -> Any:
    found = extract(dumps(call).decode()).call
    assert found is not None
    return found.canonical


@given(tool_names, arguments, st.randoms(use_true_random=False))
def test_expected_after_any_key_shuffle_scores_one(
    name: str, args: dict[str, Any], rnd: random.Random
) -> None:
    task = parse_task({"id": "t", "expected": {"name": name, "arguments": args}})
    answer = dumps(shuffled({"name": name, "arguments": args}, rnd)).decode()
    assert score(task, answer).score == 1


@pytest.mark.parametrize(
    "prose",
    [SEARCH_WINDOW - 1, SEARCH_WINDOW, SEARCH_WINDOW + 1, 3 * SEARCH_WINDOW + 7],
    ids=["window_minus_one", "window", "window_plus_one", "three_windows"],
)
def test_a_call_after_windows_of_prose_is_found(prose: int) -> None:
    """The opener search runs a window at a time on long answers; no call may fall between."""
    task = parse_task({"id": "w", "expected": {"name": "f", "arguments": {"a": 1}}})
    answer = "x" * prose + '{"name": "f", "arguments": {"a": 1}}'
    assert score(task, answer).reason_code == "match"


@given(st.integers(min_value=309, max_value=4000), st.integers(min_value=1, max_value=9))
def test_an_overflowing_literal_keeps_its_exact_value(exponent: int, mantissa: int) -> None:
    """GRADING-DECISIONS: ``{m}e{x}`` past a double's range parses to exactly m * 10**x."""
    value = loads_exact(f'{{"n": {mantissa}e{exponent}}}')["n"]
    assert value == mantissa * 10**exponent
    assert value != float("inf")


# Tool-call envelopes as the proxy captures them: arguments as text (JSON or not, any code
# point, lone surrogates included), odd names, odd ids, legacy and empty shapes, deep nesting.
any_text = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=12)
argument_texts = st.one_of(
    arguments.map(lambda a: dumps(a).decode()),
    any_text,
    st.sampled_from(["", "null", "[1]", '{"a": 1e400}', '{"a": 12345678901234567890123}']),
    st.integers(min_value=120, max_value=140).map(lambda n: '{"a":' + "[" * n + "]" * n + "}"),
)
wire_calls = st.fixed_dictionaries(
    {
        "id": st.none() | any_text,
        "type": st.just("function"),
        "function": st.fixed_dictionaries(
            {"name": tool_names | any_text, "arguments": argument_texts}
        ),
    }
)
envelopes = st.lists(wire_calls, max_size=3).map(lambda calls: {"tool_calls": calls})


@given(envelopes, tool_names, arguments)
def test_an_envelope_handed_over_parsed_grades_as_its_text(
    envelope: dict[str, Any], name: str, expected_args: dict[str, Any]
) -> None:
    text = dumps(envelope).decode()
    assert extract(text, parsed=envelope) == extract(text)
    task = parse_task({"id": "t", "expected": {"name": name, "arguments": expected_args}})
    assert grade(task, text, parsed=envelope) == grade(task, text)


# Red team, round 3: a lone surrogate in a tool-call name (with a 19-digit number elsewhere, so
# the capture took the stdlib's exact path) raised in the reason's quoting: a grader error with
# no row. Names, keys and values with lone surrogates and integers wider than 64 bits must
# grade to a verdict, through the parsed value and through the text.
odd_text = st.lists(
    st.sampled_from(["\ud800", "\udfff", "\udce9", "a", "é", "_"]) | st.characters(), max_size=8
).map("".join)
huge_ints = st.integers(min_value=10**18, max_value=10**40) | st.integers(max_value=-(10**19))
odd_values = st.recursive(
    st.none() | st.booleans() | huge_ints | odd_text,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(odd_text, children, max_size=3)
    ),
    max_leaves=8,
)


@given(odd_text, st.dictionaries(odd_text, odd_values, max_size=3), tool_names, arguments)
def test_odd_unicode_and_huge_numbers_grade_to_a_verdict(
    name: str, args: dict[str, Any], expected_name: str, expected_args: dict[str, Any]
) -> None:
    envelope = {"tool_calls": [{"function": {"name": name, "arguments": dumps(args).decode()}}]}
    text = dumps(envelope).decode()
    task = parse_task({"id": "t", "expected": {"name": expected_name, "arguments": expected_args}})
    checked = parse_task(
        {
            "id": "c",
            "expected": {"name": expected_name, "arguments": expected_args},
            "checks": [{"type": "tool_call", "name": "call"}],
        }
    )
    for graded in (task, checked):
        # (The text path may read two adjacent lone surrogates back as one code point, so the
        # two verdicts can differ in what they quote; each must still be a verdict.)
        for outcome in (grade(graded, text, parsed=envelope), grade(graded, text)):
            assert outcome.result in ("pass", "fail", "stale")
            assert all(column.error is None for column in outcome.checks)
