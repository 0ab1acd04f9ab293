"""``gradeproxy grade``: grade a file of answers against a task set, offline.

Exit 0 when grading ran, whatever the scores; exit 2 on unreadable input or an unknown task id,
with nothing written: every input row is validated before the first byte of output.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from grader._json import dumps
from grader.cli._io import InputError, Progress, jsonl_bytes, read_jsonl, write_atomically
from grader.report import Report
from grader.score import score
from grader.tasks import Task, TaskLoadError, TaskSet, load_tasks
from grader.verdict import Verdict
from grader.version import GRADER_RULES_VERSION

PROGRESS_MIN_ROWS = 1000


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "grade",
        help="grade answers offline against a task set",
        description="Grade a JSONL file of answers against a task set and print a report.",
    )
    parser.add_argument("--tasks", required=True, type=Path, help="task file or folder")
    parser.add_argument(
        "--answers", required=True, type=Path, help='JSONL rows {"task_id", "answer"}'
    )
    parser.add_argument("--out", type=Path, help="write one result row per answer (JSONL)")
    parser.add_argument("--report", type=Path, help="write the run report (JSON)")
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=f"progress bar on stderr (default: on a terminal, from {PROGRESS_MIN_ROWS} rows)",
    )
    parser.set_defaults(handler=run)


def result_row(task: Task, verdict: Verdict, tasks_digest: str) -> dict[str, Any]:
    """One result row; the same shape the proxy writes, minus the live-traffic fields."""
    return {
        "task_id": task.id,
        **verdict.to_dict(),
        "mutationKind": task.mutation_kind,
        "call": verdict.call,
        "tasks_digest": tasks_digest,
        "grader_rules_version": GRADER_RULES_VERSION,
    }


def read_answers(path: Path, tasks: TaskSet) -> list[tuple[Task, Any]]:
    rows: list[tuple[Task, Any]] = []
    for lineno, row in read_jsonl(path):
        where = f"{path}:{lineno}"
        if not isinstance(row, dict):
            raise InputError(f'{where}: expected an object {{"task_id", "answer"}}')
        task_id = row.get("task_id")
        if not isinstance(task_id, str):
            raise InputError(f"{where}: 'task_id' must be a string")
        if "answer" not in row:
            raise InputError(f"{where}: no 'answer' field")
        task = tasks.get(task_id)
        if task is None:
            raise InputError(f"{where}: unknown task id {task_id!r}")
        rows.append((task, row["answer"]))
    return rows


def run(args: argparse.Namespace) -> int:
    try:
        tasks = load_tasks(args.tasks)
        answers = read_answers(args.answers, tasks)
    except (TaskLoadError, InputError) as exc:
        print(f"gradeproxy grade: error: {exc}", file=sys.stderr)
        return 2
    show = args.progress
    if show is None:
        show = sys.stderr.isatty() and len(answers) >= PROGRESS_MIN_ROWS
    progress = Progress(len(answers), show)
    report = Report(tasks.digest)
    rows: list[dict[str, Any]] = []
    for done, (task, answer) in enumerate(answers, start=1):
        verdict = score(task, answer)
        report.add(task, verdict)
        if args.out is not None:
            rows.append(result_row(task, verdict, tasks.digest))
        progress.update(done)
    try:
        if args.out is not None:
            write_atomically(args.out, jsonl_bytes(rows))
        if args.report is not None:
            write_atomically(args.report, [dumps(report.to_dict()) + b"\n"])
    except OSError as exc:
        print(f"gradeproxy grade: error: cannot write output: {exc}", file=sys.stderr)
        return 2
    print(report.render_table())
    return 0
