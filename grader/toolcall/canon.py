"""Normalisation and canonical values: the one definition of "the same call".

Both sides of every comparison (the task's expected and stale calls, the model's answer) go
through :func:`canon`, so the rules live in exactly one place. Canonical values are plain,
hashable Python values whose ``==`` is the grading equality:

* objects become :class:`CObject` (keys sorted), arrays :class:`CArray` (order kept);
* integers stay exact ``int``; a double with an integral value becomes that ``int`` so
  ``4550 == 4550.0 == 4.55e3`` and ``-0 == 0``, while two different 20-digit ids never meet;
* booleans become :class:`CBool`, because Python's ``True == 1`` must not leak into grading;
* strings with a comma have each part stripped; comma-free ISO-8601 W/D/H/M/S durations
  become :class:`Duration` (total seconds); every other string is kept code point for code point.

The tool name is never normalised: callers pass it through untouched.
"""

from __future__ import annotations

import enum
import re
from typing import Any, TypeAlias

import orjson

from grader.errors import GraderError
from grader.json import MAX_DEPTH, quote
from grader.values import value_type


class TooDeepError(GraderError, ValueError):
    """A value nests deeper than :data:`grader.json.MAX_DEPTH`."""


class CBool(enum.Enum):
    """A JSON boolean that never equals a number."""

    FALSE = False
    TRUE = True


@value_type
class Duration:
    """An ISO-8601 duration reduced to its length, so ``PT0H45M == PT45M``."""

    seconds: int
    text: str  # the first spelling seen, for messages only

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Duration) and other.seconds == self.seconds

    def __hash__(self) -> int:
        return hash(("duration", self.seconds))


@value_type
class CObject:
    """A JSON object with its keys sorted."""

    items: tuple[tuple[str, Canon], ...]

    def as_dict(self) -> dict[str, Canon]:
        return dict(self.items)


@value_type
class CArray:
    """A JSON array; order is part of its meaning."""

    items: tuple[Canon, ...]


Canon: TypeAlias = "CBool | int | float | str | Duration | CObject | CArray | None"

# Only integer W, D, H, M (inside T) and S components; a T must be followed by a component.
# Years, months, fractions and lower-case designators do not match and stay plain strings.
_DURATION = re.compile(
    r"P(?!$)(?:([0-9]+)W)?(?:([0-9]+)D)?(?:T(?=[0-9])(?:([0-9]+)H)?(?:([0-9]+)M)?(?:([0-9]+)S)?)?"
)
_SECONDS = (7 * 86400, 86400, 3600, 60, 1)


def normalise_string(text: str) -> str | Duration:
    """Apply the two string equivalences of grading.md (comma lists, durations)."""
    if "," in text:
        return ",".join(part.strip() for part in text.split(","))
    if text.startswith("P"):
        match = _DURATION.fullmatch(text)
        if match is not None:
            total = sum(int(g) * s for g, s in zip(match.groups(), _SECONDS, strict=True) if g)
            return Duration(total, text)
    return text


def canon(value: Any, depth: int = 0) -> Canon:
    """Canonicalise a parsed JSON value; raise :class:`TooDeepError` past the depth bound."""
    if isinstance(value, dict):  # first: what canon is asked for most (a call's arguments)
        if depth >= MAX_DEPTH:
            raise TooDeepError(f"value nests deeper than {MAX_DEPTH} levels")
        # Sorting the items compares keys only: a dict's keys are distinct.
        return CObject(tuple([(k, _member(v, depth)) for k, v in sorted(value.items())]))
    if isinstance(value, str):
        return normalise_string(value)
    if isinstance(value, bool):
        return CBool.TRUE if value else CBool.FALSE
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else value
    if value is None:
        return None
    if depth >= MAX_DEPTH:
        raise TooDeepError(f"value nests deeper than {MAX_DEPTH} levels")
    if isinstance(value, list):
        return CArray(tuple([_member(v, depth) for v in value]))
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def _member(value: Any, depth: int) -> Canon:
    """:func:`canon` of a member of a container at ``depth``: the scalars a parsed call holds
    are told apart by their exact type, without the call and the isinstance chain (every
    argument of every graded call comes through here); anything else is :func:`canon`'s."""
    kind = type(value)
    if kind is str:
        return normalise_string(value) if "," in value or value.startswith("P") else value
    if kind is int or value is None:
        return value  # type: ignore[no-any-return]
    return canon(value, depth + 1)


def kind_of(value: Canon) -> str:
    """The JSON type name a canonical value had, for type-mismatch messages."""
    if value is None:
        return "null"
    if isinstance(value, CBool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str | Duration):
        return "string"
    if isinstance(value, CObject):
        return "object"
    return "array"


def to_plain(value: Canon) -> Any:
    """Turn a canonical value back into plain JSON data (durations keep their spelling)."""
    if isinstance(value, CObject):
        return {k: to_plain(v) for k, v in value.items}
    if isinstance(value, CArray):
        return [to_plain(v) for v in value.items]
    if isinstance(value, CBool):
        return value.value
    if isinstance(value, Duration):
        return value.text
    return value


def canonical_json(value: Any) -> str:
    """Deterministic JSON text of a plain JSON value: keys sorted, exact integers, no spaces.

    Used for digests, so it must be stable across processes and library versions: integers
    are written by ``str`` (exact at any width) and doubles by ``repr`` (shortest round trip).
    orjson writes it where its text is this one (:func:`_orjson_text`) and the value is plain
    JSON data (orjson also writes tuples, UUIDs and enums, which this refuses: what orjson
    wrote must read back equal to the value); anything else is written by the walk below.
    """
    data = _orjson_text(value, 0)
    if data is not None and orjson.loads(data) == value:
        return data.decode()
    return _canonical_at(value, 0)


def canonical_json_parsed(value: Any, depth: int = 0) -> bytes:
    """:func:`canonical_json`, UTF-8 encoded, of a value read by :mod:`grader.json` from JSON
    text (dicts with string keys, lists, strings, integers, doubles, booleans, None: nothing
    else, so the read-back comparison is skipped), at ``depth`` (its place in an enclosing
    value: a task in the task set's list)."""
    try:
        data = orjson.dumps(value, option=_SORTED)
    except TypeError:  # orjson.JSONEncodeError included
        data = None
    if data is not None and not (
        data.count(b"[") + data.count(b"{") + depth > MAX_DEPTH
        or data.find(_SMALL) >= 0
        or _has_exponent(data)
    ):
        if _INTEGRAL_END.search(data) is None:
            return data
        return _integral_doubles(data)
    parts: list[bytes] = []
    _write_parsed(value, parts, depth)
    return b"".join(parts)


def _integral_doubles(data: bytes) -> bytes:
    """orjson's text with each integral double (``5.0``, ``-0.0``) written as canonical_json
    writes it (``5``, ``0``), strings untouched: the text of a value whose only doubles orjson
    may spell otherwise are integral ones.

    Each ``.0`` that ends a number (:data:`_INTEGRAL_END`) is a candidate; it lies inside a
    string when an odd number of the quotes before it delimit strings. orjson escapes a quote
    inside a string as ``\\"`` and a backslash as ``\\\\``, so blanking those escapes (same
    length: positions hold) leaves exactly the delimiting quotes, counted in C. A regular
    expression that skipped each string whole cost several times the whole digest on a task
    with long escaped texts (its fixtures' answers)."""
    quotes = data.replace(b"\\\\", b"__").replace(b'\\"', b"__")
    parts: list[bytes] = []
    done = counted = inside = 0
    for match in _INTEGRAL_END.finditer(data):
        dot = match.start()
        inside ^= quotes.count(b'"', counted, dot) & 1
        counted = dot
        if inside:
            continue
        start = dot  # outside strings, a "." follows a number's digits (and maybe a sign)
        while start and data[start - 1] in _DIGITS:
            start -= 1
        if start and data[start - 1] == _MINUS:
            start -= 1
        parts.append(data[done:start])
        number = data[start:dot]
        parts.append(b"0" if number in _ZEROS else number)
        done = dot + 2
    parts.append(data[done:])
    return b"".join(parts)


_DIGITS = frozenset(b"0123456789")
_MINUS = ord("-")
_ZEROS = (b"0", b"-0")  # -0.0 is written 0, as canonical_json writes it


def _canonical_at(value: Any, depth: int) -> str:
    parts: list[str] = []
    _write(value, parts, depth)
    return "".join(parts)


# Where orjson's text of a value may differ from canonical_json's: a double with an integral
# value ("5.0", "-0.0": canonical_json writes "5", "0"), or one repr writes with an exponent
# (orjson writes "0.00001" where repr writes "1e-05"; "1e+16" and "1e-7" alike, its exponents
# always signed). Every other double orjson writes as repr does (the shortest round trip). A
# match inside a string only costs the walk (or, for ".0", a count of quotes). Each is searched
# apart, led by a literal (one pattern with alternatives would test every byte: several times
# slower).
_INTEGRAL_END = re.compile(rb"\.0(?:[,\]}]|$)")
_SMALL = b"0.0000"  # found by bytes.find, which skips ahead (a pattern tests every "0")
# The exponent's pattern leads with "e", a common byte, so the regex engine tries it at every
# "e" of the text, and so does a search for the two bytes "e-" (CPython's search for a short
# needle stops at each occurrence of its first byte). A sign is rarer: each is found by a
# one-byte search (a memchr) and checked for an "e" before it. A text with many signs (a
# Markdown rule, a list of negative numbers) takes the pattern after a few.
_EXPONENT = re.compile(rb"e[-+]\d")
_SIGNS = (ord("-"), ord("+"))
_E = ord("e")
_SIGNS_CHECKED = 16  # per sign, before the pattern decides


def _has_exponent(data: bytes) -> bool:
    """Whether ``data`` holds ``e-`` or ``e+`` then a digit (an exponent, or a string's text)."""
    for sign in _SIGNS:
        at = data.find(sign, 1)  # a sign at 0 has no "e" before it
        checked = 0
        while at > 0:
            if data[at - 1] == _E or checked == _SIGNS_CHECKED:
                return _EXPONENT.search(data) is not None
            checked += 1
            at = data.find(sign, at + 1)
    return False


_SORTED = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_PASSTHROUGH_SUBCLASS
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
)


def _orjson_text(value: Any, depth: int) -> bytes | None:
    """orjson's text of ``value`` (keys sorted) where it is canonical_json's for plain JSON
    data: no double it may spell otherwise, no integer it refuses (past 64 bits), no lone
    surrogate, too few brackets to nest past the depth bound; else None."""
    try:
        data = orjson.dumps(value, option=_SORTED)
    except TypeError:  # orjson.JSONEncodeError included
        return None
    if (
        data.count(b"[") + data.count(b"{") + depth > MAX_DEPTH
        or data.find(_SMALL) >= 0
        or _INTEGRAL_END.search(data) is not None
        or _has_exponent(data)
    ):
        return None
    return data


def _write_parsed(value: Any, out: list[bytes], depth: int) -> None:
    """:func:`_write` of a parsed value whose orjson text is not canonical as a whole: each
    member of an object or array is written by orjson where its own text is canonical, and
    walked only where not. A task with one ``5.0`` (or ``".0,"`` inside a string) walks the
    path down to it, never its large clean parts (questions, tool schemas)."""
    if depth > MAX_DEPTH:
        raise TooDeepError(f"value nests deeper than {MAX_DEPTH} levels")
    kind = type(value)
    if kind is dict:
        out.append(b"{")
        for i, key in enumerate(sorted(value)):
            if i:
                out.append(b",")
            out.append(quote(key).encode())
            out.append(b":")
            _member_parsed(value[key], out, depth + 1)
        out.append(b"}")
    elif kind is list:
        out.append(b"[")
        for i, item in enumerate(value):
            if i:
                out.append(b",")
            _member_parsed(item, out, depth + 1)
        out.append(b"]")
    else:
        out.append(_canonical_at(value, depth).encode())


def _member_parsed(value: Any, out: list[bytes], depth: int) -> None:
    if type(value) is dict or type(value) is list:
        data = _orjson_text(value, depth)
        if data is not None:
            out.append(data)
            return
        _write_parsed(value, out, depth)
        return
    out.append(_canonical_at(value, depth).encode())


def _write(value: Any, out: list[str], depth: int) -> None:
    if depth > MAX_DEPTH:
        raise TooDeepError(f"value nests deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        out.append(quote(value))
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif value is None:
        out.append("null")
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(str(int(value)) if value.is_integer() else repr(value))
    elif isinstance(value, dict):
        out.append("{")
        for i, key in enumerate(sorted(value)):
            if i:
                out.append(",")
            out.append(quote(key))
            out.append(":")
            _write(value[key], out, depth + 1)
        out.append("}")
    elif isinstance(value, list):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write(item, out, depth + 1)
        out.append("]")
    else:
        raise TypeError(f"not a JSON value: {type(value).__name__}")
