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
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
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


_BOUNDED = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
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
    cls = jsonschema.validators.extend(base, validators=_BOUNDED)  # type: ignore[no-untyped-call]
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
