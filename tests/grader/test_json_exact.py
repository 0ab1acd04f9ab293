"""The one exact JSON reader and writer, at the boundaries where hostile text arrives.

Properties: whatever strings a client or upstream sent (lone surrogates included) and whatever
integers, ``dumps`` writes valid UTF-8 that ``loads_exact`` reads back to the same value; the
windowed digit-run search agrees with one search over the whole text wherever the run falls.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grader.json import (
    SEARCH_WINDOW,
    JSONError,
    dumps,
    dumps_line,
    has_long_digit_run,
    loads_exact,
    loads_exact_bytes,
    printable,
)

# Any code point, lone surrogates included (what surrogateescape and \ud800 escapes produce).
TEXT = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF))
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**40), max_value=10**40) | TEXT,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(TEXT, children, max_size=4),
    max_leaves=12,
)


@given(VALUES)
def test_dumps_then_loads_exact_is_the_identity(value: Any) -> None:
    data = dumps(value)
    data.decode("utf-8")  # always valid UTF-8, whatever the strings held
    assert loads_exact(data.decode("utf-8")) == value
    assert json.loads(data) == value


@given(TEXT)
def test_printable_is_always_encodable_and_keeps_clean_text(text: str) -> None:
    shown = printable(text)
    shown.encode("utf-8")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        assert "\\ud" in shown
    else:
        assert shown == text


@pytest.mark.parametrize(
    ("text", "escaped"),
    [
        ("run-\udcff", b'"run-\\udcff"'),  # an obs-text header byte, decoded with surrogateescape
        ("\ud800x", b'"\\ud800x"'),  # a lone high surrogate from an upstream escape
        ("back\\slash\udc80", b'"back\\\\slash\\udc80"'),  # a real backslash stays escaped
        ("Zürich", '"Zürich"'.encode()),  # other non-ASCII text is written as UTF-8
    ],
    ids=["obs_text", "lone_high", "backslash_then_surrogate", "plain_utf8"],
)
def test_lone_surrogates_are_written_as_escapes(text: str, escaped: bytes) -> None:
    assert dumps(text) == escaped


@given(
    st.integers(min_value=0, max_value=3 * SEARCH_WINDOW),
    st.integers(min_value=1, max_value=30),
    st.integers(min_value=SEARCH_WINDOW, max_value=3 * SEARCH_WINDOW),
)
def test_windowed_digit_search_matches_one_search(at: int, run: int, size: int) -> None:
    text = ("x" * size)[:at] + "7" * run + "x" * max(size - at, 0)
    assert has_long_digit_run(text) is (re.search(r"[0-9]{19,}", text) is not None)


@given(
    st.lists(
        st.one_of(
            TEXT,  # any code point: non-ASCII digits (U+0663) and lone surrogates included
            st.integers(min_value=0, max_value=30).map(lambda n: "9" * n),
        ),
        max_size=6,
    )
)
def test_digit_run_search_is_the_ascii_digit_regex(parts: list[str]) -> None:
    text = "".join(parts)
    assert has_long_digit_run(text) is (re.search(r"[0-9]{19,}", text) is not None)


@pytest.mark.parametrize(
    ("text", "found"),
    [
        pytest.param("1" * 19, True, id="nineteen_digits"),
        pytest.param("x" + "1" * 18 + "x" + "1" * 18, False, id="two_runs_of_eighteen"),
        pytest.param("\u0663" * 25, False, id="arabic_indic_digits_are_not_ascii_digits"),
        pytest.param("\uff11" * 25, False, id="fullwidth_digits_are_not_ascii_digits"),
        pytest.param("\ud800" + "1" * 19 + "\udcff", True, id="beside_lone_surrogates"),
        pytest.param("\u00e9" + "1" * 19, True, id="after_a_two_byte_character"),
    ],
)
def test_digit_runs_are_ascii_digit_runs(text: str, found: bool) -> None:
    assert has_long_digit_run(text) is found


def test_a_run_straddling_a_window_boundary_is_found() -> None:
    text = "x" * (SEARCH_WINDOW - 10) + "1" * 19 + "x" * SEARCH_WINDOW
    assert has_long_digit_run(text)
    assert loads_exact(f'["{text[:10]}", {"1" * 25}]') == [text[:10], int("1" * 25)]


def _read(parse: Any, data: Any) -> tuple[str, Any]:
    try:
        return ("value", parse(data))
    except JSONError as exc:
        return ("error", type(exc).__name__)


# Bytes as a body arrives: JSON values, then damaged (cut, a byte flipped, invalid UTF-8, a
# BOM, a lone-surrogate escape, an overflowing literal, a long digit run).
BODIES = st.one_of(
    VALUES.map(dumps),
    st.tuples(VALUES.map(dumps), st.integers(min_value=0, max_value=60)).map(
        lambda t: t[0][: t[1]]
    ),
    st.tuples(VALUES.map(dumps), st.binary(min_size=1, max_size=3)).map(lambda t: t[1] + t[0]),
    st.sampled_from(
        [
            b'{"a": "\\ud800"}',
            b"[12, 1.5e-3, -0, true]",
            b"[1e400]",
            b"\xef\xbb\xbf{}",
            b'{"a": "\xff"}',
            b"[12345678901234567890123]",
            b"NaN",
            b"[" * 2000 + b"]" * 2000,
        ]
    ),
    st.binary(max_size=40),
)


@given(BODIES)
def test_reading_bytes_is_reading_their_replaced_text(data: bytes) -> None:
    assert _read(loads_exact_bytes, data) == _read(loads_exact, data.decode("utf-8", "replace"))


@given(VALUES)
def test_a_line_is_the_value_and_one_newline(value: Any) -> None:
    assert dumps_line(value) == dumps(value) + b"\n"
