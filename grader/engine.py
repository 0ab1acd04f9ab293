"""The grading engine: one answer against one task, every check, one frozen :class:`Outcome`.

Every surface grades through here (docs/checks-contract.md): ``gradeproxy grade``, the Python
API (``grade``/``grade_run``), ``POST /grading/v1/score``, MCP and the live proxy.
The same task and answer therefore give the same columns, the same ``result`` and (through
:mod:`grader.rows`) the same row wherever they are graded.

::

    grade(task, answer, context=None, item=None)              -> Outcome   judge columns: error
    await grade_async(task, answer, context, item, judge)     -> Outcome   judge checks called
    local_columns(task, answer, context, item)                -> the columns needing no judge
    await grade_async(..., judge, local=columns)              -> Outcome   only the judge runs
    offline_context(task, row)                                -> CheckContext for a row offline

What an outcome holds:

* ``checks`` — one column per check (``policy`` expands to one per behaviour), each with its
  digest; a task without ``checks`` has grading.md's tool-call check as its only column,
  graded by :func:`grader.toolcall.match.match_call` directly (the fast path);
* ``result`` — ``pass | fail | stale | error`` by the task's ``pass_rule`` (``all``, ``any`` or
  one check or column name). A column the rule reads that could not reach a verdict
  (``passed is None``) makes the result ``error``: infrastructure, out of every denominator.
  A failed outcome is ``stale`` when the tool-call verdict (or a column) matched the stale call;
* ``verdict`` — the tool-call verdict when the task has an expected call (the task's first
  single-call ``tool_call`` check, options applied; else ``match_call`` on the task's calls);
* ``warnings`` — from the columns (a judge of the same family as the graded model …).

A task holds check *definitions* (grader/tasks.py); the engine builds the checks
(:func:`checks_of`) once per process, cached by the task's ``checks_digest`` (the loader hands
over the checks it built to validate the task, so a loaded task is never built twice), bounded
at ``_BUILT_MAX`` tasks, oldest out first.

Judge checks reach the judge through the :class:`~grader.checks.JudgeClient` protocol; without
one their column is ``error`` (``judge_unavailable``) with a reason that says how to configure
one, never a fail. A check that raises is a bug: a ``check_error`` column, never an exception.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from grader.advisory import is_advisory

# Re-exported: callers have always asked the engine for a task's built checks.
from grader.built import build_task_checks as build_task_checks
from grader.built import checks_of as checks_of
from grader.built import needs_judge as needs_judge
from grader.built import reads_request_tools as reads_request_tools
from grader.built import remember_checks as remember_checks
from grader.checks import (
    Check,
    CheckContext,
    CheckResult,
    JudgeClient,
    Sample,
    columns_of,
)
from grader.checks.judge import Judge, as_judge
from grader.checks.tool_call import ToolCallCheck
from grader.tasks import CheckDefinition, Task
from grader.toolcall.extract import UNPARSED
from grader.toolcall.match import match_call
from grader.values import value_type
from grader.verdict import Verdict

Result = Literal["pass", "fail", "stale", "error"]
RESULTS: tuple[Result, ...] = ("pass", "fail", "stale", "error")
OFFLINE_NO_TOOLS = (
    "schema is 'from_request' and, offline, there is no request: give the answers row "
    "'tools' (or 'request' with 'tools'), or the task its own 'tools'"
)


@value_type
class Outcome:
    """Every result column for one answer, the overall ``result`` and the tool-call verdict."""

    task_id: str
    result: Result
    checks: tuple[CheckResult, ...]
    verdict: Verdict | None
    has_checks: bool
    warnings: tuple[str, ...] = ()

    @property
    def passed(self) -> bool | None:
        """The overall pass: None for an ``error`` outcome (no verdict was reached)."""
        if self.result == "error":
            return None
        return self.result == "pass"

    @property
    def stale_schema_used(self) -> bool:
        return self.result == "stale"

    def column(self, name: str) -> CheckResult | None:
        return next((r for r in self.checks if r.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        """The outcome as plain data (a result row is :func:`grader.rows.answer_row`)."""
        return {
            "result": self.result,
            "passed": self.passed,
            "checks": [r.to_dict() for r in self.checks],
            "warnings": list(self.warnings),
        }


def overall(results: Sequence[CheckResult], rule: str = "all") -> bool | None:
    """Apply a pass rule to result columns (None when a column it reads has no verdict)."""
    if rule not in ("all", "any"):
        results = [r for r in results if r.name == rule or r.name.startswith(rule + ".")]
    states = [r.passed for r in results]
    if not states or None in states:
        return None
    return any(states) if rule == "any" else all(states)


def _result(passed: bool | None, stale: bool) -> Result:
    if passed is None:
        return "error"
    if passed:
        return "pass"
    return "stale" if stale else "fail"


def _tool_call_column(check: Check | CheckDefinition, verdict: Verdict) -> CheckResult:
    return CheckResult(
        check.name,
        check.type,
        verdict.score == 1,
        None,
        verdict.reason,
        verdict.reason_code,
        None,
        check.digest,
        details={"path": verdict.path, "staleSchemaUsed": verdict.stale_schema_used},
    )


# The fast path's columns repeat (every matching answer to a task gets the same one), and a
# CheckResult (a measurable share of a typical grade: docs/performance.md) need not be built
# again: keep the recent ones.
_COLUMNS: dict[tuple[object, ...], CheckResult] = {}
_COLUMNS_MAX = 4096


def _fast(task: Task, answer: object, parsed: Any) -> Outcome:
    """A task without checks: one ``match_call``, its verdict the only column."""
    verdict = match_call(task.expected, task.stale, answer, parsed)
    (check,) = task.checks or checks_of(task)  # a definition: no check is built here
    key = (check.digest, check.name, verdict.reason_code, verdict.reason, verdict.path)
    column = _COLUMNS.get(key)
    if column is None:
        if len(_COLUMNS) >= _COLUMNS_MAX:
            _COLUMNS.clear()
        column = _COLUMNS[key] = _tool_call_column(check, verdict)
    return Outcome(task.id, verdict.result, (column,), verdict, False)


def _crashed(check: Check, exc: BaseException) -> CheckResult:
    reason = f"check raised {type(exc).__name__}"
    return CheckResult(
        check.name, check.type, None, None, reason, "check_error", repr(exc)[:500], check.digest
    )


def run_check(
    check: Check, sample: Sample, item: Mapping[str, Any], context: CheckContext
) -> CheckResult:
    """Run one synchronous check; a check that raises is a ``check_error`` column."""
    try:
        result = check.run(sample, item, context)
    except Exception as exc:  # a bug in a check must not take the grading worker down
        return _crashed(check, exc)
    return _with_context(result, context)


async def arun_check(
    check: Check,
    sample: Sample,
    item: Mapping[str, Any],
    context: CheckContext,
    judge: Judge | None,
) -> CheckResult:
    """Run one check that may call the judge."""
    try:
        result = await check.arun(sample, item, context, judge)
    except Exception as exc:
        return _crashed(check, exc)
    return _with_context(result, context)


def _with_context(result: CheckResult, context: CheckContext) -> CheckResult:
    """Name what is missing offline when a ``from_request`` schema found no tools."""
    if result.reason_code == "no_request_tools" and context.missing_tools is not None:
        hint = context.missing_tools
        return dataclasses.replace(result, reason=hint, error=hint)
    return result


def _not_a_string(check: Check, answer: object) -> tuple[CheckResult, ...]:
    reason = f"answer is {type(answer).__name__}, not a string"
    return tuple(
        CheckResult(column, check.type, False, None, reason, "not_a_string", None, check.digest)
        for column in columns_of(check)
    )


def _verdict_of(
    task: Task, checks: Sequence[Check], sample: Sample, ctx: CheckContext
) -> Verdict | None:
    """The first single-call ``tool_call`` check's verdict (as :func:`grade` gets it from the
    check's run), else :func:`_task_verdict`."""
    for check in checks:
        if isinstance(check, ToolCallCheck) and check.gives_verdict:
            return check.graded(sample, ctx)[1]
    return _task_verdict(task, sample)


def _task_verdict(task: Task, sample: Sample) -> Verdict | None:
    """grading.md's verdict on the task's own expected call, when no check gave one."""
    if task.expected_call is None:
        return None
    return match_call(task.expected_call, task.stale, sample.answer)


def _outcome(task: Task, results: Sequence[CheckResult], verdict: Verdict | None) -> Outcome:
    if len(results) == 1 and not task.advisory:  # one plain column: the common task
        only = results[0]
        if not only.parts and not only.advisory:
            return _one_column(task, only, verdict)
    flat = tuple(part for r in results for part in (r.parts or (r,)))
    if task.advisory:  # shown in the row, left out of the rule (grader/advisory.py)
        flat = tuple(
            dataclasses.replace(c, advisory=True) if is_advisory(c.name, task.advisory) else c
            for c in flat
        )
    decisive = [c for c in flat if not c.advisory]
    warnings = tuple(dict.fromkeys(r.warning for r in flat if r.warning is not None))
    stale = (verdict is not None and verdict.stale_schema_used) or any(
        c.reason_code == "stale_schema" for c in decisive
    )
    result = _result(overall(decisive, task.pass_rule), stale)
    return Outcome(task.id, result, flat, verdict, True, warnings)


def _one_column(task: Task, only: CheckResult, verdict: Verdict | None) -> Outcome:
    """:func:`_outcome` of a task without advisory checks whose one column has no parts (the
    stale call is asked after only of a failed column)."""
    rule = task.pass_rule
    name = only.name
    if rule in ("all", "any") or rule == name or name.startswith(rule + "."):
        passed = only.passed
    else:  # a rule naming no column of this task: as overall() over no columns
        passed = None
    stale = passed is False and (
        (verdict is not None and verdict.stale_schema_used) or only.reason_code == "stale_schema"
    )
    one: tuple[str, ...] = () if only.warning is None else (only.warning,)
    return Outcome(task.id, _result(passed, stale), (only,), verdict, True, one)


def _graded_tool_call(
    check: ToolCallCheck, sample: Sample, ctx: CheckContext
) -> tuple[CheckResult, Verdict | None]:
    """A tool-call check's column and, for its single-call form, the verdict of the same match;
    as :func:`run_check`, a bug is a ``check_error`` column (and no verdict)."""
    try:
        result, verdict = check.graded(sample, ctx)
    except Exception as exc:
        return _crashed(check, exc), None
    if result.reason_code != "no_request_tools":  # nearly every column: no context to name
        return result, verdict
    return _with_context(result, ctx), verdict


# The context of an answer graded without one: a value, so one instance serves every answer.
_NO_CONTEXT = CheckContext()


def _prepare(
    task: Task, answer: str, item: Mapping[str, Any] | None, context: CheckContext | None
) -> tuple[Sample, Mapping[str, Any], CheckContext]:
    row = task.item if item is None else item
    return Sample.from_answer(answer), row, context or _NO_CONTEXT


def grade(
    task: Task,
    answer: object,
    context: CheckContext | None = None,
    item: Mapping[str, Any] | None = None,
    *,
    parsed: Any = UNPARSED,
) -> Outcome:
    """Grade one answer with every check of ``task``; judge checks give ``error`` columns.

    ``answer`` is the answer string; anything else (an SDK caller's untyped JSON) fails every
    column with ``not_a_string``. ``item`` replaces the task's ``item`` namespace; ``context``
    carries the request's tools (live) or :func:`offline_context`'s. ``parsed`` is the JSON
    value ``answer`` was written from by ``grader.json.dumps``, when the caller has it (the
    proxy): the tool-call path then reads it instead of the text again; the outcome is the same.
    """
    if not task.has_checks:
        return _fast(task, answer, parsed)
    checks = checks_of(task)
    if not isinstance(answer, str):
        verdict = None if task.expected_call is None else match_call(task.expected, None, answer)
        return _outcome(task, [r for c in checks for r in _not_a_string(c, answer)], verdict)
    sample = Sample.from_answer(answer)
    only = checks[0] if len(checks) == 1 else None
    if type(only) is ToolCallCheck and not task.advisory:
        # A task whose only check is a tool-call check (every BFCL task): _run_checks and
        # _outcome for its one column, without their passes over many (a tool-call column
        # has no parts and, the task having no advisory checks, is decisive).
        result, verdict = _graded_tool_call(only, sample, context or _NO_CONTEXT)
        if verdict is None and task.expected_call is not None:  # the check's form gives none:
            verdict = _task_verdict(task, sample)  # the task's own expected call decides
        return _one_column(task, result, verdict)
    results, verdict = _run_checks(task, checks, sample, item, context or _NO_CONTEXT)
    if verdict is None:
        verdict = _task_verdict(task, sample)
    return _outcome(task, results, verdict)


def _run_checks(
    task: Task,
    checks: Sequence[Check],
    sample: Sample,
    item: Mapping[str, Any] | None,
    ctx: CheckContext,
) -> tuple[list[CheckResult], Verdict | None]:
    """Every check's column, and the first single-call ``tool_call`` check's verdict from the
    same match (one match per answer: :meth:`ToolCallCheck.graded`); None when no check gave
    one (then the task's own expected call decides: :func:`_task_verdict`). The ``item``
    namespace (``task.item`` unless given) is built only when a check other than a tool-call
    check reads it."""
    results: list[CheckResult] = []
    verdict: Verdict | None = None
    row = item
    for check in checks:
        if verdict is None and isinstance(check, ToolCallCheck):
            result, verdict = _graded_tool_call(check, sample, ctx)
            results.append(result)
        else:
            if row is None:
                row = task.item
            results.append(run_check(check, sample, row, ctx))
    return results, verdict


# The columns of the checks that need no judge, in the task's check order (None where a judge
# check stands): computed where CPU is cheap (the proxy's grading process) and finished by
# :func:`grade_async` where the judge's client lives.
LocalColumns = tuple[CheckResult | None, ...]


def local_columns(
    task: Task,
    answer: str,
    context: CheckContext | None = None,
    item: Mapping[str, Any] | None = None,
) -> LocalColumns:
    """Every column :func:`grade_async` computes without the judge, judge slots left None."""
    sample, row, ctx = _prepare(task, answer, item, context)
    return tuple(None if c.needs_judge else run_check(c, sample, row, ctx) for c in checks_of(task))


async def grade_async(
    task: Task,
    answer: object,
    context: CheckContext | None = None,
    item: Mapping[str, Any] | None = None,
    judge: Judge | JudgeClient | None = None,
    local: LocalColumns | None = None,
) -> Outcome:
    """:func:`grade`, with judge checks sent (concurrently) to ``judge``.

    ``local`` is :func:`local_columns` of the same answer, computed elsewhere: only the judge
    checks run here then. The verdict is the same either way (one code path assembles it).
    """
    client = as_judge(judge)
    if client is None or not needs_judge(task) or not isinstance(answer, str):
        return grade(task, answer, context, item)
    import asyncio  # imported here: asyncio is a good part of the command line's start-up

    checks = checks_of(task)
    sample, row, ctx = _prepare(task, answer, item, context)
    judged = iter(
        await asyncio.gather(
            *(arun_check(c, sample, row, ctx, client) for c in checks if c.needs_judge)
        )
    )
    fits = local is not None and len(local) == len(checks)
    results: list[CheckResult] = []
    for index, check in enumerate(checks):
        column = local[index] if fits and local is not None else None
        if check.needs_judge:
            results.append(next(judged))
        else:  # a column the caller did not bring is computed here
            results.append(column or run_check(check, sample, row, ctx))
    return _outcome(task, results, _verdict_of(task, checks, sample, ctx))


# The offline context of a row with no tools and no model (a value: one serves every row).
_OFFLINE_BARE = CheckContext(missing_tools=OFFLINE_NO_TOOLS)


# The answers-row fields an offline context reads: a row with none of them is its task's alone.
_ROW_CONTEXT = frozenset({"tools", "request", "model"})


def _tool_list(value: object) -> list[dict[str, Any]] | None:
    return [t for t in value if isinstance(t, dict)] if isinstance(value, list) else None


def offline_context(task: Task, row: Mapping[str, Any] | None = None) -> CheckContext:
    """The context of an answer graded offline (docs/checks-contract.md, "Context offline").

    The request's tools are, in order: the answers row's ``tools``, its ``request.tools``, the
    task's own ``tools``; with none of them a ``from_request`` column is an ``error`` naming
    what is missing. ``model`` comes from the row's ``model`` (or ``request.model``). A row
    with none of those fields (most rows: ``task_id`` and ``answer``) is the task's alone,
    decided by one set question instead of reading each field.
    """
    if row is None or _ROW_CONTEXT.isdisjoint(row):
        # Task.tools filters a fresh list from the raw task: asked only of a task with some.
        tools = task.tools if "tools" in task.raw else None
        model = None
    else:
        request = row.get("request")
        request = request if isinstance(request, Mapping) else {}
        tools = _tool_list(row.get("tools"))
        if tools is None:
            tools = _tool_list(request.get("tools"))
        if tools is None:
            tools = task.tools
        given = row.get("model", request.get("model"))
        model = given if isinstance(given, str) else None
    if tools is None and model is None:
        return _OFFLINE_BARE
    return CheckContext(
        request_tools=tools,
        model=model,
        missing_tools=None if tools else OFFLINE_NO_TOOLS,
    )
