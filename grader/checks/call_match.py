"""Matching one answer call against one expected call, with per-path rules (BFCL parity).

``tool_call`` compiles each expected call once into an :class:`ExpectedCall` (its arguments,
``acceptable`` values, ``optional`` paths, string modes and strict numeric types) and parses each
answer call once into an :class:`AnswerCall`, whose canonical forms are computed on first use
and cached per string mode. Matching then compares canonical values only: nothing is
re-serialised or re-extracted per (expected, answer) pair, so grading ``n`` parallel calls costs
``n²`` cheap comparisons, not ``n²`` parses. What each rule means for one value (paths, string
modes, numeric types) lives in :mod:`grader.checks.call_rules`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Any, NamedTuple

from grader.checks._base import CheckReasonCode
from grader.checks.call_answer import UNCOMPARABLE, AnswerCall, leaf_in
from grader.checks.call_rules import (
    ARTICLE,
    EVERY,
    NumberType,
    Path,
    StringMode,
    canon_in,
    fold_strings,
    number_fails,
    path_text,
)
from grader.toolcall.canon import Canon, CArray, CObject, TooDeepError, kind_of
from grader.toolcall.diff import first_difference
from grader.values import value_type


class Mismatch(NamedTuple):
    """Why a call did not match: a check reason code, the path, a human reason (a tuple: one
    is made per failing answer, and a frozen dataclass costs several times more to build)."""

    code: CheckReasonCode
    path: str | None
    reason: str


@value_type
class Rules:
    """Per-path options of one expected call (plain values; compiled by ExpectedCall)."""

    acceptable: Mapping[Path, tuple[Any, ...]] = field(default_factory=dict)
    optional: frozenset[Path] = frozenset()
    strings: StringMode = "exact"
    string_paths: Mapping[Path, StringMode] = field(default_factory=dict)
    numbers: Mapping[Path, NumberType] = field(default_factory=dict)
    # The paths above that reach below a top-level argument (nearly always none): read_rules
    # collects them as it reads each path, so a compiled call need not measure every path.
    deep: tuple[Path, ...] = ()


@value_type
class _Key:
    """One top-level argument's compiled rules (the fast path of :meth:`ExpectedCall.matches`)."""

    in_expected: bool
    optional: bool
    number: NumberType | None
    mode: StringMode
    accept: frozenset[Canon] | None
    want: Canon
    element: NumberType | None = None  # numbers "arguments.<key>[*]"
    number_ok: frozenset[type] = frozenset()  # value types that always meet ``number``


# The Python types that meet a strict numeric type without asking number_fails (JSON gives no
# other int or float types; anything else takes the general test).
_NUMBER_OK: dict[NumberType | None, frozenset[type]] = {
    "integer": frozenset({int}),
    "number": frozenset({int, float}),
    "float": frozenset({float}),
    None: frozenset(),
}


_NONE: frozenset[Any] = frozenset()  # an empty table's keys, shared
_ABSENT: Any = object()  # _compile_keys: a key the expected call does not have


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
        "_known",
        "_mode",
        "_required",
        "_ruled",
        "_table",
        "arguments",
        "name",
        "rules",
    )

    def __init__(
        self, name: str, arguments: dict[str, Any], rules: Rules, canonical: Canon
    ) -> None:
        """``canonical``: the arguments' canonical value (:func:`grader.toolcall.canon.canon`'s,
        the expected :class:`~grader.toolcall.extract.Call`'s own), folded to the check's string
        modes instead of canonicalising ``arguments`` again.

        One of three forms, by where the rules reach: none (the arguments compared whole,
        ``_canon``), top-level arguments only (nearly every call: the per-key ``_table``), or
        below them (the general walk, which reads ``_ruled``), told apart by the rules' ``deep``
        paths. Each form builds only what it reads."""
        self.name = name
        self.arguments = arguments
        self.rules = rules
        acceptable = rules.acceptable
        accept: dict[Path, frozenset[Canon]] = {}
        if acceptable:
            string_paths, strings = rules.string_paths, rules.strings
            for path, values in acceptable.items():
                mode = self.mode_at(path) if string_paths else strings
                accept[path] = frozenset([canon_in(v, mode) for v in values])
        self._accept = accept
        self._every = False
        self._canon: Canon = None
        self._table: dict[str, _Key] | None = None
        self._known: frozenset[str] = _NONE  # the table's keys
        self._required: frozenset[str] = _NONE
        self._mode: StringMode | None = None
        self._ruled: frozenset[Path] = _NONE
        deep, numbers = rules.deep, rules.numbers
        if not deep:
            if acceptable or numbers or rules.optional or rules.string_paths:
                self._compile_keys(canonical)
            else:
                self._canon = fold_strings(canonical, rules.strings)
        elif all(len(path) == 2 and path[1] == EVERY and path in numbers for path in deep):
            self._every = True  # numbers "arguments.<key>[*]": still one entry per key
            self._compile_keys(canonical)
        else:
            self._every = any(EVERY in path for path in numbers)
            paths = (*acceptable, *rules.optional, *rules.string_paths, *numbers)
            self._ruled = frozenset({path[:end] for path in paths for end in range(len(path) + 1)})

    def _compile_keys(self, canonical: Canon) -> None:
        """The per-key table: one entry per argument the call or an ``acceptable`` path names,
        in key order (the order :meth:`mismatch` reports in)."""
        rules = self.rules
        default, string_paths, optional, numbers, accept = (
            rules.strings,
            rules.string_paths,
            rules.optional,
            rules.numbers,
            self._accept,
        )
        # The arguments' canonical pairs, in key order already (folded per key to its mode
        # below); a key that only an acceptable path names (absent from the call) joins them
        # in key order, with no value.
        pairs: Sequence[tuple[str, Canon]] = canonical.items if type(canonical) is CObject else ()
        if accept:
            present = {key for key, _ in pairs}
            added = {p[0] for p in accept if isinstance(p[0], str) and p[0] not in present}
            if added:
                pairs = sorted([*pairs, *[(key, _ABSENT) for key in added]])
        table: dict[str, _Key] = {}
        required = []
        modes = set()  # without per-path modes, every key's is the default
        every = self._every  # else no "[*]" path to look up
        mode = default
        for key, value in pairs:
            path: Path = (key,)
            if string_paths:
                mode = string_paths.get(path, default)
                modes.add(mode)
            in_expected = value is not _ABSENT
            is_optional = path in optional
            if in_expected and not is_optional:
                required.append(key)
            number = numbers.get(path)
            table[key] = _Key(
                in_expected,
                is_optional,
                number,
                mode,
                accept.get(path) if accept else None,
                fold_strings(value, mode) if in_expected else None,
                numbers.get((key, EVERY)) if every else None,
                _NUMBER_OK[number],
            )
        self._table = table
        self._known = frozenset(table)
        self._required = frozenset(required)
        if string_paths:
            self._mode = modes.pop() if len(modes) == 1 else None
        else:
            self._mode = default if table else None

    def matches(self, got: AnswerCall) -> bool:
        """Whether ``got`` matches: the same verdict as ``mismatch(got) is None``, faster (a
        yes/no needs no order: the key sets are compared first, then each answer value once)."""
        if got.name != self.name or got.arguments is None:
            return False
        table = self._table
        if table is None:
            if self._ruled:
                return self.mismatch(got) is None
            mine = got.canonical(self.rules.strings)
            return mine is not None and mine == self._canon
        args = got.arguments
        keys = args.keys()
        if not (keys <= self._known and keys >= self._required):
            return False
        mode = self._mode
        leaves = got.leaves(mode) if mode is not None else None
        for key, value in args.items():
            entry = table[key]
            number = entry.number
            if (
                number is not None
                and type(value) not in entry.number_ok
                and number_fails(number, value)
            ):
                return False
            if entry.element is not None and _element_fails(entry.element, value) is not None:
                return False
            mine = leaves[key] if leaves is not None else got.leaf(key, entry.mode)
            if mine is UNCOMPARABLE:
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
        if self._table is None and not self._ruled:
            mine = got.canonical(self.rules.strings)
            if mine is None:
                return Mismatch(
                    "too_deep", "arguments", "arguments nest deeper than the grader follows"
                )
            return _differ(self._canon, mine, "arguments", False)
        try:
            if self._table is not None:
                return self._keyed_mismatch(got, got.arguments, self._table)
            return self._walk(self.arguments, got.arguments, (), self.rules.strings)
        except (TooDeepError, TypeError):
            return Mismatch(
                "too_deep", "arguments", "arguments nest deeper than the grader follows"
            )

    def _keyed_mismatch(
        self, got: AnswerCall, args: dict[str, Any], table: dict[str, _Key]
    ) -> Mismatch | None:
        """:meth:`mismatch` through the per-key table (rules on top-level arguments only),
        reusing the answer's cached canonical values."""
        leaves = got.cached_leaves(self._mode)
        known = args.keys() <= self._known
        for key in table if known else sorted(self._known | set(args)):
            entry = table.get(key)
            if entry is None:
                where = "arguments." + key
                return Mismatch("unexpected", where, f"{where} unexpected")
            if key not in args:
                if entry.in_expected and not entry.optional:
                    where = "arguments." + key
                    return Mismatch("missing", where, f"{where} missing")
                continue
            value = args[key]
            if (
                entry.number is not None
                and type(value) not in entry.number_ok
                and number_fails(entry.number, value)
            ):
                where = "arguments." + key
                return Mismatch(
                    "numeric_type_mismatch",
                    where,
                    f"{where}: expected {ARTICLE[entry.number]} {entry.number}, got {value!r}",
                )
            bad = None if entry.element is None else _element_fails(entry.element, value)
            if bad is not None:
                where = path_text((key, bad))
                kind = entry.element
                return Mismatch(
                    "numeric_type_mismatch",
                    where,
                    f"{where}: expected {ARTICLE[kind or 'number']} {kind}, got {value[bad]!r}",
                )
            mine = leaves[key] if leaves is not None else leaf_in(value, entry.mode)
            if mine is UNCOMPARABLE:
                where = "arguments." + key
                return Mismatch("too_deep", where, f"{where} nests deeper than the grader follows")
            if entry.accept is not None and mine in entry.accept:
                continue
            if not entry.in_expected:
                where = "arguments." + key
                return Mismatch("unexpected", where, f"{where} unexpected")
            if mine == entry.want:
                continue
            found = _differ(entry.want, mine, "arguments." + key, entry.accept is not None)
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
                f"{where}: expected {ARTICLE[wanted_type]} {wanted_type}, got {got!r}",
            )
        element = self.rules.numbers.get((*path, EVERY)) if self._every else None
        if element is not None and isinstance(got, list):
            for index, value in enumerate(got):
                if number_fails(element, value):
                    where = path_text((*path, index))
                    article = ARTICLE[element]
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
        where = path_text(path) if path else "arguments"
        return _differ(canon_in(want, mode), canon_in(got, mode), where, listed)


def _differ(a: Canon, b: Canon, where: str, listed: bool) -> Mismatch | None:
    """The first difference of two canonical values below ``where``, the reported path
    (grading.md's order)."""
    if a == b:
        return None
    if isinstance(a, CObject | CArray) and isinstance(b, CObject | CArray):
        diff = first_difference(a, b, where)
        if diff is not None:
            return Mismatch(diff.code, diff.path, diff.reason)
    if kind_of(a) != kind_of(b):
        return Mismatch("type_mismatch", where, f"{where}: expected {kind_of(a)}, got {kind_of(b)}")
    extra = " or an acceptable value" if listed else ""
    return Mismatch("value_mismatch", where, f"{where}: value differs from expected{extra}")
