"""The grader record's values: what ``record.py`` parses a task's ``episode`` into.

Frozen, plain data: the replay and the columns read them, nothing mutates them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from grader.toolcall.rules import Action, Link

Op = Literal["create", "update", "delete", "cancel"]
SideEffectKind = Literal["cancelled", "created", "deleted", "unchanged"]
OPS: tuple[Op, ...] = get_args(Op)
SIDE_EFFECTS: tuple[SideEffectKind, ...] = get_args(SideEffectKind)
# An id a final answer can cite: one whole token of these characters (docs/episodes.md).
ID_TOKEN = re.compile(r"[A-Za-z0-9_\-]+")
COLUMNS = (
    "end_state_ok",
    "no_forbidden_change",
    "authority_ok",
    "links_ok",
    "side_effects_ok",
    "outcome_ok",
    "cause_correct",
    "evidence_overlap",
)


Source = tuple[Literal["path", "value"], Any]  # ("path", "arguments.x") or ("value", literal)


@dataclass(frozen=True, slots=True)
class Effect:
    op: Op
    table: str
    id_source: str  # a path: arguments.<p> or result.<p>
    fields: tuple[tuple[str, Source], ...]


@dataclass(frozen=True, slots=True)
class StateCheck:
    """``id`` + ``fields`` (the record holds these values), ``id`` + ``absent``, or ``match``
    (some record of the table holds these values)."""

    table: str
    id: str | None
    fields: tuple[tuple[str, Any], ...]
    absent: bool = False

    @property
    def text(self) -> str:
        where = self.id if self.id is not None else "a record matching " + repr(dict(self.fields))
        return f"{self.table} {where}" + (" absent" if self.absent else "")


@dataclass(frozen=True, slots=True)
class RecordRef:
    table: str
    id: str | None  # None: every record of the table, and no new one


@dataclass(frozen=True, slots=True)
class StateLink:
    """A record the run created or changed in ``table`` has ``field`` equal to ``target_id``,
    and that record of ``target_table`` exists at the end."""

    table: str
    field: str
    target_table: str
    target_id: str

    @property
    def text(self) -> str:
        return f"{self.table}.{self.field} = {self.target_table}.{self.target_id}"


@dataclass(frozen=True, slots=True)
class SideEffect:
    table: str
    id: str | None  # None with ``match``: a created record holding those values
    match: tuple[tuple[str, Any], ...]
    effect: SideEffectKind


@dataclass(frozen=True, slots=True)
class Bundle:
    """An end state: the target state, the links and the side effects that must all hold."""

    target_state: tuple[StateCheck, ...]
    links: tuple[Link | StateLink, ...]
    side_effects: tuple[SideEffect, ...]


@dataclass(frozen=True, slots=True)
class RootCause:
    """The rule form: phrases the final answer states (case-insensitive, spaces collapsed);
    or the judge form: a ``label_model``/``score_model`` check (a rubric of facts) that reads
    the final answer as ``{{sample.output_text}}`` (grader.checks.model_graded)."""

    any_of: tuple[str, ...]
    all_of: tuple[str, ...]
    judge: Any = None  # a built JudgeCheck; None in the rule form


@dataclass(frozen=True, slots=True)
class EpisodeRecord:
    snapshot: Mapping[str, Mapping[str, Mapping[str, Any]]] | None
    tools: Mapping[str, tuple[Effect, ...]] | None
    role: str | None
    target_state: tuple[StateCheck, ...] | None
    forbidden_changes: tuple[RecordRef, ...] | None
    required_links: tuple[Link | StateLink, ...] | None
    allowed_actions: Mapping[str, Action] | None
    side_effects: tuple[SideEffect, ...] | None
    expected_outcome: Bundle | None
    accepted_alternatives: tuple[Bundle, ...]
    root_cause: RootCause | None
    evidence_ids: tuple[str, ...] | None
    evidence_pass_at: float

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns this record configures, in row order; the rest are absent."""
        on = {
            "end_state_ok": self.target_state is not None,
            "no_forbidden_change": self.forbidden_changes is not None,
            "authority_ok": self.allowed_actions is not None,
            "links_ok": self.required_links is not None,
            "side_effects_ok": self.side_effects is not None,
            "outcome_ok": self.expected_outcome is not None,
            "cause_correct": self.root_cause is not None,
            "evidence_overlap": self.evidence_ids is not None,
        }
        return tuple(column for column in COLUMNS if on[column])

    def snapshot_ids(self) -> frozenset[str]:
        return frozenset(i for table in (self.snapshot or {}).values() for i in table)
