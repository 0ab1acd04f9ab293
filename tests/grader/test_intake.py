"""grader/intake.py: the JSON-line describer says what is wrong in a person's words and never
raises; any cut of a valid JSON line reads as truncated."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grader.intake as intake_module
from grader.intake import Intake, UnusableInputError, describe_json_error
from grader.json import JSONError, loads_exact

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


def refused(text: str) -> bool:
    try:
        loads_exact(text)
    except JSONError:
        return True
    return False


@settings(max_examples=300)
@given(value=JSON_VALUES, ascii_only=st.booleans(), data=st.data())
def test_any_cut_of_a_valid_json_line_reads_as_truncated(
    value: Any, ascii_only: bool, data: st.DataObject
) -> None:
    line = json.dumps(value, ensure_ascii=ascii_only)
    cut = data.draw(st.integers(min_value=1, max_value=max(1, len(line) - 1)))
    prefix = line[:cut]
    if not refused(prefix):  # "12" is a whole value cut from "123"
        return
    message = describe_json_error(prefix)
    assert message.startswith("the line ends ")
    assert message.endswith("truncated?)")


@settings(max_examples=500)
@given(text=st.text(max_size=60))
def test_any_text_gets_a_message_never_an_exception(text: str) -> None:
    message = describe_json_error(text)
    assert isinstance(message, str)
    assert message


@settings(max_examples=300)
@given(value=JSON_VALUES)
def test_a_valid_line_refused_by_the_grader_gets_the_parsers_reason(value: Any) -> None:
    """Grammatical JSON the grader still refuses (nesting past the parser's limit): the
    message carries the parser's own reason rather than inventing a syntax error."""
    deep = "[" * 2000 + json.dumps(value) + "]" * 2000
    assert refused(deep)
    try:
        loads_exact(deep)
    except JSONError as exc:
        reason = str(exc)
    message = describe_json_error(deep, reason)
    assert message == f"not a JSON value the grader reads: {reason}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            '{"task_id": "a", "answer": "{\\"name',
            "the line ends inside a string (truncated?)",
            id="cut_in_a_string_not_a_control_character",
        ),
        pytest.param(
            '{"a": [1, 2',
            "the line ends before the array opened at column 7 is closed "
            "(missing ']}': truncated?)",
            id="cut_in_nested_containers_names_what_is_missing",
        ),
        pytest.param(
            '{"a": tr',
            "the line ends before the object opened at column 1 is closed",
            id="cut_in_a_literal",
        ),
        pytest.param("-", "the line ends inside a number (truncated?)", id="cut_in_a_number"),
        pytest.param(
            '{"a": 1,}',
            "not JSON at column 9: expected a key in double quotes (a trailing comma?), found '}'",
            id="trailing_comma_in_an_object",
        ),
        pytest.param(
            "[1, ]",
            "not JSON at column 5: expected a value (a trailing comma?), found ']'",
            id="trailing_comma_in_an_array",
        ),
        pytest.param(
            "{'a': 1}",
            "not JSON at column 2: expected a key in double quotes or '}'",
            id="single_quotes",
        ),
        pytest.param('{"a": NaN}', "not JSON at column 7: NaN is not JSON (write null", id="nan"),
        pytest.param(
            '{"a": "x\ty"}',
            "not JSON at column 9: a raw control character (U+0009) inside a string",
            id="raw_tab_inside_a_string",
        ),
        pytest.param(
            '{"a": "\\q"}', "not JSON at column 8: an invalid escape '\\\\q'", id="bad_escape"
        ),
        pytest.param(
            "[1}", "not JSON at column 3: expected ',' or ']' after a value", id="mismatch"
        ),
        pytest.param(
            '{"a": 1}{"a": 2}',
            "not JSON at column 9: a second JSON value starts here: one value a line",
            id="two_values_on_one_line",
        ),
        pytest.param("   ", "the line holds no JSON value", id="only_whitespace"),
        pytest.param(
            '\ufeff{"a": 1}',
            "not JSON at column 1: a byte-order mark (U+FEFF): save the file as UTF-8",
            id="byte_order_mark",
        ),
    ],
)
def test_messages_name_the_place_and_the_cause(text: str, message: str) -> None:
    assert refused(text)
    assert describe_json_error(text).startswith(message)


def test_lines_records_problems_and_yields_the_rest_in_order(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"a": 1}\r\n\n{"a": \n\xff\n[2]\n')
    intake = Intake("test")
    assert list(intake.lines(path)) == [(1, {"a": 1}), (5, [2])]
    assert [(p.line, p.reason_code) for p in intake.problems] == [
        (3, "line_unreadable"),
        (4, "line_unreadable"),
    ]
    assert intake.rows == 4
    assert intake.exit_code() == 1
    assert intake.to_dict()["reasons"] == {"line_unreadable": 2}
    kept = Intake("test")
    assert [type(v).__name__ for _, v in kept.lines(path, unreadable=True)] == [
        "dict",
        "Problem",
        "Problem",
        "list",
    ]


def test_strict_refuses_at_the_first_problem_with_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n{"a": "\n')
    with pytest.raises(UnusableInputError, match=r"rows\.jsonl:2: the line ends inside a string"):
        list(Intake("test", strict=True).lines(path))


def test_the_first_few_problems_go_to_stderr_and_the_rest_are_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text("1\n" + "{\n" * 8)
    intake = Intake("grade", what="error row")
    list(intake.lines(path))
    intake.warn()
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 6
    assert err[0].startswith(f"gradeproxy grade: error row: {path}:2: the line ends before")
    assert err[-1] == "gradeproxy grade: … and 3 more (all in the report)"
    assert intake.summary() == ("input: 9 rows; 8 error rows (in no pass rate): line_unreadable 8")


def _by_text(raw: bytes) -> Any:
    """What a line was before lines() read plain lines from their bytes: its UTF-8 text through
    loads_exact (None for a line it skips or refuses)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not text or text.isspace():
        return None
    try:
        return ("value", loads_exact(text))
    except JSONError:
        return None


LINES = st.lists(
    st.one_of(
        JSON_VALUES.map(lambda v: json.dumps(v).encode()),
        JSON_VALUES.map(lambda v: json.dumps(v, ensure_ascii=False).encode("utf-8", "replace")),
        st.integers(min_value=10**19, max_value=10**30).map(lambda n: f'{{"id": {n}}}'.encode()),
        st.sampled_from([b'"\\udcff"', b"1e400", b"\xef\xbb\xbf{}", b"\xff{}", b"", b"  ", b"{"]),
        st.binary(max_size=20).filter(lambda b: b"\n" not in b and b"\r" not in b),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=150)
@given(LINES)
def test_lines_read_from_bytes_are_the_values_of_their_text(lines: list[bytes]) -> None:
    """A plain line is parsed from its bytes (no decode); every line must still give what its
    text gave: the same value, or the same line refused or skipped."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rows.jsonl"
        path.write_bytes(b"\n".join(lines) + b"\n")
        intake = Intake("grade", strict=False, what="error row")
        try:
            got = {n: v for n, v in intake.lines(path) if not isinstance(v, Exception)}
        except UnusableInputError:
            got = {}
    expected = {n: r[1] for n, r in enumerate(map(_by_text, lines), start=1) if r is not None}
    if not expected:  # a file with lines and none of them JSON is refused whole
        return
    assert repr(got) == repr(expected)  # repr: an integer read as a double would differ


@pytest.mark.parametrize(
    "block", [1, 64, 1 << 20], ids=["a_line_a_block", "two_blocks", "one_block"]
)
def test_lines_read_a_block_at_a_time_keep_their_numbers_and_exact_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    """Lines are read (and searched for digit runs) a block at a time: a run in one block must
    not make another's lines inexact, and line numbers run on across blocks. An object of
    strings alone is read as it is, whatever digits its strings hold."""
    monkeypatch.setattr(intake_module, "LINES_BLOCK", block)
    path = tmp_path / "rows.jsonl"
    path.write_bytes(
        b'{"a": 1}\n\n{"id": 12345678901234567890123}\n"\\udcff"\n1e400\n\xff\n[2]\n{"b": 2.5}\n'
        b'{"task_id": "t", "answer": "12345678901234567890123"}'
    )
    intake = Intake("t")
    assert [(n, repr(v)) for n, v in intake.lines(path)] == [
        (1, repr({"a": 1})),
        (3, repr({"id": 12345678901234567890123})),
        (4, repr("\udcff")),
        (5, repr(10**400)),
        (7, repr([2])),
        (8, repr({"b": 2.5})),
        (9, repr({"task_id": "t", "answer": "12345678901234567890123"})),  # strings: no search
    ]
    assert [(p.line, p.reason_code) for p in intake.problems] == [(6, "line_unreadable")]
