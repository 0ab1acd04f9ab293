"""The fast paths of tool_call's value rules give exactly what the general definitions give:
``canon_in``'s one-walk fold is ``canon`` then folding; the duplicate test's identical-JSON
shortcut never decides differently from canonical equality (grader/checks/call_rules.py,
grader/checks/tool_call.py)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grader.checks.call_answer import AnswerCall
from grader.checks.call_rules import STRING_MODES, StringMode, canon_in, fold_strings
from grader.checks.tool_call import _same
from grader.toolcall.canon import CArray, CBool, Duration, canon

# Strings that normalisation changes (comma lists, durations) or BFCL's standardisation does.
STRINGS = st.one_of(
    st.text(max_size=6),
    st.sampled_from(["a, b", "PT1H", "PT60M", "P1D", "P", "Paris", "PARIS", "3x**2 - 1", "a'b"]),
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([1.0, -0.0, 2.5, 1e20]),
    STRINGS,
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=10,
)


@given(VALUES, st.sampled_from(STRING_MODES))
def test_canon_in_is_canon_then_folding(value: Any, mode: StringMode) -> None:
    assert canon_in(value, mode) == fold_strings(canon(value), mode)


@pytest.mark.parametrize(
    ("value", "mode", "expected"),
    [
        pytest.param("a , B", "exact", "a,B", id="comma_list_trimmed"),
        pytest.param("a , B", "bfcl", "ab", id="comma_list_then_bfcl"),
        pytest.param("PT1H", "bfcl", Duration(3600, "PT1H"), id="duration_not_folded"),
        pytest.param("Paris", "casefold", "paris", id="casefold"),
        pytest.param(4.0, "exact", 4, id="integral_double_is_int"),
        pytest.param(True, "bfcl", CBool.TRUE, id="boolean_never_a_number"),
        pytest.param(["A-b", 2.0], "bfcl", CArray(("ab", 2)), id="array_folded_once"),
    ],
)
def test_canon_in_values(value: Any, mode: StringMode, expected: Any) -> None:
    assert canon_in(value, mode) == expected


@given(VALUES, VALUES, st.booleans())
def test_same_call_is_canonical_equality(a: Any, b: Any, same_value: bool) -> None:
    first = AnswerCall("f", {"x": a})
    second = AnswerCall("f", {"x": a if same_value else b})
    expected = first.canonical("exact") == second.canonical("exact")
    assert _same(first, second) is expected


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        pytest.param({"n": 1}, {"n": 1.0}, True, id="int_and_integral_double"),
        pytest.param({"n": True}, {"n": 1}, False, id="true_is_not_one"),
        pytest.param({"t": "PT1H"}, {"t": "PT60M"}, True, id="durations_by_length"),
        pytest.param({"l": [1, 2]}, {"l": [2, 1]}, False, id="array_order_counts"),
        pytest.param(None, None, True, id="both_unusable"),
    ],
)
def test_same_call_cases(a: Any, b: Any, same: bool) -> None:
    assert _same(AnswerCall("f", a), AnswerCall("f", b)) is same
