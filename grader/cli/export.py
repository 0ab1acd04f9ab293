"""``gradeproxy export``: result rows (JSONL, live rotations included) to one Parquet file.

Live rows stay JSONL (a Parquet file is readable only once its footer is written, so a crash
would lose a whole open file); export them when a run is over. Given ``results/grades.jsonl``,
its rotations (``grades.jsonl.5`` … ``.1``) are read first, oldest first, so the Parquet rows
are in the order they were written. Exit 0 on success; 2 on unreadable input (``file:line``),
a row that is not an object, or a missing pyarrow (naming the ``gradeproxy[parquet]`` extra).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from grader.cli._io import ExpandGlobs, InputError, Source, read_jsonl, results_source
from grader.cli.parquet import require_pyarrow, with_rotations, write_parquet


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
        help="result JSONL (quoted globs expanded) or a postgresql:// URL",
    )
    parser.add_argument("--parquet", required=True, type=Path, metavar="OUT", help="Parquet file")
    parser.add_argument(
        "--wide",
        action="store_true",
        help="add check.<name>.passed/.score/.reason_code columns (names escaped)",
    )
    parser.add_argument(
        "--no-rotations",
        action="store_true",
        help="read only the files named, not their .1 .2 … rotations",
    )
    parser.set_defaults(handler=run)


def read_rows(paths: list[Source]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in paths:
        for lineno, row in read_jsonl(path):
            if not isinstance(row, dict):
                raise InputError(f"{path}:{lineno}: expected a result row (a JSON object)")
            rows.append(row)
    return rows


def run(args: argparse.Namespace) -> int:
    try:
        require_pyarrow()
        paths = args.results if args.no_rotations else with_rotations(args.results)
        rows = read_rows(paths)
        write_parquet(args.parquet, rows, wide=args.wide)
    except InputError as exc:
        print(f"gradeproxy export: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"gradeproxy export: error: cannot write output: {exc}", file=sys.stderr)
        return 2
    print(f"{len(rows)} rows from {len(paths)} file(s) -> {args.parquet}")
    return 0
