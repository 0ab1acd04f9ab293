"""Seed 001's grader record: the reset snapshot, what each tool does to it, and what must hold.

A task carries it under ``episode`` (docs/episodes.md has the format and a worked task)::

    {"schema_version": 1,
     "snapshot": {"payments": {"pay_1": {"amount": 40, "status": "captured"}}, "refunds": {}},
     "tools": {"get_payment": {},
               "refund": {"effects": [{"op": "create", "table": "refunds", "id": "result.id",
                                       "fields": {"payment_id": "arguments.payment_id"}}]}},
     "target_state": [{"table": "refunds", "match": {"payment_id": "pay_1"}}],
     "forbidden_changes": [{"table": "payments", "id": "pay_1"}], ...}

Parsing is all-or-nothing and every error names its path inside the record
(``episode.tools.refund.effects[0].op: …``); ``grader.tasks`` prefixes ``file:line: task 'id'``.
The effects language stays small on purpose: four operations, ids and field values taken from
``arguments.<path>`` or ``result.<path>``, literals as ``{"value": …}``, and no expressions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from grader.episodes.rules import Link, parse_actions, parse_call_link
from grader.episodes.values import (
    COLUMNS,
    ID_TOKEN,
    OPS,
    SIDE_EFFECTS,
    Bundle,
    Effect,
    EpisodeRecord,
    Op,
    RecordRef,
    RootCause,
    SideEffect,
    SideEffectKind,
    Source,
    StateCheck,
    StateLink,
)
from grader.errors import GraderError

__all__ = [
    "COLUMNS",
    "ID_TOKEN",
    "OPS",
    "SIDE_EFFECTS",
    "Bundle",
    "Effect",
    "EpisodeRecord",
    "Op",
    "RecordError",
    "RecordRef",
    "RootCause",
    "SideEffect",
    "SideEffectKind",
    "Source",
    "StateCheck",
    "StateLink",
    "parse_record",
]

_SOURCE = re.compile(r"(arguments|result)(?:\.[^.\s]+)*")
_STATE_REF = re.compile(r"([A-Za-z0-9_\-]{1,64})\.([^.\s][^\s]*)")
_RECORD_KEYS = frozenset(
    {
        "schema_version",
        "snapshot",
        "tools",
        "role",
        "target_state",
        "forbidden_changes",
        "required_links",
        "allowed_actions",
        "side_effects",
        "expected_outcome",
        "accepted_alternatives",
        "root_cause",
        "evidence_ids",
        "evidence_pass_at",
    }
)


class RecordError(GraderError, ValueError):
    """An unusable grader record; the message starts with the path inside it."""


def _error(key: str, message: str) -> RecordError:
    return RecordError(f"episode.{key}: {message}")


def _list(raw: Any, key: str) -> list[Any]:
    if not isinstance(raw, list) or not raw:
        raise _error(key, "must be a non-empty list")
    return raw


def _str(raw: Any, key: str) -> str:
    if not isinstance(raw, str) or not raw:
        raise _error(key, "must be a non-empty string")
    return raw


def _only(raw: Any, key: str, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise _error(key, f"must be an object of {', '.join(sorted(allowed))}")
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise _error(f"{key}.{unknown[0]}", f"unknown field (takes: {', '.join(sorted(allowed))})")
    return raw


class _Parser:
    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.raw = raw
        self.snapshot = self._snapshot(raw.get("snapshot"))

    def table(self, raw: Any, key: str) -> str:
        name = _str(raw, key)
        if self.snapshot is None:
            raise _error(key, "names a table, so the record needs a 'snapshot'")
        if name not in self.snapshot:
            raise _error(key, f"table {name!r} is not in the snapshot")
        return name

    def existing(self, table: str, raw: Any, key: str) -> str:
        record_id = _str(raw, key)
        if self.snapshot is None or record_id not in self.snapshot[table]:
            raise _error(key, f"{table} has no record {record_id!r} in the snapshot")
        return record_id

    @staticmethod
    def _snapshot(raw: Any) -> dict[str, dict[str, dict[str, Any]]] | None:
        if raw is None:
            return None
        if not isinstance(raw, dict) or not raw:
            raise _error("snapshot", "must map table names to {record id: record}")
        for table, records in raw.items():
            if not isinstance(records, dict):
                raise _error(f"snapshot.{table}", "must map record ids to records")
            for record_id, record in records.items():
                if not isinstance(record, dict):
                    raise _error(f"snapshot.{table}.{record_id}", "must be an object of fields")
        return raw

    def tools(self, raw: Any) -> dict[str, tuple[Effect, ...]]:
        if not isinstance(raw, dict) or not raw:
            raise _error("tools", "must map tool names to {effects: [...]} ({} when read-only)")
        tools: dict[str, tuple[Effect, ...]] = {}
        for name, body in raw.items():
            body = _only(body, f"tools.{name}", {"effects"})
            effects = body.get("effects", [])
            if not isinstance(effects, list):
                raise _error(f"tools.{name}.effects", "must be a list")
            tools[name] = tuple(
                self.effect(e, f"tools.{name}.effects[{i}]") for i, e in enumerate(effects)
            )
        return tools

    def effect(self, raw: Any, key: str) -> Effect:
        raw = _only(raw, key, {"op", "table", "id", "fields"})
        op = raw.get("op")
        if op not in OPS:
            raise _error(f"{key}.op", f"must be one of {', '.join(OPS)}")
        table = self.table(raw.get("table"), f"{key}.table")
        id_source = _str(raw.get("id"), f"{key}.id")
        if not _SOURCE.fullmatch(id_source):
            raise _error(f"{key}.id", "must be a path: 'arguments.<path>' or 'result.<path>'")
        fields_raw = raw.get("fields", {})
        if not isinstance(fields_raw, dict) or (op == "delete" and fields_raw):
            raise _error(f"{key}.fields", "must be an object (and empty for delete)")
        fields: list[tuple[str, Source]] = []
        for field, source in fields_raw.items():
            if isinstance(source, str) and _SOURCE.fullmatch(source):
                fields.append((field, ("path", source)))
            elif isinstance(source, dict) and set(source) == {"value"}:
                fields.append((field, ("value", source["value"])))
            else:
                raise _error(
                    f"{key}.fields.{field}",
                    "must be a path ('arguments.<path>' or 'result.<path>') or {\"value\": …}; "
                    "the effects language has no expressions",
                )
        return Effect(op, table, id_source, tuple(fields))

    def state_check(self, raw: Any, key: str) -> StateCheck:
        raw = _only(raw, key, {"table", "id", "fields", "match", "absent"})
        table = self.table(raw.get("table"), f"{key}.table")
        absent = raw.get("absent", False)
        if not isinstance(absent, bool):
            raise _error(f"{key}.absent", "must be true or false")
        if "match" in raw:
            match = raw["match"]
            if "id" in raw or "fields" in raw or absent or not isinstance(match, dict) or not match:
                raise _error(
                    key, "takes either 'id' with 'fields' or 'absent', or a 'match' object"
                )
            return StateCheck(table, None, tuple(match.items()))
        record_id = _str(raw.get("id"), f"{key}.id")
        fields = raw.get("fields", {})
        if not isinstance(fields, dict) or (absent == bool(fields)):
            raise _error(key, "an 'id' needs a non-empty 'fields' object, or 'absent': true")
        return StateCheck(table, record_id, tuple(fields.items()), absent)

    def record_ref(self, raw: Any, key: str) -> RecordRef:
        raw = _only(raw, key, {"table", "id"})
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
            raise _error(
                key,
                "must be {from: '<table>.<field>', to: '<table>.<record id>'} or a call link "
                "{from: '<tool>.arguments.<path>', to: '<tool>.arguments.<path>' | 'item.<f>'}",
            )
        table = self.table(src.group(1), f"{key}.from")
        target_table = self.table(dst.group(1), f"{key}.to")
        return StateLink(table, src.group(2), target_table, dst.group(2))

    def side_effect(self, raw: Any, key: str) -> SideEffect:
        raw = _only(raw, key, {"table", "id", "match", "effect"})
        table = self.table(raw.get("table"), f"{key}.table")
        effect = raw.get("effect")
        if effect not in SIDE_EFFECTS:
            raise _error(f"{key}.effect", f"must be one of {', '.join(SIDE_EFFECTS)}")
        if effect == "created":
            match = raw.get("match")
            if "id" in raw or not isinstance(match, dict) or not match:
                raise _error(key, "'created' takes a 'match' object (the new record's values)")
            return SideEffect(table, None, tuple(match.items()), effect)
        if "match" in raw:
            raise _error(f"{key}.match", f"only 'created' takes 'match'; {effect!r} takes 'id'")
        return SideEffect(table, self.existing(table, raw.get("id"), f"{key}.id"), (), effect)

    def bundle(self, raw: Any, key: str) -> Bundle:
        raw = _only(raw, key, {"target_state", "required_links", "side_effects"})
        if not raw:
            raise _error(key, "must give target_state, required_links or side_effects")
        return Bundle(
            self.many(raw.get("target_state"), f"{key}.target_state", self.state_check) or (),
            self.many(raw.get("required_links"), f"{key}.required_links", self.link) or (),
            self.many(raw.get("side_effects"), f"{key}.side_effects", self.side_effect) or (),
        )

    def many(self, raw: Any, key: str, parse: Any) -> tuple[Any, ...] | None:
        if raw is None:
            return None
        return tuple(parse(entry, f"{key}[{i}]") for i, entry in enumerate(_list(raw, key)))


def _judge_cause(raw: Any) -> RootCause:
    # Imported here: grader.checks imports grader.tasks, which imports this module.
    from grader.checks import CheckDefinitionError, build_check

    if not isinstance(raw, dict) or raw.get("type") not in ("label_model", "score_model"):
        raise _error("root_cause.judge", "must be a label_model or score_model check")
    try:
        check = build_check(raw, "episode.root_cause.judge")
    except CheckDefinitionError as exc:
        raise RecordError(str(exc)) from None
    return RootCause((), (), check)


def _root_cause(raw: Any) -> RootCause:
    if isinstance(raw, dict) and "judge" in raw:
        if set(raw) != {"judge"}:
            raise _error("root_cause", "takes either 'judge' or 'any'/'all' phrases, not both")
        return _judge_cause(raw["judge"])
    raw = _only(raw, "root_cause", {"any", "all", "judge"})
    lists = {}
    for key in ("any", "all"):
        phrases = raw.get(key, [])
        if not isinstance(phrases, list) or not all(
            isinstance(p, str) and p.strip() for p in phrases
        ):
            raise _error(f"root_cause.{key}", "must be a list of non-empty phrases")
        lists[key] = tuple(" ".join(p.split()).casefold() for p in phrases)
    if not lists["any"] and not lists["all"]:
        raise _error("root_cause", "needs 'any' or 'all' phrases")
    return RootCause(lists["any"], lists["all"])


def _evidence(raw: Any) -> tuple[str, ...]:
    ids = _list(raw, "evidence_ids")
    for index, value in enumerate(ids):
        if not isinstance(value, str) or not ID_TOKEN.fullmatch(value):
            raise _error(
                f"evidence_ids[{index}]",
                "must be one whole id token (letters, digits, '_' and '-'), as answers cite it",
            )
    return tuple(dict.fromkeys(ids))


def parse_record(raw: Any) -> EpisodeRecord:
    """Validate a grader record; raise :class:`RecordError` naming the first problem."""
    if not isinstance(raw, dict):
        raise RecordError("episode: must be an object (the grader record)")
    unknown = sorted(set(raw) - _RECORD_KEYS)
    if unknown:
        raise _error(
            unknown[0], f"unknown field (a record takes: {', '.join(sorted(_RECORD_KEYS))})"
        )
    if raw.get("schema_version") != 1:
        raise _error("schema_version", "must be 1")
    parser = _Parser(raw)
    if parser.snapshot is not None and "tools" not in raw:
        raise _error("tools", "is required with a snapshot: it says what each call changes")
    tools = parser.tools(raw["tools"]) if "tools" in raw else None
    if tools is not None and parser.snapshot is None:
        raise _error("snapshot", "is required with tools: effects change a snapshot")
    actions = parse_actions(_error, raw["allowed_actions"]) if "allowed_actions" in raw else None
    if actions is not None and tools is not None:
        unknown = sorted(set(actions) - set(tools))
        if unknown:
            raise _error(
                f"allowed_actions.{unknown[0]}", "is not in 'tools' (give {} if read-only)"
            )
    role = raw.get("role")
    if role is not None and (not isinstance(role, str) or not role):
        raise _error("role", "must be a non-empty string")
    alternatives = parser.many(
        raw.get("accepted_alternatives"), "accepted_alternatives", parser.bundle
    )
    if alternatives and "expected_outcome" not in raw:
        raise _error("accepted_alternatives", "needs an 'expected_outcome' beside it")
    pass_at = raw.get("evidence_pass_at", 0.5)
    if isinstance(pass_at, bool) or not isinstance(pass_at, int | float) or not 0 < pass_at <= 1:
        raise _error("evidence_pass_at", "must be a number in (0, 1]")
    record = EpisodeRecord(
        snapshot=_frozen(parser.snapshot),
        tools=MappingProxyType(tools) if tools is not None else None,
        role=role,
        target_state=parser.many(raw.get("target_state"), "target_state", parser.state_check),
        forbidden_changes=parser.many(
            raw.get("forbidden_changes"), "forbidden_changes", parser.record_ref
        ),
        required_links=parser.many(raw.get("required_links"), "required_links", parser.link),
        allowed_actions=actions,
        side_effects=parser.many(raw.get("side_effects"), "side_effects", parser.side_effect),
        expected_outcome=(
            parser.bundle(raw["expected_outcome"], "expected_outcome")
            if "expected_outcome" in raw
            else None
        ),
        accepted_alternatives=alternatives or (),
        root_cause=_root_cause(raw["root_cause"]) if "root_cause" in raw else None,
        evidence_ids=_evidence(raw["evidence_ids"]) if "evidence_ids" in raw else None,
        evidence_pass_at=float(pass_at),
    )
    if not record.columns:
        raise RecordError("episode: configures no column (give target_state, root_cause, …)")
    _refuse_vacuous(record)
    return record


# The columns a run that does nothing must fail: the state the task asks for is not the reset one.
_MUST_FAIL_AT_RESET = {
    "end_state_ok": "target_state",
    "side_effects_ok": "side_effects",
    "outcome_ok": "expected_outcome",
}


def _refuse_vacuous(record: EpisodeRecord) -> None:
    """Refuse a record whose state columns already pass on the reset snapshot: they could not
    tell an agent that fixed the mismatch from one that did nothing (a column that cannot fail
    is worse than none)."""
    # Imported here: the columns read this module's values.
    from grader.episodes.columns import columns
    from grader.episodes.log import EpisodeLog
    from grader.episodes.replay import replay

    idle = EpisodeLog((), None, 0)
    for column in columns(record, idle, replay(record, ()), None, {})[0]:
        field = _MUST_FAIL_AT_RESET.get(column.name)
        if field is not None and column.passed:
            raise _error(
                field,
                f"already holds in the snapshot: {column.name} could not fail (a run "
                "that does nothing would pass it)",
            )


def _frozen(
    snapshot: dict[str, dict[str, dict[str, Any]]] | None,
) -> Mapping[str, Mapping[str, Mapping[str, Any]]] | None:
    if snapshot is None:
        return None
    return MappingProxyType(
        {
            t: MappingProxyType({i: MappingProxyType(r) for i, r in rs.items()})
            for t, rs in snapshot.items()
        }
    )
