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

from grader.checks.call_sets import answer_calls
from grader.checks.sample import Sample
from grader.json import (
    SEARCH_WINDOW,
    JSONError,
    dumps,
    dumps_line,
    has_long_digit_run,
    loads_exact,
    loads_exact_bytes,
    loads_plain,
    loads_with_plain,
    plain_strings,
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


@given(BODIES)
def test_reading_an_answer_is_loads_exact_and_plain_strings(data: bytes) -> None:
    """One digit search serves both answers: the value, and whether its strings are plain."""
    text = data.decode("utf-8", "replace")
    read = _read(loads_with_plain, text)
    assert (read if read[0] == "error" else ("value", read[1][0])) == _read(loads_exact, text)
    if read[0] == "value":
        assert read[1][1] is plain_strings(text)


@given(VALUES)
def test_a_line_is_the_value_and_one_newline(value: Any) -> None:
    assert dumps_line(value) == dumps(value) + b"\n"


# An answer's arguments are a JSON text inside a JSON string: when the outer text is cleared by
# plain_strings, the inner one is parsed without a second digit search (loads_plain).
ARGUMENT_VALUES = st.dictionaries(
    TEXT,
    st.integers(min_value=-(10**30), max_value=10**30)
    | TEXT
    | st.floats(allow_nan=False, allow_infinity=False),
    max_size=4,
)


@given(ARGUMENT_VALUES, st.booleans())
def test_arguments_inside_a_plain_answer_parse_as_loads_exact_does(
    arguments: dict[str, Any], ascii_only: bool
) -> None:
    inner = json.dumps(arguments, ensure_ascii=ascii_only)
    outer = json.dumps({"tool_calls": [{"function": {"name": "f", "arguments": inner}}]})
    if not plain_strings(outer):
        return
    text = loads_exact(outer)["tool_calls"][0]["function"]["arguments"]
    assert loads_plain(text) == loads_exact(text) == arguments


@pytest.mark.parametrize(
    ("outer", "plain"),
    [
        pytest.param('{"a": "12345678901234567"}', True, id="short_runs"),
        pytest.param('{"a": "1234567890123456789"}', False, id="a_run_of_19"),
        # \u0030 is "0": the decoded string holds 20 digits the text never writes in a row
        pytest.param('{"a": "123456789012345678\\u0030\\u0031"}', False, id="escaped_digits"),
        pytest.param('{"a": "caf\\u00e9"}', False, id="any_unicode_escape_is_refused"),
    ],
)
def test_plain_strings_clears_only_texts_whose_strings_hold_no_long_run(
    outer: str, plain: bool
) -> None:
    assert plain_strings(outer) is plain
    decoded = loads_exact(outer)["a"]
    assert has_long_digit_run(decoded) is False or plain is False


@pytest.mark.parametrize(
    "text",
    [
        pytest.param('{"x": 1e400}', id="overflowing_literal"),
        pytest.param('{"s": "\\udcff"}', id="lone_surrogate_escape"),
        pytest.param('{"a": ', id="not_json"),
    ],
)
def test_loads_plain_decides_what_orjson_refuses_as_loads_exact(text: str) -> None:
    try:
        expected: Any = loads_exact(text)
    except JSONError as exc:
        with pytest.raises(type(exc)):
            loads_plain(text)
        return
    assert loads_plain(text) == expected


@pytest.mark.parametrize(
    ("answer", "value"),
    [
        pytest.param(
            '{"tool_calls": [{"function": {"name": "f", "arguments": '
            '"{\\"id\\": 12345678901234567891}"}}]}',
            12345678901234567891,
            id="a_wide_integer_in_the_arguments",
        ),
        pytest.param(
            '{"tool_calls": [{"function": {"name": "f", "arguments": '
            '"{\\"id\\": 123456789012345678\\u0039\\u0031}"}}]}',
            12345678901234567891,
            id="digits_written_as_escapes",
        ),
        pytest.param(
            '{"tool_calls": [{"function": {"name": "f", "arguments": "{\\"id\\": 12}"}}]}',
            12,
            id="a_plain_answer",
        ),
    ],
)
def test_answer_arguments_keep_wide_integers_exact(answer: str, value: int) -> None:
    (call,) = answer_calls(Sample.from_answer(answer))
    assert call.arguments == {"id": value}
    assert type(call.arguments["id"]) is int
