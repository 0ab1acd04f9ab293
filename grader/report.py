"""Run reports: pass and stale rates overall and per mutation kind (grading.md).

The same report rides on every surface (CLI, Python API, HTTP, MCP), so it is built here once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from grader.tasks import Task
from grader.verdict import Verdict

NO_KIND = "(none)"


@dataclass(slots=True)
class Tally:
    """Counts for one slice of a run."""

    n: int = 0
    passed: int = 0
    stale: int = 0

    def add(self, verdict: Verdict) -> None:
        self.n += 1
        self.passed += verdict.score
        self.stale += verdict.stale_schema_used

    def to_dict(self) -> dict[str, Any]:
        """Rates are null for an empty slice: an undefined rate is not a zero rate."""
        return {
            "n": self.n,
            "passed": self.passed,
            "passRate": self.passed / self.n if self.n else None,
            "staleSchemaUsed": self.stale,
            "staleSchemaUsedRate": self.stale / self.n if self.n else None,
        }


@dataclass(slots=True)
class Report:
    """Aggregate of a graded run; feed it ``(task, verdict)`` pairs."""

    tasks_digest: str
    total: Tally = field(default_factory=Tally)
    per_kind: dict[str, Tally] = field(default_factory=dict)
    reasons: Counter[str] = field(default_factory=Counter)

    def add(self, task: Task, verdict: Verdict) -> None:
        self.total.add(verdict)
        kind = task.mutation_kind or NO_KIND
        self.per_kind.setdefault(kind, Tally()).add(verdict)
        self.reasons[verdict.reason_code] += 1

    @classmethod
    def of(cls, tasks_digest: str, graded: Iterable[tuple[Task, Verdict]]) -> Report:
        report = cls(tasks_digest)
        for task, verdict in graded:
            report.add(task, verdict)
        return report

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.total.to_dict(),
            "perMutationKind": {k: self.per_kind[k].to_dict() for k in sorted(self.per_kind)},
            "reasons": dict(sorted(self.reasons.items())),
            "tasks_digest": self.tasks_digest,
        }

    def render_table(self) -> str:
        """A terminal table: one row per mutation kind, then the total and the reasons."""
        rows = [(kind, self.per_kind[kind]) for kind in sorted(self.per_kind)]
        rows.append(("TOTAL", self.total))
        width = max(len("mutation kind"), *(len(kind) for kind, _ in rows))
        head = (
            f"{'mutation kind':<{width}}  {'n':>6}  {'pass':>6}  {'pass %':>7}"
            f"  {'stale':>6}  {'stale %':>7}"
        )
        lines = [head, "-" * len(head)]
        for kind, tally in rows:
            if kind == "TOTAL":
                lines.append("-" * len(head))
            lines.append(
                f"{kind:<{width}}  {tally.n:>6}  {tally.passed:>6}"
                f"  {_pct(tally.passed, tally.n):>7}  {tally.stale:>6}"
                f"  {_pct(tally.stale, tally.n):>7}"
            )
        reasons = ", ".join(f"{code} {count}" for code, count in sorted(self.reasons.items()))
        lines.append(f"reasons: {reasons or '-'}")
        lines.append(f"tasks digest: {self.tasks_digest}")
        return "\n".join(lines)


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}" if whole else "-"
