"""Typed config sections from plain mappings: the checking behind every ``field: message``.

Values come from YAML (already typed) or from ``GRADEPROXY_*`` environment variables (text, so
converted here); either way a wrong value raises :class:`ConfigError` naming the field.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from proxy.errors import ProxyError


class ConfigError(ProxyError, ValueError):
    """The configuration is unusable; the message names the field."""


def plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return [plain(item) for item in value]
    return value


def coerce(where: str, hint: Any, value: Any, from_text: bool) -> Any:
    """Check (and, for environment strings, convert) one value against its type hint."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        options = get_args(hint)
        if value is None or (from_text and value == "" and type(None) in options):
            if type(None) in options:
                return None
            raise ConfigError(f"{where}: must be set")
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return coerce(where, option, value, from_text)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0])
    if origin is Literal:
        # Closed sets are lower-case words; `DEBUG` from an environment means `debug`.
        folded = value.lower() if isinstance(value, str) else value
        if folded not in get_args(hint):
            choices = "|".join(str(a) for a in get_args(hint))
            raise ConfigError(f"{where}: must be one of {choices}, got {value!r}")
        return folded
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        if from_text and isinstance(value, str):
            raise ConfigError(f"{where}: must be a mapping; set it in the config file")
        return section(where, hint, value, {})
    if origin is tuple and get_args(hint)[0] is not str:
        (item,) = get_args(hint)[:1]
        if not isinstance(value, list):
            raise ConfigError(f"{where}: must be a list")
        return tuple(coerce(f"{where}[{n}]", item, v, False) for n, v in enumerate(value))
    if origin is tuple:
        if from_text and isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where}: must be a list of strings")
        return tuple(value)
    if hint is bool:
        if from_text and isinstance(value, str) and value.lower() in ("1", "true", "yes", "on"):
            return True
        if from_text and isinstance(value, str) and value.lower() in ("0", "false", "no", "off"):
            return False
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: must be true or false, got {value!r}")
        return value
    if hint is int:
        if from_text and isinstance(value, str):
            try:
                value = int(value)
            except ValueError:
                raise ConfigError(f"{where}: must be an integer, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: must be an integer, got {value!r}")
        return value
    if hint is float:
        if from_text and isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise ConfigError(f"{where}: must be a number, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: must be a number, got {value!r}")
        return float(value)
    if hint is Path:
        if not isinstance(value, str | Path):
            raise ConfigError(f"{where}: must be a path, got {value!r}")
        return Path(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: must be a string, got {value!r}")
        return value
    raise ConfigError(f"{where}: unsupported type")  # pragma: no cover - a programming error


def section(name: str, cls: type[Any], data: Any, from_text: Mapping[str, bool]) -> Any:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{name}: must be a mapping")
    hints = get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(known), n=1)
        hint = f"; did you mean {name}.{close[0]}?" if close else ""
        raise ConfigError(
            f"{name}.{unknown[0]}: unknown field (known: {', '.join(sorted(known))}){hint}"
        )
    values = {
        key: coerce(f"{name}.{key}", hints[key], value, from_text.get(f"{name}.{key}", False))
        for key, value in data.items()
    }
    return cls(**values)
