"""The Python scoring API: grade answers against tasks into rows and a run report.

Every surface grades through :mod:`grader.engine` and writes :mod:`grader.rows`' row, so a row
and a run report have one shape everywhere (grading.md: "per-mutation-kind breakdowns and the
stale rate ride on every run report")::

    grade(task, answer, context=None, item=None) -> Outcome     every check; judge columns error
    await grade_async(task, answer, ..., judge)   -> Outcome     judge checks called
    grade_run(tasks, answers)                     -> RunResult   rows + Report; UnknownTaskError
    await grade_run_async(tasks, answers, judge)  -> RunResult
    score(task, answer)       -> Verdict     tasks without checks; TaskHasChecksError otherwise
    parse_task(obj)           -> Task        TaskLoadError naming the field
    load_tasks(path)          -> TaskSet     TaskLoadError naming file:line

One name per concept: ``grade_run`` (once also ``score_run``), ``parse_task`` (once also
``task_from_dict``), ``grade``/``grade_async`` (once also ``evaluate_sync``/``evaluate``).

``answers`` are ``(task_id, answer)`` pairs or answers rows (``{"task_id", "answer", "tools"?,
"request"?}``: the offline context of a ``from_request`` schema, see
:func:`grader.engine.offline_context`).

The wire surfaces' request readers (:func:`resolve_item`, :func:`resolve_items`,
:class:`ScoreRequestError`, :func:`request_digest`) live in :mod:`grader.score_requests` and
are re-exported here, where the surfaces import them: reading a request off a wire is its own
concern (every refusal names a field and a code), grading it is this module's.

Pure like the rest of ``grader/``: no I/O beyond :func:`load_tasks`, and never aiohttp.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from grader.checks import CheckContext, JudgeClient
from grader.checks.judge import Judge
from grader.engine import Outcome, grade, grade_async, needs_judge, offline_context
from grader.errors import GraderError
from grader.loader import load_tasks
from grader.report import Report
from grader.rows import answer_row, carried_conflicts, offline_row
from grader.score import score
from grader.score_requests import ScoreRequestError, request_digest, resolve_item, resolve_items
from grader.tasks import Task, TaskSet, build_task_set, digest_of
from grader.values import value_type
from grader.verdict import Verdict

__all__ = [
    "GradedAnswer",
    "RunResult",
    "ScoreRequestError",
    "UnknownTaskError",
    "digest_of",
    "grade",
    "grade_all",
    "grade_all_async",
    "grade_all_dict",
    "grade_async",
    "grade_run",
    "grade_run_async",
    "load_tasks",
    "request_digest",
    "resolve_item",
    "resolve_items",
    "score",
]

# One answer to grade: the task, the answer, and its context (None: the task's own tools).
Item = tuple[Task, object, CheckContext | None]
AnswerInput = tuple[str, object] | Mapping[str, Any]


class UnknownTaskError(GraderError, LookupError):
    """An answer names a task id the task set does not hold. Raised before anything is graded."""

    def __init__(self, task_id: object, index: int, known: int) -> None:
        self.task_id = task_id
        self.index = index
        super().__init__(
            f"answers[{index}]: unknown task id {task_id!r} (the task set holds {known} tasks)"
        )

    def __str__(self) -> str:  # LookupError would repr() a single argument like KeyError does not
        return str(self.args[0])


@value_type
class GradedAnswer:
    """One graded answer: the task it was graded against and the engine's outcome."""

    task: Task
    outcome: Outcome
    tasks_digest: str
    # The answers row it came from (grade_run with mappings): its fields ride into the row.
    source: Mapping[str, Any] | None = None

    @property
    def verdict(self) -> Verdict | None:
        """The tool-call verdict (None for a task with no expected call)."""
        return self.outcome.verdict

    def to_dict(self) -> dict[str, Any]:
        """The result row (:func:`grader.rows.answer_row`), the same on every surface; with the
        answers row it came from, :func:`grader.rows.offline_row` (its fields carried)."""
        if self.source is not None:
            return offline_row(self.task, self.outcome, self.tasks_digest, self.source)
        return answer_row(self.task, self.outcome, self.tasks_digest)


@dataclass(frozen=True, slots=True)
class RunResult:
    """A graded run: one row per answer, in input order, and the run report."""

    results: tuple[GradedAnswer, ...]
    report: Report

    def __len__(self) -> int:
        return len(self.results)

    @property
    def outcomes(self) -> tuple[Outcome, ...]:
        return tuple(row.outcome for row in self.results)

    @property
    def verdicts(self) -> tuple[Verdict | None, ...]:
        return tuple(row.verdict for row in self.results)

    def to_dict(self) -> dict[str, Any]:
        """``{"results": [row, ...], "report": {... perMutationKind, staleSchemaUsedRate ...}}``."""
        return {
            "results": [row.to_dict() for row in self.results],
            "report": self.report.to_dict(),
        }


def _items(pairs: Iterable[Sequence[Any]]) -> list[Item]:
    """``(task, answer)`` or ``(task, answer, context)``; a missing context is the offline one."""
    items: list[Item] = []
    for pair in pairs:
        task, answer = pair[0], pair[1]
        context = pair[2] if len(pair) > 2 else None
        items.append((task, answer, context or offline_context(task)))
    return items


def _run(
    graded: list[tuple[Task, Outcome]],
    digest: str,
    sources: Sequence[Mapping[str, Any] | None] | None = None,
) -> RunResult:
    report = Report(digest)
    for task, outcome in graded:
        report.add(task, outcome)
    if sources is None:
        return RunResult(tuple(GradedAnswer(t, o, digest) for t, o in graded), report)
    pairs = zip(graded, sources, strict=True)
    return RunResult(tuple(GradedAnswer(t, o, digest, s) for (t, o), s in pairs), report)


def grade_all(pairs: Iterable[Sequence[Any]], tasks_digest: str) -> RunResult:
    """Grade ``(task, answer[, context])`` items into a :class:`RunResult` (no judge)."""
    return _run([(t, grade(t, a, c)) for t, a, c in _items(pairs)], tasks_digest)


def grade_all_dict(pairs: Iterable[Sequence[Any]], tasks_digest: str) -> dict[str, Any]:
    """:func:`grade_all` as the scoring API answers it: plain values, which cross to the grading
    process and back (a :class:`RunResult` holds its tasks, whose built checks do not pickle)."""
    return grade_all(pairs, tasks_digest).to_dict()


async def grade_all_async(
    pairs: Iterable[Sequence[Any]], tasks_digest: str, judge: Judge | JudgeClient | None
) -> RunResult:
    """:func:`grade_all` with judge checks sent to ``judge``."""
    graded = []
    for task, answer, context in _items(pairs):
        if judge is not None and needs_judge(task):
            graded.append((task, await grade_async(task, answer, context, judge=judge)))
        else:
            graded.append((task, grade(task, answer, context)))
    return _run(graded, tasks_digest)


def _resolve(
    tasks: TaskSet | Iterable[Task], answers: Iterable[AnswerInput]
) -> tuple[TaskSet, list[Item], list[Mapping[str, Any] | None]]:
    """Look every task id up before the first answer is graded (all or nothing); a mapping's
    fields ride into its row (``offline_row``), one that would overwrite a result field raises."""
    task_set = tasks if isinstance(tasks, TaskSet) else build_task_set(tasks)
    items: list[Item] = []
    sources: list[Mapping[str, Any] | None] = []
    by_id = task_set.tasks
    for index, entry in enumerate(answers):
        if type(entry) is dict or isinstance(entry, Mapping):
            task_id, answer, row = entry.get("task_id"), entry.get("answer"), entry
            if clash := carried_conflicts(entry):
                raise ValueError(
                    f"answers[{index}]: field {clash[0]!r} would overwrite a result field"
                )
        else:
            (task_id, answer), row = entry, None
        task = by_id.get(task_id) if type(task_id) is str or isinstance(task_id, str) else None
        if task is None:
            raise UnknownTaskError(task_id, index, len(task_set))
        items.append((task, answer, offline_context(task, row)))
        sources.append(row)
    return task_set, items, sources


def _carrying(result: RunResult, sources: list[Mapping[str, Any] | None]) -> RunResult:
    pairs = zip(result.results, sources, strict=True)
    return RunResult(tuple(dataclasses.replace(g, source=s) for g, s in pairs), result.report)


def grade_run(tasks: TaskSet | Iterable[Task], answers: Iterable[AnswerInput]) -> RunResult:
    """Grade answers against ``tasks``: every check of every task (judge columns ``error``).

    Every task id is looked up before the first answer is graded, so an unknown id raises
    :class:`UnknownTaskError` and nothing half-graded is returned. A plain iterable of tasks
    becomes a task set first (duplicate ids raise ``TaskLoadError``); the report carries that
    set's digest, the same digest ``gradeproxy grade`` prints for the same task file.
    """
    task_set, items, sources = _resolve(tasks, answers)
    return _run([(t, grade(t, a, c)) for t, a, c in items], task_set.digest, sources)


async def grade_run_async(
    tasks: TaskSet | Iterable[Task],
    answers: Iterable[AnswerInput],
    judge: Judge | JudgeClient | None = None,
) -> RunResult:
    """:func:`grade_run` with judge checks sent to ``judge``."""
    task_set, items, sources = _resolve(tasks, answers)
    return _carrying(await grade_all_async(items, task_set.digest, judge), sources)
