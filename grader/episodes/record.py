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
(``episode.tools.refund.effects[0].op: …``); ``grader.loader`` prefixes ``file:line: task 'id'``.
The parts read against the snapshot (tables, effects, targets, links, side effects, bundles)
are ``record_parts.py``; this module reads the record as a whole.
The effects language stays small on purpose: four operations, ids and field values taken from
``arguments.<path>`` or ``result.<path>``, literals as ``{"value": …}``, and no expressions.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from grader.checks import CheckDefinitionError, build_check
from grader.episodes.columns import columns
from grader.episodes.log import EpisodeLog
from grader.episodes.record_parts import (
    Parser,
    RecordError,
    entries,
    error,
    only,
)
from grader.episodes.replay import replay
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
from grader.toolcall.rules import parse_actions

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


def _judge_cause(raw: Any) -> RootCause:
    if not isinstance(raw, dict) or raw.get("type") not in ("label_model", "score_model"):
        raise error("root_cause.judge", "must be a label_model or score_model check")
    try:
        check = build_check(raw, "episode.root_cause.judge")
    except CheckDefinitionError as exc:
        raise RecordError(str(exc)) from None
    return RootCause((), (), check)


def _root_cause(raw: Any) -> RootCause:
    if isinstance(raw, dict) and "judge" in raw:
        if set(raw) != {"judge"}:
            raise error("root_cause", "takes either 'judge' or 'any'/'all' phrases, not both")
        return _judge_cause(raw["judge"])
    raw = only(raw, "root_cause", {"any", "all", "judge"})
    lists = {}
    for key in ("any", "all"):
        phrases = raw.get(key, [])
        if not isinstance(phrases, list) or not all(
            isinstance(p, str) and p.strip() for p in phrases
        ):
            raise error(f"root_cause.{key}", "must be a list of non-empty phrases")
        lists[key] = tuple(" ".join(p.split()).casefold() for p in phrases)
    if not lists["any"] and not lists["all"]:
        raise error("root_cause", "needs 'any' or 'all' phrases")
    return RootCause(lists["any"], lists["all"])


def _evidence(raw: Any) -> tuple[str, ...]:
    ids = entries(raw, "evidence_ids")
    for index, value in enumerate(ids):
        if not isinstance(value, str) or not ID_TOKEN.fullmatch(value):
            raise error(
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
        raise error(
            unknown[0], f"unknown field (a record takes: {', '.join(sorted(_RECORD_KEYS))})"
        )
    if raw.get("schema_version") != 1:
        raise error("schema_version", "must be 1")
    parser = Parser(raw)
    if parser.snapshot is not None and "tools" not in raw:
        raise error("tools", "is required with a snapshot: it says what each call changes")
    tools = parser.tools(raw["tools"]) if "tools" in raw else None
    if tools is not None and parser.snapshot is None:
        raise error("snapshot", "is required with tools: effects change a snapshot")
    actions = parse_actions(error, raw["allowed_actions"]) if "allowed_actions" in raw else None
    if actions is not None and tools is not None:
        unknown = sorted(set(actions) - set(tools))
        if unknown:
            raise error(f"allowed_actions.{unknown[0]}", "is not in 'tools' (give {} if read-only)")
    role = raw.get("role")
    if role is not None and (not isinstance(role, str) or not role):
        raise error("role", "must be a non-empty string")
    alternatives = parser.many(
        raw.get("accepted_alternatives"), "accepted_alternatives", parser.bundle
    )
    if alternatives and "expected_outcome" not in raw:
        raise error("accepted_alternatives", "needs an 'expected_outcome' beside it")
    pass_at = raw.get("evidence_pass_at", 0.5)
    if isinstance(pass_at, bool) or not isinstance(pass_at, int | float) or not 0 < pass_at <= 1:
        raise error("evidence_pass_at", "must be a number in (0, 1]")
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
    idle = EpisodeLog((), None, 0)
    for column in columns(record, idle, replay(record, ()), None, {})[0]:
        field = _MUST_FAIL_AT_RESET.get(column.name)
        if field is not None and column.passed:
            raise error(
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
