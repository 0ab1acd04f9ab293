"""``gradeproxy import bfcl``: BFCL question and possible-answer files to a task file.

BFCL's files are JSON Lines (one entry a line). The questions file is required; the answers
file is optional for irrelevance files, whose entries have no possible answer. Every written
task is loaded back through the task loader before the file is replaced, so a conversion that
the grader would refuse never reaches disk. Exit 0 on success, 2 on unusable input.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from grader.importers.bfcl import BfclImportError, convert_all
from grader.json import JSONError, dumps, loads_exact
from grader.loader import parse_task
from grader.tasks import TaskLoadError


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "import", help="convert another benchmark's files to a task file"
    )
    kinds = parser.add_subparsers(dest="kind", required=True, metavar="KIND")
    bfcl = kinds.add_parser("bfcl", help="BFCL questions and possible answers to tasks")
    bfcl.add_argument("--questions", type=Path, required=True, help="BFCL_v4_<category>.json")
    bfcl.add_argument("--answers", type=Path, help="possible_answer/BFCL_v4_<category>.json")
    bfcl.add_argument("--out", type=Path, required=True, help="task file (JSONL) to write")
    bfcl.set_defaults(handler=run)


def read_jsonl(path: Path) -> list[Any]:
    """Every line of a JSON Lines file; raise ``ValueError`` naming ``file:line``."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read: {exc}") from None
    rows = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                rows.append(loads_exact(line))
            except JSONError as exc:
                raise ValueError(f"{path}:{lineno}: not valid JSON: {exc}") from None
    return rows


def run(args: argparse.Namespace) -> int:
    try:
        questions = read_jsonl(args.questions)
        answers = read_jsonl(args.answers) if args.answers else None
        tasks = list(convert_all(questions, answers))
        for task in tasks:
            parse_task(task, f"{args.out}: task {task['id']!r}")
    except (ValueError, KeyError, TypeError, BfclImportError, TaskLoadError) as exc:
        print(f"gradeproxy import bfcl: {exc}", file=sys.stderr)
        return 2
    out: Path = args.out
    fd, tmp = tempfile.mkstemp(dir=out.parent if str(out.parent) else ".", prefix=".import-")
    with os.fdopen(fd, "wb") as handle:
        for task in tasks:
            handle.write(dumps(task) + b"\n")
    os.replace(tmp, out)
    print(f"wrote {len(tasks)} tasks to {out}")
    return 0
