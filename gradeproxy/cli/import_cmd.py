"""``gradeproxy import bfcl``: BFCL question and possible-answer files to a task file.

BFCL's files are JSON Lines (one entry a line). The questions file is required; the answers
file is optional for irrelevance files, whose entries have no possible answer. Every written
task is loaded back through the task loader before the file is replaced, so a conversion that
the grader would refuse never reaches disk. Exit 0 on success, 2 on unusable input or a category
the importer does not support (one line on stderr naming it). The summary counts the tasks per
BFCL category and the entries flagged ``bfcl_reference_fails``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import Counter
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
                if lineno == 1 and _one_object(text):
                    raise ValueError(f"{path}: {NOT_ENTRIES}") from None
                raise ValueError(f"{path}:{lineno}: not valid JSON: {exc}") from None
    return rows


NOT_ENTRIES = (
    "one JSON object, not BFCL entries (one object a line): BFCL's format_sensitivity file "
    "(ids of other categories' entries to ask again in other prompt formats) is not supported"
)


def _one_object(text: str) -> bool:
    """Whether the whole text is one JSON object (BFCL's format_sensitivity file)."""
    try:
        return isinstance(loads_exact(text), dict)
    except JSONError:
        return False


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
    print(summary(tasks, out))
    return 0


def summary(tasks: list[dict[str, Any]], out: Path) -> str:
    """``wrote N tasks to OUT (category: n, ...)``, and the flagged entries when any."""
    categories = Counter(str(t["metadata"].get("category")) for t in tasks)
    per = ", ".join(f"{name}: {n}" for name, n in sorted(categories.items()))
    line = f"wrote {len(tasks)} tasks to {out} ({per})"
    flagged = [t["id"] for t in tasks if "bfcl_reference_fails" in t["metadata"]]
    if flagged:
        line += (
            f"; {len(flagged)} flagged bfcl_reference_fails (BFCL's checker fails their own "
            f"possible answer): {', '.join(flagged)}"
        )
    return line
