"""``gradeproxy tasks draft`` and ``gradeproxy tasks promote``: from traffic to reviewed tasks.

``draft --from ROWS`` reads result rows (JSONL files or a ``postgresql://`` URL, through the
same reader loop as every row command) and writes task drafts (grader/drafts.py) to ``--out``,
never inside the task set the proxy loads (``--tasks``, ``--config``'s ``tasks.path`` or
``GRADEPROXY_TASKS_PATH``): a draft is refused by the loader, and a reload must not fail over
one. ``promote DRAFTS [--labels ROWS] --out TASKS`` turns drafts into tasks: every draft
without ``--labels``; with it, per each draft's latest ``kind: "label"`` row, ``pass`` keeps
it, ``edit`` replaces its expected call, ``fail`` and no label leave it out (counted). Every
promoted task is validated as the loader would before anything is written.

Exit codes as every batch command's (docs/offline.md): 0 every row used or counted as unused,
1 some rows were bad (skipped and named on stderr), 2 nothing usable (no such file, a bad
``--filter``, an output inside the task set, an unwritable output); ``--strict`` refuses the
run at the first bad row.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from gradeproxy.cli._io import (
    ExpandGlobs,
    InputError,
    Source,
    add_strict,
    jsonl_bytes,
    results_source,
    source_lines,
    write_atomically,
)
from grader.drafts import (
    Drafter,
    DraftRowError,
    FilterError,
    Label,
    RowFilter,
    label_of,
    latest_labels,
    promote,
)
from grader.errors import GraderError
from grader.intake import Intake, UnusableInputError
from grader.loader import parse_task
from grader.tasks import TaskLoadError


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "tasks",
        help="draft tasks from captured traffic, promote reviewed drafts",
        description="Draft tasks from capture rows and failing rows; promote reviewed drafts.",
    )
    commands = parser.add_subparsers(dest="tasks_command", required=True, metavar="SUBCOMMAND")
    draft = commands.add_parser(
        "draft",
        help="group capture and failing rows into task drafts",
        description="Group capture rows and failing graded rows by tool set and prompt hash and"
        " write one task draft per group (status: draft).",
    )
    draft.add_argument(
        "--from",
        dest="sources",
        required=True,
        nargs="+",
        type=results_source,
        action=ExpandGlobs,
        metavar="ROWS",
        help="result rows: JSONL files (quoted globs expanded) or a postgresql:// URL",
    )
    draft.add_argument(
        "--filter",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="kind=capture|failing, model=ID, route=chat_completions|responses,"
        " since=ISO-TIME (repeatable; all must hold)",
    )
    draft.add_argument("--out", required=True, type=Path, help="drafts file (JSONL)")
    draft.add_argument(
        "--tasks", type=Path, help="the proxy's task file or folder: --out must not be in it"
    )
    draft.add_argument(
        "--config", type=Path, help="the proxy's config: --out must not be in its tasks.path"
    )
    add_strict(draft)
    draft.set_defaults(handler=run_draft)
    promote_cmd = commands.add_parser(
        "promote",
        help="turn reviewed drafts into tasks",
        description="Turn drafts into tasks (status removed, provenance kept); with --labels,"
        " only drafts whose latest label is pass or edit.",
    )
    promote_cmd.add_argument("drafts", type=Path, help="drafts file (from 'tasks draft')")
    promote_cmd.add_argument(
        "--labels",
        nargs="+",
        type=results_source,
        action=ExpandGlobs,
        metavar="ROWS",
        help="rows holding kind: label rows (JSONL files or a postgresql:// URL)",
    )
    promote_cmd.add_argument("--out", required=True, type=Path, help="task file (JSONL)")
    add_strict(promote_cmd)
    promote_cmd.set_defaults(handler=run_promote)


def _task_paths(args: argparse.Namespace) -> list[Path]:
    """Where the proxy's tasks are: ``--tasks``, the config's ``tasks.path``, the variable."""
    paths = [args.tasks] if args.tasks is not None else []
    if args.config is not None:
        from proxy.config import ConfigError, load_config  # lazily: only with --config

        try:
            config = load_config(args.config)
        except ConfigError as exc:
            raise InputError(f"--config: {exc}") from None
        if config.tasks.path is not None:
            paths.append(config.tasks.path)
    if os.environ.get("GRADEPROXY_TASKS_PATH"):
        paths.append(Path(os.environ["GRADEPROXY_TASKS_PATH"]))
    return paths


def _inside(out: Path, tasks: Path) -> bool:
    out, tasks = out.resolve(), tasks.resolve()
    return out == tasks or tasks in out.parents


def run_draft(args: argparse.Namespace) -> int:
    intake = Intake("tasks draft", strict=args.strict)
    try:
        row_filter = RowFilter.parse(args.filter)
        for tasks in _task_paths(args):
            if _inside(args.out, tasks):
                raise InputError(
                    f"--out {args.out}: inside the task set {tasks}; drafts are refused by the"
                    " loader: write them elsewhere and promote them after review"
                )
        drafter = Drafter(row_filter)
        for source in args.sources:
            _draft_rows(intake, source, drafter)
        drafts = drafter.drafts()
        write_atomically(args.out, jsonl_bytes(drafts))
    except (InputError, UnusableInputError, FilterError) as exc:
        print(f"gradeproxy tasks draft: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"gradeproxy tasks draft: error: cannot write output: {exc}", file=sys.stderr)
        return 2
    print(f"{len(drafts)} drafts from {drafter.used} rows -> {args.out}")
    if drafter.unused:
        print("rows not drafted: " + _counts(drafter.unused))
    print(intake.summary(f"{drafter.used} drafted"))
    intake.warn()
    return intake.exit_code()


def _draft_rows(intake: Intake, source: Source, drafter: Drafter) -> None:
    for lineno, row in source_lines(intake, source):
        if not isinstance(row, dict):
            intake.problem(str(source), lineno, "not_an_object", "expected a result row")
            continue
        try:
            drafter.add(row)
        except DraftRowError as exc:
            intake.problem(str(source), lineno, exc.reason_code, str(exc))


def _counts(counts: Counter[str]) -> str:
    return ", ".join(f"{reason} {count}" for reason, count in sorted(counts.items()))


def run_promote(args: argparse.Namespace) -> int:
    intake = Intake("tasks promote", strict=args.strict)
    left_out: Counter[str] = Counter()
    try:
        labels = _labels(intake, args.labels) if args.labels else None
        tasks: list[dict[str, Any]] = []
        seen: set[str] = set()
        for lineno, draft in source_lines(intake, args.drafts):
            task = _promoted(intake, args.drafts, lineno, draft, labels, left_out)
            if task is None:
                continue
            if task["id"] in seen:
                intake.problem(args.drafts, lineno, "bad_field", f"task {task['id']!r} twice")
                continue
            seen.add(task["id"])
            tasks.append(task)
        write_atomically(args.out, jsonl_bytes(tasks))
    except (InputError, UnusableInputError) as exc:
        print(f"gradeproxy tasks promote: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"gradeproxy tasks promote: error: cannot write output: {exc}", file=sys.stderr)
        return 2
    print(f"{len(tasks)} tasks -> {args.out}")
    if left_out:
        print("drafts left out: " + _counts(left_out))
    print(intake.summary(f"{len(tasks)} promoted"))
    intake.warn()
    return intake.exit_code()


def _promoted(
    intake: Intake,
    path: Path,
    lineno: int,
    draft: Any,
    labels: dict[str, Label] | None,
    left_out: Counter[str],
) -> dict[str, Any] | None:
    """One draft as a validated task, or None (counted as left out, or a problem row)."""
    if not isinstance(draft, dict):
        intake.problem(path, lineno, "not_an_object", "expected a task draft (a JSON object)")
        return None
    task_id = draft.get("id")
    label = labels.get(task_id) if labels is not None and isinstance(task_id, str) else None
    try:
        task = promote(draft, label, labels is not None)
        parse_task(task, f"{path}:{lineno}")  # what the loader will say, said now
    except LookupError as exc:
        left_out[str(exc.args[0])] += 1
        return None
    except DraftRowError as exc:
        intake.problem(path, lineno, exc.reason_code, str(exc))
        return None
    except (TaskLoadError, GraderError) as exc:
        intake.problem(path, lineno, "bad_field", str(exc))
        return None
    return task


def _labels(intake: Intake, sources: list[Source]) -> dict[str, Label]:
    """The latest draft label per draft id, from every source in the order given."""
    found = []
    for source in sources:
        for lineno, row in source_lines(intake, source):
            if not isinstance(row, dict):
                intake.problem(str(source), lineno, "not_an_object", "expected a row")
                continue
            try:
                label = label_of(row)
            except DraftRowError as exc:
                intake.problem(str(source), lineno, exc.reason_code, str(exc))
                continue
            if label is not None:
                found.append(label)
    return latest_labels(found)
