"""Re-grade stored answers with another grader version and classify every changed column.

Seed 003's migration workflow: "Run both grader versions against the same stored model
outputs … Classify every changed row … Do not average these categories into a single
improvement number." Rows keep their answer (offline rows always; live rows while
``results.capture_answer`` is on), so a new task set grades them again without a model call.

Per row, per check column (by name), a :class:`Change` is one of:

``newly_accepted`` / ``newly_rejected``  the column's ``passed`` went false→true / true→false
``now_error`` / ``no_longer_error``      it reached a verdict before and not now / the reverse
``stale_changed``                        same ``passed``; whether it matched the stale call moved
``reason_changed``                       same ``passed`` and staleness, another ``reason_code``
``check_added`` / ``check_removed``      the column exists in only one version
``task_missing``                         the row's task is not in the new set (one line, no check)

A row is *not re-gradable*, and counted with its reason, when it has no stored answer
(``no_answer``), its answer was cut (``truncated``), a new check reads the request's tools and
the row kept none (``no_request_tools``), or it is not an answer row (``not_an_answer_row``).
Counts are kept per task, per check, per mutation kind and per change: never folded into one
number. Pure: no I/O (``gradeproxy/cli/regrade.py`` reads and writes the files).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from grader.engine import Outcome, offline_context, reads_request_tools
from grader.rows import OFFLINE_FIELDS
from grader.tasks import Task

Change = Literal[
    "newly_accepted",
    "newly_rejected",
    "now_error",
    "no_longer_error",
    "stale_changed",
    "reason_changed",
    "check_added",
    "check_removed",
    "task_missing",
]
CHANGES: tuple[Change, ...] = get_args(Change)
NotRegradable = Literal["no_answer", "truncated", "no_request_tools", "not_an_answer_row"]
NO_KIND = "(none)"
# Fields of a row that are the grader's output or bulky inputs, not the row's ids and metadata.
_NOT_IDS = frozenset(OFFLINE_FIELDS) | {"answer", "truncated", "tools", "request", "timings"}


def row_ids(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row's ids and metadata: everything but the verdict, the answer and the tools."""
    return {key: value for key, value in row.items() if key not in _NOT_IDS}


def not_regradable(row: Mapping[str, Any], task: Task) -> NotRegradable | None:
    """Why ``row`` cannot be graded again against ``task``, or None when it can."""
    if row.get("kind", "answer") != "answer":
        return "not_an_answer_row"
    if not isinstance(row.get("answer"), str):
        return "no_answer"
    if row.get("truncated") is True:
        return "truncated"
    if reads_request_tools(task) and offline_context(task, row).missing_tools is not None:
        return "no_request_tools"
    return None


def _stale(column: Mapping[str, Any]) -> bool:
    details = column.get("details")
    marked = isinstance(details, Mapping) and details.get("staleSchemaUsed") is True
    return marked or column.get("reason_code") == "stale_schema"


def classify(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> Change | None:
    """The change of one column between two versions, or None when nothing moved."""
    if before is None:
        return "check_added" if after is not None else None
    if after is None:
        return "check_removed"
    was, now = before.get("passed"), after.get("passed")
    if was is None and now is not None:
        return "no_longer_error"
    if was is not None and now is None:
        return "now_error"
    if was != now:
        return "newly_accepted" if now else "newly_rejected"
    if _stale(before) != _stale(after):
        return "stale_changed"
    if before.get("reason_code") != after.get("reason_code"):
        return "reason_changed"
    return None


def _side(column: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if column is None:
        return None
    return {k: column.get(k) for k in ("passed", "score", "reason_code", "reason")}


def _path(column: Mapping[str, Any] | None) -> Any:
    details = column.get("details") if column is not None else None
    return details.get("path") if isinstance(details, Mapping) else None


def diff_lines(
    row: Mapping[str, Any], task: Task, outcome: Outcome, tasks_digest: str
) -> list[dict[str, Any]]:
    """One line per changed column of a re-graded row (empty when nothing moved)."""
    old = {c["name"]: c for c in row.get("checks") or () if isinstance(c, Mapping)}
    new = {c.name: c.to_dict() for c in outcome.checks}
    lines: list[dict[str, Any]] = []
    for name in [*old, *(n for n in new if n not in old)]:
        before, after = old.get(name), new.get(name)
        change = classify(before, after)
        if change is None:
            continue
        lines.append(
            {
                "task_id": task.id,
                **row_ids(row),
                "mutationKind": task.mutation_kind,
                "check": name,
                "change": change,
                "before": _side(before),
                "after": _side(after),
                "path": _path(after) if after is not None else _path(before),
                "reason": (after or before or {}).get("reason"),
                "result_before": row.get("result"),
                "result_after": outcome.result,
                "digest_before": None if before is None else before.get("digest"),
                "digest_after": None if after is None else after.get("digest"),
                "tasks_digest_before": row.get("tasks_digest"),
                "tasks_digest_after": tasks_digest,
            }
        )
    return lines


def missing_line(row: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "task_id": row.get("task_id"),
        **row_ids(row),
        "check": None,
        "change": "task_missing",
        "result_before": row.get("result"),
        "tasks_digest_before": row.get("tasks_digest"),
    }


@dataclass(slots=True)
class RegradeSummary:
    """What ``gradeproxy regrade`` prints: counts, never one improvement number."""

    rows: int = 0
    regraded: int = 0
    changed_rows: int = 0
    not_regradable: Counter[str] = field(default_factory=Counter)
    missing_tasks: Counter[str] = field(default_factory=Counter)
    by_change: Counter[str] = field(default_factory=Counter)
    by_task: dict[str, Counter[str]] = field(default_factory=dict)
    by_check: dict[str, Counter[str]] = field(default_factory=dict)
    by_mutation_kind: dict[str, Counter[str]] = field(default_factory=dict)

    def add(self, lines: list[dict[str, Any]]) -> None:
        self.changed_rows += bool(lines)
        for line in lines:
            change = line["change"]
            self.by_change[change] += 1
            self.by_task.setdefault(str(line["task_id"]), Counter())[change] += 1
            if line["check"] is not None:
                self.by_check.setdefault(line["check"], Counter())[change] += 1
            kind = line.get("mutationKind") or NO_KIND
            self.by_mutation_kind.setdefault(kind, Counter())[change] += 1

    def to_dict(self) -> dict[str, Any]:
        def table(groups: dict[str, Counter[str]]) -> dict[str, dict[str, int]]:
            return {name: dict(sorted(groups[name].items())) for name in sorted(groups)}

        return {
            "rows": self.rows,
            "regraded": self.regraded,
            "changed_rows": self.changed_rows,
            "not_regradable": dict(sorted(self.not_regradable.items())),
            "missing_tasks": dict(sorted(self.missing_tasks.items())),
            "by_change": {c: self.by_change[c] for c in CHANGES if self.by_change[c]},
            "by_task": table(self.by_task),
            "by_check": table(self.by_check),
            "by_mutation_kind": table(self.by_mutation_kind),
        }

    def render(self) -> str:
        lines = [
            f"{self.rows} rows: {self.regraded} re-graded, {self.changed_rows} with a changed "
            f"column; not re-gradable: {_counts(self.not_regradable)}; rows of tasks missing "
            f"from the new set: {_counts(self.missing_tasks)}",
            "Changes are counted by class, never netted into one improvement number.",
        ]
        for title, groups in (
            ("task", self.by_task),
            ("check", self.by_check),
            ("mutation kind", self.by_mutation_kind),
        ):
            lines.append("")
            lines.append(f"per {title}:")
            for name in sorted(groups):
                lines.append(f"  {name}: {_counts(groups[name])}")
            if not groups:
                lines.append("  -")
        return "\n".join(lines)


def _order(item: tuple[str, int]) -> tuple[int, str]:
    name = item[0]
    return (CHANGES.index(name) if name in CHANGES else len(CHANGES), name)


def _counts(counter: Counter[str]) -> str:
    ordered = sorted(counter.items(), key=_order)
    return ", ".join(f"{name} {count}" for name, count in ordered) or "none"
