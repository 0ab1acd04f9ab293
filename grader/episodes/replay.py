"""Replay an episode's calls, in order, against a copy of the reset snapshot.

Each call's effects (grader.episodes.record) are applied: ``create`` adds a record (its id must
be new), ``update`` merges fields into an existing one, ``cancel`` sets ``status`` to
``"cancelled"`` (plus any fields), ``delete`` removes it. What cannot be applied is a *problem*
with a reason, never an exception: a call no tool entry knows, arguments that are not an object,
an id or field path that does not resolve, a record that is missing (or, for create, present).
A problem's effects are not applied, so the end state is what the legal calls made of it.

The snapshot on the record is never touched: the replay works on its own deep copy.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from grader.episodes.log import Event
from grader.episodes.values import Effect, EpisodeRecord
from grader.toolcall.rules import MISSING, lookup

State = dict[str, dict[str, dict[str, Any]]]
CANCELLED = "cancelled"


@dataclass(slots=True)
class Replay:
    """The end state and what the run did to it."""

    state: State
    changed: set[tuple[str, str]] = field(default_factory=set)  # ever changed, in any step
    created: set[tuple[str, str]] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)


def initial_state(record: EpisodeRecord) -> State:
    return {
        table: {record_id: copy.deepcopy(dict(values)) for record_id, values in records.items()}
        for table, records in (record.snapshot or {}).items()
    }


def _resolve(path: str, event: Event) -> Any:
    head, _, rest = path.partition(".")
    root = event.arguments if head == "arguments" else event.result
    if not rest:
        return root if root is not None else MISSING
    return lookup(root, rest)


def _apply(effect: Effect, event: Event, replay: Replay) -> str | None:
    record_id = _resolve(effect.id_source, event)
    if isinstance(record_id, bool) or not isinstance(record_id, str | int):
        return f"{effect.id_source} does not resolve to a record id"
    record_id = str(record_id)
    fields: dict[str, Any] = {}
    for name, (kind, source) in effect.fields:
        value = source if kind == "value" else _resolve(source, event)
        if value is MISSING:
            return f"{source} does not resolve (field {name!r})"
        fields[name] = copy.deepcopy(value)
    table = replay.state[effect.table]
    before = table.get(record_id)
    key = (effect.table, record_id)
    if effect.op == "create":
        if before is not None:
            return f"{effect.table} {record_id!r} already exists"
        table[record_id] = fields
        replay.created.add(key)
        replay.changed.add(key)
        return None
    if before is None:
        return f"{effect.table} has no record {record_id!r} to {effect.op}"
    if effect.op == "delete":
        del table[record_id]
        replay.changed.add(key)
        return None
    after = {**before, **fields}
    if effect.op == "cancel":
        after["status"] = CANCELLED
    if after != before:
        table[record_id] = after
        replay.changed.add(key)
    return None


def replay(record: EpisodeRecord, events: tuple[Event, ...]) -> Replay:
    """Apply every call's effects in order; problems collected, never raised."""
    result = Replay(initial_state(record))
    if record.tools is None:
        return result
    for index, event in enumerate(events):
        where = f"call {index + 1} ({event.name})"
        effects = record.tools.get(event.name) if event.name is not None else None
        if effects is None:
            result.problems.append(f"{where}: no tool entry knows this call")
            continue
        if event.arguments is None:
            result.problems.append(f"{where}: arguments are not a JSON object")
            continue
        for effect in effects:
            problem = _apply(effect, event, result)
            if problem is not None:
                result.problems.append(f"{where}: {problem}")
                break
    return result
