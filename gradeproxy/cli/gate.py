"""``gradeproxy compare --gate GATE.yaml``: the promotion decision (grader/analysis/gate.py).

Two inputs, one decision: ``--results FILE...`` (live rows: the ``primary`` variant is the
baseline, the ``shadow`` the candidate, paired by ``pair_id`` and ``choice``) or ``--baseline
FILE... --candidate FILE...`` (two offline runs, paired by ``task_id`` and ``sample_id``).
Exit 0: every suite passes or warns; 1: a suite's drop passed its hard-fail threshold; 3: no
hard fail, but a suite cannot be decided at its item count; 2: unusable input. A row that cannot
be read is skipped and counted (grader/intake.py), and makes the run undecidable: exit 3
whatever the suites say (rows the gate could not see might have moved any of them), unless
``--strict``, which refuses the run at the first bad row (exit 2).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from gradeproxy.cli._io import InputError, Source, source_lines
from grader.analysis.gate import (
    EXIT_CANNOT_DECIDE,
    GateError,
    Item,
    SuiteResult,
    check_frozen,
    evaluate,
    exit_code,
    parse_gate,
)
from grader.capture import is_capture
from grader.intake import InputReason, Intake, UnusableInputError
from grader.json import dumps
from grader.labels import is_label

GRADED = ("pass", "fail", "stale")
UNDECIDABLE = EXIT_CANNOT_DECIDE


def load_gate(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise InputError(f"{path}: cannot read the gate file: {exc}") from None


def _rows(paths: list[Source], intake: Intake) -> list[tuple[str, dict[str, Any]]]:
    rows: list[tuple[str, dict[str, Any]]] = []
    for path in paths:
        for lineno, row in source_lines(intake, path):
            if not isinstance(row, dict):
                intake.problem(str(path), lineno, "not_an_object", _ROW)
            elif is_capture(row) or is_label(row):  # an untagged answer, a person's label
                continue
            elif not isinstance(row.get("task_id"), str):
                code: InputReason = "missing_field" if "task_id" not in row else "bad_field"
                intake.problem(str(path), lineno, code, _ROW)
            else:
                rows.append((f"{path}:{lineno}", row))
    return rows


_ROW = "expected a result row with a string 'task_id'"


def _item(row: dict[str, Any], live: bool) -> Item | None:
    if row.get("result") not in GRADED:  # error rows: out of every count
        return None
    task_id = row["task_id"]
    if live:
        key = None if row.get("pair_id") is None else ("pair", row["pair_id"], row.get("choice", 0))
    else:
        sample = row.get("sample_id")
        key = None if sample is None else ("sample", task_id, dumps(sample).decode())
    return Item(task_id, key, row["result"] == "pass")


def read_runs(args: argparse.Namespace, intake: Intake) -> tuple[list[Item], list[Item]]:
    if args.baseline or args.candidate:
        if not (args.baseline and args.candidate) or args.results:
            raise InputError("give --baseline and --candidate together, or --results alone")
        first = [_item(r, False) for _, r in _rows(args.baseline, intake)]
        second = [_item(r, False) for _, r in _rows(args.candidate, intake)]
        return [i for i in first if i is not None], [i for i in second if i is not None]
    if not args.results:
        raise InputError("--gate needs --results (shadow rows) or --baseline and --candidate")
    base: list[Item] = []
    cand: list[Item] = []
    for _, row in _rows(args.results, intake):
        item = _item(row, True)
        if item is not None and row.get("variant") in ("primary", "shadow"):
            (base if row["variant"] == "primary" else cand).append(item)
    return base, cand


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


WORDS = {
    "pass": "pass",
    "warn": "WARN (drop inside the hard-fail threshold, past the noise tolerance)",
    "cannot_decide": "CANNOT DECIDE (the item count cannot resolve the threshold)",
    "hard_fail": "HARD FAIL",
}


def render(results: list[SuiteResult]) -> str:
    lines = [
        "delta = candidate - baseline pass rate, in points; ± the 95% half-width. A hard fail is "
        "decided on the point estimate; the interval is shown beside it."
    ]
    for r in results:
        d = r.to_dict()
        interval = d["delta_interval_95_pts"]
        lines.append(
            f"{r.suite.name}: {'paired' if r.paired else 'unpaired'} n {r.n}"
            f" (left out {r.left_out}), baseline {_fmt(r.baseline_rate, '.3f')}"
            f" candidate {_fmt(r.candidate_rate, '.3f')}, delta {_fmt(r.delta_pts, '+.2f')}"
            f" ± {_fmt(r.half_width_pts, '.2f')} pts"
            + ("" if interval is None else f" [{interval[0]:+.2f}, {interval[1]:+.2f}]")
            + f"; noise {r.suite.noise_pts:g}, hard fail {r.suite.hard_fail_pts:g}"
            f" (decidable below ± {r.suite.hard_fail_pts / 2:g}): {WORDS[r.decision]}"
        )
    return "\n".join(lines)


def run_gate(args: argparse.Namespace) -> int:
    intake = Intake("compare", strict=args.strict)
    try:
        suites = parse_gate(load_gate(args.gate))
        baseline, candidate = read_runs(args, intake)
        for suite in suites:
            check_frozen(suite, "baseline", {i.task_id for i in baseline})
            check_frozen(suite, "candidate", {i.task_id for i in candidate})
        results = [evaluate(suite, baseline, candidate) for suite in suites]
    except (InputError, GateError, UnusableInputError) as exc:
        print(f"gradeproxy compare: error: {exc}", file=sys.stderr)
        return 2
    code = exit_code(results)
    if intake.problems:  # rows the gate could not read might have moved any suite
        code = UNDECIDABLE
    if args.json:
        data = {
            "suites": [r.to_dict() for r in results],
            "exit_code": code,
            "input": intake.to_dict(),
        }
        sys.stdout.buffer.write(dumps(data) + b"\n")
        sys.stdout.flush()
    else:
        if intake.problems:
            print(f"{intake.summary()}: the gate cannot decide (exit {UNDECIDABLE})")
        print(render(results))
    intake.warn()
    return code
