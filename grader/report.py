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
from itertools import chain
from operator import attrgetter
from typing import Any, cast

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

    def add(self, result: Result, times: int = 1) -> None:
        if result == "error":
            self.errors += times
            return
        self.n += times
        self.passed += times if result == "pass" else 0
        self.stale += times if result == "stale" else 0

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

    def add(self, passed: bool | None, times: int = 1) -> None:
        if passed is None:
            self.errors += times
            return
        self.n += times
        self.passed += times if passed else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "passed": self.passed,
            "passRate": _rate(self.passed, self.n),
            "errors": self.errors,
        }


# What one answer adds to a report, all of it, in one flat tuple: its task's mutation kind and
# category, the result, the tool-call verdict's reason code and whether that verdict failed
# (:data:`_Head`), then each column's name, advisory, passed and reason code, four items a
# column. Flat, not a tuple of column tuples: it is built, hashed and compared for every
# answer, and nesting cost a tuple more of each.
_Head = tuple[str | None, str | None, Result, str | None, bool]
_Column = tuple[str, bool, bool | None, str]
_Row = tuple[str | bool | None, ...]
_HEAD, _EACH = 5, 4  # the head's items; a column's
_COLUMN = attrgetter("name", "advisory", "passed", "reason_code")


@dataclass(slots=True)
class _Slices:
    """The report's tallies, slice by slice (what :class:`Report` reads them from)."""

    total: Tally = field(default_factory=Tally)
    per_kind: dict[str, Tally] = field(default_factory=dict)
    per_check: dict[str, CheckTally] = field(default_factory=dict)
    reasons: Counter[str] = field(default_factory=Counter)
    per_category: dict[str, Tally] = field(default_factory=dict)
    advisory: dict[str, CheckTally] = field(default_factory=dict)
    failures: Counter[str] = field(default_factory=Counter)

    def add(self, row: _Row, times: int) -> None:
        kind, category, result, reason, missed = cast("_Head", row[:_HEAD])
        self.total.add(result, times)
        tally = self.per_kind.get(kind or NO_KIND)
        if tally is None:
            tally = self.per_kind[kind or NO_KIND] = Tally()
        tally.add(result, times)
        if category is not None:
            tally = self.per_category.get(category)
            if tally is None:
                tally = self.per_category[category] = Tally()
            tally.add(result, times)
        failure = reason if missed else None
        for at in range(_HEAD, len(row), _EACH):
            name, advisory, passed, code = cast("_Column", row[at : at + _EACH])
            tallies = self.advisory if advisory else self.per_check
            check = tallies.get(name)
            if check is None:
                check = tallies[name] = CheckTally()
            check.add(passed, times)
            if failure is None and passed is False and not advisory:
                failure = code
        if reason is not None:
            self.reasons[reason] += times
        if result in ("fail", "stale"):
            self.failures[failure or "fail"] += times


@dataclass(slots=True)
class Report:
    """Aggregate of a graded run; feed it ``(task, outcome)`` pairs.

    ``perCheck`` is keyed by column name across tasks (a task without checks contributes its
    ``tool_call`` column). ``reasons`` counts the tool-call verdicts' reason codes.

    An answer is counted once, under everything it adds (:data:`_Row`); the slices are
    tallied from those counts when read, one pass per distinct row instead of one per answer
    (a run of ten thousand answers has a few hundred distinct ones).
    """

    tasks_digest: str
    # Each distinct row's count, in a one-item list: an answer met again is counted by one
    # look-up of its row (hashed and compared once), not a get and a set.
    _rows: dict[_Row, list[int]] = field(default_factory=dict, init=False, repr=False)
    _slices: _Slices | None = field(default=None, init=False, repr=False, compare=False)

    def add(self, task: Task, outcome: Outcome) -> None:
        kind = task.mutation_kind
        category = task.metadata.get("category")
        category = category if isinstance(category, str) else None
        result = outcome.result
        verdict = outcome.verdict
        if verdict is None:
            reason, missed = None, False
        else:
            reason, missed = verdict.reason_code, verdict.score == 0
        row: _Row
        match outcome.checks:
            case (column,):  # most tasks: one column, its part of the row written out
                row = (
                    kind,
                    category,
                    result,
                    reason,
                    missed,
                    column.name,
                    column.advisory,
                    column.passed,
                    column.reason_code,
                )
            case several:
                head = (kind, category, result, reason, missed)
                row = (*head, *chain.from_iterable(map(_COLUMN, several)))
        counted = self._rows.get(row)
        if counted is None:
            self._rows[row] = [1]
        else:
            counted[0] += 1
        self._slices = None

    def _tallied(self) -> _Slices:
        """The slices of every answer added so far (tallied again after an add)."""
        slices = self._slices
        if slices is None:
            slices = self._slices = _Slices()
            for row, (times,) in self._rows.items():
                slices.add(row, times)
        return slices

    @property
    def total(self) -> Tally:
        return self._tallied().total

    @property
    def per_kind(self) -> dict[str, Tally]:
        """By mutation kind (:data:`NO_KIND` for tasks without one)."""
        return self._tallied().per_kind

    @property
    def per_check(self) -> dict[str, CheckTally]:
        return self._tallied().per_check

    @property
    def reasons(self) -> Counter[str]:
        return self._tallied().reasons

    @property
    def per_category(self) -> dict[str, Tally]:
        return self._tallied().per_category

    @property
    def advisory(self) -> dict[str, CheckTally]:
        """Advisory columns (grader/advisory.py): counted for review, never given a pass rate."""
        return self._tallied().advisory

    @property
    def failures(self) -> Counter[str]:
        """The model's failures (``fail`` and ``stale`` answers) by reason: the tool-call
        verdict's reason code when it failed, else the first failing column's (advisory ones
        aside), else ``fail``. What ``gradeproxy grade`` names in its header."""
        return self._tallied().failures

    def merge(self, other: Report) -> None:
        """Add the answers ``other`` counted: a report of other rows of the same run (a slice
        graded in another process, ``gradeproxy grade --jobs``). Every view of a report is
        sorted, so the sum reads as one report of all the rows."""
        for row, (times,) in other._rows.items():
            self._rows.setdefault(row, [0])[0] += times
        self._slices = None

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
