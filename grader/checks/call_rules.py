"""What one ``tool_call`` rule means for one value: paths, string modes, strict numeric types.

Kept apart from :mod:`grader.checks.call_match` (which pairs whole calls) because these are the
leaf definitions both the check's option parser and the matcher read, and because they are the
part BFCL parity pins down character for character (``bfcl_standardize``).

Paths are written as the grader reports them: ``arguments.items[0].qty``.

String modes (per check, or per path and everything below it):

* ``exact`` — grading.md's rules (comma lists trimmed, durations by length), code points kept;
* ``casefold`` — the same, then Unicode case folding (``"Paris" == "PARIS"``);
* ``bfcl`` — BFCL's ``standardize_string``: spaces and ``,./-_*^`` removed, lower-cased, ``'``
  read as ``"``. It over-accepts by design: ``"3x**2+2x1"`` equals ``"3x**2 + 2x - 1"``
  (the minus sign is dropped), ``"1/2"`` equals ``"12"``, ``"a.b"`` equals ``"ab"``.

Numeric types (opt-in, per path): ``integer`` accepts only a JSON number written without a
fraction or exponent (``5``; ``5.0`` and ``5e0`` fail with ``numeric_type_mismatch``);
``number`` accepts any JSON number. Without a type, grading.md's ``4550 == 4550.0`` holds.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Literal

from grader.errors import GraderError
from grader.json import MAX_DEPTH
from grader.lazy_pattern import LazyPattern
from grader.toolcall.canon import (
    Canon,
    CArray,
    CBool,
    CObject,
    TooDeepError,
    canon,
    normalise_string,
)

StringMode = Literal["exact", "casefold", "bfcl"]
STRING_MODES: tuple[StringMode, ...] = ("exact", "casefold", "bfcl")
NumberType = Literal["integer", "number", "float"]
NUMBER_TYPES: tuple[NumberType, ...] = ("integer", "number", "float")
Path = tuple[str | int, ...]
ARTICLE = {"integer": "an", "number": "a", "float": "a"}
EVERY = -1  # the index step of ``[*]``: every element of an array (numbers only)

_SEGMENT = LazyPattern(r"([^.\[\]]+)((?:\[(?:[0-9]+|\*)\])*)")
_INDEX = LazyPattern(r"\[([0-9]+|\*)\]")
# BFCL's ``re.sub(r"[ ,./\-_*^]", "", s).lower().replace("'", '"')``. An ASCII string (nearly
# every argument) takes one bytes.translate that deletes the seven characters, lower-cases and
# maps ``'`` to ``"`` in a single C pass (str.translate with a dict, or the regex, is several
# times slower); any other string takes BFCL's own three steps.
_BFCL_DROP = LazyPattern(r"[ ,./\-_*^]")
_BFCL_DELETE = b" ,./-_*^"
_BFCL_BYTES = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ'", b'abcdefghijklmnopqrstuvwxyz"')


class PathError(GraderError, ValueError):
    """A path that is not ``arguments.<key>[<index>]...``."""


def parse_path(text: Any) -> Path:
    """``"arguments.items[0].qty"`` -> ``("items", 0, "qty")``; raise :class:`PathError`."""
    if not isinstance(text, str) or not text.startswith("arguments."):
        raise PathError(f"path {text!r} must look like 'arguments.<key>[<index>][.<key>...]'")
    key = text[10:]  # len("arguments.")
    if key and "." not in key and "[" not in key and "]" not in key:
        return (key,)  # one top-level key, nearly every path: the segment pattern's own answer
    path: list[str | int] = []
    for part in text[len("arguments.") :].split("."):
        match = _SEGMENT().fullmatch(part)
        if match is None:
            raise PathError(f"path {text!r} must look like 'arguments.<key>[<index>][.<key>...]'")
        path.append(match.group(1))
        path.extend(EVERY if i == "*" else int(i) for i in _INDEX().findall(match.group(2)))
    return tuple(path)


def path_text(path: Path) -> str:
    """The reported form of a path: ``arguments.items[0].qty``."""
    out = "arguments"
    for step in path:
        if isinstance(step, int):
            out += "[*]" if step == EVERY else f"[{step}]"
        else:
            out += f".{step}"
    return out


def bfcl_standardize(text: str) -> str:
    """BFCL's ``standardize_string`` (bfcl-eval 2026.3.23), character for character."""
    if len(text) <= MEMO_CHARS:
        return _remembered(text)
    return _standardized(text)


def _standardized(text: str) -> str:
    if text.isascii():
        return text.encode().translate(_BFCL_BYTES, _BFCL_DELETE).decode()
    return _BFCL_DROP().sub("", text).lower().replace("'", '"')


# Answers repeat their argument values (ten BFCL answers per task, nine standardised strings in
# ten seen before): short ones are remembered, a bounded table's look-up in C instead of a
# translation (docs/performance.md). A long string, which rarely repeats, is never kept.
MEMO_CHARS = 64
_remembered = lru_cache(maxsize=8192)(_standardized)


def fold_strings(value: Canon, mode: StringMode) -> Canon:
    """A canonical value (:func:`grader.toolcall.canon.canon`'s) under a string mode: the same
    value :func:`canon_in` gives for the plain value it came from. An expected call's arguments
    are folded from the call's own canonical value (made when the call was read), so a task's
    arguments are not canonicalised twice: objects are sorted and strings normalised already."""
    if mode == "exact":
        return value
    # A canonical value's types are exact (no subclass to test for); a string, what nearly
    # every argument holds, is folded here without bfcl_standardize's call.
    if type(value) is str:
        if mode == "casefold":
            return value.casefold()
        return _remembered(value) if len(value) <= MEMO_CHARS else _standardized(value)
    if type(value) is CObject:
        return CObject(tuple([(k, fold_strings(v, mode)) for k, v in value.items]))
    if type(value) is CArray:
        return CArray(tuple([fold_strings(v, mode) for v in value.items]))
    return value


def canon_in(value: Any, mode: StringMode, depth: int = 0) -> Canon:
    """The canonical value under a string mode; raise ``TooDeepError``/``TypeError``.

    The same value as folding the strings of :func:`grader.toolcall.canon.canon`'s result, in
    one walk: scalars, the values nearly every argument holds, are decided here directly, and
    arrays and objects under a folding mode are rebuilt once instead of twice."""
    kind = type(value)
    if kind is str:
        # normalise_string changes only a string with a comma or a leading "P" (a duration).
        plain = normalise_string(value) if "," in value or value[:1] == "P" else value
        if mode == "exact" or type(plain) is not str:
            return plain
        if mode == "bfcl":  # bfcl_standardize, without its call (every string argument)
            return _remembered(plain) if len(plain) <= MEMO_CHARS else _standardized(plain)
        return plain.casefold()
    if kind is int:
        number: int = value
        return number
    if kind is float:
        return int(value) if value.is_integer() else value
    if kind is bool:
        return CBool.TRUE if value else CBool.FALSE
    if value is None:
        return None
    if mode == "exact" or (kind is not list and kind is not dict):
        return fold_strings(canon(value, depth), mode)
    if depth >= MAX_DEPTH:
        raise TooDeepError(f"value nests deeper than {MAX_DEPTH} levels")
    depth += 1
    if kind is list:
        return CArray(tuple([canon_in(v, mode, depth) for v in value]))
    # Sorting the items compares keys only (a dict's keys are distinct): the same order as
    # sorting the canonical pairs, without comparing canonical values.
    return CObject(tuple([(k, canon_in(v, mode, depth)) for k, v in sorted(value.items())]))


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def number_fails(kind: NumberType, value: Any) -> bool:
    """Whether ``value`` breaks a strict numeric type: ``integer`` is a number written without
    fraction or exponent, ``float`` one written with them (``5.0``), ``number`` either."""
    if not is_number(value):
        return True
    if kind == "integer":
        return isinstance(value, float)
    return kind == "float" and not isinstance(value, float)
