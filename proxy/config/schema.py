"""``gradeproxy config-schema``: the config file's JSON Schema, generated from the dataclasses.

Generated rather than written, so it cannot drift from what :func:`proxy.config.load_config`
accepts: the same fields, types, closed sets and defaults, and no other keys
(``additionalProperties: false``, as unknown keys are errors). Editors validate a config file
against it (YAML language servers read a ``# yaml-language-server: $schema=...`` comment); a
test checks every example config in the repository against it. Range checks (``0..65535``,
``>= 1``) stay in ``load_config``, whose messages name the field.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import orjson

from proxy.config import Config
from proxy.config.coerce import plain


def _type(hint: Any) -> dict[str, Any]:
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        options = [_type(option) for option in get_args(hint) if option is not type(None)]
        nullable = type(None) in get_args(hint)
        branches = [*options, {"type": "null"}] if nullable else options
        return branches[0] if len(branches) == 1 else {"anyOf": branches}
    if origin is Literal:
        return {"type": "string", "enum": list(get_args(hint))}
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return _object(hint)
    if origin is tuple:
        return {"type": "array", "items": _type(get_args(hint)[0])}
    simple = {bool: "boolean", int: "integer", float: "number", str: "string", Path: "string"}
    return {"type": simple[hint]}


def _object(cls: type[Any]) -> dict[str, Any]:
    hints = get_type_hints(cls)
    properties: dict[str, Any] = {}
    for item in dataclasses.fields(cls):
        schema = _type(hints[item.name])
        if item.default is not dataclasses.MISSING:
            schema["default"] = plain(item.default)
        properties[item.name] = schema
    return {"type": "object", "properties": properties, "additionalProperties": False}


def config_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a gradeproxy config file."""
    # No `required`: upstream.url may come from GRADEPROXY_UPSTREAM_URL or --upstream.
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "gradeproxy config",
        "description": "gradeproxy's YAML config; GRADEPROXY_<SECTION>_<FIELD> variables and "
        "serve's flags override it. Enum values are matched case-insensitively by gradeproxy.",
        **_object(Config),
    }


def run(name: str, args: argparse.Namespace) -> int:
    sys.stdout.buffer.write(orjson.dumps(config_schema(), option=orjson.OPT_INDENT_2) + b"\n")
    return 0
