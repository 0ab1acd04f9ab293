"""One rounding rule: one decimal, exact halves up, from the counts (the page's pct agrees:
tests/e2e/test_live_page.py evaluates it in Chromium on the same table)."""

from __future__ import annotations

from fractions import Fraction
from math import floor

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grader.rounding import percent

CASES = [
    pytest.param(9, 16, "56.3", id="exact_half_56_25_goes_up"),
    pytest.param(1, 16, "6.3", id="exact_half_6_25_goes_up"),
    pytest.param(1, 8, "12.5", id="exact_tenth"),
    pytest.param(1, 3, "33.3", id="third_down"),
    pytest.param(2, 3, "66.7", id="two_thirds_up"),
    pytest.param(0, 7, "0.0", id="none"),
    pytest.param(7, 7, "100.0", id="all"),
    pytest.param(1, 2000, "0.1", id="half_a_tenth_up"),
    pytest.param(1, 2001, "0.0", id="just_under_half_a_tenth"),
    pytest.param(0, 0, "–", id="nothing_graded"),
]


@pytest.mark.parametrize(("count", "total", "shown"), CASES)
def test_percent_rounds_half_up_to_one_decimal(count: int, total: int, shown: str) -> None:
    assert percent(count, total) == shown


def test_python_format_would_disagree_on_an_exact_half() -> None:
    """Why the rule exists: the terminal's old f"{x:.1f}" rounded 56.25 to even."""
    assert f"{100 * 9 / 16:.1f}" == "56.2"
    assert percent(9.0, 16.0) == "56.3"  # counts read back from /metrics are floats


@given(st.integers(0, 10**9), st.integers(1, 10**9))
def test_percent_is_the_exact_value_rounded_half_up(count: int, total: int) -> None:
    tenths = floor(Fraction(1000 * count, total) + Fraction(1, 2))
    assert percent(count, total) == f"{tenths // 10}.{tenths % 10}"
