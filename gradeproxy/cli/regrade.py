"""``gradeproxy regrade``: grade stored answers again with a new task set; write what changed.

``gradeproxy regrade --results ROWS... --tasks NEW --out DIFF.jsonl [--judge CFG] [--json]``
reads result rows (offline rows, or the proxy's ``grades.jsonl``: its rotations ``.5`` … ``.1``
are read first unless ``--no-rotations``),
grades each stored answer against the new task set (``grader/analysis/regrade.py``), writes one JSON
line per changed column, and prints counts per task, per check and per mutation kind.

A stored row that cannot be read (not JSON or cut off, not a result row, a ``checks`` that is
not a list of columns) gets one ``input_error`` line in the diff (``reason_code``, and a
``file:line`` reason) and is counted apart, by reason, in the printed counts' ``input``.

Exit 0 every row read, whatever changed; 1 some rows could not be read (the first few named
on stderr); 2 nothing usable (no such file, not JSONL, an unusable task set or judge config, an
unwritable output), with nothing written. ``--strict`` refuses the run at the first bad row.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gradeproxy.cli._io import (
    ExpandGlobs,
    InputError,
    Source,
    add_no_rotations,
    add_strict,
    jsonl_bytes,
    results_source,
    source_lines,
    write_atomically,
)
from gradeproxy.cli.parquet import with_rotations
from grader.analysis.regrade import RegradeSummary, diff_lines, missing_line, not_regradable
from grader.capture import is_capture
from grader.checks.judge import Judge
from grader.engine import Outcome, grade, grade_async, needs_judge, offline_context
from grader.intake import InputReason, Intake, Problem, UnusableInputError
from grader.json import dumps
from grader.labels import is_label
from grader.loader import load_tasks
from grader.tasks import Task, TaskLoadError, TaskSet


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "regrade",
        help="grade stored answers with another task set and classify every change",
        description="Re-grade the answers stored in result rows against a new task set and "
        "write one line per changed check column (seed 003's migration diff).",
    )
    parser.add_argument(
        "--results",
        required=True,
        nargs="+",
        type=results_source,
        action=ExpandGlobs,
        metavar="FILE",
        help="result rows (quoted globs expanded) or a "
        "postgresql:// URL (filters: ?run=&since=&until=&task=&variant=)",
    )
    parser.add_argument("--tasks", required=True, type=Path, help="the new task file or folder")
    parser.add_argument("--out", required=True, type=Path, help="the diff (JSONL)")
    parser.add_argument("--judge", type=Path, help="judge config for label_model/score_model")
    parser.add_argument("--json", action="store_true", help="print the counts as JSON")
    add_strict(parser)
    add_no_rotations(parser)
    parser.set_defaults(handler=run)


Stored = tuple[str, dict[str, Any]]


def read_rows(paths: list[Source], intake: Intake) -> tuple[list[Stored], list[dict[str, Any]]]:
    """The readable result rows, and one ``input_error`` diff line per row that is not."""
    rows: list[Stored] = []
    refused: list[dict[str, Any]] = []
    for path in paths:
        for lineno, row in source_lines(intake, path, unreadable=True):
            if isinstance(row, Problem):
                refused.append(_input_error(row, None))
                continue
            if not isinstance(row, dict):
                problem = intake.problem(str(path), lineno, "not_an_object", _ROW)
                refused.append(_input_error(problem, None))
                continue
            if is_capture(row) or is_label(row):  # an untagged answer, a person's label
                continue
            if not isinstance(row.get("task_id"), str):
                code: InputReason = "missing_field" if "task_id" not in row else "bad_field"
                refused.append(_input_error(intake.problem(str(path), lineno, code, _ROW), row))
                continue
            checks = row.get("checks", [])
            if not isinstance(checks, list) or not all(isinstance(c, dict) for c in checks):
                message = "'checks' must be a list of column objects"
                problem = intake.problem(str(path), lineno, "bad_field", message)
                refused.append(_input_error(problem, row))
                continue
            rows.append((f"{path}:{lineno}", row))
    return rows, refused


_ROW = "expected a result row with a string 'task_id'"


def _input_error(problem: Problem, row: dict[str, Any] | None) -> dict[str, Any]:
    """The diff line of a stored row that cannot be read: no verdict before or after."""
    row = row or {}
    task_id = row.get("task_id")
    return {
        "task_id": task_id if isinstance(task_id, str) else None,
        "sample_id": row.get("sample_id"),
        "check": None,
        "change": "input_error",
        "reason_code": problem.reason_code,
        "reason": problem.text(),
        "result_before": row.get("result"),
        "result_after": "error",
    }


def _grade_all(items: list[tuple[Task, dict[str, Any]]], judge: Judge | None) -> list[Outcome]:
    """Grade in order; judge checks (only with ``--judge``) on one event loop."""

    def one(task: Task, row: Mapping[str, Any]) -> Outcome:
        return grade(task, row["answer"], offline_context(task, row))

    if judge is None or not any(needs_judge(task) for task, _ in items):
        return [one(task, row) for task, row in items]

    async def judged() -> list[Outcome]:
        return [
            await grade_async(task, row["answer"], offline_context(task, row), judge=judge)
            if needs_judge(task)
            else one(task, row)
            for task, row in items
        ]

    import asyncio

    return asyncio.run(judged())


def regrade(
    rows: list[Stored], tasks: TaskSet, judge: Judge | None
) -> tuple[list[dict[str, Any]], RegradeSummary]:
    """The diff lines, in row order, and the counts."""
    summary = RegradeSummary(rows=len(rows))
    gradable: list[tuple[Task, dict[str, Any]]] = []
    for _, row in rows:
        task = tasks.get(row["task_id"])
        if task is None:
            summary.missing_tasks[row["task_id"]] += 1
            continue
        reason = not_regradable(row, task)
        if reason is not None:
            summary.not_regradable[reason] += 1
            continue
        gradable.append((task, row))
    outcomes = iter(_grade_all(gradable, judge))
    summary.regraded = len(gradable)
    out: list[dict[str, Any]] = []
    for _, row in rows:
        task = tasks.get(row["task_id"])
        if task is None:
            lines = [missing_line(row)]
        elif not_regradable(row, task) is None:
            lines = diff_lines(row, task, next(outcomes), tasks.digest)
        else:
            continue
        summary.add(lines)
        out.extend(lines)
    return out, summary


def run(args: argparse.Namespace) -> int:
    judge = None
    intake = Intake("regrade", strict=args.strict, what="error row")
    try:
        if args.judge is not None:
            from gradeproxy.cli.validate import load_judge

            try:
                judge = load_judge(args.judge)
            except ValueError as exc:
                raise InputError(str(exc)) from None
        tasks = load_tasks(args.tasks)
        paths = args.results if args.no_rotations else with_rotations(args.results)
        rows, refused = read_rows(paths, intake)
        lines, summary = regrade(rows, tasks, judge)
        write_atomically(args.out, jsonl_bytes([*lines, *refused]))
    except (TaskLoadError, InputError, UnusableInputError) as exc:
        print(f"gradeproxy regrade: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"gradeproxy regrade: error: cannot write output: {exc}", file=sys.stderr)
        return 2
    if judge is None and any(needs_judge(t) for t in tasks.tasks.values()):
        print(
            "gradeproxy regrade: note: no --judge: judge columns are errors in the new version",
            file=sys.stderr,
        )
    if args.json:
        data = {**summary.to_dict(), "input": intake.to_dict()}
        sys.stdout.buffer.write(dumps(data) + b"\n")
        sys.stdout.flush()
    else:
        print(intake.summary(f"{summary.regraded} re-graded"))
        print(summary.render())
    intake.warn()
    return intake.exit_code()
