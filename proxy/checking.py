"""Grade one captured answer with its task's checks: the verdict fields of a result row.

A task without ``checks`` keeps grading.md's single tool-call verdict (one ``score()`` call, the
fast path) and gets that verdict as its only column. A task with checks gets one column per
check (``policy`` expands to one per behaviour) and an overall pass by its ``pass_rule``. An
infrastructure error in a column the rule reads — an unresolved template, a judge that did not
answer — makes the row's ``result`` ``error``: counted apart, never as a model failure, and
left out of every pass-rate denominator.
"""

from __future__ import annotations

from typing import Any, Literal

from grader.checks import CheckContext, CheckResult, Judge, TaskOutcome, evaluate, evaluate_sync
from grader.score import score
from grader.tasks import Task

Result = Literal["pass", "fail", "stale", "error"]


def has_checks(task: Task) -> bool:
    """Whether the task lists its own checks (else it has only grading.md's)."""
    return "checks" in task.raw


def needs_judge(task: Task) -> bool:
    return has_checks(task) and any(check.needs_judge for check in task.checks)


def _verdict_fields(task: Task, text: str) -> dict[str, Any]:
    if task.expected_call is None:  # a checks-only task has no tool-call verdict
        return {
            "score": None,
            "staleSchemaUsed": False,
            "reason": None,
            "reason_code": None,
            "path": None,
            "call": None,
        }
    verdict = score(task, text)
    return {**verdict.to_dict(), "call": verdict.call}


def _result(passed: bool | None, stale: bool) -> Result:
    if passed is None:
        return "error"
    if passed:
        return "pass"
    return "stale" if stale else "fail"


def _with_outcome(fields: dict[str, Any], outcome: TaskOutcome) -> dict[str, Any]:
    stale = fields["staleSchemaUsed"] or any(
        c.reason_code == "stale_schema" for c in outcome.checks
    )
    fields["checks"] = [column.to_dict() for column in outcome.checks]
    fields["passed"] = outcome.passed
    fields["result"] = _result(outcome.passed, stale)
    if outcome.warnings:
        fields["warnings"] = list(outcome.warnings)
    return fields


def grade_answer(task: Task, text: str, context: CheckContext) -> dict[str, Any]:
    """Every verdict field for one answer, without judge checks (they need the event loop)."""
    fields = _verdict_fields(task, text)
    if has_checks(task):
        return _with_outcome(fields, evaluate_sync(task, text, context=context))
    [check] = task.checks  # grading.md's tool-call check: its verdict is the column
    passed = fields["score"] == 1
    column = CheckResult(
        check.name,
        check.type,
        passed,
        None,
        fields["reason"],
        fields["reason_code"],
        None,
        check.digest,
    )
    fields["checks"] = [column.to_dict()]
    fields["passed"] = passed
    fields["result"] = _result(passed, fields["staleSchemaUsed"])
    return fields


async def grade_answer_judged(
    task: Task, text: str, context: CheckContext, judge: Judge | None
) -> dict[str, Any]:
    """Every verdict field for one answer of a task with judge checks."""
    outcome = await evaluate(task, text, context=context, judge=judge)
    return _with_outcome(_verdict_fields(task, text), outcome)
