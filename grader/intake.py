"""Reading a batch run's input rows: a bad row is a counted problem with a reason, not a refusal.

Every offline batch command (``grade``, ``replay``, ``regrade``, ``export``, ``compare``,
``calibrate``) reads JSONL through :class:`Intake`. A line that cannot be used (not JSON, cut
off, not UTF-8, the wrong shape, an unknown task) becomes a :class:`Problem`: ``file:line``, an
:data:`InputReason` code and a message in a person's words (:func:`describe_json_error`: "the
line ends inside a string (truncated?)", never the parser's "unexpected control character").
The grading commands turn each problem into an ``error`` row; the reading commands skip the row
and count it. Either way one bad row never costs the others their grades.

The exit-code policy lives here too, the same for every batch command (docs/offline.md): 0 all
rows read and graded, 1 some rows were errors or skipped, 2 nothing usable
(:class:`UnusableInputError`: no such file, not JSONL at all, a task file that does not load).
``strict`` keeps the old refuse-everything behaviour: the first problem raises
:class:`UnusableInputError`, before any output is written.

A non-string ``answer`` is not an input problem: grading.md's rule 11 scores it 0 with
``not_a_string`` (a model failure), as :func:`grader.score` does. This module never grades,
never writes a file, and imports nothing of the CLI.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from functools import partial
from itertools import chain
from pathlib import Path
from typing import Any, Literal, TextIO, get_args

import orjson

from grader.errors import GraderError
from grader.json import (
    NOT_READ,
    JSONError,
    bytes_have_long_digit_run,
    loads_exact,
    read_plain_bytes,
)
from grader.lazy_pattern import LazyPattern
from grader.values import value_type

InputReason = Literal[
    "line_unreadable",  # not JSON, cut off, two values on a line, not UTF-8 text
    "not_an_object",  # valid JSON, but not the object a row is
    "missing_field",  # a required field is absent (task_id, answer, a label)
    "bad_field",  # a field of the wrong type or value
    "reserved_field",  # an answers-row field that would overwrite a result field
    "unknown_task",  # the row's task id is not in the task set
    "no_grader_record",  # replay: the task has no episode grader record
    "history_malformed",  # replay: not exactly one history of the right shape
    "history_incomplete",  # replay: a tool result whose call is not in the history
    "cannot_grade",  # the grader raised on this row (a bug): an error row, never a traceback
]
INPUT_REASONS: tuple[InputReason, ...] = get_args(InputReason)

SHOWN_ON_STDERR = 5  # the first few problems are named on stderr; all of them in the report


class UnusableInputError(GraderError, ValueError):
    """Nothing usable (exit 2): no such file, not JSONL at all, or a bad row under ``strict``."""


@value_type
class Problem:
    """One input row that could not be used: where it is, why (a code), and in words."""

    file: str
    line: int
    reason_code: InputReason
    message: str

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    def text(self) -> str:
        return f"{self.where}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "reason_code": self.reason_code,
            "message": self.message,
        }


class Intake:
    """The input rows of one batch run: how many were read and every problem, by reason.

    ``what`` names what a problem row becomes in messages: ``"error row"`` for the grading
    commands (the row is written with ``result: "error"``), ``"skipped row"`` for the readers.
    """

    def __init__(self, command: str, *, strict: bool = False, what: str = "skipped row") -> None:
        self.command = command
        self.strict = strict
        self.what = what
        self.rows = 0
        self.problems: list[Problem] = []

    def problem(
        self, file: Path | str, line: int, reason_code: InputReason, message: str
    ) -> Problem:
        """Record a problem row; under ``strict`` refuse the whole run instead."""
        found = Problem(str(file), line, reason_code, message)
        if self.strict:
            raise UnusableInputError(f"{found.text()} (--strict: nothing written)")
        self.problems.append(found)
        return found

    def lines(self, path: Path, *, unreadable: bool = False) -> Iterator[tuple[int, Any]]:
        """``(line number, value)`` for every readable non-blank line of ``path``.

        An unreadable line is recorded (``line_unreadable``) and, with ``unreadable``, yielded
        as its :class:`Problem` (a grading command writes an error row in its place). Raises
        :class:`UnusableInputError` when the file cannot be opened, or when it has lines and
        not one of them is JSON (a binary file, a pretty-printed JSON document): not JSONL.
        """
        seen = readable = lineno = 0
        first: Problem | None = None
        try:
            with path.open("rb") as handle:
                for block in iter(partial(handle.readlines, LINES_BLOCK), []):
                    values = _block_values(block)
                    if values is not None:  # every line read, exactly: handed out as they are
                        count = len(values)
                        seen += count
                        readable += count
                        self.rows += count
                        yield from enumerate(values, start=lineno + 1)
                        lineno += count
                        continue
                    plain = _plain_block(block)
                    for raw in block:
                        lineno += 1
                        if plain:  # no digit run: orjson reads the line exactly, or not at all
                            try:
                                value = orjson.loads(raw)
                            except orjson.JSONDecodeError:
                                value = NOT_READ
                        else:
                            value = read_plain_bytes(raw)  # no decode, no re-encode
                        if value is not NOT_READ:
                            seen += 1
                            readable += 1
                            self.rows += 1
                            yield lineno, value
                            continue
                        try:
                            text = raw.decode("utf-8")
                        except UnicodeDecodeError as exc:
                            why = _not_utf8(raw, exc)
                        else:
                            if not text or text.isspace():
                                continue
                            try:  # the text with its newline, as a text-mode read gives it
                                value = loads_exact(text)
                            except JSONError as exc:
                                why = describe_json_error(text.rstrip("\r\n"), str(exc))
                            else:
                                seen += 1
                                readable += 1
                                self.rows += 1
                                yield lineno, value
                                continue
                        seen += 1
                        self.rows += 1
                        problem = self.problem(path, lineno, "line_unreadable", why)
                        first = first or problem
                        if unreadable:
                            yield lineno, problem
        except OSError as exc:
            raise UnusableInputError(f"{path}: cannot read: {exc.strerror or exc}") from None
        if seen and not readable and first is not None:
            raise UnusableInputError(
                f"{path}: not JSONL: none of its {seen} line(s) is a JSON value ({first.text()})"
            )

    def by_reason(self) -> dict[str, int]:
        counts = Counter(p.reason_code for p in self.problems)
        return {code: counts[code] for code in INPUT_REASONS if counts[code]}

    def exit_code(self) -> int:
        """0 every row read and used, 1 some were errors or skipped (2: the exception)."""
        return 1 if self.problems else 0

    def to_dict(self) -> dict[str, Any]:
        """The report's ``input`` section: counts by reason and every problem row."""
        return {
            "rows": self.rows,
            "problem_rows": len(self.problems),
            "reasons": self.by_reason(),
            "problems": [p.to_dict() for p in self.problems],
        }

    def summary(self, used: str = "") -> str:
        """The header line: rows read, what became of the used ones (``used``, e.g. the model
        failures by reason), and the problem rows by reason, counted apart."""
        head = f"input: {self.rows} row{'' if self.rows == 1 else 's'}"
        head += f", {used}" if used else ""
        if not self.problems:
            return f"{head}; every row read"
        reasons = ", ".join(f"{code} {count}" for code, count in self.by_reason().items())
        count = len(self.problems)
        plural = "" if count == 1 else "s"
        return f"{head}; {count} {self.what}{plural} (in no pass rate): {reasons}"

    def warn(self, stream: TextIO | None = None) -> None:
        """Name the first few problems on stderr, with ``file:line`` and the cause."""
        out = sys.stderr if stream is None else stream
        for problem in self.problems[:SHOWN_ON_STDERR]:
            print(f"gradeproxy {self.command}: {self.what}: {problem.text()}", file=out)
        more = len(self.problems) - SHOWN_ON_STDERR
        if more > 0:
            print(f"gradeproxy {self.command}: … and {more} more (all in the report)", file=out)


LINES_BLOCK = 1 << 20  # bytes of whole lines read (and searched for digit runs) at a time


# A row orjson cannot have read inexactly holds no number to round: its line's value is of a
# type in _OBJECT_TYPES, and each of that object's values of a type in _STRINGS.
_OBJECT_TYPES, _STRINGS = frozenset({dict}), frozenset({str})


def _block_values(block: list[bytes]) -> list[Any] | None:
    """Every line's value, when orjson reads each of them as the text path would; else None
    (a line that is not JSON, blank, or a digit run somewhere): then the lines are read one
    by one. A block of objects of strings alone (the common answers rows) holds no number
    orjson could round, so it is not searched; and its lines are parsed and checked by C
    loops (``map``), not a Python step each."""
    try:
        values = list(map(orjson.loads, block))
    except orjson.JSONDecodeError:
        return None
    if _OBJECT_TYPES.issuperset(map(type, values)) and _STRINGS.issuperset(
        map(type, chain.from_iterable(map(dict.values, values)))
    ):
        return values
    return values if _plain_block(block) else None


def _plain_block(block: list[bytes]) -> bool:
    """Whether no line of ``block`` holds a run of 19 digits, by one search over them all (a
    newline ends a run): the search line by line was a third of reading a line that orjson
    then parses in C. Not asked of a block of objects of strings alone (:func:`_block_values`:
    the search was still a third of reading the common row). A block that a long line made
    large is not searched at once (its lines are read one by one, each long one searched a
    window at a time, as before)."""
    if sum(map(len, block)) > 2 * LINES_BLOCK:
        return False
    return not bytes_have_long_digit_run(b"".join(block))


def _not_utf8(raw: bytes, exc: UnicodeDecodeError) -> str:
    return (
        f"the line is not UTF-8 text (byte 0x{raw[exc.start]:02x} at byte {exc.start + 1}): "
        "save the file as UTF-8"
    )


# ---- the JSON-line error describer -------------------------------------------------------------

_WHITESPACE = " \t\n\r"
_STRING_RUN = LazyPattern(r'[^"\\\x00-\x1f]*')
_NUMBER = LazyPattern(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_NUMBER_PREFIX = LazyPattern(r"-?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*)?(?:[eE][+-]?[0-9]*)?)?")
_LITERALS = ("true", "false", "null")
_ESCAPES = frozenset('"\\/bfnrtu')
_HEX = frozenset("0123456789abcdefABCDEF")
_CONTAINER = {"{": "object", "[": "array"}
_CLOSER = {"{": "}", "[": "]"}

# What the scanner expects next.
_VALUE, _VALUE_OR_CLOSE, _KEY_OR_CLOSE, _KEY, _COLON, _COMMA_OR_CLOSE, _DONE = range(7)
_WANTED = {
    _VALUE: "a value",
    _VALUE_OR_CLOSE: "a value or ']'",
    _KEY_OR_CLOSE: "a key in double quotes or '}'",
    _KEY: "a key in double quotes",
    _COLON: "':' after the key",
}


class _BadCharError(Exception):
    """A character that cannot continue any JSON text: where, and what was wrong."""

    def __init__(self, pos: int, why: str) -> None:
        super().__init__(why)
        self.pos = pos
        self.why = why


class _EndedError(Exception):
    """The text ran out inside a token (a string, a number, a literal)."""

    def __init__(self, token: str) -> None:
        super().__init__(token)
        self.token = token


def describe_json_error(text: str, error: str | None = None) -> str:
    """Why ``text`` (one JSONL line) is not a JSON value, in a person's words.

    Walks the JSON grammar once, without recursion, and names the first place it breaks:
    a line cut off anywhere reads "the line ends inside a string (truncated?)" or "… before
    the object opened at column 1 is closed (truncated?)"; a bad character reads "not JSON at
    column 14: expected ',' or '}' after a value, found 'x'". ``error`` is the parser's own
    message, used when the text is grammatical JSON the grader still refuses (nesting past the
    parser's limit, a number too large to keep). Never raises.
    """
    stack: list[tuple[str, int]] = []
    try:
        _scan(text.rstrip("\r\n"), stack)
    except _BadCharError as bad:
        return f"not JSON at column {bad.pos + 1}: {bad.why}"
    except _EndedError as ended:
        if ended.token == "string":
            return "the line ends inside a string (truncated?)"
        if stack:
            return _unclosed(stack)
        return f"the line ends inside {ended.token} (truncated?)"
    except _UnclosedError:
        return _unclosed(stack)
    except _EmptyError:
        return "the line holds no JSON value"
    return f"not a JSON value the grader reads: {error or 'refused by the parser'}"


class _UnclosedError(Exception):
    """The text ended with a container still open."""


class _EmptyError(Exception):
    """The text held only whitespace."""


def _unclosed(stack: list[tuple[str, int]]) -> str:
    opener, pos = stack[-1]
    return (
        f"the line ends before the {_CONTAINER[opener]} opened at column {pos + 1} is closed "
        f"(missing {''.join(_CLOSER[o] for o, _ in reversed(stack))!r}: truncated?)"
    )


def _found(text: str, pos: int) -> str:
    char = text[pos]
    if char < " " or char == "\x7f":
        return f"found the control character U+{ord(char):04X}"
    return f"found {text[pos : pos + 12]!r}"


def _scan(text: str, stack: list[tuple[str, int]]) -> None:
    """Return when ``text`` is exactly one JSON value (whitespace around it allowed); else
    raise where and how it breaks (``_BadCharError``, ``_EndedError``, ``_UnclosedError``,
    ``_EmptyError``)."""
    pos, end = 0, len(text)
    expect = _VALUE
    while True:
        while pos < end and text[pos] in _WHITESPACE:
            pos += 1
        if pos == end:
            break
        char = text[pos]
        if expect == _DONE:
            raise _BadCharError(
                pos,
                "a second JSON value starts here: one value a line (two lines run together?)",
            )
        if expect == _COLON:
            if char != ":":
                raise _BadCharError(pos, f"expected ':' after the key, {_found(text, pos)}")
            pos, expect = pos + 1, _VALUE
            continue
        if expect == _COMMA_OR_CLOSE:
            opener = stack[-1][0]
            if char == ",":
                pos, expect = pos + 1, _KEY if opener == "{" else _VALUE
                continue
            if char == _CLOSER[opener]:
                stack.pop()
                pos, expect = pos + 1, _after(stack)
                continue
            raise _BadCharError(
                pos, f"expected ',' or {_CLOSER[opener]!r} after a value, {_found(text, pos)}"
            )
        if expect in (_KEY_OR_CLOSE, _KEY):
            if char == "}" and expect == _KEY_OR_CLOSE:
                stack.pop()
                pos, expect = pos + 1, _after(stack)
                continue
            if char != '"':
                hint = " (a trailing comma?)" if char == "}" else ""
                raise _BadCharError(pos, f"expected {_WANTED[expect]}{hint}, {_found(text, pos)}")
            pos, expect = _string(text, pos), _COLON
            continue
        # _VALUE or _VALUE_OR_CLOSE
        if char == "]" and expect == _VALUE_OR_CLOSE:
            stack.pop()
            pos, expect = pos + 1, _after(stack)
            continue
        if char in "{[":
            stack.append((char, pos))
            pos, expect = pos + 1, _KEY_OR_CLOSE if char == "{" else _VALUE_OR_CLOSE
            continue
        pos = _scalar(text, pos, expect)
        expect = _after(stack)
    if expect == _DONE:
        return
    if stack:
        raise _UnclosedError
    raise _EmptyError


def _after(stack: list[tuple[str, int]]) -> int:
    return _COMMA_OR_CLOSE if stack else _DONE


def _scalar(text: str, pos: int, expect: int) -> int:
    """Scan one string, number or literal at ``pos``; return the position after it."""
    char = text[pos]
    if char == '"':
        return _string(text, pos)
    if char == "-" or char.isdigit():
        number = _NUMBER().match(text, pos)
        prefix = _NUMBER_PREFIX().match(text, pos)
        ended = prefix is not None and prefix.end() == len(text)
        if ended and (number is None or number.end() < len(text)):
            raise _EndedError("a number")
        if number is None:
            raise _BadCharError(pos, f"expected a number, {_found(text, pos)}")
        return number.end()
    for word in _LITERALS:
        if text.startswith(word, pos):
            return pos + len(word)
        rest = text[pos:]
        if word.startswith(rest):
            raise _EndedError(f"'{word}'")
    for word in ("NaN", "Infinity"):
        if text.startswith(word, pos):
            raise _BadCharError(pos, f"{word} is not JSON (write null, or the value as a string)")
    if char == "'":
        raise _BadCharError(pos, "a string in single quotes: JSON strings take double quotes")
    if char == "\ufeff":
        raise _BadCharError(pos, "a byte-order mark (U+FEFF): save the file as UTF-8 without one")
    hint = " (a trailing comma?)" if char == "]" else ""
    raise _BadCharError(pos, f"expected {_WANTED[expect]}{hint}, {_found(text, pos)}")


def _string(text: str, pos: int) -> int:
    """Scan the string opening at ``pos``; return the position after its closing quote."""
    end = len(text)
    at = pos + 1
    while True:
        run = _STRING_RUN().match(text, at)
        at = run.end() if run is not None else at
        if at >= end:
            raise _EndedError("string")
        char = text[at]
        if char == '"':
            return at + 1
        if char == "\\":
            if at + 1 >= end:
                raise _EndedError("string")
            kind = text[at + 1]
            if kind not in _ESCAPES:
                raise _BadCharError(at, f"an invalid escape {text[at : at + 2]!r} in a string")
            if kind == "u":
                digits = text[at + 2 : at + 6]
                if not all(d in _HEX for d in digits):
                    raise _BadCharError(at, f"an invalid escape {text[at : at + 6]!r} in a string")
                if len(digits) < 4:
                    raise _EndedError("string")
                at += 6
            else:
                at += 2
            continue
        raise _BadCharError(
            at,
            f"a raw control character (U+{ord(char):04X}) inside a string: "
            "write it escaped (\\n, \\t, \\u00XX)",
        )
