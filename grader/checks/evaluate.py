"""Run a task's checks on one answer: the columns, and the overall pass.

Overall pass (docs/checks-contract.md): by the task's ``pass_rule`` — ``"all"`` (default),
``"any"``, or the name of one check or column. An infrastructure error (``passed is None``)
in any column the rule reads makes the overall None: the row is left out of the denominator
rather than counted as a model fail. A check that raises is a bug, not a verdict: it becomes
a ``check_error`` column and never an exception that reaches the caller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from grader.checks._base import Check, CheckContext, CheckResult, JudgeClient, Sample
from grader.checks.build import columns_of
from grader.checks.judge import Judge, as_judge
from grader.checks.tool_call import default_check
from grader.tasks import Task


@dataclass(frozen=True, slots=True)
class TaskOutcome:
    """Every result column for one answer, and the overall pass under the task's rule."""

    checks: tuple[CheckResult, ...]
    passed: bool | None
    warnings: tuple[str, ...] = ()

    def column(self, name: str) -> CheckResult | None:
        return next((r for r in self.checks if r.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "checks": [r.to_dict() for r in self.checks],
            "warnings": list(self.warnings),
        }


def checks_of(task: Task) -> tuple[Check, ...]:
    """The task's checks; a task built by hand without any gets grading.md's check."""
    return task.checks or (default_check(task.expected_call, task.stale),)


def task_item(task: Task) -> dict[str, Any]:
    """The ``item`` namespace: the task's ``item`` object, ``prompt`` defaulting to its prompt."""
    raw_item = task.raw.get("item")
    item = dict(raw_item) if isinstance(raw_item, Mapping) else {}
    prompt = task.raw.get("prompt")
    if isinstance(prompt, str):
        item.setdefault("prompt", prompt)
    return item


def overall(results: Sequence[CheckResult], rule: str = "all") -> bool | None:
    """Apply a pass rule to result columns."""
    if rule not in ("all", "any"):
        results = [r for r in results if r.name == rule or r.name.startswith(rule + ".")]
    states = [r.passed for r in results]
    if not states or None in states:
        return None
    return any(states) if rule == "any" else all(states)


def _crashed(check: Check, exc: BaseException) -> CheckResult:
    reason = f"check raised {type(exc).__name__}"
    return CheckResult(
        check.name, check.type, None, None, reason, "check_error", repr(exc)[:500], check.digest
    )


def _not_a_string(check: Check, answer: object) -> tuple[CheckResult, ...]:
    reason = f"answer is {type(answer).__name__}, not a string"
    return tuple(
        CheckResult(column, check.type, False, None, reason, "not_a_string", None, check.digest)
        for column in columns_of(check)
    )


def _outcome(task: Task, results: list[CheckResult]) -> TaskOutcome:
    flat = tuple(part for r in results for part in (r.parts or (r,)))
    rule = task.raw.get("pass_rule", "all")
    warnings = tuple(dict.fromkeys(r.warning for r in flat if r.warning is not None))
    return TaskOutcome(flat, overall(flat, rule if isinstance(rule, str) else "all"), warnings)


def _run_sync(
    check: Check, sample: Sample, item: Mapping[str, Any], ctx: CheckContext
) -> CheckResult:
    try:
        return check.run(sample, item, ctx)
    except Exception as exc:  # a bug in a check must not take the grading worker down
        return _crashed(check, exc)


async def _run_async(
    check: Check, sample: Sample, item: Mapping[str, Any], ctx: CheckContext, judge: Judge | None
) -> CheckResult:
    try:
        return await check.arun(sample, item, ctx, judge)
    except Exception as exc:
        return _crashed(check, exc)


async def evaluate(
    task: Task,
    answer_text: object,
    item: Mapping[str, Any] | None = None,
    context: CheckContext | None = None,
    judge: Judge | JudgeClient | None = None,
) -> TaskOutcome:
    """Grade one answer with every check of the task; judge checks run concurrently.

    ``answer_text`` is the answer string the proxy hands the grader; anything else (an SDK
    caller's untyped JSON) fails every column with ``not_a_string``, as ``score()`` does.
    """
    checks = checks_of(task)
    if not isinstance(answer_text, str):
        return _outcome(task, [r for c in checks for r in _not_a_string(c, answer_text)])
    sample = Sample.from_answer(answer_text)
    row = task_item(task) if item is None else item
    ctx = context or CheckContext()
    client = as_judge(judge)
    judged = iter(
        await asyncio.gather(
            *(_run_async(c, sample, row, ctx, client) for c in checks if c.needs_judge)
        )
    )
    results = [next(judged) if c.needs_judge else _run_sync(c, sample, row, ctx) for c in checks]
    return _outcome(task, results)


def evaluate_sync(
    task: Task,
    answer_text: object,
    item: Mapping[str, Any] | None = None,
    context: CheckContext | None = None,
) -> TaskOutcome:
    """:func:`evaluate` without a judge: judge checks report ``judge_unavailable``."""
    checks = checks_of(task)
    if not isinstance(answer_text, str):
        return _outcome(task, [r for c in checks for r in _not_a_string(c, answer_text)])
    sample = Sample.from_answer(answer_text)
    row = task_item(task) if item is None else item
    ctx = context or CheckContext()
    return _outcome(task, [_run_sync(c, sample, row, ctx) for c in checks])
