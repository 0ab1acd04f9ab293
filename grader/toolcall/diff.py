"""The first differing path between two canonical values, and its reason code.

The walk follows canonical order (object keys sorted, arrays by index), so the reported path
is deterministic: ``arguments.labels[1]`` and never "somewhere in arguments".
"""

from __future__ import annotations

import re

from grader.json import dumps, quote
from grader.toolcall.canon import Canon, CArray, CObject, kind_of, to_plain
from grader.values import value_type
from grader.verdict import ReasonCode

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SHOWN = 60  # characters of a value quoted in a reason


@value_type
class Difference:
    """The first difference of two canonical values: its reason code, path and message."""

    code: ReasonCode
    path: str
    reason: str


def _key_path(parent: str, key: str) -> str:
    if _IDENTIFIER.fullmatch(key):
        return f"{parent}.{key}" if parent else key
    return f"{parent}[{quote(key)}]"


def _show(value: Canon) -> str:
    text = dumps(to_plain(value)).decode()  # wide integers and lone surrogates included
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


def first_difference(expected: Canon, actual: Canon, path: str = "") -> Difference | None:
    """Walk both values in canonical order; None when they are equal."""
    if expected == actual:
        return None
    if isinstance(expected, CObject) and isinstance(actual, CObject):
        want, got = expected.as_dict(), actual.as_dict()
        for key in sorted(want.keys() | got.keys()):
            where = _key_path(path, key)
            if key not in got:
                return Difference("missing", where, f"{where} missing")
            if key not in want:
                return Difference("unexpected", where, f"{where} unexpected")
            found = first_difference(want[key], got[key], where)
            if found is not None:
                return found
        return None  # unreachable for unequal objects; kept total for the type checker
    if isinstance(expected, CArray) and isinstance(actual, CArray):
        for index in range(max(len(expected.items), len(actual.items))):
            where = f"{path}[{index}]"
            if index >= len(actual.items):
                return Difference("missing", where, f"{where} missing")
            if index >= len(expected.items):
                return Difference("unexpected", where, f"{where} unexpected")
            found = first_difference(expected.items[index], actual.items[index], where)
            if found is not None:
                return found
        return None
    want_kind, got_kind = kind_of(expected), kind_of(actual)
    if want_kind != got_kind:
        return Difference(
            "type_mismatch", path, f"{path}: type mismatch (expected {want_kind}, got {got_kind})"
        )
    code: ReasonCode = "name_mismatch" if path == "name" else "value_mismatch"
    label = "name mismatch" if code == "name_mismatch" else "value mismatch"
    return Difference(
        code, path, f"{path}: {label} (expected {_show(expected)}, got {_show(actual)})"
    )
