"""``uniqueItems`` and ``enum`` in O(n log n), with exactly jsonschema's meaning of equal.

Red team, round 3: ``uniqueItems`` fell back to comparing every pair as soon as the items were
objects or mixed types (6,000 items: 34 s, and all live grading stalled behind it). The bounded
keywords must agree with the library's own on every value (a table of the edge cases, then a
property over random JSON), and a 6,000-item array must grade through the public check: these
cases would not finish inside pytest's timeout with the quadratic keyword.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from grader.checks import CheckContext, Sample, build_check
from grader.checks._schema import all_unique, safe_validator, schema_errors
from grader.json import dumps

LIBRARY = jsonschema.Draft202012Validator  # the unbounded keywords, as the oracle

UNIQUE_CASES = [
    ("empty", [], True),
    ("one_and_one_point_zero_are_equal", [1, 1.0], False),
    ("true_and_one_differ", [True, 1], True),
    ("false_and_zero_differ", [False, 0], True),
    ("objects_equal_whatever_key_order", [{"a": 1, "b": 2}, {"b": 2, "a": 1}], False),
    ("objects_with_other_values", [{"a": 1}, {"a": 2}], True),
    ("arrays_are_ordered", [[1, 2], [2, 1]], True),
    ("equal_arrays", [[1, {"x": None}], [1, {"x": None}]], False),
    ("null_twice", [None, None], False),
    ("mixed_types_all_distinct", [None, True, 0, "0", [0], {"0": 0}], True),
    ("integers_beyond_64_bits", [2**70, 2**70 + 1, 2**70], False),
    ("lone_surrogates", ["\ud800", "\udfff", "\ud800"], False),
    ("nested_bool_and_int", [[True], [1]], True),
]


@pytest.mark.parametrize(
    ("items", "unique"), [c[1:] for c in UNIQUE_CASES], ids=[c[0] for c in UNIQUE_CASES]
)
def test_unique_items_agrees_with_the_library(items: list[Any], unique: bool) -> None:
    assert all_unique(items) is unique
    assert LIBRARY({"uniqueItems": True}).is_valid(items) is unique
    bounded = safe_validator({"uniqueItems": True})
    assert (schema_errors(bounded, items) is None) is unique


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.sampled_from([0.0, 1.0, 2.5])
    | st.text("ab", max_size=2),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.text("ab", max_size=2), children, max_size=3)
    ),
    max_leaves=6,
)


@given(st.lists(json_values, max_size=8))
def test_unique_items_agrees_with_the_library_on_any_json(items: list[Any]) -> None:
    expected = LIBRARY({"uniqueItems": True}).is_valid(items)
    assert all_unique(items) is expected
    assert (schema_errors(safe_validator({"uniqueItems": True}), items) is None) is expected


@given(st.lists(json_values, min_size=9, max_size=20), json_values)
def test_a_long_enum_agrees_with_the_library(enum: list[Any], value: Any) -> None:
    """Past eight values an enum is sorted once and bisected: same verdicts as the scan."""
    schema = {"enum": enum}
    expected = LIBRARY(schema).is_valid(value)
    assert (schema_errors(safe_validator(schema), value) is None) is expected
    for member in enum:
        assert schema_errors(safe_validator(schema), member) is None


def _answer(arguments: dict[str, Any]) -> Sample:
    call = {"function": {"name": "f", "arguments": dumps(arguments).decode()}}
    return Sample.from_answer(dumps({"tool_calls": [call]}).decode())


LARGE = [
    ("distinct_objects", [{"id": i} for i in range(6000)], "schema_valid"),
    ("one_duplicate_at_the_end", [{"id": i} for i in range(6000)] + [{"id": 0}], "schema_invalid"),
    ("mixed_types", [*range(3000), *(str(i) for i in range(3000)), True], "schema_valid"),
]


@pytest.mark.parametrize(("items", "code"), [c[1:] for c in LARGE], ids=[c[0] for c in LARGE])
def test_six_thousand_items_grade_through_the_check(items: list[Any], code: str) -> None:
    schema = {"type": "object", "properties": {"xs": {"type": "array", "uniqueItems": True}}}
    check = build_check({"type": "json_schema", "name": "args", "schema": schema}, "t")
    result = check.run(_answer({"xs": items}), {}, CheckContext())
    assert result.reason_code == code


def test_a_long_enum_checks_six_thousand_values() -> None:
    members = [{"k": i} for i in range(6000)]
    schema = {"type": "object", "properties": {"xs": {"items": {"enum": members}}}}
    check = build_check({"type": "json_schema", "name": "args", "schema": schema}, "t")
    ok = check.run(_answer({"xs": members[::-1]}), {}, CheckContext())
    bad = check.run(_answer({"xs": [*members, {"k": -1}]}), {}, CheckContext())
    assert (ok.reason_code, bad.reason_code) == ("schema_valid", "schema_invalid")
