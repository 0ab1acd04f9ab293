"""``gradeproxy regrade``: grade stored answers again with a new task set; write what changed.

``gradeproxy regrade --results ROWS... --tasks NEW --out DIFF.jsonl [--judge CFG] [--json]``
reads result rows (offline rows, or the proxy's ``grades.jsonl``: its rotations ``.5`` … ``.1``
are read first unless ``--no-rotations``),
grades each stored answer against the new task set (``grader/analysis/regrade.py``), writes one JSON
line per changed column, and prints counts per task, per check and per mutation kind.

Exit 0 when the re-grade ran, whatever changed; exit 2 on unreadable input (``file:line``), an
unusable task set or judge config, or an unwritable output, with nothing written.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from grader._json import dumps
from grader.analysis.regrade import RegradeSummary, diff_lines, missing_line, not_regradable
from grader.checks.judge import Judge
from grader.cli._io import (
    ExpandGlobs,
    InputError,
    Source,
    jsonl_bytes,
    read_jsonl,
    results_source,
    write_atomically,
)
from grader.cli.parquet import with_rotations
from grader.engine import Outcome, grade, grade_async, needs_judge, offline_context
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
        help="result rows (quoted globs expanded) or a postgresql:// URL",
    )
    parser.add_argument("--tasks", required=True, type=Path, help="the new task file or folder")
    parser.add_argument("--out", required=True, type=Path, help="the diff (JSONL)")
    parser.add_argument("--judge", type=Path, help="judge config for label_model/score_model")
    parser.add_argument("--json", action="store_true", help="print the counts as JSON")
    parser.add_argument(
        "--no-rotations",
        action="store_true",
        help="read only the files named, not their .1 .2 … rotations",
    )
    parser.set_defaults(handler=run)


Stored = tuple[str, dict[str, Any]]


def read_rows(paths: list[Source]) -> list[Stored]:
    rows: list[Stored] = []
    for path in paths:
        for lineno, row in read_jsonl(path):
            where = f"{path}:{lineno}"
            if not isinstance(row, dict) or not isinstance(row.get("task_id"), str):
                raise InputError(f"{where}: expected a result row with a string 'task_id'")
            checks = row.get("checks", [])
            if not isinstance(checks, list) or not all(isinstance(c, dict) for c in checks):
                raise InputError(f"{where}: 'checks' must be a list of column objects")
            rows.append((where, row))
    return rows


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
    try:
        if args.judge is not None:
            from grader.cli.validate import load_judge

            try:
                judge = load_judge(args.judge)
            except ValueError as exc:
                raise InputError(str(exc)) from None
        tasks = load_tasks(args.tasks)
        rows = read_rows(args.results if args.no_rotations else with_rotations(args.results))
        lines, summary = regrade(rows, tasks, judge)
        write_atomically(args.out, jsonl_bytes(lines))
    except (TaskLoadError, InputError) as exc:
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
        sys.stdout.buffer.write(dumps(summary.to_dict()) + b"\n")
        sys.stdout.flush()
    else:
        print(summary.render())
    return 0
