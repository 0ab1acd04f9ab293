"""Judge calibration (seed 002): TPR and TNR against human labels, and the corrected pass rate.

A judge's raw pass rate is skewed by its own asymmetric errors. With its true-positive rate
(sensitivity) and true-negative rate (specificity) measured on a sealed, human-labelled split,
the Rogan-Gladen estimator recovers the true rate::

    corrected = (observed + TNR - 1) / (TPR + TNR - 1)

It is refused when ``TPR + TNR - 1 <= 0`` (a judge at or below chance: recalibrate, do not
correct). The estimate can leave [0, 1] by sampling noise; it is returned as computed, and the
CLI shows the clamped value beside it, so neither is silently hidden.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from grader.errors import GraderError


class CalibrationError(GraderError, ValueError):
    """The labels cannot give a trustworthy calibration; the message says why."""


@dataclass(frozen=True, slots=True)
class Calibration:
    """Confusion counts of a judge against human labels (human label = ground truth)."""

    tp: int
    fn: int
    tn: int
    fp: int

    @property
    def n(self) -> int:
        return self.tp + self.fn + self.tn + self.fp

    @property
    def tpr(self) -> float:
        return self.tp / (self.tp + self.fn)

    @property
    def tnr(self) -> float:
        return self.tn / (self.tn + self.fp)

    def to_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "tp": self.tp,
            "fn": self.fn,
            "tn": self.tn,
            "fp": self.fp,
            "tpr": self.tpr,
            "tnr": self.tnr,
        }


def calibrate(judge: Sequence[bool], human: Sequence[bool]) -> Calibration:
    """Count agreement; raise :class:`CalibrationError` for the seed's unusable splits.

    Empty input, mismatched lengths (a ``zip`` would silently drop the extra items), and a split
    without positive or without negative human labels (TPR or TNR undefined) are all refused.
    """
    if not judge or not human:
        raise CalibrationError("judge verdicts and human labels must be non-empty")
    if len(judge) != len(human):
        raise CalibrationError(
            f"length mismatch ({len(judge)} verdicts vs {len(human)} labels): "
            "check the split for a collection bug"
        )
    pairs = list(zip(judge, human, strict=True))
    counts = Calibration(
        tp=sum(j and h for j, h in pairs),
        fn=sum((not j) and h for j, h in pairs),
        tn=sum((not j) and (not h) for j, h in pairs),
        fp=sum(j and (not h) for j, h in pairs),
    )
    if counts.tp + counts.fn == 0:
        raise CalibrationError("no positive human labels in this split: TPR is undefined")
    if counts.tn + counts.fp == 0:
        raise CalibrationError("no negative human labels in this split: TNR is undefined")
    return counts


def tpr_tnr(judge: Sequence[bool], human: Sequence[bool]) -> tuple[float, float]:
    """Seed 002's ``tpr_tnr``: (TPR, TNR) of the judge against human labels."""
    counts = calibrate(judge, human)
    return counts.tpr, counts.tnr


def bias_corrected_pass_rate(observed_pass_rate: float, tpr: float, tnr: float) -> float:
    """Rogan-Gladen correction of a judge's observed pass rate (not clamped to [0, 1])."""
    if not 0.0 <= observed_pass_rate <= 1.0:
        raise CalibrationError(f"observed pass rate {observed_pass_rate!r} is not in [0, 1]")
    denominator = tpr + tnr - 1
    if denominator <= 0:
        raise CalibrationError(
            f"TPR + TNR - 1 = {denominator:.4f} <= 0: the judge is at or below chance; "
            "do not correct, recalibrate"
        )
    return (observed_pass_rate + tnr - 1) / denominator


def label_value(value: Any, where: str) -> bool:
    """A label as written in a labels file: a JSON boolean, or exactly "PASS" / "FAIL"."""
    if isinstance(value, bool):
        return value
    if value in ("PASS", "FAIL"):
        return bool(value == "PASS")
    raise CalibrationError(f'{where} must be true, false, "PASS" or "FAIL", got {value!r}')


SPLITS = ("train", "dev", "test")
UNSPLIT = "unsplit"


def labels_by_split(
    rows: Iterable[tuple[str, Any]],
) -> dict[str, tuple[list[bool], list[bool]]]:
    """Judge and human columns per ``split`` (train, dev, test; rows without one: unsplit).

    Seed 002 §2: the splits stay separate for the whole calibration cycle, so they are never
    pooled into one figure; a file that mixes split and unsplit rows is refused.
    """
    groups: dict[str, list[tuple[str, Any]]] = {}
    for where, row in rows:
        split = row.get("split", UNSPLIT) if isinstance(row, dict) else UNSPLIT
        if split != UNSPLIT and split not in SPLITS:
            raise CalibrationError(f"{where}: 'split' must be train, dev or test, got {split!r}")
        groups.setdefault(split, []).append((where, row))
    if UNSPLIT in groups and len(groups) > 1:
        where = groups[UNSPLIT][0][0]
        raise CalibrationError(f"{where}: no 'split' while other rows have one: label every row")
    order = [*SPLITS, UNSPLIT]
    return {name: labels_from_rows(groups[name]) for name in order if name in groups}


def labels_from_rows(rows: Iterable[tuple[str, Any]]) -> tuple[list[bool], list[bool]]:
    """Judge and human columns from ``(where, row)`` pairs of ``{"judge", "human"}`` objects."""
    judge: list[bool] = []
    human: list[bool] = []
    for where, row in rows:
        if not isinstance(row, dict) or "judge" not in row or "human" not in row:
            raise CalibrationError(f'{where}: expected an object {{"judge", "human"}}')
        judge.append(label_value(row["judge"], f"{where}: 'judge'"))
        human.append(label_value(row["human"], f"{where}: 'human'"))
    return judge, human
