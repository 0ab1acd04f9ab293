"""``gradeproxy calibrate``: a judge's TPR and TNR against human labels, per split (seed 002).

Reads JSONL rows ``{"judge": true|false|"PASS"|"FAIL", "human": ..., "split"?: "train"|"dev"|
"test"}`` (``--labels``), or the label rows people wrote in the review queue straight from the
result rows (``--results FILE|URL``, docs/review.md): the latest label of each row is the
human verdict, the judge's verdict is joined from the labelled row by ``row_id``, and the split
is a hash of that ``row_id`` (20/40/40 train/dev/test, grader/labels.py). A label whose row is
not among the rows given, or whose row has no judge verdict, is skipped and counted.

Figures are reported per split, never pooled (seed 002 §2); the headline is the
sealed ``test`` split (or, in a file without splits, all rows, said to be no sealed estimate).
``--judge-model`` is required, must be a pinned snapshot, and is recorded with the figures (seed
002 §5); ``--out REC.json`` writes the calibration record that judge checks cite
(``"calibration": "REC.json"``, grader/advisory.py), which refuses a check pinning another model.
``--bar 0.85`` marks the judge **advisory-only** when TPR or TNR on the test split is under the
bar (seed 002 §7), says so in words, and records ``advisory_only: true``. With
``--observed-pass-rate`` it prints the Rogan-Gladen corrected pass rate from the headline figures,
refused for a judge at or below chance.

A label row that cannot be used (not JSON or cut off, not an object, a missing or unreadable
``judge``/``human`` label, an unknown ``split``) is skipped and counted by reason
(grader/intake.py; ``input`` in ``--json`` and the record); a file that mixes rows with and
without a split is still refused, since its figures would pool what seed 002 keeps apart.

Exit 0 when the figures were computed from every row (and meet ``--bar`` when given); 1 when
the judge is advisory-only under ``--bar``, or some rows were skipped (the first few named on
stderr); 2 with a message on unusable input (no such file, not JSONL, an unpinned judge model,
a headline split without both classes, a judge at or below chance). ``--strict`` refuses the
run at the first bad row (exit 2, nothing written).
"""

from __future__ import annotations

import argparse
import hashlib
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
    write_atomically,
)
from gradeproxy.cli.parquet import with_rotations
from grader.advisory import CALIBRATION_KIND
from grader.analysis.calibration import (
    SPLITS,
    UNSPLIT,
    Calibration,
    CalibrationError,
    bias_corrected_pass_rate,
    calibrate,
    label_value,
    labels_by_split,
)
from grader.checks.judge import pinned_problem
from grader.intake import InputReason, Intake, UnusableInputError
from grader.json import dumps
from grader.labels import is_label, judge_verdict, label_problem, latest_labels, split_of

MIN_LABELS = 100  # seed 002 §1: collect human labels for >= 100 items


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "calibrate",
        help="judge TPR/TNR against human labels per split, the bar, the corrected pass rate",
        description="Compute a judge's TPR and TNR from human-labelled rows, per split "
        "(train/dev/test), check them against a bar and, given the judge's observed pass "
        "rate, the Rogan-Gladen corrected pass rate.",
    )
    given = parser.add_mutually_exclusive_group(required=True)
    given.add_argument(
        "--labels",
        type=Path,
        help='JSONL rows {"judge": ..., "human": ..., "split"?: train|dev|test}',
    )
    given.add_argument(
        "--results",
        nargs="+",
        type=results_source,
        action=ExpandGlobs,
        metavar="FILE",
        help="result rows with the review queue's label rows (JSONL, quoted globs expanded, "
        "or a postgresql:// URL): the judge's verdict joined by row_id, split by its hash",
    )
    parser.add_argument(
        "--judge-model",
        required=True,
        metavar="ID",
        help="the pinned judge snapshot the labels were judged by (recorded with the figures)",
    )
    parser.add_argument(
        "--bar",
        type=float,
        metavar="B",
        help="TPR and TNR on the test split must reach B (e.g. 0.85), else advisory-only",
    )
    parser.add_argument(
        "--observed-pass-rate",
        type=float,
        metavar="R",
        help="the judge's raw pass rate on live traffic, 0..1",
    )
    parser.add_argument("--out", type=Path, help="write the calibration record (JSON)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_strict(parser)
    add_no_rotations(parser)
    parser.set_defaults(handler=run)


def read_labels(path: Path, intake: Intake) -> list[tuple[str, Any]]:
    """The usable label rows as ``(file:line, row)``; the others skipped and counted."""
    rows: list[tuple[str, Any]] = []
    for lineno, row in intake.lines(path):
        problem = _label_problem(row)
        if problem is not None:
            intake.problem(path, lineno, *problem)
            continue
        rows.append((f"{path}:{lineno}", row))
    return rows


def read_label_rows(sources: list[Source], intake: Intake) -> tuple[list[tuple[str, Any]], str]:
    """Calibration rows ``(where, {"judge", "human", "split"})`` from result rows and their
    label rows (the latest label of each row; draft labels are not a judge's), and the sha256
    of what was used; a label that cannot be joined is skipped and counted."""
    verdicts: dict[str, bool | None] = {}
    labels: list[dict[str, Any]] = []
    where: dict[int, str] = {}
    for source in sources:
        for lineno, row in source_lines(intake, source):
            if not isinstance(row, dict):
                intake.problem(str(source), lineno, "not_an_object", "expected a result row")
            elif is_label(row):
                problem = label_problem(row)
                if problem is not None:
                    intake.problem(str(source), lineno, "bad_field", f"label row: {problem}")
                    continue
                where[id(row)] = f"{source}:{lineno}"
                labels.append(row)
            elif isinstance(row.get("row_id"), str):
                verdicts[row["row_id"]] = judge_verdict(row)
    out: list[tuple[str, Any]] = []
    for (kind, row_id), label in latest_labels(labels).items():
        if kind != "row":
            continue
        at = where[id(label)]
        file, _, line = at.rpartition(":")
        if row_id not in verdicts:
            message = f"label of row {row_id}: that row is not among the rows given"
            intake.problem(file, int(line), "missing_field", message)
        elif verdicts[row_id] is None:
            message = f"label of row {row_id}: the row has no judge verdict to calibrate"
            intake.problem(file, int(line), "missing_field", message)
        else:
            human = label["verdict"] == "pass"
            out.append((at, {"judge": verdicts[row_id], "human": human, "split": split_of(row_id)}))
    out.sort(key=lambda pair: pair[0])
    digest = hashlib.sha256(b"".join(dumps(row) + b"\n" for _, row in out)).hexdigest()
    return out, digest


def _label_problem(row: Any) -> tuple[InputReason, str] | None:
    if not isinstance(row, dict):
        return "not_an_object", 'expected an object {"judge", "human"}'
    for key in ("judge", "human"):
        if key not in row:
            return "missing_field", f'expected an object {{"judge", "human"}}: no {key!r} label'
        try:
            label_value(row[key], f"{key!r}")
        except CalibrationError as exc:
            return "bad_field", str(exc)
    split = row.get("split", UNSPLIT)
    if split != UNSPLIT and split not in SPLITS:
        return "bad_field", f"'split' must be train, dev or test, got {split!r}"
    return None


def _figures(groups: dict[str, tuple[list[bool], list[bool]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, (judge, human) in groups.items():
        try:
            out[name] = calibrate(judge, human)
        except CalibrationError as exc:
            out[name] = str(exc)
    return out


def _headline(figures: dict[str, Any]) -> tuple[str, Calibration]:
    """The sealed test split's figures (or the unsplit file's); refused when unusable."""
    name = "test" if "test" in figures else UNSPLIT if UNSPLIT in figures else None
    if name is None:
        raise CalibrationError(
            "no 'test' split: TPR/TNR are reported on the sealed test split (seed 002 §2); "
            f"found {', '.join(figures)}"
        )
    counts = figures[name]
    if not isinstance(counts, Calibration):
        raise CalibrationError(f"{name} split: {counts}")
    return name, counts


def _verdict(bar: float | None, name: str, counts: Calibration) -> tuple[bool, str | None]:
    """Whether the judge is advisory-only under ``bar``, and the sentence that says so."""
    if bar is None:
        return False, None
    if name != "test":
        return True, (
            f"ADVISORY-ONLY: the labels have no sealed test split, so the judge cannot be shown "
            f"to reach the bar {bar:g}; its verdicts must not gate a promotion or count into a "
            "pass rate (seed 002 §7)"
        )
    under = [f"{k} {v:.4f}" for k, v in (("TPR", counts.tpr), ("TNR", counts.tnr)) if v < bar]
    if not under:
        return False, f"meets the bar: TPR and TNR on the test split are both >= {bar:g}"
    return True, (
        f"ADVISORY-ONLY: {' and '.join(under)} on the test split is under the bar {bar:g}; its "
        "verdicts must not gate a promotion or count into a pass rate (seed 002 §7). Iterate "
        "the prompt on the dev split and re-seal a fresh test split; do not lower the bar"
    )


def run(args: argparse.Namespace) -> int:
    intake = Intake("calibrate", strict=args.strict)
    try:
        problem = pinned_problem(args.judge_model)
        if problem is not None:
            raise CalibrationError(f"--judge-model {problem}")
        if args.results is not None:
            sources = args.results if args.no_rotations else with_rotations(args.results)
            rows, digest = read_label_rows(sources, intake)
            given = ", ".join(str(s) for s in sources)
        else:
            raw = args.labels.read_bytes() if args.labels.exists() else b""
            rows, digest = read_labels(args.labels, intake), hashlib.sha256(raw).hexdigest()
            given = str(args.labels)
        if not rows:
            raise CalibrationError("judge verdicts and human labels must be non-empty")
        figures = _figures(labels_by_split(rows))
        name, counts = _headline(figures)
        corrected = None
        if args.observed_pass_rate is not None:
            corrected = bias_corrected_pass_rate(args.observed_pass_rate, counts.tpr, counts.tnr)
    except (InputError, CalibrationError, UnusableInputError) as exc:
        intake.warn()  # the rows skipped on the way, when they left nothing usable
        print(f"gradeproxy calibrate: error: {exc}", file=sys.stderr)
        return 2
    advisory, sentence = _verdict(args.bar, name, counts)
    report: dict[str, Any] = {
        "kind": CALIBRATION_KIND,
        "judge_model": args.judge_model,
        "headline_split": name,
        **counts.to_dict(),
        "splits": {
            k: v.to_dict() if isinstance(v, Calibration) else {"error": v}
            for k, v in figures.items()
        },
        "bar": args.bar,
        "advisory_only": advisory,
        "labels": given,
        "labels_sha256": digest,
        "input": intake.to_dict(),
    }
    if sentence is not None:
        report["verdict"] = sentence
    labelled = sum(v.n for v in figures.values() if isinstance(v, Calibration))
    if labelled < MIN_LABELS:
        report["warning"] = (
            f"{labelled} labelled items: seed 002 asks for at least {MIN_LABELS} before the "
            "figures are trusted"
        )
    if corrected is not None:
        report["observed_pass_rate"] = args.observed_pass_rate
        report["corrected_pass_rate"] = corrected
        report["corrected_pass_rate_clamped"] = min(1.0, max(0.0, corrected))
    if args.out is not None:
        try:
            write_atomically(args.out, [dumps(report) + b"\n"])
        except OSError as exc:
            print(f"gradeproxy calibrate: error: cannot write output: {exc}", file=sys.stderr)
            return 2
    if args.json:
        print(dumps(report).decode())
    else:
        if intake.problems:
            print(intake.summary())
        _print(report, figures, counts, corrected, args.observed_pass_rate)
    intake.warn()
    return 1 if advisory else intake.exit_code()


def _print(
    report: dict[str, Any],
    figures: dict[str, Any],
    counts: Calibration,
    corrected: float | None,
    observed: float | None,
) -> None:
    print(f"judge {report['judge_model']}")
    for split, value in figures.items():
        if isinstance(value, Calibration):
            print(
                f"{split:<8} n {value.n}  TP {value.tp}  FN {value.fn}  TN {value.tn}"
                f"  FP {value.fp}  TPR {value.tpr:.4f}  TNR {value.tnr:.4f}"
            )
        else:
            print(f"{split:<8} {value}")
    if report["headline_split"] == UNSPLIT:
        print("no split column: these figures are not a sealed-test estimate (seed 002 §2)")
    print(f"TPR {counts.tpr:.4f}  TNR {counts.tnr:.4f}  ({report['headline_split']})")
    if "verdict" in report:
        print(report["verdict"])
    if "warning" in report:
        print(f"warning: {report['warning']}")
    if corrected is not None and observed is not None:
        line = f"corrected pass rate {corrected:.4f} (observed {observed:.4f})"
        if not 0.0 <= corrected <= 1.0:
            line += f"; outside [0, 1], clamped {min(1.0, max(0.0, corrected)):.4f}"
        print(line)
