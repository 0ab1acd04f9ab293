"""Exact-number JSON parsing for the grader.

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
import re
from decimal import Decimal, InvalidOperation
from typing import Any

import orjson

# Nesting levels (objects and arrays) a graded value may have. Deeper spans are skipped and
# deeper arguments make a call unusable (grading.md failure mode 12): the bound keeps every
# recursive walk far inside Python's recursion limit.
MAX_DEPTH = 128

_LONG_DIGIT_RUN = re.compile(r"[0-9]{19,}")


class JSONError(ValueError):
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
    """Parse ``text`` keeping integers exact; raise :class:`JSONError` when it is not JSON."""
    try:
        if _LONG_DIGIT_RUN.search(text) is None:
            try:
                return orjson.loads(text)
            except orjson.JSONDecodeError as exc:
                if "infinity" not in str(exc):  # only an overflowing literal is retried
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
    """Serialise plain JSON data; integers wider than 64 bits fall back to the exact stdlib path."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()  # noqa: TID251
