"""``gradeproxy export``: result rows (JSONL, live rotations included) to one Parquet file.

Live rows stay JSONL (a Parquet file is readable only once its footer is written, so a crash
would lose a whole open file); export them when a run is over. Given ``results/grades.jsonl``,
its rotations (``grades.jsonl.5`` … ``.1``) are read first, oldest first, so the Parquet rows
are in the order they were written. Where the rows hold label rows (the review queue's,
docs/review.md), each labelled row gets its latest label joined by ``row_id``: ``label``
(``pass`` / ``fail``), ``label_note``, ``label_reviewer``, ``label_at`` (null on a row nobody
labelled); the label rows are exported too. A line that is not JSON (cut off by a crash, say) or not
an object is skipped and counted by reason (grader/intake.py), never a refused file.

Exit 0 every row exported; 1 some rows were skipped (the first few named on stderr with
``file:line``); 2 nothing usable (no such file, not JSONL, a missing pyarrow naming the
``gradeproxy[parquet]`` extra, an unwritable output). ``--strict`` refuses the run at the first
bad row (exit 2, nothing written).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from gradeproxy.cli._io import (
    ExpandGlobs,
    InputError,
    Source,
    add_no_rotations,
    add_strict,
    results_source,
    source_lines,
)
from gradeproxy.cli.parquet import require_pyarrow, with_rotations, write_parquet
from grader.intake import Intake, UnusableInputError
from grader.labels import is_label, latest_labels

LABEL_COLUMNS = ("label", "label_note", "label_reviewer", "label_at")


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "export",
        help="convert result rows (JSONL) to Parquet",
        description="Convert result rows (JSONL files, live rotations included) to Parquet.",
    )
    parser.add_argument(
        "--results",
        required=True,
        nargs="+",
        type=results_source,
        action=ExpandGlobs,
        metavar="FILE",
        help="result JSONL (quoted globs expanded) or a "
        "postgresql:// URL (filters: ?run=&since=&until=&task=&variant=)",
    )
    parser.add_argument("--parquet", required=True, type=Path, metavar="OUT", help="Parquet file")
    parser.add_argument(
        "--wide",
        action="store_true",
        help="add check.<name>.passed/.score/.reason_code columns (names escaped)",
    )
    add_strict(parser)
    add_no_rotations(parser)
    parser.set_defaults(handler=run)


def read_rows(paths: list[Source], intake: Intake) -> list[dict[str, Any]]:
    """The result rows of every file; a row that is not one is skipped and counted."""
    rows: list[dict[str, Any]] = []
    for path in paths:
        for lineno, row in source_lines(intake, path):
            if not isinstance(row, dict):
                message = "expected a result row (a JSON object)"
                intake.problem(str(path), lineno, "not_an_object", message)
                continue
            rows.append(row)
    return rows


def with_labels(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row with its latest label's columns, when any row is a label (else as given)."""
    if not any(is_label(row) for row in rows):
        return rows
    latest = latest_labels(rows)
    out: list[dict[str, Any]] = []
    for row in rows:
        if is_label(row) or any(column in row for column in LABEL_COLUMNS):
            out.append(row)  # a row that carries such a field keeps its own
            continue
        label = latest.get(("row", row["row_id"])) if isinstance(row.get("row_id"), str) else None
        values = (
            (label["verdict"], label.get("note"), label.get("reviewer"), label["at"])
            if label is not None
            else (None, None, None, None)
        )
        out.append({**row, **dict(zip(LABEL_COLUMNS, values, strict=True))})
    return out


def run(args: argparse.Namespace) -> int:
    intake = Intake("export", strict=args.strict)
    try:
        require_pyarrow()
        paths = args.results if args.no_rotations else with_rotations(args.results)
        rows = with_labels(read_rows(paths, intake))
        write_parquet(args.parquet, rows, wide=args.wide)
    except (InputError, UnusableInputError) as exc:
        print(f"gradeproxy export: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"gradeproxy export: error: cannot write output: {exc}", file=sys.stderr)
        return 2
    print(f"{len(rows)} rows from {len(paths)} file(s) -> {args.parquet}")
    if intake.problems:
        print(intake.summary(f"{len(rows)} exported"))
    intake.warn()
    return intake.exit_code()
