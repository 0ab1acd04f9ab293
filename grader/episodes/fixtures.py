"""Episode fixtures: recorded runs a task ships to prove each of its columns reads the run.

``metadata.episode_fixtures`` lists runs as plain events with the verdict each column must give::

    {"id": "deletes_the_duplicate", "events": [{"name": "delete_payment", "arguments": {…}}],
     "final": "…", "role": "billing_lead", "passes": {"authority_ok": false, …}}

``validate-tasks`` replays every fixture and reports a column whose verdict differs
(``fixture_mismatch``), and a configured column that no fixture both passes and fails
(``info``: not proven connected). The same fixtures are the episode test table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from grader.episodes.grade import episode_row
from grader.episodes.log import from_events
from grader.episodes.record import EpisodeRecord

Level = Literal["ok", "info", "fixture_mismatch", "invalid"]


@dataclass(frozen=True, slots=True)
class EpisodeFixture:
    id: str
    events: list[Any]
    final: str | None
    role: str | None
    passes: Mapping[str, bool]


def episode_fixtures(metadata: Mapping[str, Any]) -> list[EpisodeFixture]:
    """The task's fixtures; ``ValueError`` naming the first malformed one."""
    raw = metadata.get("episode_fixtures", [])
    if not isinstance(raw, list):
        raise ValueError("metadata.episode_fixtures must be a list")
    out = []
    for index, entry in enumerate(raw):
        where = f"metadata.episode_fixtures[{index}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            raise ValueError(f"{where} must be an object with a string 'id'")
        events, final, role = entry.get("events"), entry.get("final"), entry.get("role")
        passes = entry.get("passes")
        if not isinstance(events, list) or not isinstance(passes, dict):
            raise ValueError(f"{where} needs an 'events' list and a 'passes' object")
        if not all(isinstance(v, bool) for v in passes.values()):
            raise ValueError(f"{where}.passes must map columns to true/false")
        if (final is not None and not isinstance(final, str)) or (
            role is not None and not isinstance(role, str)
        ):
            raise ValueError(f"{where}: 'final' and 'role' must be strings")
        out.append(EpisodeFixture(entry["id"], events, final, role, passes))
    return out


def fixture_row(
    task_id: str, record: EpisodeRecord, fixture: EpisodeFixture, item: Mapping[str, Any]
) -> dict[str, Any]:
    log = from_events(fixture.events, fixture.final)
    return episode_row(
        task_id, record, log, tasks_digest="-", item=item, role=fixture.role, episode_id=fixture.id
    )


def passed_of(row: Mapping[str, Any]) -> dict[str, bool | None]:
    return {column["name"]: column["passed"] for column in row["columns"]}


def findings(
    task_id: str, record: EpisodeRecord, metadata: Mapping[str, Any], item: Mapping[str, Any]
) -> list[tuple[str, Level, str]]:
    """``(column, level, message)`` for each configured column, levels as validate-tasks'."""
    try:
        fixtures = episode_fixtures(metadata)
    except ValueError as exc:
        return [("-", "invalid", str(exc))]
    seen: dict[str, set[bool | None]] = {column: set() for column in record.columns}
    out: list[tuple[str, Level, str]] = []
    for fixture in fixtures:
        got = passed_of(fixture_row(task_id, record, fixture, item))
        for column, want in fixture.passes.items():
            if column not in got:
                out.append((column, "invalid", f"fixture {fixture.id}: no such column"))
            elif got[column] != want:
                message = f"fixture {fixture.id}: expected {want}, got {got[column]}"
                out.append((column, "fixture_mismatch", message))
        for column, verdict in got.items():
            seen[column].add(verdict)
    for column, verdicts in seen.items():
        if {True, False} <= verdicts:
            out.append((column, "ok", "episode fixtures pass and fail it"))
        else:
            out.append((column, "info", "no episode fixture both passes and fails this column"))
    return out
