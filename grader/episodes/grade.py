"""Grade one episode into one row: replay, columns, and the counts a reader joins on.

The live proxy (proxy/pipeline/episodes.py) and ``gradeproxy replay`` both call :func:`episode_row`,
so an episode gives the same row both ways; the proxy only adds its live-traffic fields.

Role: the episode's own role (``X-Grade-Role`` live, ``role`` on an offline line) wins over the
record's ``role``, which wins over ``item.role``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Literal

from grader.checks import CheckContext, Judge, Sample
from grader.episodes.columns import columns
from grader.episodes.log import EpisodeLog
from grader.episodes.record import COLUMNS, EpisodeRecord
from grader.episodes.replay import replay
from grader.rowids import offline_row_id
from grader.toolcall.canon import canonical_json
from grader.version import GRADER_RULES_VERSION

Result = Literal["pass", "fail", "error"]


def episode_digest(task_id: str, log: EpisodeLog) -> str:
    """A stable id for an episode that came without one: its task and its whole log."""
    events = [[e.name, e.arguments, e.result] for e in log.events]
    try:
        text = canonical_json([task_id, events, log.final_text])
    except (TypeError, ValueError):
        text = repr((task_id, events, log.final_text))
    return "ep_" + hashlib.sha256(text.encode()).hexdigest()[:24]


def _settle(row: dict[str, Any]) -> None:
    """The row's ``result``/``passed`` and one field per column, from its ``columns``."""
    states = [c["passed"] for c in row["columns"]]
    result: Result = "error" if None in states else "pass" if all(states) else "fail"
    row["result"] = result
    row["passed"] = None if result == "error" else result == "pass"
    for column in row["columns"]:
        name = column["name"]
        row[name] = column["score"] if name == "evidence_overlap" else column["passed"]


def needs_judge(record: EpisodeRecord, log: EpisodeLog) -> bool:
    """Whether the row's ``cause_correct`` waits for the judge (judge form, a final answer)."""
    cause = record.root_cause
    return cause is not None and cause.judge is not None and log.final_text is not None


async def judge_cause(
    row: dict[str, Any],
    record: EpisodeRecord,
    log: EpisodeLog,
    judge: Judge | None,
    item: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Settle a judge-form ``cause_correct`` with the judge (the label_model check's own
    retries, timeouts and parse rules); without a judge it stays an error column."""
    if not needs_judge(record, log) or judge is None:
        return row
    assert record.root_cause is not None  # needs_judge checked it
    result = await record.root_cause.judge.arun(
        Sample.from_answer(log.final_text or ""), dict(item or {}), CheckContext(), judge
    )
    for column in row["columns"]:
        if column["name"] == "cause_correct":
            column.update(
                passed=result.passed,
                score=result.score,
                reason=result.reason,
                reason_code=result.reason_code,
            )
    _settle(row)
    return row


def resolve_role(role: str | None, record: EpisodeRecord, item: Mapping[str, Any]) -> str | None:
    if role:
        return role
    if record.role:
        return record.role
    item_role = item.get("role")
    return item_role if isinstance(item_role, str) else None


def episode_row(
    task_id: str,
    record: EpisodeRecord,
    log: EpisodeLog,
    *,
    tasks_digest: str,
    item: Mapping[str, Any] | None = None,
    role: str | None = None,
    episode_id: str | None = None,
) -> dict[str, Any]:
    """The episode's result row: one field per configured column, plus ``columns`` details."""
    item = item or {}
    who = resolve_role(role, record, item)
    run = replay(record, log.events)
    cols, outcome = columns(record, log, run, who, item)
    row: dict[str, Any] = {
        "kind": "episode",
        "row_id": offline_row_id(),  # live, the turn's fields replace it with a derived one
        "episode_id": episode_id or episode_digest(task_id, log),
        "task_id": task_id,
        "role": who,
        "turns": log.turns,
        "calls": log.calls,
        "result": None,  # settled below, once the columns are in
        "passed": None,
        **{column.name: None for column in cols},
        "columns": [c.to_dict() for c in cols],
    }
    _settle(row)
    row["outcome"] = outcome
    row["replay_problems"] = list(run.problems)
    row["tasks_digest"] = tasks_digest
    row["grader_rules_version"] = GRADER_RULES_VERSION
    return row


def episode_error_row(
    task_id: str | None,
    record: EpisodeRecord | None,
    reason_code: str,
    reason: str,
    *,
    tasks_digest: str,
    episode_id: str | None = None,
    role: str | None = None,
) -> dict[str, Any]:
    """The row of an episode line that could not be graded (``gradeproxy replay``).

    ``result`` is ``error`` with the input reason code (grader/intake.py) and its ``file:line``
    message; every verdict column the record configures (all of them when the task is
    unknown) is ``false``, so no reader of one column takes the row for a pass, while
    ``columns`` stays empty: the row is in no column's pass rate. ``evidence_overlap`` (a
    score, averaged by reports) is left out.
    """
    if record is None:
        names = [name for name in COLUMNS if name != "evidence_overlap"]
    else:
        empty = EpisodeLog((), None, 0)
        cols, _ = columns(record, empty, replay(record, ()), None, {})
        names = [c.name for c in cols if c.name != "evidence_overlap"]
    return {
        "kind": "episode",
        "episode_id": episode_id,
        "task_id": task_id,
        "role": role,
        "turns": 0,
        "calls": 0,
        "result": "error",
        "passed": None,
        **dict.fromkeys(names, False),
        "columns": [],
        "reason_code": reason_code,
        "reason": reason,
        "outcome": None,
        "replay_problems": [],
        "tasks_digest": tasks_digest,
        "grader_rules_version": GRADER_RULES_VERSION,
    }
