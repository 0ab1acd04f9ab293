"""The parts of a grader record that name the snapshot: tables, records, effects, targets.

Apart from ``record.py`` (the record's keys, its root cause and evidence, the refusal of a record
that cannot fail) because every part here is read against the record's ``snapshot``: a table
or record id that the snapshot does not hold is refused where it is named, with the path
inside the record (``episode.target_state[0].table: …``). One :class:`Parser` a record, built
on its snapshot; ``RecordError`` and the small field readers are shared with ``record.py``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from grader.episodes.values import (
    OPS,
    SIDE_EFFECTS,
    Bundle,
    Effect,
    RecordRef,
    SideEffect,
    Source,
    StateCheck,
    StateLink,
)
from grader.errors import GraderError
from grader.toolcall.rules import Link, parse_call_link

_SOURCE = re.compile(r"(arguments|result)(?:\.[^.\s]+)*")
_STATE_REF = re.compile(r"([A-Za-z0-9_\-]{1,64})\.([^.\s][^\s]*)")


class RecordError(GraderError, ValueError):
    """An unusable grader record; the message starts with the path inside it."""


def error(key: str, message: str) -> RecordError:
    """The error for ``key``, named by its path inside the record."""
    return RecordError(f"episode.{key}: {message}")


def entries(raw: Any, key: str) -> list[Any]:
    """A non-empty list."""
    if not isinstance(raw, list) or not raw:
        raise error(key, "must be a non-empty list")
    return raw


def text(raw: Any, key: str) -> str:
    """A non-empty string."""
    if not isinstance(raw, str) or not raw:
        raise error(key, "must be a non-empty string")
    return raw


def only(raw: Any, key: str, allowed: set[str]) -> dict[str, Any]:
    """An object with no key outside ``allowed``."""
    if not isinstance(raw, dict):
        raise error(key, f"must be an object of {', '.join(sorted(allowed))}")
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise error(f"{key}.{unknown[0]}", f"unknown field (takes: {', '.join(sorted(allowed))})")
    return raw


class Parser:
    """Reads the snapshot-bound parts of one record; every method names the path it read."""

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.raw = raw
        self.snapshot = self._snapshot(raw.get("snapshot"))

    def table(self, raw: Any, key: str) -> str:
        name = text(raw, key)
        if self.snapshot is None:
            raise error(key, "names a table, so the record needs a 'snapshot'")
        if name not in self.snapshot:
            raise error(key, f"table {name!r} is not in the snapshot")
        return name

    def existing(self, table: str, raw: Any, key: str) -> str:
        record_id = text(raw, key)
        if self.snapshot is None or record_id not in self.snapshot[table]:
            raise error(key, f"{table} has no record {record_id!r} in the snapshot")
        return record_id

    @staticmethod
    def _snapshot(raw: Any) -> dict[str, dict[str, dict[str, Any]]] | None:
        if raw is None:
            return None
        if not isinstance(raw, dict) or not raw:
            raise error("snapshot", "must map table names to {record id: record}")
        for table, records in raw.items():
            if not isinstance(records, dict):
                raise error(f"snapshot.{table}", "must map record ids to records")
            for record_id, record in records.items():
                if not isinstance(record, dict):
                    raise error(f"snapshot.{table}.{record_id}", "must be an object of fields")
        return raw

    def tools(self, raw: Any) -> dict[str, tuple[Effect, ...]]:
        if not isinstance(raw, dict) or not raw:
            raise error("tools", "must map tool names to {effects: [...]} ({} when read-only)")
        tools: dict[str, tuple[Effect, ...]] = {}
        for name, body in raw.items():
            body = only(body, f"tools.{name}", {"effects"})
            effects = body.get("effects", [])
            if not isinstance(effects, list):
                raise error(f"tools.{name}.effects", "must be a list")
            tools[name] = tuple(
                self.effect(e, f"tools.{name}.effects[{i}]") for i, e in enumerate(effects)
            )
        return tools

    def effect(self, raw: Any, key: str) -> Effect:
        raw = only(raw, key, {"op", "table", "id", "fields"})
        op = raw.get("op")
        if op not in OPS:
            raise error(f"{key}.op", f"must be one of {', '.join(OPS)}")
        table = self.table(raw.get("table"), f"{key}.table")
        id_source = text(raw.get("id"), f"{key}.id")
        if not _SOURCE.fullmatch(id_source):
            raise error(f"{key}.id", "must be a path: 'arguments.<path>' or 'result.<path>'")
        fields_raw = raw.get("fields", {})
        if not isinstance(fields_raw, dict) or (op == "delete" and fields_raw):
            raise error(f"{key}.fields", "must be an object (and empty for delete)")
        fields: list[tuple[str, Source]] = []
        for field, source in fields_raw.items():
            if isinstance(source, str) and _SOURCE.fullmatch(source):
                fields.append((field, ("path", source)))
            elif isinstance(source, dict) and set(source) == {"value"}:
                fields.append((field, ("value", source["value"])))
            else:
                raise error(
                    f"{key}.fields.{field}",
                    "must be a path ('arguments.<path>' or 'result.<path>') or {\"value\": …}; "
                    "the effects language has no expressions",
                )
        return Effect(op, table, id_source, tuple(fields))

    def state_check(self, raw: Any, key: str) -> StateCheck:
        raw = only(raw, key, {"table", "id", "fields", "match", "absent"})
        table = self.table(raw.get("table"), f"{key}.table")
        absent = raw.get("absent", False)
        if not isinstance(absent, bool):
            raise error(f"{key}.absent", "must be true or false")
        if "match" in raw:
            match = raw["match"]
            if "id" in raw or "fields" in raw or absent or not isinstance(match, dict) or not match:
                raise error(key, "takes either 'id' with 'fields' or 'absent', or a 'match' object")
            return StateCheck(table, None, tuple(match.items()))
        record_id = text(raw.get("id"), f"{key}.id")
        fields = raw.get("fields", {})
        if not isinstance(fields, dict) or (absent == bool(fields)):
            raise error(key, "an 'id' needs a non-empty 'fields' object, or 'absent': true")
        return StateCheck(table, record_id, tuple(fields.items()), absent)

    def record_ref(self, raw: Any, key: str) -> RecordRef:
        raw = only(raw, key, {"table", "id"})
        table = self.table(raw.get("table"), f"{key}.table")
        if "id" not in raw:
            return RecordRef(table, None)
        return RecordRef(table, self.existing(table, raw["id"], f"{key}.id"))

    def link(self, raw: Any, key: str) -> Link | StateLink:
        call_link = parse_call_link(raw)
        if call_link is not None:
            return call_link
        source = raw.get("from") if isinstance(raw, dict) else None
        target = raw.get("to") if isinstance(raw, dict) else None
        src = _STATE_REF.fullmatch(source) if isinstance(source, str) else None
        dst = _STATE_REF.fullmatch(target) if isinstance(target, str) else None
        if src is None or dst is None or set(raw) != {"from", "to"}:
            raise error(
                key,
                "must be {from: '<table>.<field>', to: '<table>.<record id>'} or a call link "
                "{from: '<tool>.arguments.<path>', to: '<tool>.arguments.<path>' | 'item.<f>'}",
            )
        table = self.table(src.group(1), f"{key}.from")
        target_table = self.table(dst.group(1), f"{key}.to")
        return StateLink(table, src.group(2), target_table, dst.group(2))

    def side_effect(self, raw: Any, key: str) -> SideEffect:
        raw = only(raw, key, {"table", "id", "match", "effect"})
        table = self.table(raw.get("table"), f"{key}.table")
        effect = raw.get("effect")
        if effect not in SIDE_EFFECTS:
            raise error(f"{key}.effect", f"must be one of {', '.join(SIDE_EFFECTS)}")
        if effect == "created":
            match = raw.get("match")
            if "id" in raw or not isinstance(match, dict) or not match:
                raise error(key, "'created' takes a 'match' object (the new record's values)")
            return SideEffect(table, None, tuple(match.items()), effect)
        if "match" in raw:
            raise error(f"{key}.match", f"only 'created' takes 'match'; {effect!r} takes 'id'")
        return SideEffect(table, self.existing(table, raw.get("id"), f"{key}.id"), (), effect)

    def bundle(self, raw: Any, key: str) -> Bundle:
        raw = only(raw, key, {"target_state", "required_links", "side_effects"})
        if not raw:
            raise error(key, "must give target_state, required_links or side_effects")
        return Bundle(
            self.many(raw.get("target_state"), f"{key}.target_state", self.state_check) or (),
            self.many(raw.get("required_links"), f"{key}.required_links", self.link) or (),
            self.many(raw.get("side_effects"), f"{key}.side_effects", self.side_effect) or (),
        )

    def many(self, raw: Any, key: str, parse: Any) -> tuple[Any, ...] | None:
        if raw is None:
            return None
        return tuple(parse(entry, f"{key}[{i}]") for i, entry in enumerate(entries(raw, key)))
