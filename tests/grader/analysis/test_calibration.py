"""Judge calibration: TPR/TNR and Rogan-Gladen against hand-computed values; the CLI."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from gradeproxy.cli import main
from grader import CalibrationError, bias_corrected_pass_rate, calibrate, tpr_tnr
from grader.json import dumps, loads_exact

T, F = True, False
# Pairs (judge, human): tp tp fn tn fp tn tp tn tp fp -> TP 4, FN 1, TN 3, FP 2.
JUDGE = [T, T, F, F, T, F, T, F, T, T]
HUMAN = [T, T, T, F, F, F, T, F, T, F]


def test_confusion_counts_and_rates() -> None:
    counts = calibrate(JUDGE, HUMAN)
    assert (counts.tp, counts.fn, counts.tn, counts.fp, counts.n) == (4, 1, 3, 2, 10)
    tpr, tnr = tpr_tnr(JUDGE, HUMAN)
    assert tpr == pytest.approx(0.8)
    assert tnr == pytest.approx(0.6)


@pytest.mark.parametrize(
    ("judge", "human", "message"),
    [
        pytest.param([], [], "must be non-empty", id="empty"),
        pytest.param([T], [], "must be non-empty", id="one_side_empty"),
        pytest.param([T, F], [T], "length mismatch \\(2 verdicts vs 1 labels\\)", id="mismatch"),
        pytest.param([T, F], [F, F], "no positive human labels", id="no_positives"),
        pytest.param([T, F], [T, T], "no negative human labels", id="no_negatives"),
    ],
)
def test_unusable_splits(judge: list[bool], human: list[bool], message: str) -> None:
    with pytest.raises(CalibrationError, match=message):
        calibrate(judge, human)


@pytest.mark.parametrize(
    ("observed", "tpr", "tnr", "corrected"),
    [
        pytest.param(0.5, 0.8, 0.6, 0.25, id="hand_computed"),  # (0.5 + 0.6 - 1) / 0.4
        pytest.param(0.9, 0.8, 0.6, 1.25, id="above_one_not_clamped"),  # 0.5 / 0.4
        pytest.param(0.1, 0.8, 0.6, -0.75, id="below_zero_not_clamped"),  # -0.3 / 0.4
        pytest.param(0.37, 1.0, 1.0, 0.37, id="perfect_judge_changes_nothing"),
        pytest.param(0.6, 0.9, 0.9, 0.625, id="symmetric_judge"),  # 0.5 / 0.8
    ],
)
def test_rogan_gladen(observed: float, tpr: float, tnr: float, corrected: float) -> None:
    assert bias_corrected_pass_rate(observed, tpr, tnr) == pytest.approx(corrected)


@pytest.mark.parametrize(
    ("observed", "tpr", "tnr", "message"),
    [
        pytest.param(0.5, 0.5, 0.5, "at or below chance", id="chance"),
        pytest.param(0.5, 0.3, 0.4, "at or below chance", id="below_chance"),
        pytest.param(1.5, 0.9, 0.9, "not in \\[0, 1\\]", id="observed_above_one"),
    ],
)
def test_correction_refused(observed: float, tpr: float, tnr: float, message: str) -> None:
    with pytest.raises(CalibrationError, match=message):
        bias_corrected_pass_rate(observed, tpr, tnr)


PINNED = ("--judge-model", "judge-2024-08-06")


def labels(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else dumps(r).decode()) + "\n" for r in rows))
    return path


ROWS = [
    {"judge": j if i % 2 else ("PASS" if j else "FAIL"), "human": h}
    for i, (j, h) in enumerate(zip(JUDGE, HUMAN, strict=True))
]


def test_cli_reports_rates_and_corrected_rate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = labels(tmp_path / "l.jsonl", ROWS)
    assert (
        main(["calibrate", *PINNED, "--labels", str(path), "--observed-pass-rate", "0.5", "--json"])
        == 0
    )
    report = loads_exact(capsys.readouterr().out)
    assert (report["tp"], report["fn"], report["tn"], report["fp"]) == (4, 1, 3, 2)
    assert report["corrected_pass_rate"] == pytest.approx(0.25)
    assert main(["calibrate", *PINNED, "--labels", str(path), "--observed-pass-rate", "0.9"]) == 0
    text = capsys.readouterr().out
    assert "TPR 0.8000  TNR 0.6000" in text
    assert "corrected pass rate 1.2500" in text
    assert "clamped 1.0000" in text


@pytest.mark.parametrize(
    ("rows", "extra", "message"),
    [
        pytest.param([], [], "must be non-empty", id="empty_file"),
        pytest.param(["{oops"], [], "l.jsonl:1: not JSON at column 2", id="bad_json"),
        pytest.param(
            [{"judge": "pass", "human": True}],
            [],
            "l.jsonl:1: 'judge' must be",
            id="lower_case_label",
        ),
        pytest.param(
            [{"judge": True}],
            [],
            'l.jsonl:1: expected an object \\{"judge", "human"\\}',
            id="missing_human",
        ),
        pytest.param(
            [{"judge": True, "human": True}, {"judge": False, "human": True}],
            [],
            "no negative human labels",
            id="one_class",
        ),
        pytest.param(ROWS, ["--observed-pass-rate", "0.5"], None, id="ok_for_contrast"),
    ],
)
def test_cli_bad_input_under_strict_exits_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    rows: list[Any],
    extra: list[str],
    message: str | None,
) -> None:
    """``--strict`` keeps the refusal; without it a bad row is skipped and counted
    (tests/gradeproxy/cli/test_bad_rows.py)."""
    path = labels(tmp_path / "l.jsonl", rows)
    code = main(["calibrate", "--strict", *PINNED, "--labels", str(path), *extra])
    err = capsys.readouterr().err
    if message is None:
        assert code == 0
    else:
        assert code == 2
        assert err.startswith("gradeproxy calibrate: error: ")
        assert re.search(message, err)


def test_cli_refuses_correction_for_chance_judge(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chance = [{"judge": True, "human": True}, {"judge": True, "human": False}]
    path = labels(tmp_path / "l.jsonl", chance)
    assert main(["calibrate", *PINNED, "--labels", str(path), "--observed-pass-rate", "0.5"]) == 2
    assert "recalibrate" in capsys.readouterr().err


def test_cli_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", *PINNED, "--labels", str(tmp_path / "none.jsonl")]) == 2
    assert "cannot read" in capsys.readouterr().err
