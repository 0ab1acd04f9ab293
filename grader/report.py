"""Run reports over outcomes: pass and stale rates overall, per mutation kind and per check.

Tasks whose metadata names a ``category`` (``gradeproxy import bfcl`` writes BFCL's) are also
counted per category (``perCategory``, only when some task has one).

The same report rides on every surface (CLI, Python API, HTTP, MCP), so it is built here once
from :class:`~grader.engine.Outcome` s. ``error`` rows (no verdict reached: an unresolved item
field, a judge that did not answer) are counted apart, in ``errors``, and left out of every
denominator; so is an ``error`` column out of its check's pass rate (seed 003: "do not put that
row in the model-accuracy denominator as a zero").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from grader.engine import Outcome, Result
from grader.rounding import percent
from grader.tasks import Task

NO_KIND = "(none)"


def _rate(part: int, whole: int) -> float | None:
    """Null for an empty slice: an undefined rate is not a zero rate."""
    return part / whole if whole else None


@dataclass(slots=True)
class Tally:
    """Counts for one slice of a run; ``n`` counts graded rows (errors apart)."""

    n: int = 0
    passed: int = 0
    stale: int = 0
    errors: int = 0

    def add(self, result: Result) -> None:
        if result == "error":
            self.errors += 1
            return
        self.n += 1
        self.passed += result == "pass"
        self.stale += result == "stale"

    def merge(self, other: Tally) -> None:
        self.n += other.n
        self.passed += other.passed
        self.stale += other.stale
        self.errors += other.errors

    def to_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "passed": self.passed,
            "passRate": _rate(self.passed, self.n),
            "staleSchemaUsed": self.stale,
            "staleSchemaUsedRate": _rate(self.stale, self.n),
            "errors": self.errors,
        }


@dataclass(slots=True)
class CheckTally:
    """One column's counts across the run (errors apart)."""

    n: int = 0
    passed: int = 0
    errors: int = 0

    def add(self, passed: bool | None) -> None:
        if passed is None:
            self.errors += 1
            return
        self.n += 1
        self.passed += passed

    def merge(self, other: CheckTally) -> None:
        self.n += other.n
        self.passed += other.passed
        self.errors += other.errors

    def to_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "passed": self.passed,
            "passRate": _rate(self.passed, self.n),
            "errors": self.errors,
        }


@dataclass(slots=True)
class Report:
    """Aggregate of a graded run; feed it ``(task, outcome)`` pairs.

    ``perCheck`` is keyed by column name across tasks (a task without checks contributes its
    ``tool_call`` column). ``reasons`` counts the tool-call verdicts' reason codes.
    """

    tasks_digest: str
    total: Tally = field(default_factory=Tally)
    per_kind: dict[str, Tally] = field(default_factory=dict)
    per_check: dict[str, CheckTally] = field(default_factory=dict)
    reasons: Counter[str] = field(default_factory=Counter)
    per_category: dict[str, Tally] = field(default_factory=dict)
    # Advisory columns (grader/advisory.py): counted for review, never given a pass rate.
    advisory: dict[str, CheckTally] = field(default_factory=dict)

    def add(self, task: Task, outcome: Outcome) -> None:
        # A tally is made for a slice's first row only (setdefault would build one per row).
        result = outcome.result
        self.total.add(result)
        kind = task.mutation_kind or NO_KIND
        tally = self.per_kind.get(kind)
        if tally is None:
            tally = self.per_kind[kind] = Tally()
        tally.add(result)
        category = task.metadata.get("category")
        if isinstance(category, str):
            tally = self.per_category.get(category)
            if tally is None:
                tally = self.per_category[category] = Tally()
            tally.add(result)
        for column in outcome.checks:
            tallies = self.advisory if column.advisory else self.per_check
            check = tallies.get(column.name)
            if check is None:
                check = tallies[column.name] = CheckTally()
            check.add(column.passed)
        if outcome.verdict is not None:
            self.reasons[outcome.verdict.reason_code] += 1

    def merge(self, other: Report) -> None:
        """Add the counts of ``other``, a report of other rows of the same run (a slice graded
        in another process: ``gradeproxy grade --jobs``); every view of a report is sorted, so
        the sum reads as one report of all the rows."""
        self.total.merge(other.total)
        for mine, theirs in (
            (self.per_kind, other.per_kind),
            (self.per_category, other.per_category),
        ):
            for key, tally in theirs.items():
                mine.setdefault(key, Tally()).merge(tally)
        for checks, their_checks in (
            (self.per_check, other.per_check),
            (self.advisory, other.advisory),
        ):
            for key, check in their_checks.items():
                checks.setdefault(key, CheckTally()).merge(check)
        self.reasons.update(other.reasons)

    @classmethod
    def of(cls, tasks_digest: str, graded: Iterable[tuple[Task, Outcome]]) -> Report:
        report = cls(tasks_digest)
        for task, outcome in graded:
            report.add(task, outcome)
        return report

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.total.to_dict(),
            "perMutationKind": {k: self.per_kind[k].to_dict() for k in sorted(self.per_kind)},
            "perCheck": {k: self.per_check[k].to_dict() for k in sorted(self.per_check)},
            "reasons": dict(sorted(self.reasons.items())),
            **({"perCategory": self._categories()} if self.per_category else {}),
            "tasks_digest": self.tasks_digest,
            **({"advisory": self._advisory()} if self.advisory else {}),
        }

    def _categories(self) -> dict[str, Any]:
        return {k: self.per_category[k].to_dict() for k in sorted(self.per_category)}

    def _advisory(self) -> dict[str, Any]:
        """Advisory columns' counts, without a pass rate (seed 002 §7: not counted into one)."""
        out = {}
        for name in sorted(self.advisory):
            tally = self.advisory[name]
            out[name] = {"n": tally.n, "judged_pass": tally.passed, "errors": tally.errors}
        return out

    def render_table(self) -> str:
        """A terminal table: one row per mutation kind, the total, the checks, the reasons."""
        rows = [(kind, self.per_kind[kind]) for kind in sorted(self.per_kind)]
        rows.append(("TOTAL", self.total))
        width = max(len("mutation kind"), *(len(kind) for kind, _ in rows))
        head = (
            f"{'mutation kind':<{width}}  {'n':>6}  {'pass':>6}  {'pass %':>7}"
            f"  {'stale':>6}  {'stale %':>7}  {'errors':>6}"
        )
        lines = [head, "-" * len(head)]
        for kind, tally in rows:
            if kind == "TOTAL":
                lines.append("-" * len(head))
            lines.append(
                f"{kind:<{width}}  {tally.n:>6}  {tally.passed:>6}"
                f"  {_pct(tally.passed, tally.n):>7}  {tally.stale:>6}"
                f"  {_pct(tally.stale, tally.n):>7}  {tally.errors:>6}"
            )
        if self.per_category:
            lines.append("")
            cat_width = max(len("category"), *(len(name) for name in self.per_category))
            lines.append(
                f"{'category':<{cat_width}}  {'n':>6}  {'pass':>6}  {'pass %':>7}  {'errors':>6}"
            )
            lines.append("-" * len(lines[-1]))
            for name in sorted(self.per_category):
                t = self.per_category[name]
                lines.append(
                    f"{name:<{cat_width}}  {t.n:>6}  {t.passed:>6}  {_pct(t.passed, t.n):>7}"
                    f"  {t.errors:>6}"
                )
        if set(self.per_check) - {"tool_call"}:
            lines.append("")
            cwidth = max(len("check"), *(len(name) for name in self.per_check))
            check_head = f"{'check':<{cwidth}}  {'n':>6}  {'pass':>6}  {'pass %':>7}  {'errors':>6}"
            lines += [check_head, "-" * len(check_head)]
            for name in sorted(self.per_check):
                c = self.per_check[name]
                lines.append(
                    f"{name:<{cwidth}}  {c.n:>6}  {c.passed:>6}  {_pct(c.passed, c.n):>7}"
                    f"  {c.errors:>6}"
                )
        if self.advisory:
            lines.append("")
            lines.append(
                "advisory checks (shown for review; in no pass rate, no verdict, no gate):"
            )
            for name, advice in self._advisory().items():
                lines.append(
                    f"  {name}: n {advice['n']}, judged pass {advice['judged_pass']}, "
                    f"errors {advice['errors']}"
                )
        reasons = ", ".join(f"{code} {count}" for code, count in sorted(self.reasons.items()))
        lines.append(f"reasons: {reasons or '-'}")
        lines.append(f"tasks digest: {self.tasks_digest}")
        return "\n".join(lines)


def _pct(part: int, whole: int) -> str:
    return percent(part, whole) if whole else "-"
