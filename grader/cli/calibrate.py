"""``gradeproxy calibrate``: a judge's TPR and TNR against human labels (seed 002).

Reads JSONL rows ``{"judge": true|false|"PASS"|"FAIL", "human": ...}`` from the sealed test
split. With ``--observed-pass-rate`` it also prints the Rogan-Gladen corrected pass rate.
Exit 0 when the numbers were computed; exit 2 with a message on unusable input (unreadable
file, bad rows, an empty split, a split without both classes, a judge at or below chance).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from grader._json import dumps
from grader.calibration import (
    CalibrationError,
    bias_corrected_pass_rate,
    calibrate,
    labels_from_rows,
)
from grader.cli._io import InputError, read_jsonl


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "calibrate",
        help="judge TPR/TNR against human labels, and the corrected pass rate",
        description="Compute a judge's TPR and TNR from human-labelled rows and, given the "
        "judge's observed pass rate, the Rogan-Gladen corrected pass rate.",
    )
    parser.add_argument(
        "--labels", required=True, type=Path, help='JSONL rows {"judge": ..., "human": ...}'
    )
    parser.add_argument(
        "--observed-pass-rate",
        type=float,
        metavar="R",
        help="the judge's raw pass rate on live traffic, 0..1",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        rows = [(f"{args.labels}:{lineno}", row) for lineno, row in read_jsonl(args.labels)]
        judge, human = labels_from_rows(rows)
        counts = calibrate(judge, human)
        corrected = None
        if args.observed_pass_rate is not None:
            corrected = bias_corrected_pass_rate(args.observed_pass_rate, counts.tpr, counts.tnr)
    except (InputError, CalibrationError) as exc:
        print(f"gradeproxy calibrate: error: {exc}", file=sys.stderr)
        return 2
    report: dict[str, Any] = counts.to_dict()
    if corrected is not None:
        report["observed_pass_rate"] = args.observed_pass_rate
        report["corrected_pass_rate"] = corrected
        report["corrected_pass_rate_clamped"] = min(1.0, max(0.0, corrected))
    if args.json:
        print(dumps(report).decode())
        return 0
    print(f"n {counts.n}  TP {counts.tp}  FN {counts.fn}  TN {counts.tn}  FP {counts.fp}")
    print(f"TPR {counts.tpr:.4f}  TNR {counts.tnr:.4f}")
    if corrected is not None:
        line = f"corrected pass rate {corrected:.4f} (observed {args.observed_pass_rate:.4f})"
        if not 0.0 <= corrected <= 1.0:
            line += f"; outside [0, 1], clamped {min(1.0, max(0.0, corrected)):.4f}"
        print(line)
    return 0
