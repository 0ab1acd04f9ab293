"""``gradeproxy grade``: grade a file of answers against a task set, offline.

Every answer is graded by the engine (``grader.engine``) on every check of its task, and each
row is :mod:`grader.rows`' offline row (``offline_row``): the verdict, the answer, and every
other field of the answers row carried unchanged (``sample_id``, ``model``, ``run``,
``attempt``, ``sampling`` …: docs/offline.md), so rows join to run metadata by value. An
answers row is ``{"task_id", "answer", "sample_id"?, "tools"?, "request"?, ...}``: ``tools``
(or ``request.tools``) is the offline context of a ``from_request`` schema, else the task's
own ``tools``. A field that would overwrite a result field (``result``, ``checks`` …) is
refused with ``file:line``. ``--out x.parquet`` writes Parquet (``gradeproxy[parquet]``).

Exit 0 when grading ran, whatever the scores; exit 2 on unreadable input, an unknown task id,
an answer that is not a string (the typed wires refuse it too; only the Python API scores it
``not_a_string``) or an answer that cannot be graded, always with ``file:line`` and with
nothing written: every input row is validated before the first byte of output.
"""

from __future__ import annotations

import argparse
import gc
import sys
from pathlib import Path
from typing import Any

from grader._json import dumps
from grader.checks.judge import Judge
from grader.cli._io import InputError, Progress, read_jsonl, write_atomically
from grader.cli.parquet import is_parquet, require_pyarrow, write_rows
from grader.engine import Outcome, grade, grade_async, needs_judge, offline_context
from grader.loader import load_tasks
from grader.report import Report
from grader.rows import carried_conflicts, offline_row
from grader.tasks import Task, TaskLoadError, TaskSet

PROGRESS_MIN_ROWS = 1000
_JSON_TYPES = {
    dict: "an object",
    list: "an array",
    type(None): "null",
    bool: "a boolean",
    int: "a number",
    float: "a number",
}
Answer = tuple[str, Task, str, dict[str, Any]]  # where, task, answer, the answers row


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
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=f"progress bar on stderr (default: on a terminal, from {PROGRESS_MIN_ROWS} rows)",
    )
    parser.set_defaults(handler=run)


def read_answers(path: Path, tasks: TaskSet) -> list[Answer]:
    rows: list[Answer] = []
    for lineno, row in read_jsonl(path):
        where = f"{path}:{lineno}"
        if not isinstance(row, dict):
            raise InputError(f'{where}: expected an object {{"task_id", "answer"}}')
        task_id = row.get("task_id")
        if not isinstance(task_id, str):
            raise InputError(f"{where}: 'task_id' must be a string")
        if "answer" not in row:
            raise InputError(f"{where}: no 'answer' field")
        answer = row["answer"]
        if not isinstance(answer, str):
            kind = _JSON_TYPES.get(type(answer), type(answer).__name__)
            raise InputError(
                f"{where}: 'answer' must be a string (the raw model output), not {kind}: "
                "write a tool call as its JSON text, the way the model sent it"
            )
        task = tasks.get(task_id)
        if task is None:
            raise InputError(f"{where}: unknown task id {task_id!r}")
        for key, shape in (("tools", list), ("request", dict)):
            if key in row and not isinstance(row[key], shape):
                raise InputError(f"{where}: '{key}' must be a JSON {shape.__name__}")
        clash = carried_conflicts(row)
        if clash:
            raise InputError(
                f"{where}: field {clash[0]!r} would overwrite the result row's own field of "
                "that name: rename it (answers-file fields ride into the row unchanged)"
            )
        sample_id = row.get("sample_id")
        if sample_id is not None and not isinstance(sample_id, str | int):
            raise InputError(f"{where}: 'sample_id' must be a string or an integer")
        rows.append((where, task, answer, row))
    return rows


def _grade_one(where: str, task: Task, answer: str, row: dict[str, Any]) -> Outcome:
    try:
        return grade(task, answer, offline_context(task, row))
    except Exception as exc:  # a grader bug: name the row, never a traceback
        raise InputError(_cannot(where, task, exc)) from None


async def _grade_judged(
    where: str, task: Task, answer: str, row: dict[str, Any], judge: Judge
) -> Outcome:
    try:
        return await grade_async(task, answer, offline_context(task, row), judge=judge)
    except Exception as exc:
        raise InputError(_cannot(where, task, exc)) from None


def _cannot(where: str, task: Task, exc: Exception) -> str:
    return (
        f"{where}: cannot grade this answer against task {task.id!r} ({task.source}): "
        f"{type(exc).__name__}: {exc}"
    )


def _grade_all(answers: list[Answer], judge: Judge | None, progress: Progress) -> list[Outcome]:
    """Grade in input order; judge checks (only with ``--judge``) on one event loop."""
    if judge is None or not any(needs_judge(task) for _, task, _, _ in answers):
        outcomes = []
        for done, answer in enumerate(answers, start=1):
            outcomes.append(_grade_one(*answer))
            progress.update(done)
        return outcomes

    async def judged() -> list[Outcome]:
        graded: list[Outcome] = []
        for done, (where, task, answer, row) in enumerate(answers, start=1):
            if needs_judge(task):
                graded.append(await _grade_judged(where, task, answer, row, judge))
            else:
                graded.append(_grade_one(where, task, answer, row))
            progress.update(done)
        return graded

    import asyncio

    return asyncio.run(judged())


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    finally:
        gc.unfreeze()  # called in process (tests, the Python API's users): leave gc as it was


def _run(args: argparse.Namespace) -> int:
    judge = None
    try:
        if args.out is not None and is_parquet(args.out):
            require_pyarrow()
        if args.judge is not None:
            from grader.cli.validate import load_judge

            try:
                judge = load_judge(args.judge)
            except ValueError as exc:
                raise InputError(str(exc)) from None
        collecting = gc.isenabled()
        gc.disable()  # loading builds no garbage cycles, only what lives to the end
        try:
            tasks = load_tasks(args.tasks)
            answers = read_answers(args.answers, tasks)
        finally:
            gc.freeze()  # the tasks and answers: the collector need not scan them again
            if collecting:
                gc.enable()
        show = args.progress
        if show is None:
            show = sys.stderr.isatty() and len(answers) >= PROGRESS_MIN_ROWS
        outcomes = _grade_all(answers, judge, Progress(len(answers), show))
    except (TaskLoadError, InputError) as exc:
        print(f"gradeproxy grade: error: {exc}", file=sys.stderr)
        return 2
    report = Report(tasks.digest)
    rows: list[dict[str, Any]] = []
    for (_, task, _, source), outcome in zip(answers, outcomes, strict=True):
        report.add(task, outcome)
        if args.out is not None:
            rows.append(offline_row(task, outcome, tasks.digest, source))
    try:
        if args.out is not None:
            write_rows(args.out, rows, wide=args.wide)
        if args.report is not None:
            write_atomically(args.report, [dumps(report.to_dict()) + b"\n"])
    except OSError as exc:
        print(f"gradeproxy grade: error: cannot write output: {exc}", file=sys.stderr)
        return 2
    print(report.render_table())
    return 0
