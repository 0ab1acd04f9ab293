"""Reading ``tool_call``'s options: rule paths, ``acceptable``/``optional``/``strings``/
``numbers`` and the ``parallel`` list, validated and compiled into :class:`ExpectedCall`s.

Kept apart from :mod:`grader.checks.tool_call` (which grades) because every error here names
the check and the field at load time, while grading never raises: the two share nothing but
the compiled calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from grader.checks._base import Spec
from grader.checks.call_match import ExpectedCall, Rules
from grader.checks.call_rules import (
    EVERY,
    NUMBER_TYPES,
    STRING_MODES,
    NumberType,
    Path,
    PathError,
    StringMode,
    parse_path,
)
from grader.checks.json_schema import FROM_REQUEST
from grader.toolcall.extract import Call, call_from_value, extract

MAX_PARALLEL = 64
RULE_KEYS = ("acceptable", "optional", "strings", "numbers")
ENTRY_KEYS = frozenset({"name", "arguments", "function", "type", "id", *RULE_KEYS})


def call_of(value: Any) -> Call | None:
    """A task-style call: an object (wrappers allowed) or a JSON string holding one."""
    return extract(value).call if isinstance(value, str) else call_from_value(value)


# A task set's rules name a few hundred distinct paths, each in many tasks ("arguments.unit"):
# each text is parsed once (a path is a tuple, shared safely); a refused one is not kept.
_parsed_path = lru_cache(maxsize=4096)(parse_path)


def _path(spec: Spec, where: str, field: str, text: Any, deep: list[Path]) -> Path:
    """A rule's path read from ``text``; errors name ``{where}{field}``. A path below a
    top-level argument is also added to ``deep`` (see :attr:`Rules.deep`)."""
    try:
        path = _parsed_path(text) if type(text) is str else parse_path(text)
    except PathError as exc:
        raise spec.error(f"{where}{field}", str(exc)) from None
    if len(path) == 1:  # a top-level argument, nearly every path: a name, never "[*]"
        return path
    every = [i for i, step in enumerate(path) if step == EVERY]
    if every and (field != "numbers" or every != [len(path) - 1]):
        raise spec.error(
            f"{where}{field}", f"path {text!r}: '[*]' is allowed only at the end of a numbers path"
        )
    deep.append(path)
    return path


def read_rules(spec: Spec, raw: Mapping[str, Any], where: str, base: Rules | None = None) -> Rules:
    """Read ``acceptable``/``optional``/``strings``/``numbers`` from ``raw`` over ``base``.

    ``where`` prefixes the field in errors (``parallel[2].``). A field ``raw`` does not have
    is not read at all (nearly every definition has two or three of the four)."""
    # The base's tables are shared where ``raw`` adds nothing to them (never written after).
    acceptable: Mapping[Path, tuple[Any, ...]] = base.acceptable if base else _EMPTY
    deep: list[Path] = []
    if "acceptable" in raw:
        acceptable = dict(acceptable)
        acc_raw = raw["acceptable"]
        if not isinstance(acc_raw, dict):
            raise spec.error(f"{where}acceptable", "must map argument paths to lists of values")
        for text, values in acc_raw.items():
            if not isinstance(values, list) or not values:
                raise spec.error(f"{where}acceptable", f"{text!r} needs a non-empty list of values")
            acceptable[_path(spec, where, "acceptable", text, deep)] = tuple(values)
    optional = base.optional if base else _NO_PATHS
    if "optional" in raw:
        opt_raw = raw["optional"]
        if not isinstance(opt_raw, list):
            raise spec.error(f"{where}optional", "must be a list of argument paths")
        paths = []  # a loop: nearly every list names one or two paths (a comprehension is a call)
        for p in opt_raw:
            paths.append(_path(spec, where, "optional", p, deep))
        optional = optional.union(paths)
    strings: StringMode = base.strings if base else "exact"
    string_paths: Mapping[Path, StringMode] = base.string_paths if base else _EMPTY
    str_raw = raw.get("strings")
    if isinstance(str_raw, str):
        str_raw = {"default": str_raw}
    if str_raw is not None:
        if not isinstance(str_raw, dict):
            raise spec.error(f"{where}strings", f"must be one of {STRING_MODES} or an object")
        own: dict[Path, StringMode] | None = None  # a copy of the base's, made if a path is set
        for text, mode in str_raw.items():
            if mode not in STRING_MODES:
                raise spec.error(f"{where}strings", f"{mode!r} is not one of {STRING_MODES}")
            if text == "default":
                strings = mode
            else:
                if own is None:
                    own = dict(string_paths)
                own[_path(spec, where, "strings", text, deep)] = mode
        if own is not None:
            string_paths = own
    numbers: Mapping[Path, NumberType] = base.numbers if base else _EMPTY
    num_raw = raw.get("numbers", _NONE)
    if num_raw == FROM_REQUEST and not where:
        num_raw = _NONE  # the check's numbers_from_request flag; read by build()
    if num_raw is not _NONE:
        numbers = dict(numbers)
        if not isinstance(num_raw, dict):
            raise spec.error(f"{where}numbers", "must map argument paths to 'integer' or 'number'")
        for text, kind in num_raw.items():
            if kind not in NUMBER_TYPES:
                raise spec.error(f"{where}numbers", f"{kind!r} is not one of {NUMBER_TYPES}")
            numbers[_path(spec, where, "numbers", text, deep)] = kind
    if base and base.deep:
        deep[:0] = base.deep
    return Rules(acceptable, optional, strings, string_paths, numbers, tuple(deep))


_NONE: Any = object()  # read_rules: a field the definition does not have
# The empty table every Rules without one shares (never written: a table is copied first).
_EMPTY: Mapping[Any, Any] = {}
_NO_PATHS: frozenset[Path] = frozenset()


def compile_call(spec: Spec, key: str, call: Call, rules: Rules) -> ExpectedCall:
    """The expected call compiled with its rules; a value canon cannot read names ``key``."""
    try:
        # The Call's canonical value is {"arguments": ..., "name": ...}, its keys sorted.
        return ExpectedCall(call.name, call.arguments, rules, call.canonical.items[0][1])
    except (ValueError, TypeError) as exc:
        raise spec.error(key, f"holds a value the grader cannot compare: {exc}") from None


def read_parallel(spec: Spec, raw: Any, rules: Rules) -> tuple[ExpectedCall, ...]:
    """The ``parallel`` list compiled: each entry's own rules added to the check's ``rules``."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_PARALLEL:
        raise spec.error("parallel", f"must be a list of 1 to {MAX_PARALLEL} calls")
    calls = []
    for index, value in enumerate(raw):
        # An entry's own rules; the call is read from the same object (its rule keys are
        # none of the keys a call is read from: name, arguments, function).
        own: Mapping[str, Any] = {}
        if isinstance(value, dict):
            if not ENTRY_KEYS.issuperset(value):
                unknown = min(set(value) - ENTRY_KEYS)
                known = ", ".join(sorted(ENTRY_KEYS))
                raise spec.error(f"parallel[{index}]", f"has unknown field {unknown!r} ({known})")
            if not value.keys().isdisjoint(RULE_KEYS):
                own = value
        call = call_of(value)
        if call is None:
            raise spec.error(f"parallel[{index}]", "is not a usable call {name, arguments}")
        entry_rules = read_rules(spec, own, f"parallel[{index}].", rules) if own else rules
        calls.append(compile_call(spec, f"parallel[{index}]", call, entry_rules))
    return tuple(calls)
