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
import os
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from itertools import chain
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
from grader.collector import grading_collector
from grader.engine import Outcome, grade, grade_async, needs_judge, offline_context
from grader.intake import InputReason, Intake, Problem, UnusableInputError
from grader.json import dumps, dumps_line
from grader.loader import load_tasks
from grader.report import Report
from grader.rows import carried_conflicts, input_error_row, offline_row
from grader.tasks import Task, TaskLoadError, TaskSet

PROGRESS_MIN_ROWS = 1000
Answer = tuple[int, Task, object, dict[str, Any]]  # line, task, answer, the answers row
# An answer's outcome, from its line, task, answer and answers row.
Grader = Callable[[int, Task, object, dict[str, Any]], Outcome | Problem]
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
    parser.add_argument(
        "--jobs",
        type=_jobs_count,
        default=1,
        metavar="N",
        help="grade in N processes (0: one per CPU; default 1); the rows, report and exit code "
        "are those of one process. Without a judge, into JSONL or no --out, where fork exists",
    )
    parser.set_defaults(handler=run)


def _jobs_count(text: str) -> int:
    """``--jobs``: a count of processes, 0 for one per CPU this process may use."""
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if count < 0:
        raise argparse.ArgumentTypeError("must be 0 (one per CPU) or more")
    if count == 0:
        usable = getattr(os, "sched_getaffinity", None)
        return len(usable(0)) if usable is not None else os.cpu_count() or 1
    return count


def read_answers(path: Path, tasks: TaskSet, intake: Intake) -> Iterator[Answer | Refused]:
    """Every answers row in order, as it is read: ready to grade, or refused with its problem
    (an error row).

    A row of a known task with ``task_id`` and ``answer`` alone (the common row) has nothing
    :func:`_refusal` could refuse, so it is taken as it is, without asking."""
    by_id = tasks.tasks  # TaskSet.get's own mapping: one look-up a row, no call around it
    for lineno, row in intake.lines(path, unreadable=True):
        if not isinstance(row, dict):
            if not isinstance(row, Problem):
                row = intake.problem(path, lineno, "not_an_object", _OBJECT)
            yield row, None, None
            continue
        task_id = row.get("task_id")
        task = by_id.get(task_id) if isinstance(task_id, str) else None
        if task is not None and len(row) == 2 and "answer" in row:
            yield lineno, task, row["answer"], row
            continue
        refusal = _refusal(row, task)
        if refusal is None and task is not None:
            yield lineno, task, row["answer"], row
            continue
        code, message, drop = refusal or ("unknown_task", f"unknown task id {task_id!r}", "")
        source = {key: value for key, value in row.items() if key != drop}
        yield intake.problem(path, lineno, code, message), task, source


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
    path: Path, intake: Intake, line: int, task: Task, answer: object, row: dict[str, Any]
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
                graded.append(_grade_one(path, intake, line, task, answer, row))
            progress.update(done)
        return graded

    import asyncio

    return iter(asyncio.run(judged()))


def _streams(args: argparse.Namespace, judge: Judge | None) -> bool:
    """Whether to grade each answer as it is read, holding one answers row at a time: not
    when the answers go to a judge (graded on one event loop once read), to ``--jobs`` slices
    (cut from the whole list), or past a progress bar (which needs their count first)."""
    if judge is not None or args.jobs > 1:
        return False
    return not (args.progress or (args.progress is None and sys.stderr.isatty()))


def _primed(entries: Iterator[Answer | Refused]) -> Iterator[Answer | Refused]:
    """``entries`` with the first one read already (what reading it raises, raised here)."""
    first = next(entries, None)
    return entries if first is None else chain((first,), entries)


def _in_turn(outcomes: Iterator[Outcome | Problem]) -> Grader:
    """Outcomes graded ahead (or lazily, in input order) handed out one an answer, in turn."""
    return lambda *_answer: next(outcomes)


def _line(problem: Problem) -> int:
    return problem.line


def _forks(jobs: int, wanted: str | None, answers: list[Answer], judge: Judge | None) -> bool:
    """Whether to grade in ``jobs`` processes: not for Parquet (its writer needs every row in
    one process), not when an answer goes to the judge (graded on one event loop), and only
    where the platform forks."""
    if jobs <= 1 or wanted == "row":
        return False
    if judge is not None and any(needs_judge(task) for _, task, _, _ in answers):
        return False
    from gradeproxy.cli._jobs import can_fork  # only a run asked to fork loads the forking code

    return can_fork()


def _graded_in_slices(
    args: argparse.Namespace,
    entries: list[Answer | Refused],
    digest: str,
    wanted: str | None,
    report: Report,
    intake: Intake,
    progress: Progress,
) -> Iterator[bytes]:
    """The output chunks of ``entries`` graded ``args.jobs`` slices at a time (gradeproxy/cli/
    _jobs.py): each slice's lines as :func:`_rows` writes them, and each slice's counts added
    into ``report`` and ``intake`` in slice order, as one process counts them."""
    from gradeproxy.cli._jobs import sliced

    read = len(intake.problems)  # the problems met while reading, before any slice is graded
    done = 0

    def grade_slice(part: Sequence[Answer | Refused], shown: Progress) -> Iterator[bytes]:
        answers = [entry for entry in part if len(entry) == 4]
        outcomes = _in_turn(_graded_lazily(args.answers, answers, shown, intake))
        rows = _rows(part, outcomes, digest, wanted, report)
        if wanted is None:  # the report alone: rows are graded and counted, never kept
            deque(rows, maxlen=0)
            return
        yield from batched_lines(rows)

    def here(part: Sequence[Answer | Refused]) -> Iterator[bytes]:
        nonlocal done
        yield from grade_slice(part, progress)
        done = sum(len(entry) == 4 for entry in part)

    def counts() -> tuple[Report, list[Problem]]:
        return report, intake.problems[read:]

    def absorb(counted: tuple[Report, list[Problem]]) -> None:
        their_report, their_problems = counted
        report.merge(their_report)
        intake.problems.extend(their_problems)

    def finished(part: Sequence[Answer | Refused]) -> None:
        nonlocal done
        done += sum(len(entry) == 4 for entry in part)
        progress.update(done)

    def there(part: Sequence[Answer | Refused]) -> Iterator[bytes]:
        return grade_slice(part, Progress(0, False))  # a child shows no progress of its own

    scratch = args.out if wanted == "line" else None
    return sliced(entries, args.jobs, here, there, counts, absorb, scratch, finished)


def _graded_lazily(
    path: Path, answers: list[Answer], progress: Progress, intake: Intake
) -> Iterator[Outcome | Problem]:
    if not progress.enabled:  # no bar to move: no count kept, no call a row
        for answer in answers:
            yield _grade_one(path, intake, *answer)
        return
    for done, answer in enumerate(answers, start=1):
        outcome = _grade_one(path, intake, *answer)
        progress.update(done)  # before the yield: the last one is never resumed
        yield outcome


def run(args: argparse.Namespace) -> int:
    try:
        with grading_collector():  # answers graded by the thousand: rare young collections
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
        streamed = _streams(args, judge)
        collecting = gc.isenabled()
        gc.disable()  # loading builds no garbage cycles, only what lives to the end
        try:
            if args.task_cache is not None:
                from grader.task_cache import load_tasks_cached

                tasks = load_tasks_cached(args.tasks, args.task_cache)
            else:
                tasks = load_tasks(args.tasks)
            entries: Iterable[Answer | Refused] = read_answers(args.answers, tasks, intake)
            # Streamed, the first row is read here: a file that cannot be opened (or a bad
            # first row under --strict) is refused before any output is begun.
            entries = _primed(iter(entries)) if streamed else list(entries)
        finally:
            gc.freeze()  # the tasks (and answers): the collector need not scan them again
            if collecting:
                gc.enable()
        out = args.out
        # A JSONL output's rows are written as they are built, a batch at a time (no row or
        # line lives to the end); Parquet needs the rows themselves; without --out the report.
        wanted = None if out is None else "row" if is_parquet(out) else "line"
        forked = False
        progress = Progress(0, False)
        if streamed:  # each answer graded as it is read
            outcome_of: Grader = partial(_grade_one, args.answers, intake)
        else:
            assert isinstance(entries, list)  # read whole above
            answers = [e for e in entries if len(e) == 4]
            show = args.progress
            if show is None:
                show = sys.stderr.isatty() and len(answers) >= PROGRESS_MIN_ROWS
            progress = Progress(len(answers), show)
            forked = _forks(args.jobs, wanted, answers, judge)
            if not forked:
                outcome_of = _in_turn(_grade_all(args.answers, answers, judge, progress, intake))
    except (TaskLoadError, InputError, UnusableInputError) as exc:
        print(f"gradeproxy grade: error: {exc}", file=sys.stderr)
        return 2
    report = Report(tasks.digest)
    try:
        if forked:
            assert isinstance(entries, list)  # forked runs read every row first
            lines = _graded_in_slices(args, entries, tasks.digest, wanted, report, intake, progress)
            if out is not None:
                write_atomically(out, lines)
            else:
                deque(lines, maxlen=0)
        elif out is not None and wanted == "line":
            rows = _rows(entries, outcome_of, tasks.digest, wanted, report)
            write_atomically(out, batched_lines(rows))
        elif out is not None:
            rows = _rows(entries, outcome_of, tasks.digest, wanted, report)
            write_rows(out, list(rows), wide=args.wide)
        else:
            deque(_rows(entries, outcome_of, tasks.digest, wanted, report), maxlen=0)
        # Problems met reading and grading, in line order: a streamed run meets them in turn,
        # a run read whole (or graded in slices) meets every reading problem first.
        intake.problems.sort(key=_line)
        if args.report is not None:
            data = {**report.to_dict(), "input": intake.to_dict()}
            write_atomically(args.report, [dumps(data) + b"\n"])
    except OSError as exc:
        print(f"gradeproxy grade: error: cannot write output: {exc}", file=sys.stderr)
        return 2
    except UnusableInputError as exc:  # --strict and an answer that could not be graded
        print(f"gradeproxy grade: error: {exc}", file=sys.stderr)
        return 2
    print(intake.summary(_graded(report)))
    print(report.render_table())
    intake.warn()
    return intake.exit_code()


def _rows(
    entries: Iterable[Answer | Refused],
    outcome_of: Grader,
    digest: str,
    wanted: str | None,
    report: Report,
) -> Iterator[Any]:
    """Each entry's row in input order (``wanted``: ``"line"`` its JSONL line, ``"row"`` the
    row, None nothing but the report), each answer's outcome from ``outcome_of``, the report
    counted as it goes."""
    for entry in entries:
        if len(entry) == 3:  # refused while reading
            problem, task, source = entry
            row = _error_row(problem, task, source, digest)
            yield dumps_line(row) if wanted == "line" else row
            continue
        _, task, _, source = entry
        outcome = outcome_of(*entry)
        if isinstance(outcome, Problem):
            row = _error_row(outcome, task, source, digest)
            yield dumps_line(row) if wanted == "line" else row
            continue
        report.add(task, outcome)
        if wanted is not None:
            row = offline_row(task, outcome, digest, source)
            yield dumps_line(row) if wanted == "line" else row


def _error_row(
    problem: Problem, task: Task | None, source: dict[str, Any] | None, digest: str
) -> dict[str, Any]:
    task_id = task.id if task is not None else (source or {}).get("task_id")
    return input_error_row(task_id, task, problem.reason_code, problem.text(), digest, source)


def _graded(report: Report) -> str:
    """The graded rows for the header: model failures by reason (errors of the engine apart)."""
    total, failures = report.total, report.failures
    reasons = ", ".join(f"{code} {n}" for code, n in sorted(failures.items()))
    text = f"{total.n + total.errors} graded, {total.passed} passed"
    text += f", {total.n - total.passed} model failures ({reasons})" if failures else ""
    return text + (f", {total.errors} grading errors" if total.errors else "")
