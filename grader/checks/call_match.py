"""Matching one answer call against one expected call, with per-path rules (BFCL parity).

``tool_call`` compiles each expected call once into an :class:`ExpectedCall` (its arguments,
``acceptable`` values, ``optional`` paths, string modes and strict numeric types) and parses each
answer call once into an :class:`AnswerCall`, whose canonical forms are computed on first use
and cached per string mode. Matching then compares canonical values only: nothing is
re-serialised or re-extracted per (expected, answer) pair, so grading ``n`` parallel calls costs
``n²`` cheap comparisons, not ``n²`` parses.

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

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from grader.checks._base import CheckReasonCode
from grader.errors import GraderError
from grader.toolcall.canon import (
    Canon,
    CArray,
    CObject,
    TooDeepError,
    canon,
    kind_of,
    normalise_string,
)
from grader.toolcall.diff import first_difference

StringMode = Literal["exact", "casefold", "bfcl"]
STRING_MODES: tuple[StringMode, ...] = ("exact", "casefold", "bfcl")
NumberType = Literal["integer", "number", "float"]
NUMBER_TYPES: tuple[NumberType, ...] = ("integer", "number", "float")
Path = tuple[str | int, ...]
_ARTICLE = {"integer": "an", "number": "a", "float": "a"}
EVERY = -1  # the index step of ``[*]``: every element of an array (numbers only)

_SEGMENT = re.compile(r"([^.\[\]]+)((?:\[(?:[0-9]+|\*)\])*)")
_INDEX = re.compile(r"\[([0-9]+|\*)\]")
_BFCL_DROP = re.compile(r"[ ,./\-_*^]")


class PathError(GraderError, ValueError):
    """A path that is not ``arguments.<key>[<index>]...``."""


def parse_path(text: Any) -> Path:
    """``"arguments.items[0].qty"`` -> ``("items", 0, "qty")``; raise :class:`PathError`."""
    if not isinstance(text, str) or not text.startswith("arguments."):
        raise PathError(f"path {text!r} must look like 'arguments.<key>[<index>][.<key>...]'")
    path: list[str | int] = []
    for part in text[len("arguments.") :].split("."):
        match = _SEGMENT.fullmatch(part)
        if match is None:
            raise PathError(f"path {text!r} must look like 'arguments.<key>[<index>][.<key>...]'")
        path.append(match.group(1))
        path.extend(EVERY if i == "*" else int(i) for i in _INDEX.findall(match.group(2)))
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
    return _BFCL_DROP.sub("", text).lower().replace("'", '"')


def _fold_strings(value: Canon, mode: StringMode) -> Canon:
    if mode == "exact":
        return value
    if isinstance(value, str):
        return value.casefold() if mode == "casefold" else bfcl_standardize(value)
    if isinstance(value, CObject):
        return CObject(tuple((k, _fold_strings(v, mode)) for k, v in value.items))
    if isinstance(value, CArray):
        return CArray(tuple(_fold_strings(v, mode) for v in value.items))
    return value


def canon_in(value: Any, mode: StringMode) -> Canon:
    """The canonical value under a string mode; raise ``TooDeepError``/``TypeError``."""
    if type(value) is str:  # the common leaf, without the generic walk
        plain = normalise_string(value)
        if mode == "exact" or not isinstance(plain, str):
            return plain
        return plain.casefold() if mode == "casefold" else bfcl_standardize(plain)
    if type(value) is int:
        return value
    return _fold_strings(canon(value), mode)


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


@dataclass(frozen=True, slots=True)
class Mismatch:
    """Why a call did not match: a check reason code, the path, a human reason."""

    code: CheckReasonCode
    path: str | None
    reason: str


_UNCOMPARABLE = object()


@dataclass(slots=True)
class AnswerCall:
    """One call from the answer, parsed once; canonical forms cached per string mode (the whole
    arguments, and each top-level argument), so matching it against many expected calls
    canonicalises each value once."""

    name: str | None
    arguments: dict[str, Any] | None
    _canon: dict[StringMode, Canon | None] = field(default_factory=dict)
    _leaf: dict[tuple[str, StringMode], Any] = field(default_factory=dict)
    shallow: bool | None = None  # nesting within extract's bound; None: not yet known

    def leaf(self, key: str, mode: StringMode) -> Any:
        """The canonical value of top-level argument ``key`` under ``mode`` (cached);
        :data:`_UNCOMPARABLE` when it cannot be compared."""
        found = self._leaf.get((key, mode))
        if found is None:
            assert self.arguments is not None
            try:
                found = canon_in(self.arguments[key], mode)
            except (TooDeepError, TypeError):
                found = _UNCOMPARABLE
            self._leaf[(key, mode)] = found
        return found

    def canonical(self, mode: StringMode) -> Canon | None:
        """The arguments' canonical value under ``mode``; None when they cannot be compared."""
        if mode not in self._canon:
            try:
                self._canon[mode] = canon_in(self.arguments, mode)
            except (TooDeepError, TypeError):
                self._canon[mode] = None
        return self._canon[mode]


@dataclass(frozen=True, slots=True)
class Rules:
    """Per-path options of one expected call (plain values; compiled by ExpectedCall)."""

    acceptable: Mapping[Path, tuple[Any, ...]] = field(default_factory=dict)
    optional: frozenset[Path] = frozenset()
    strings: StringMode = "exact"
    string_paths: Mapping[Path, StringMode] = field(default_factory=dict)
    numbers: Mapping[Path, NumberType] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Key:
    """One top-level argument's compiled rules (the fast path of :meth:`ExpectedCall.matches`)."""

    key: str
    in_expected: bool
    optional: bool
    number: NumberType | None
    mode: StringMode
    accept: frozenset[Canon] | None
    want: Canon
    element: NumberType | None = None  # numbers "arguments.<key>[*]"


def _element_fails(kind: NumberType | None, value: Any) -> int | None:
    """The index of the first element of array ``value`` that breaks ``kind``, if any."""
    if kind is None or not isinstance(value, list):
        return None
    return next((i for i, v in enumerate(value) if number_fails(kind, v)), None)


class ExpectedCall:
    """An expected call compiled with its rules.

    :meth:`matches` is the fast yes/no used for every (expected, answer) pair; :meth:`mismatch`
    walks the values to name the first difference, for the one verdict that reports it. The two
    agree by construction (tests/conformance checks it on the whole conformance corpus).
    """

    __slots__ = (
        "_accept",
        "_canon",
        "_every",
        "_keys",
        "_known",
        "_ruled",
        "_table",
        "arguments",
        "name",
        "rules",
    )

    def __init__(self, name: str, arguments: dict[str, Any], rules: Rules) -> None:
        self.name = name
        self.arguments = arguments
        self.rules = rules
        self._accept: dict[Path, frozenset[Canon]] = {}
        for path, values in rules.acceptable.items():
            mode = self.mode_at(path)
            self._accept[path] = frozenset(canon_in(v, mode) for v in values)
        ruled: set[Path] = set()
        for path in (*rules.acceptable, *rules.optional, *rules.string_paths, *rules.numbers):
            ruled.update(path[:i] for i in range(len(path) + 1))
        self._ruled = frozenset(ruled)
        self._every = any(EVERY in path for path in rules.numbers)
        self._canon = canon_in(arguments, rules.strings)
        self._keys = self._compile_keys()
        self._known = frozenset(entry.key for entry in self._keys or ())
        self._table = {entry.key: entry for entry in self._keys or ()}

    def _compile_keys(self) -> tuple[_Key, ...] | None:
        """The per-key table, or None when a rule reaches below a top-level argument."""
        every = {path for path in self.rules.numbers if len(path) == 2 and path[1] == EVERY}
        if any(len(path) > 1 and path not in every for path in self._ruled):
            return None
        keys = set(self.arguments) | {p[0] for p in self.rules.acceptable if isinstance(p[0], str)}
        table = []
        for key in sorted(keys):
            path: Path = (key,)
            mode = self.rules.string_paths.get(path, self.rules.strings)
            in_expected = key in self.arguments
            want = canon_in(self.arguments[key], mode) if in_expected else None
            table.append(
                _Key(
                    key,
                    in_expected,
                    path in self.rules.optional,
                    self.rules.numbers.get(path),
                    mode,
                    self._accept.get(path),
                    want,
                    self.rules.numbers.get((key, EVERY)),
                )
            )
        return tuple(table)

    def matches(self, got: AnswerCall) -> bool:
        """Whether ``got`` matches: the same verdict as ``mismatch(got) is None``, faster."""
        if got.name != self.name or got.arguments is None:
            return False
        if not self._ruled:
            mine = got.canonical(self.rules.strings)
            return mine is not None and mine == self._canon
        if self._keys is None:
            return self.mismatch(got) is None
        args = got.arguments
        if not self._known.issuperset(args):
            return False
        for entry in self._keys:
            if entry.key not in args:
                if entry.in_expected and not entry.optional:
                    return False
                continue
            if entry.number is not None and number_fails(entry.number, args[entry.key]):
                return False
            if (
                entry.element is not None
                and _element_fails(entry.element, args[entry.key]) is not None
            ):
                return False
            mine = got.leaf(entry.key, entry.mode)
            if mine is _UNCOMPARABLE:
                return False
            if entry.accept is not None and mine in entry.accept:
                continue
            if not entry.in_expected or mine != entry.want:
                return False
        return True

    def mode_at(self, path: Path) -> StringMode:
        """The string mode of the longest ``string_paths`` prefix of ``path``, else the default."""
        for end in range(len(path), 0, -1):
            found = self.rules.string_paths.get(path[:end])
            if found is not None:
                return found
        return self.rules.strings

    def mismatch(self, got: AnswerCall) -> Mismatch | None:
        """None when ``got`` matches; else the first difference (name first)."""
        if got.name != self.name:
            return Mismatch(
                "name_mismatch", "name", f"name: expected {self.name!r}, got {got.name!r}"
            )
        if got.arguments is None:
            return Mismatch("invalid_arguments", "arguments", "arguments are not a JSON object")
        if not self._ruled:
            mine = got.canonical(self.rules.strings)
            if mine is None:
                return Mismatch(
                    "too_deep", "arguments", "arguments nest deeper than the grader follows"
                )
            return _differ(self._canon, mine, (), False)
        try:
            if self._keys is not None:
                return self._keyed_mismatch(got, got.arguments)
            return self._walk(self.arguments, got.arguments, (), self.rules.strings)
        except (TooDeepError, TypeError):
            return Mismatch(
                "too_deep", "arguments", "arguments nest deeper than the grader follows"
            )

    def _keyed_mismatch(self, got: AnswerCall, args: dict[str, Any]) -> Mismatch | None:
        """:meth:`mismatch` through the per-key table (rules on top-level arguments only),
        reusing the answer's cached canonical values."""
        table = self._table
        known = self._known.issuperset(args)
        for key in table if known else sorted(self._known | set(args)):
            entry, sub = table.get(key), (key,)
            if entry is None:
                return Mismatch("unexpected", path_text(sub), f"{path_text(sub)} unexpected")
            if key not in args:
                if entry.in_expected and not entry.optional:
                    return Mismatch("missing", path_text(sub), f"{path_text(sub)} missing")
                continue
            value = args[key]
            if entry.number is not None and number_fails(entry.number, value):
                where = path_text(sub)
                return Mismatch(
                    "numeric_type_mismatch",
                    where,
                    f"{where}: expected {_ARTICLE[entry.number]} {entry.number}, got {value!r}",
                )
            bad = _element_fails(entry.element, value)
            if bad is not None:
                where = path_text((*sub, bad))
                kind = entry.element
                return Mismatch(
                    "numeric_type_mismatch",
                    where,
                    f"{where}: expected {_ARTICLE[kind or 'number']} {kind}, got {value[bad]!r}",
                )
            mine = got.leaf(key, entry.mode)
            if mine is _UNCOMPARABLE:
                where = path_text(sub)
                return Mismatch("too_deep", where, f"{where} nests deeper than the grader follows")
            if entry.accept is not None and mine in entry.accept:
                continue
            if not entry.in_expected:
                return Mismatch("unexpected", path_text(sub), f"{path_text(sub)} unexpected")
            found = _differ(entry.want, mine, sub, entry.accept is not None)
            if found is not None:
                return found
        return None

    def _walk(self, want: Any, got: Any, path: Path, mode: StringMode) -> Mismatch | None:
        mode = self.rules.string_paths.get(path, mode) if path else mode
        wanted_type = self.rules.numbers.get(path)
        if wanted_type is None and self._every and path and isinstance(path[-1], int):
            wanted_type = self.rules.numbers.get((*path[:-1], EVERY))
        if wanted_type is not None and number_fails(wanted_type, got):
            where = path_text(path)
            return Mismatch(
                "numeric_type_mismatch",
                where,
                f"{where}: expected {_ARTICLE[wanted_type]} {wanted_type}, got {got!r}",
            )
        element = self.rules.numbers.get((*path, EVERY)) if self._every else None
        if element is not None and isinstance(got, list):
            for index, value in enumerate(got):
                if number_fails(element, value):
                    where = path_text((*path, index))
                    article = _ARTICLE[element]
                    return Mismatch(
                        "numeric_type_mismatch",
                        where,
                        f"{where}: expected {article} {element}, got {value!r}",
                    )
        accepted = self._accept.get(path)
        if accepted is not None and canon_in(got, mode) in accepted:
            return None
        if path not in self._ruled:
            return self._plain(want, got, path, mode, accepted is not None)
        if isinstance(want, dict) and isinstance(got, dict):
            for key in sorted(set(want) | set(got)):
                sub = (*path, key)
                if key not in got:
                    if sub in self.rules.optional:
                        continue
                    return Mismatch("missing", path_text(sub), f"{path_text(sub)} missing")
                if key not in want:
                    listed = self._accept.get(sub)
                    if listed is not None and canon_in(got[key], self.mode_at(sub)) in listed:
                        continue
                    return Mismatch("unexpected", path_text(sub), f"{path_text(sub)} unexpected")
                found = self._walk(want[key], got[key], sub, mode)
                if found is not None:
                    return found
            return None
        if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
            for index, (w, g) in enumerate(zip(want, got, strict=True)):
                found = self._walk(w, g, (*path, index), mode)
                if found is not None:
                    return found
            return None
        return self._plain(want, got, path, mode, accepted is not None)

    @staticmethod
    def _plain(want: Any, got: Any, path: Path, mode: StringMode, listed: bool) -> Mismatch | None:
        return _differ(canon_in(want, mode), canon_in(got, mode), path, listed)


def _differ(a: Canon, b: Canon, path: Path, listed: bool) -> Mismatch | None:
    """The first difference of two canonical values below ``path`` (grading.md's order)."""
    if a == b:
        return None
    where = path_text(path) if path else "arguments"
    if isinstance(a, CObject | CArray) and isinstance(b, CObject | CArray):
        diff = first_difference(a, b, where)
        if diff is not None:
            return Mismatch(diff.code, diff.path, diff.reason)
    if kind_of(a) != kind_of(b):
        return Mismatch("type_mismatch", where, f"{where}: expected {kind_of(a)}, got {kind_of(b)}")
    extra = " or an acceptable value" if listed else ""
    return Mismatch("value_mismatch", where, f"{where}: value differs from expected{extra}")
