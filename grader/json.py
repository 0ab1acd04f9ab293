"""Exact-number JSON parsing for the grader: the one reader every surface parses answers with.

Public under a plain name (``grader.json``: ``loads_exact``, ``loads_exact_bytes``, ``dumps``,
``JSONError`` …) because the proxy reads and writes the same values with it. ``import json``
here is the standard library (absolute imports), never this module.

orjson is the parser, but it silently turns integers wider than 64 bits into floats, so two
different 20-digit ids would compare equal. Any text holding a run of 19 or more digits is
parsed by the standard library instead, which keeps integers exact. Both paths reject NaN and
Infinity: they are not JSON.

A literal that overflows a double (``1e400``) *is* valid JSON (``../shared/GRADING-DECISIONS.md``):
it parses, on the standard-library path, to its exact value. Every such value is an integer
(a double overflows only past 1.8e308, far beyond any fraction a literal can write), so it is
kept as a Python ``int``: ``1e400`` equals ``10**400`` exactly and differs from every double, so
``1e400 != 1000`` is a ``value_mismatch`` at its path, never ``no_call``.
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson

from grader.errors import GraderError

# Nesting levels (objects and arrays) a graded value may have. Deeper spans are skipped and
# deeper arguments make a call unusable (grading.md failure mode 12): the bound keeps every
# recursive walk far inside Python's recursion limit.
MAX_DEPTH = 128

_RUN = 19  # digits in a row from which the standard library parses the text
# Every ASCII digit byte becomes "0", every other byte " ": a run of 19 digits in the text is
# then a run of 19 "0" bytes, found by bytes.find. Translating and finding are each one C pass
# (several times faster than a regex search on short texts, the cost every answer pays). Only ASCII
# digits count, as with ``[0-9]``: a multi-byte UTF-8 character never holds an ASCII byte.
_DIGITS_TO_ZERO = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_ZEROS = b"0" * _RUN
# A run is found with ``bytes.find``, never ``in``: ``bytes in bytes`` first tries to read its
# operand as one byte's integer value, raising and clearing a TypeError on every search.
# A scan holds the GIL for the whole call: over a 5 MB text one pass would keep the proxy's
# event loop from running for milliseconds. Large texts are searched a window at a time.
SEARCH_WINDOW = 256 * 1024


def _has_run(text: str) -> bool:
    try:
        data = text.encode()
    except UnicodeEncodeError:  # a lone surrogate (the stdlib path keeps it): encode it as is
        data = text.encode("utf-8", "surrogatepass")
    return bytes_have_long_digit_run(data)


def bytes_have_long_digit_run(data: bytes) -> bool:
    """Whether UTF-8 ``data`` holds 19 or more consecutive digits, searched in one pass (for a
    caller that bounds the size itself: a block of lines read from a file)."""
    return data.translate(_DIGITS_TO_ZERO).find(_ZEROS) >= 0


def has_long_digit_run(text: str) -> bool:
    """Whether ``text`` holds 19 or more consecutive digits (searched window by window)."""
    if len(text) <= SEARCH_WINDOW:  # every answer: encoded here, without a call to _has_run
        try:
            return bytes_have_long_digit_run(text.encode())
        except UnicodeEncodeError:
            return _has_run(text)
    overlap = _RUN - 1  # a run that straddles two windows is found in the second
    for start in range(0, len(text), SEARCH_WINDOW):
        if _has_run(text[max(start - overlap, 0) : start + SEARCH_WINDOW]):
            return True
    return False


class JSONError(GraderError, ValueError):
    """The text is not a JSON value the grader accepts."""


class JSONTooDeepError(JSONError):
    """The text nests deeper than the parser can follow."""


def _reject_constant(name: str) -> Any:
    raise JSONError(f"{name} is not JSON")


def _exact_float(literal: str) -> float | int:
    """A double, or the exact integer value of a literal that overflows one."""
    value = float(literal)
    if not math.isinf(value):
        return value
    from decimal import Decimal, InvalidOperation  # overflowing literals only (rare)

    try:
        exact = Decimal(literal)
        if exact == exact.to_integral_value() and exact.adjusted() <= _MAX_EXPONENT:
            return int(exact)
    except (InvalidOperation, ValueError, OverflowError):
        pass
    raise JSONError(f"number {literal[:40]} is too large to keep exactly")


# An overflowing literal becomes an int of this many digits at most: 1e400 is kept, 1e99999999
# (a few bytes of text, gigabytes as an int) is refused.
_MAX_EXPONENT = 4000  # below int <-> str conversion limit (4300 digits)


def loads_exact(text: str) -> Any:
    """Parse ``text`` keeping integers exact; raise :class:`JSONError` when it is not JSON.

    A lone-surrogate escape (``"\\udcff"``) is grammatical JSON that orjson refuses and the
    stdlib keeps; such text is read by the stdlib, so the two paths agree on it whatever digit
    runs the text holds (and rows written by :func:`dumps` read back as they were).
    """
    try:
        if not has_long_digit_run(text):
            try:
                return orjson.loads(text)
            except orjson.JSONDecodeError as exc:
                # A lone-surrogate escape, or an overflowing literal (1e400): the stdlib path
                # reads both exactly; anything else orjson refuses is not JSON.
                if "surrogate" not in str(exc) and "infinity" not in str(exc):
                    raise
        return json.loads(text, parse_constant=_reject_constant, parse_float=_exact_float)
    except RecursionError:
        raise JSONTooDeepError("value nests too deep to parse") from None
    except ValueError as exc:  # orjson.JSONDecodeError and JSONError are ValueErrors
        if isinstance(exc, JSONError):
            raise
        if "depth limit" in str(exc):
            raise JSONTooDeepError(str(exc)) from None
        raise JSONError(str(exc)) from None


def loads_plain(text: str) -> Any:
    """:func:`loads_exact` of a text known to hold no run of 19 digits (searched by the caller,
    or decoded from a text :func:`plain_strings` cleared): the same value, without the search."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:  # not JSON, a lone surrogate, 1e400: decided as ever
        return loads_exact(text)


def plain_strings(text: str, searched: bool = False) -> bool:
    """Whether no string inside the JSON ``text`` can hold a run of 19 digits: the text holds no
    such run (``searched``: the caller found none) and no ``\\u`` escape, the one escape that
    writes a digit. Each decoded digit then stands for a digit of the text, next to the same
    neighbours, so a JSON text nested in one of the strings parses with :func:`loads_plain`."""
    return "\\u" not in text and (searched or not has_long_digit_run(text))


def loads_with_plain(text: str) -> tuple[Any, bool]:
    """:func:`loads_exact` of ``text``, and whether its strings are plain (:func:`plain_strings`)
    from the same digit search: the reader of every graded answer, which needs both (its calls'
    ``arguments`` are JSON texts inside its strings). A text of one window (every answer) is
    searched and parsed from its UTF-8 bytes here, encoded once (the bytes' own search, then
    orjson on them), not by :func:`has_long_digit_run` and :func:`loads_plain`, which would
    encode it again."""
    try:
        data = text.encode() if len(text) <= SEARCH_WINDOW else None
    except UnicodeEncodeError:  # a lone surrogate: searched and read below
        data = None
    if data is None:
        if has_long_digit_run(text):
            return loads_exact(text), False
        return loads_plain(text), "\\u" not in text
    if bytes_have_long_digit_run(data):
        return loads_exact(text), False
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:  # not JSON, 1e400: decided as ever
        value = loads_exact(text)
    return value, "\\u" not in text


NOT_READ = object()  # read_plain_bytes: the bytes need the text path


def read_plain_bytes(data: bytes) -> Any:
    """:func:`loads_exact` of ``data``'s UTF-8 text, read from the bytes themselves, where that
    is the same value: valid UTF-8 with no long digit run that orjson reads. Anything else
    (invalid UTF-8, a lone surrogate, an overflow, not JSON, blank) is :data:`NOT_READ`, for
    the caller's text path to decide exactly as it would have (a JSONL line read per row)."""
    if len(data) <= SEARCH_WINDOW and not bytes_have_long_digit_run(data):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return NOT_READ


def loads_exact_bytes(data: bytes) -> Any:
    """:func:`loads_exact` of ``data`` decoded as UTF-8 (invalid bytes replaced), read from the
    bytes themselves when that gives the same value: valid UTF-8 with no long digit run is
    what orjson reads exactly, with no decode and no re-encode to search it (a response body
    captured for every graded request). Anything else takes the text path, unchanged."""
    if len(data) <= SEARCH_WINDOW and not bytes_have_long_digit_run(data):
        # What orjson refuses here (invalid UTF-8, a lone surrogate, an overflow, not JSON) is
        # decided by the text path below, exactly as before this shortcut. (A try, not
        # contextlib.suppress: its two Python-level calls cost a third of the parse.)
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return loads_exact(data.decode("utf-8", "replace"))


def value_depth(value: Any) -> int:
    """Nesting depth of a parsed JSON value (a scalar is 0), walked without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            depth += 1
            stack.extend((child, depth) for child in node.values())
        elif isinstance(node, list):
            depth += 1
            stack.extend((child, depth) for child in node)
        else:
            continue
        deepest = max(deepest, depth)
    return deepest


def dumps(value: Any) -> bytes:
    """Serialise plain JSON data, whatever strings a client or an upstream put in it.

    orjson refuses integers wider than 64 bits and lone surrogates (header bytes decoded with
    ``surrogateescape``, a ``\\ud800`` escape in an upstream body). The stdlib path keeps the
    integer exact and writes each lone surrogate as its ``\\uXXXX`` escape, so a row holds the
    evidence as it was (``json.loads`` gives the same code points back) instead of U+FFFD.
    """
    try:
        return orjson.dumps(value)
    except TypeError:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))  # noqa: TID251
        return text.encode("utf-8", "backslashreplace")


def quote(text: str) -> str:
    """``text`` as a JSON string literal, lone surrogates as their ``\\uXXXX`` escapes: for
    reasons, paths and canonical text built from what an answer holds (orjson alone raised on
    a lone surrogate, which made a grader error of an answer that only deserved a verdict)."""
    try:
        return orjson.dumps(text).decode()
    except TypeError:
        return dumps(text).decode()


_LINE = orjson.OPT_APPEND_NEWLINE


def dumps_line(value: Any) -> bytes:
    """:func:`dumps` and a newline: one JSONL line, written by orjson in one buffer (no copy
    to append the newline: it is built for every result row)."""
    try:
        return orjson.dumps(value, option=_LINE)
    except TypeError:
        return dumps(value) + b"\n"


def well_formed(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD: for text handed to another
    system (a trace backend) that must parse it as UTF-8, where an escape would be read back
    as the same lone surrogate."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def printable(text: str) -> str:
    """``text`` with each lone surrogate spelled as its ``\\uXXXX`` escape (always encodable).

    For the places a string leaves the process as UTF-8 text outside JSON: metric label
    values and log fields. Only called on the way out, never before grading.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text
