"""Calibration per split with a pinned, recorded judge model and a bar; advisory checks stay out
of the verdict and every pass rate, by hand or through the calibration record they cite."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from gradeproxy.cli import main
from grader import grade, parse_task
from grader.json import loads_exact
from grader.loader import load_tasks
from grader.report import Report
from grader.tasks import TaskLoadError
from tests.support.files import write_jsonl

JUDGE = "judge-2024-08-06"


def rows(split: str | None, tp: int, fn: int, tn: int, fp: int) -> list[dict[str, Any]]:
    out = (
        [{"judge": True, "human": True}] * tp
        + [{"judge": False, "human": True}] * fn
        + [{"judge": False, "human": False}] * tn
        + [{"judge": True, "human": False}] * fp
    )
    return [{**r, "split": split} if split else dict(r) for r in out]


# train agrees perfectly, test does not: pooling would hide the test split's TPR.
SPLIT = rows("train", 10, 0, 10, 0) + rows("dev", 9, 1, 9, 1) + rows("test", 8, 2, 9, 1)

CASES = [
    # (labels, bar, exit code, headline tpr, tnr, words)
    pytest.param(SPLIT, 0.85, 1, 0.8, 0.9, r"ADVISORY-ONLY: TPR 0\.8000 on the test split is "
                 r"under the bar 0\.85", id="test_split_under_the_bar"),
    pytest.param(SPLIT, 0.75, 0, 0.8, 0.9, r"meets the bar", id="test_split_meets_the_bar"),
    pytest.param(SPLIT, None, 0, 0.8, 0.9, r"TPR 0\.8000  TNR 0\.9000  \(test\)", id="no_bar"),
    pytest.param(rows(None, 9, 1, 9, 1), None, 0, 0.9, 0.9, r"not a sealed-test estimate",
                 id="unsplit_file_said_so"),
    pytest.param(rows(None, 9, 1, 9, 1), 0.85, 1, 0.9, 0.9, r"ADVISORY-ONLY: the labels have "
                 r"no sealed test split", id="bar_without_a_test_split"),
]  # fmt: skip


@pytest.mark.parametrize(("labels", "bar", "code", "tpr", "tnr", "words"), CASES)
def test_figures_per_split_the_bar_and_the_words(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    labels: list[dict[str, Any]],
    bar: float | None,
    code: int,
    tpr: float,
    tnr: float,
    words: str,
) -> None:
    path = write_jsonl(tmp_path / "labels.jsonl", labels)
    args = ["calibrate", "--labels", str(path), "--judge-model", JUDGE]
    args += [] if bar is None else ["--bar", str(bar)]
    assert main(args) == code
    assert re.search(words, capsys.readouterr().out)
    out = tmp_path / "cal.json"
    assert main([*args, "--json", "--out", str(out)]) == code
    report = loads_exact(capsys.readouterr().out)
    assert report == loads_exact(out.read_text())
    assert (report["tpr"], report["tnr"]) == (tpr, tnr)
    assert report["judge_model"] == JUDGE
    assert report["advisory_only"] is (code == 1)
    if labels is SPLIT:
        assert list(report["splits"]) == ["train", "dev", "test"]
        assert report["splits"]["train"]["tpr"] == 1.0
    assert report["warning"].startswith(f"{len(labels)} labelled items: seed 002 asks for at least")


@pytest.mark.parametrize(
    ("labels", "extra", "message"),
    [
        pytest.param(SPLIT, ["--judge-model", "gpt-4o"], "is not pinned", id="unpinned"),
        pytest.param(SPLIT, ["--judge-model", "gpt-4o-latest"], "latest", id="latest"),
        pytest.param(
            [*rows("test", 1, 0, 1, 0), {"judge": True, "human": True}],
            ["--judge-model", JUDGE],
            r"labels\.jsonl:3: no 'split'",
            id="mixed_split_and_unsplit",
        ),
        pytest.param(
            [{"judge": True, "human": True, "split": "holdout"}],
            ["--judge-model", JUDGE],
            r"labels\.jsonl:1: 'split' must be train, dev or test",
            id="unknown_split_and_nothing_else",
        ),
        pytest.param(
            [*rows("test", 1, 0, 1, 0), {"judge": True, "human": True, "split": "holdout"}],
            ["--judge-model", JUDGE, "--strict"],
            r"labels\.jsonl:3: 'split' must be train, dev or test",
            id="unknown_split_under_strict",
        ),
        pytest.param(
            rows("test", 1, 1, 1, 1),
            ["--judge-model", JUDGE, "--observed-pass-rate", "0.5"],
            "at or below chance",
            id="rogan_gladen_refused_at_chance",
        ),
        pytest.param(
            rows("test", 2, 0, 0, 0),
            ["--judge-model", JUDGE],
            "test split: no negative",
            id="test_split_one_class",
        ),
    ],
)
def test_unusable_calibrations_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    labels: list[Any],
    extra: list[str],
    message: str,
) -> None:
    path = write_jsonl(tmp_path / "labels.jsonl", labels)
    assert main(["calibrate", "--labels", str(path), *extra]) == 2
    assert re.search(message, capsys.readouterr().err)


def judge_check(**extra: Any) -> dict[str, Any]:
    return {
        "type": "label_model",
        "name": "polite",
        "model": JUDGE,
        "criterion": "is polite",
        "pass_examples": ["Thanks!"],
        "fail_examples": ["Go away."],
        **extra,
    }


WORD = {
    "type": "string_check",
    "name": "word",
    "operation": "eq",
    "input": "{{ sample.output_text }}",
    "reference": "yes",
}


def test_an_advisory_check_is_shown_but_out_of_the_verdict_and_every_pass_rate() -> None:
    task = parse_task(
        {"id": "t", "item": {"prompt": "p"}, "checks": [WORD, judge_check(advisory=True)]}
    )
    outcome = grade(task, "yes")  # no judge: the advisory column is an error, the row is not
    assert outcome.result == "pass"
    by_name = {c.name: c for c in outcome.checks}
    assert by_name["polite"].advisory
    assert by_name["polite"].passed is None
    assert by_name["polite"].to_dict()["advisory"] is True
    assert "advisory" not in by_name["word"].to_dict()
    report = Report.of("sha256:x", [(task, outcome)]).to_dict()
    assert list(report["perCheck"]) == ["word"]
    assert report["advisory"] == {"polite": {"n": 0, "judged_pass": 0, "errors": 1}}
    assert (report["n"], report["passRate"], report["errors"]) == (1, 1.0, 0)


@pytest.mark.parametrize(
    ("task", "message"),
    [
        pytest.param(
            {"id": "t", "checks": [WORD, judge_check(advisory=True)], "pass_rule": "polite"},
            "'pass_rule' 'polite' names an advisory check",
            id="pass_rule_names_it",
        ),
        pytest.param(
            {"id": "t", "checks": [judge_check(advisory=True)]},
            "every check is advisory",
            id="nothing_left",
        ),
        pytest.param(
            {"id": "t", "checks": [WORD, judge_check(advisory="yes")]},
            "'advisory' must be true or false",
            id="not_a_boolean",
        ),
        pytest.param(
            {"id": "t", "checks": [WORD, judge_check(calibration="/etc/passwd")]},
            "'calibration' is read only for tasks loaded from a task file",
            id="inline_task_never_opens_a_path",
        ),
    ],
)
def test_advisory_definitions_that_leave_nothing_to_decide_are_refused(
    task: dict[str, Any], message: str
) -> None:
    with pytest.raises(TaskLoadError, match=re.escape(message)):
        parse_task(task)


@pytest.mark.parametrize(
    ("bar", "model", "advisory", "refused"),
    [
        pytest.param("0.85", JUDGE, True, None, id="under_the_bar_advisory"),
        pytest.param("0.75", JUDGE, False, None, id="meets_the_bar_counts"),
        pytest.param("0.75", "judge-2025-01-01", False, "voids the calibration", id="other_model"),
    ],
)
def test_a_check_citing_a_calibration_record_follows_it(
    tmp_path: Path, bar: str, model: str, advisory: bool, refused: str | None
) -> None:
    labels = write_jsonl(tmp_path / "labels.jsonl", SPLIT)
    record = tmp_path / "cal.json"
    args = ["calibrate", "--labels", str(labels), "--judge-model", JUDGE, "--bar", bar]
    main([*args, "--out", str(record)])
    check = judge_check(model=model, calibration="cal.json")
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [{"id": "t", "checks": [WORD, check]}])
    if refused is not None:
        with pytest.raises(TaskLoadError, match=refused):
            load_tasks(tasks)
        return
    task = load_tasks(tasks).tasks["t"]
    outcome = grade(task, "yes")
    column = outcome.column("polite")
    assert column is not None
    assert column.advisory is advisory
    assert outcome.result == ("pass" if advisory else "error")
    # The column's digest follows the record: recalibrating changes it, the definition alone not.
    before = column.digest
    main([*args[:-2], "--bar", "0.5", "--out", str(record)])
    after = load_tasks(tasks).tasks["t"]
    assert grade(after, "yes").column("polite").digest != before  # type: ignore[union-attr]


def test_a_hundred_labels_carry_no_small_sample_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    labels = rows("train", 15, 0, 15, 0) + rows("dev", 15, 0, 15, 0) + rows("test", 19, 1, 19, 1)
    path = write_jsonl(tmp_path / "labels.jsonl", labels)
    assert main(["calibrate", "--labels", str(path), "--judge-model", JUDGE, "--json"]) == 0
    assert "warning" not in loads_exact(capsys.readouterr().out)
