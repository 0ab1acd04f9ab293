"""Inbound keys resolved to their secrets: ``auth.keys`` (named) and ``auth.keys_env`` (unnamed).

A named key is ``{id, secret_env | secret_file}``: its id is what a row's ``key_id`` and the
metrics' ``key`` label say, so a team's traffic can be told from another's without the secret
ever being written anywhere. ``auth.keys_env`` (comma-separated secrets in one variable) is
still read: its keys have no id. Secrets are read here, at start and again on SIGHUP
(:func:`resolve_keys`), and every problem is a :class:`ConfigError` naming the field: a
variable that is not set, a file that cannot be read, an empty secret, a duplicate id or
secret. Never logs or returns a secret anywhere but in an :class:`InboundKey`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from proxy.config.coerce import ConfigError

__all__ = ["RESERVED_IDS", "InboundKey", "resolve_keys"]

# A key id is a metric label value and a row field: short, printable, no spaces.
_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")
# Label values the metrics use themselves (no named key; past the cardinality cap).
RESERVED_IDS: Final = frozenset({"none", "other"})


class NamedKey(Protocol):
    """An ``auth.keys`` entry as configured (proxy/config/model.py's AuthKey)."""

    @property
    def id(self) -> str: ...
    @property
    def secret_env(self) -> str | None: ...
    @property
    def secret_file(self) -> Path | None: ...
    @property
    def rpm(self) -> int | None: ...
    @property
    def tpm(self) -> int | None: ...


class AuthSection(Protocol):
    """The ``auth`` section as configured (proxy/config/model.py's Auth)."""

    @property
    def keys(self) -> tuple[NamedKey, ...]: ...
    @property
    def keys_env(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class InboundKey:
    """One inbound key: its id (None for a key of ``auth.keys_env``), secret and limits."""

    id: str | None
    secret: bytes
    rpm: int | None = None  # requests per minute, per process; None: no limit
    tpm: int | None = None  # tokens per minute, per process; None: no limit

    def __repr__(self) -> str:  # never the secret, in a log line or a traceback
        return f"InboundKey(id={self.id!r}, rpm={self.rpm}, tpm={self.tpm})"


def _secret_of(where: str, env: str | None, file: Path | None, environ: Mapping[str, str]) -> str:
    if (env is None) == (file is None):
        raise ConfigError(f"{where}: give one of secret_env or secret_file")
    if file is None:
        assert env is not None
        if env not in environ:
            raise ConfigError(f"{where}.secret_env: environment variable {env} is not set")
        secret = environ[env]
    else:
        try:
            secret = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ConfigError(f"{where}.secret_file: {file}: cannot read: {reason}") from None
    secret = secret.strip()  # a file's trailing newline is not part of the key
    if not secret:
        source = f"variable {env}" if env is not None else f"file {file}"
        raise ConfigError(f"{where}: the secret is empty ({source})")
    if any(c.isspace() for c in secret):
        raise ConfigError(f"{where}: the secret must not hold whitespace")
    return secret


def resolve_keys(
    auth: AuthSection, environ: Mapping[str, str] | None = None
) -> tuple[InboundKey, ...]:
    """Every inbound key with its secret read now: ``auth.keys`` in order, then the unnamed
    keys of ``auth.keys_env``; empty when neither is set (no inbound auth)."""
    environ = os.environ if environ is None else environ
    keys: list[InboundKey] = []
    ids: set[str] = set()
    for number, named in enumerate(auth.keys):
        where = f"auth.keys[{number}]"
        if not _ID.fullmatch(named.id):
            raise ConfigError(
                f"{where}.id: {named.id!r} is not a key id (letters, digits, . _ : -; "
                "at most 64, starting with a letter or digit)"
            )
        if named.id in RESERVED_IDS:
            raise ConfigError(f"{where}.id: {named.id!r} is reserved (a metric label value)")
        if named.id in ids:
            raise ConfigError(f"{where}.id: duplicate key id {named.id!r}")
        ids.add(named.id)
        for limit in ("rpm", "tpm"):
            value = getattr(named, limit)
            if value is not None and value < 1:
                raise ConfigError(f"{where}.{limit}: must be >= 1 (unset: no limit)")
        secret = _secret_of(where, named.secret_env, named.secret_file, environ)
        keys.append(InboundKey(named.id, secret.encode("utf-8"), named.rpm, named.tpm))
    if auth.keys_env:
        if auth.keys_env not in environ:
            raise ConfigError(f"auth.keys_env: environment variable {auth.keys_env} is not set")
        unnamed = [key.strip() for key in environ[auth.keys_env].split(",") if key.strip()]
        if not unnamed:
            raise ConfigError(f"auth.keys_env: {auth.keys_env} holds no key (comma-separated)")
        keys.extend(InboundKey(None, key.encode("utf-8")) for key in unnamed)
    seen: dict[bytes, str] = {}
    for key in keys:
        name = key.id or "an auth.keys_env key"
        if key.secret in seen:
            raise ConfigError(f"auth.keys: {name} has the same secret as {seen[key.secret]}")
        seen[key.secret] = name
    return tuple(keys)
