"""``gradeproxy grade``: grade a file of answers against a task set, offline.

Every answer is graded by the engine (``grader.engine``) on every check of its task, and each
row is :mod:`grader.rows`' offline row (``offline_row``): the verdict, the answer, and every
other field of the answers row carried unchanged (``sample_id``, ``model``, ``run``,
``attempt``, ``sampling`` …: docs/offline.md), so rows join to run metadata by value. An
answers row is ``{"task_id", "answer", "sample_id"?, "tools"?, "request"?, ...}``: ``tools``
(or ``request.tools``) is the offline context of a ``from_request`` schema, else the task's
own ``tools``. A field that would overwrite a result field (``result``, ``checks`` …) is
refused with ``file:line``. ``--out x.parquet`` writes Parquet (``gradeproxy[parquet]``).

A row that cannot be graded (a line that is not JSON or is cut off, no ``task_id``, an unknown
task id, a field of the wrong type, a field that would overwrite a result field) becomes an
``error`` row with an input reason code (grader/intake.py) and its ``file:line`` message, in
its place: rows out = rows in. Those rows are out of every pass rate and counted apart, by
reason, in the report's ``input`` section. An answer that is not a string is no input error:
grading.md's rule 11 scores it 0 with ``not_a_string``, as ``score()`` does.

Exit 0 every row graded, whatever the scores; 1 some rows were error rows (the first few named
on stderr); 2 nothing usable (no answers file, not JSONL, a task file or judge config that does
not load, an unwritable output), with nothing written. ``--strict`` refuses the run at the
first bad row instead (exit 2, nothing written).
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections import Counter, deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gradeproxy.cli._io import (
    InputError,
    Progress,
    add_strict,
    batched_lines,
    write_atomically,
)
from gradeproxy.cli.parquet import is_parquet, require_pyarrow, write_rows
from grader.checks.judge import Judge
from grader.engine import Outcome, grade, grade_async, needs_judge, offline_context
from grader.intake import InputReason, Intake, Problem, UnusableInputError
from grader.json import dumps, dumps_line
from grader.loader import load_tasks
from grader.report import Report
from grader.rows import carried_conflicts, input_error_row, offline_row
from grader.tasks import Task, TaskLoadError, TaskSet

PROGRESS_MIN_ROWS = 1000
Answer = tuple[int, Task, object, dict[str, Any]]  # line, task, answer, the answers row
# An answers row that cannot be graded: the problem, and the row as far as it was readable.
Refused = tuple[Problem, Task | None, dict[str, Any] | None]


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "grade",
        help="grade answers offline against a task set",
        description="Grade a JSONL file of answers against a task set and print a report.",
    )
    parser.add_argument("--tasks", required=True, type=Path, help="task file or folder")
    parser.add_argument(
        "--answers", required=True, type=Path, help='JSONL rows {"task_id", "answer", "tools"?}'
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="write one result row per answer: JSONL, or Parquet for a .parquet name "
        "(needs gradeproxy[parquet])",
    )
    parser.add_argument(
        "--wide",
        action="store_true",
        help="with a .parquet --out: add check.<name>.passed/.score/.reason_code columns",
    )
    parser.add_argument("--report", type=Path, help="write the run report (JSON)")
    parser.add_argument(
        "--judge", type=Path, help="judge config (YAML/JSON) for label_model/score_model checks"
    )
    parser.add_argument(
        "--task-cache",
        type=Path,
        metavar="DIR",
        help="reuse the loaded task set from DIR while neither the task files nor the grader "
        "change (a folder of your own: entries are pickles; docs/offline.md)",
    )
    add_strict(parser)
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=f"progress bar on stderr (default: on a terminal, from {PROGRESS_MIN_ROWS} rows)",
    )
    parser.set_defaults(handler=run)


def read_answers(path: Path, tasks: TaskSet, intake: Intake) -> list[Answer | Refused]:
    """Every answers row in order: ready to grade, or refused with its problem (an error row).

    A row of a known task with ``task_id`` and ``answer`` alone (the common row) has nothing
    :func:`_refusal` could refuse, so it is taken as it is, without asking."""
    rows: list[Answer | Refused] = []
    by_id = tasks.tasks  # TaskSet.get's own mapping: one look-up a row, no call around it
    for lineno, row in intake.lines(path, unreadable=True):
        if not isinstance(row, dict):
            if not isinstance(row, Problem):
                row = intake.problem(path, lineno, "not_an_object", _OBJECT)
            rows.append((row, None, None))
            continue
        task_id = row.get("task_id")
        task = by_id.get(task_id) if isinstance(task_id, str) else None
        if task is not None and len(row) == 2 and "answer" in row:
            rows.append((lineno, task, row["answer"], row))
            continue
        refusal = _refusal(row, task)
        if refusal is None and task is not None:
            rows.append((lineno, task, row["answer"], row))
            continue
        code, message, drop = refusal or ("unknown_task", f"unknown task id {task_id!r}", "")
        source = {key: value for key, value in row.items() if key != drop}
        rows.append((intake.problem(path, lineno, code, message), task, source))
    return rows


_OBJECT = 'expected an object {"task_id", "answer"}'


def _refusal(row: dict[str, Any], task: Task | None) -> tuple[InputReason, str, str] | None:
    """Why an answers row cannot be graded (code, message, the bad field), or None."""
    task_id = row.get("task_id")
    if not isinstance(task_id, str):
        code: InputReason = "missing_field" if task_id is None else "bad_field"
        return code, "'task_id' must be a string", "task_id"
    if task is None:
        return "unknown_task", f"unknown task id {task_id!r}", ""
    if "answer" not in row:
        return "missing_field", "no 'answer' field", ""
    for key, shape in (("tools", list), ("request", dict)):
        if key in row and not isinstance(row[key], shape):
            return "bad_field", f"'{key}' must be a JSON {shape.__name__}", key
    clash = carried_conflicts(row)
    if clash:
        return (
            "reserved_field",
            f"field {clash[0]!r} would overwrite the result row's own field of that name: "
            "rename it (answers-file fields ride into the row unchanged)",
            "",
        )
    sample_id = row.get("sample_id")
    if sample_id is not None and not isinstance(sample_id, str | int):
        return "bad_field", "'sample_id' must be a string or an integer", "sample_id"
    return None


def _grade_one(
    path: Path, line: int, task: Task, answer: object, row: dict[str, Any], intake: Intake
) -> Outcome | Problem:
    try:
        return grade(task, answer, offline_context(task, row))
    except Exception as exc:  # a grader bug: an error row that names it, never a traceback
        return _cannot(path, line, task, exc, intake)


async def _grade_judged(
    path: Path,
    line: int,
    task: Task,
    answer: object,
    row: dict[str, Any],
    judge: Judge,
    intake: Intake,
) -> Outcome | Problem:
    try:
        return await grade_async(task, answer, offline_context(task, row), judge=judge)
    except Exception as exc:
        return _cannot(path, line, task, exc, intake)


def _cannot(path: Path, line: int, task: Task, exc: Exception, intake: Intake) -> Problem:
    return intake.problem(
        path,
        line,
        "cannot_grade",
        f"cannot grade this answer against task {task.id!r} ({task.source}): "
        f"{type(exc).__name__}: {exc}",
    )


def _grade_all(
    path: Path, answers: list[Answer], judge: Judge | None, progress: Progress, intake: Intake
) -> Iterator[Outcome | Problem]:
    """Grade in input order; judge checks (only with ``--judge``) on one event loop.

    Without judge checks the outcomes are graded as they are asked for: each one is turned
    into its row and written before the next is graded, so no run holds every outcome and
    every row line at once (ten thousand rows of a kilobyte each were a third of the
    command's system time, spent faulting in fresh memory)."""
    if judge is None or not any(needs_judge(task) for _, task, _, _ in answers):
        return _graded_lazily(path, answers, progress, intake)

    async def judged() -> list[Outcome | Problem]:
        graded: list[Outcome | Problem] = []
        for done, (line, task, answer, row) in enumerate(answers, start=1):
            if needs_judge(task):
                graded.append(await _grade_judged(path, line, task, answer, row, judge, intake))
            else:
                graded.append(_grade_one(path, line, task, answer, row, intake))
            progress.update(done)
        return graded

    import asyncio

    return iter(asyncio.run(judged()))


def _graded_lazily(
    path: Path, answers: list[Answer], progress: Progress, intake: Intake
) -> Iterator[Outcome | Problem]:
    if not progress.enabled:  # no bar to move: no count kept, no call a row
        for answer in answers:
            yield _grade_one(path, *answer, intake)
        return
    for done, answer in enumerate(answers, start=1):
        outcome = _grade_one(path, *answer, intake)
        progress.update(done)  # before the yield: the last one is never resumed
        yield outcome


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    finally:
        gc.unfreeze()  # called in process (tests, the Python API's users): leave gc as it was


def _run(args: argparse.Namespace) -> int:
    judge = None
    intake = Intake("grade", strict=args.strict, what="error row")
    try:
        if args.out is not None and is_parquet(args.out):
            require_pyarrow()
        if args.judge is not None:
            from gradeproxy.cli.validate import load_judge

            try:
                judge = load_judge(args.judge)
            except ValueError as exc:
                raise InputError(str(exc)) from None
        collecting = gc.isenabled()
        gc.disable()  # loading builds no garbage cycles, only what lives to the end
        try:
            if args.task_cache is not None:
                from grader.task_cache import load_tasks_cached

                tasks = load_tasks_cached(args.tasks, args.task_cache)
            else:
                tasks = load_tasks(args.tasks)
            entries = read_answers(args.answers, tasks, intake)
        finally:
            gc.freeze()  # the tasks and answers: the collector need not scan them again
            if collecting:
                gc.enable()
        answers = [e for e in entries if len(e) == 4]
        show = args.progress
        if show is None:
            show = sys.stderr.isatty() and len(answers) >= PROGRESS_MIN_ROWS
        outcomes = _grade_all(args.answers, answers, judge, Progress(len(answers), show), intake)
    except (TaskLoadError, InputError, UnusableInputError) as exc:
        print(f"gradeproxy grade: error: {exc}", file=sys.stderr)
        return 2
    report = Report(tasks.digest)
    failures: Counter[str] = Counter()
    out = args.out
    # A JSONL output's rows are written as they are built, a batch at a time (no row or line
    # lives to the end); Parquet needs the rows themselves; without --out only the report.
    wanted = None if out is None else "row" if is_parquet(out) else "line"
    rows = _rows(entries, outcomes, tasks.digest, wanted, report, failures)
    try:
        if out is not None and wanted == "line":
            write_atomically(out, batched_lines(rows))
        elif out is not None:
            write_rows(out, list(rows), wide=args.wide)
        else:
            deque(rows, maxlen=0)
        if args.report is not None:
            data = {**report.to_dict(), "input": intake.to_dict()}
            write_atomically(args.report, [dumps(data) + b"\n"])
    except OSError as exc:
        print(f"gradeproxy grade: error: cannot write output: {exc}", file=sys.stderr)
        return 2
    except UnusableInputError as exc:  # --strict and an answer that could not be graded
        print(f"gradeproxy grade: error: {exc}", file=sys.stderr)
        return 2
    print(intake.summary(_graded(report, failures)))
    print(report.render_table())
    intake.warn()
    return intake.exit_code()


def _rows(
    entries: list[Answer | Refused],
    outcomes: Iterator[Outcome | Problem],
    digest: str,
    wanted: str | None,
    report: Report,
    failures: Counter[str],
) -> Iterator[Any]:
    """Each entry's row in input order (``wanted``: ``"line"`` its JSONL line, ``"row"`` the
    row, None nothing but the report), the report and the failure reasons counted as it goes."""
    for entry in entries:
        if len(entry) == 3:  # refused while reading
            problem, task, source = entry
            row = _error_row(problem, task, source, digest)
            yield dumps_line(row) if wanted == "line" else row
            continue
        _, task, _, source = entry
        outcome = next(outcomes)
        if isinstance(outcome, Problem):
            row = _error_row(outcome, task, source, digest)
            yield dumps_line(row) if wanted == "line" else row
            continue
        report.add(task, outcome)
        if outcome.result in ("fail", "stale"):
            failures[_failure_reason(outcome)] += 1
        if wanted is not None:
            row = offline_row(task, outcome, digest, source)
            yield dumps_line(row) if wanted == "line" else row


def _error_row(
    problem: Problem, task: Task | None, source: dict[str, Any] | None, digest: str
) -> dict[str, Any]:
    task_id = task.id if task is not None else (source or {}).get("task_id")
    return input_error_row(task_id, task, problem.reason_code, problem.text(), digest, source)


def _failure_reason(outcome: Outcome) -> str:
    """A failed answer's reason code: the tool-call verdict's, else the first failing column's."""
    if outcome.verdict is not None and outcome.verdict.score == 0:
        return outcome.verdict.reason_code
    failed = [c for c in outcome.checks if c.passed is False and not c.advisory]
    return failed[0].reason_code if failed else "fail"


def _graded(report: Report, failures: Counter[str]) -> str:
    """The graded rows for the header: model failures by reason (errors of the engine apart)."""
    total = report.total
    reasons = ", ".join(f"{code} {n}" for code, n in sorted(failures.items()))
    text = f"{total.n + total.errors} graded, {total.passed} passed"
    text += f", {total.n - total.passed} model failures ({reasons})" if failures else ""
    return text + (f", {total.errors} grading errors" if total.errors else "")
