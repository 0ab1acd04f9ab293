"""The one way the grader builds a JSON Schema validator: nothing fetched, patterns bounded.

Schemas come from clients (a request's ``tools[].function.parameters``) and from the scoring
API's callers, so a validator must never reach the network or the disk, and must never run a
backtracking regex:

* ``$ref`` resolves only inside the schema itself. The registry refuses every retrieval, so a
  remote (``https://…``) or local-file (``file://…``) reference is *unresolvable*, reported by
  :func:`schema_errors` as :class:`UnresolvableRefError`; ``$schema`` and ``$id`` fetch nothing.
  (jsonschema's deprecated default resolver fetched remote refs with urllib and no timeout.)
* ``pattern``, ``patternProperties`` and ``additionalProperties`` (which consults
  ``patternProperties``) match through :mod:`grader.patterns` (RE2, linear time). A pattern RE2
  refuses raises :class:`grader.patterns.PatternError`. ``unevaluatedProperties`` together with
  ``patternProperties`` would still reach Python's ``re`` inside jsonschema, so such a schema is
  refused up front.
* ``format`` stays an annotation (the 2020-12 default): no format checker runs.
* ``uniqueItems`` and ``enum`` compare JSON values through a sortable key (:func:`json_key`):
  O(n log n) for an array of n items, where jsonschema falls back to comparing every pair as
  soon as the items are objects or mix types (a 6,000-item array took 34 s); a long ``enum``
  is sorted once per validator and searched by bisection, not scanned per value.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any

import jsonschema
import referencing
import referencing.exceptions
from jsonschema.exceptions import SchemaError as SchemaError  # json_schema.py reads it here
from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator

from grader.errors import GraderError
from grader.patterns import PatternError, compile_pattern, search

__all__ = ["PatternError", "UnresolvableRefError", "safe_validator", "schema_errors"]


class UnresolvableRefError(GraderError, ValueError):
    """A ``$ref`` that points outside the schema (never fetched) or at nothing in it."""


# An empty registry with referencing's default ``retrieve``, which refuses every URI: passing
# any registry also turns off jsonschema's deprecated fetching fallback.
_REGISTRY: referencing.Registry[Any] = referencing.Registry()


def _pattern(validator: Any, pattern: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    matchable = validator.is_type(instance, "string") and isinstance(pattern, str)
    if matchable and not search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        compiled = compile_pattern(pattern)
        for key, value in instance.items():
            if compiled.search(key) is not None:
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional(instance: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    properties = schema.get("properties", {})
    compiled = [compile_pattern(p) for p in schema.get("patternProperties", {})]
    return [
        key
        for key in instance
        if key not in properties and not any(c.search(key) is not None for c in compiled)
    ]


def _additional_properties(
    validator: Any, allowed: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    extras = _additional(instance, schema)
    if validator.is_type(allowed, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed, path=extra)
    elif not allowed and extras:
        listed = ", ".join(repr(extra) for extra in sorted(extras))
        yield ValidationError(f"Additional properties are not allowed ({listed} unexpected)")


Key = tuple[Any, ...]
# jsonschema's own keywords (typed loosely by its stubs), for values that are not JSON.
_LIBRARY_UNIQUE: Any = jsonschema.Draft202012Validator.VALIDATORS["uniqueItems"]
_LIBRARY_ENUM: Any = jsonschema.Draft202012Validator.VALIDATORS["enum"]


def json_key(value: Any) -> Key:
    """A key equal for two values exactly when JSON Schema calls them equal (``1`` and ``1.0``
    alike, ``true`` and ``1`` not, objects whatever their key order), and ordered across every
    pair of keys, so equal values sort next to each other. Raise ``TypeError`` for a value
    that is not JSON (a Python caller's tuple, set or non-string key)."""
    if isinstance(value, str):
        return (3, value)
    if value is True or value is False:
        return (1, value)
    if value is None:
        return (0,)
    if isinstance(value, int | float | Decimal):
        return (2, value)
    if isinstance(value, Mapping):
        if not all(isinstance(name, str) for name in value):
            raise TypeError("an object key that is not a string")
        return (5, tuple(sorted((name, json_key(item)) for name, item in value.items())))
    if isinstance(value, list):
        return (4, tuple(json_key(item) for item in value))
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def all_unique(items: Sequence[Any]) -> bool:
    """Whether no two items are equal (JSON Schema's ``uniqueItems``), in O(n log n)."""
    keys = sorted(json_key(item) for item in items)
    return all(a != b for a, b in itertools.pairwise(keys))


def _unique_items(
    validator: Any, unique: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not unique or not validator.is_type(instance, "array"):
        return
    try:
        duplicated = not all_unique(instance)
    except TypeError:  # not JSON (a Python caller's value): the library's own comparison
        yield from _LIBRARY_UNIQUE(validator, unique, instance, schema)
        return
    if duplicated:
        yield ValidationError(f"{instance!r} has non-unique elements")


_SHORT_ENUM = 8  # up to this many values, scanned (cheaper than a key); longer ones bisected


def _enum_keyword() -> Any:
    """An ``enum`` keyword for one validator class: each long enum list's keys sorted once
    (held by the list's identity; the schema holds the list as long as the class lives)."""
    sorted_keys: dict[int, tuple[Any, list[Key] | None]] = {}

    def keys_of(enums: Any) -> list[Key] | None:
        held = sorted_keys.get(id(enums))
        if held is None or held[0] is not enums:
            try:
                keys: list[Key] | None = sorted(json_key(value) for value in enums)
            except TypeError:
                keys = None
            held = sorted_keys[id(enums)] = (enums, keys)
        return held[1]

    def enum(validator: Any, enums: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
        keys = keys_of(enums) if isinstance(enums, list) and len(enums) > _SHORT_ENUM else None
        if keys is None:
            yield from _LIBRARY_ENUM(validator, enums, instance, schema)
            return
        try:
            key = json_key(instance)
        except TypeError:
            yield from _LIBRARY_ENUM(validator, enums, instance, schema)
            return
        at = bisect.bisect_left(keys, key)
        if at == len(keys) or keys[at] != key:
            yield ValidationError(f"{instance!r} is not one of {enums!r}")

    return enum


_BOUNDED = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "uniqueItems": _unique_items,
}


def _keywords(schema: Any) -> set[str]:
    """Every keyword used anywhere in ``schema`` (walked without recursion)."""
    seen: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            seen.update(k for k in node if isinstance(k, str))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return seen


def safe_validator(schema: Any) -> Validator:
    """A validator for ``schema`` that fetches nothing and matches patterns with RE2.

    Raise ``SchemaError`` when the schema is invalid, :class:`PatternError` when one of its
    patterns cannot be bounded (checked now, so a definition fails at load, not per answer).
    """
    # An unknown (say, remote) $schema is never fetched: the latest draft validates.
    base = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    base.check_schema(schema)
    used = _keywords(schema)
    if "unevaluatedProperties" in used and "patternProperties" in used:
        raise PatternError(
            "unevaluatedProperties with patternProperties cannot be matched in bounded time"
        )
    if isinstance(schema, Mapping):
        for node_patterns in _patterns_in(schema):
            compile_pattern(node_patterns)
    keywords = {**_BOUNDED, "enum": _enum_keyword()}
    cls = jsonschema.validators.extend(base, validators=keywords)  # type: ignore[no-untyped-call]
    validator: Validator = cls(schema, registry=_REGISTRY)
    return validator


def _patterns_in(schema: Mapping[str, Any]) -> Iterator[str]:
    stack: list[Any] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            pattern = node.get("pattern")
            if isinstance(pattern, str):
                yield pattern
            properties = node.get("patternProperties")
            if isinstance(properties, Mapping):
                yield from (p for p in properties if isinstance(p, str))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def schema_errors(validator: Validator, instance: Any) -> ValidationError | None:
    """The most relevant validation error, or None; raise :class:`UnresolvableRefError` for a ref
    that leaves the schema (never fetched) or points at nothing."""
    try:
        error: ValidationError | None = jsonschema.exceptions.best_match(
            validator.iter_errors(instance)
        )
    except referencing.exceptions.Unresolvable as exc:
        ref = getattr(exc, "ref", "")
        raise UnresolvableRefError(f"$ref {ref!r} is not inside the schema") from None
    return error
