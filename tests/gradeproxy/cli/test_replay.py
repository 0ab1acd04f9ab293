"""``gradeproxy replay``: the same rows for every history shape, a per-column report, the last
row per episode id, and under ``--strict`` exit 2 with nothing written on bad input (bad lines
without it: tests/gradeproxy/cli/test_bad_rows.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gradeproxy.cli import main
from tests.support.episodes import (
    GOOD_BILLING,
    GOOD_BILLING_FINAL,
    chat,
    events,
    responses,
)
from tests.support.paths import REPO
from tests.support.rows import without_row_id

TASKS = REPO / "config" / "tasks" / "episodes.jsonl"
BILLING = "billing.duplicate_charge.episode"
DELETES = [GOOD_BILLING[0], ("delete_payment", {"payment_id": "pay_1002"}, {"ok": True})]


def write(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def replay(
    tmp_path: Path, lines: list[Any], *flags: str
) -> tuple[int, list[dict[str, Any]], dict[str, Any]]:
    episodes = write(tmp_path / "episodes.jsonl", lines)
    out, report = tmp_path / "rows.jsonl", tmp_path / "report.json"
    code = main(
        [
            "replay",
            *flags,
            "--tasks",
            str(TASKS),
            "--episodes",
            str(episodes),
            "--out",
            str(out),
            "--report",
            str(report),
        ]
    )
    if code != 0:
        return code, [], {}
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return code, rows, json.loads(report.read_text())


def test_every_history_shape_gives_the_same_row(tmp_path: Path) -> None:
    lines = [
        {"task_id": BILLING, "episode_id": "e", "messages": chat(GOOD_BILLING, GOOD_BILLING_FINAL)},
        {
            "task_id": BILLING,
            "episode_id": "e",
            "input": responses(GOOD_BILLING, GOOD_BILLING_FINAL),
        },
        {
            "task_id": BILLING,
            "episode_id": "e",
            "events": events(GOOD_BILLING),
            "final": GOOD_BILLING_FINAL,
        },
    ]
    code, rows, _ = replay(tmp_path, lines)
    assert code == 0
    strip = [{k: v for k, v in row.items() if k != "turns"} for row in without_row_id(rows)]
    assert strip[0] == strip[1] == strip[2]
    assert rows[0]["result"] == "pass"


def test_report_has_per_column_rates_and_mean_overlap(tmp_path: Path) -> None:
    lines = [
        {"task_id": BILLING, "messages": chat(GOOD_BILLING, GOOD_BILLING_FINAL), "run": "r1"},
        {"task_id": BILLING, "messages": chat(DELETES, "Removed pay_1002."), "model": "m"},
        {"task_id": "episodes.cause", "events": [], "final": "the card expired"},
    ]
    code, rows, report = replay(tmp_path, lines)
    assert code == 0
    assert (rows[0]["run"], rows[1]["model"]) == ("r1", "m")
    assert report["episodes"] == 3
    assert report["results"] == {"pass": 2, "fail": 1, "error": 0}
    assert report["columns"]["authority_ok"] == {"n": 2, "passed": 1, "errors": 0, "passRate": 0.5}
    assert report["columns"]["cause_correct"]["n"] == 3
    assert report["evidence_overlap_mean"] == pytest.approx((1.0 + 0.5) / 2)


def test_the_last_row_of_an_episode_id_wins(tmp_path: Path) -> None:
    lines = [
        {"task_id": BILLING, "episode_id": "retried", "messages": chat(DELETES, "x")},
        {
            "task_id": BILLING,
            "episode_id": "retried",
            "messages": chat(GOOD_BILLING, GOOD_BILLING_FINAL),
        },
    ]
    code, rows, report = replay(tmp_path, lines)
    assert (code, len(rows), report["episodes"]) == (0, 2, 1)
    assert report["results"]["pass"] == 1


@pytest.mark.parametrize(
    ("line", "message"),
    [
        pytest.param(
            {"task_id": "nope", "events": []}, "unknown task id 'nope'", id="unknown_task"
        ),
        pytest.param({"task_id": BILLING}, "give exactly one of", id="no_history"),
        pytest.param(
            {"task_id": BILLING, "events": [], "messages": []},
            "give exactly one of",
            id="two_histories",
        ),
        pytest.param(
            {"task_id": BILLING, "events": [], "final": 3}, "'final' must be", id="bad_final"
        ),
        pytest.param([1], "expected an object", id="not_an_object"),
    ],
)
def test_bad_lines_under_strict_exit_2_with_nothing_written(
    tmp_path: Path, line: Any, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, _ = replay(tmp_path, [{"task_id": "episodes.cause", "events": []}, line], "--strict")
    assert code == 2
    err = capsys.readouterr().err
    assert f"episodes.jsonl:2: {message}" in err
    assert not (tmp_path / "rows.jsonl").exists()


def test_a_task_without_a_grader_record_is_an_error_row_or_refused_under_strict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = REPO / "config" / "tasks"
    episodes = write(
        tmp_path / "e.jsonl", [{"task_id": "payments.new_required_field.policy", "events": []}]
    )
    out = tmp_path / "rows.jsonl"
    args = ["replay", "--tasks", str(tasks), "--episodes", str(episodes), "--out", str(out)]
    assert main(args) == 1
    assert "e.jsonl:1: task 'payments.new_required_field.policy' has no grader record" in (
        capsys.readouterr().err
    )
    [row] = [json.loads(line) for line in out.read_text().splitlines()]
    assert (row["result"], row["reason_code"], row["columns"]) == ("error", "no_grader_record", [])
    out.unlink()
    assert main([*args, "--strict"]) == 2
    assert "has no grader record" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("rows.parquet", id="parquet"),
        pytest.param("rows.PQ", id="pq_any_case"),
        pytest.param("new/folder/rows.parquet", id="folders_made"),
    ],
)
def test_parquet_rows_hold_the_same_values_as_jsonl(tmp_path: Path, name: str) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    lines = [
        {"task_id": BILLING, "messages": chat(GOOD_BILLING, GOOD_BILLING_FINAL), "run": "r1"},
        {"task_id": "episodes.cause", "events": [], "final": "no idea", "meta": {"seed": 7}},
    ]
    episodes = write(tmp_path / "episodes.jsonl", lines)
    jsonl, parquet = tmp_path / "rows.jsonl", tmp_path / name
    for out in (jsonl, parquet):
        assert (
            main(["replay", "--tasks", str(TASKS), "--episodes", str(episodes), "--out", str(out)])
            == 0
        )
    expected = [json.loads(line) for line in jsonl.read_text().splitlines()]
    table = pq.read_table(parquet)
    assert table.schema.field("end_state_ok").type == "bool"
    assert table.schema.field("evidence_overlap").type == "double"
    got = [
        {
            k: json.loads(v) if k in ("columns", "replay_problems", "meta") and v is not None else v
            for k, v in row.items()
        }
        for row in table.to_pylist()
    ]
    assert [{k: v for k, v in row.items() if v is not None} for row in without_row_id(got)] == [
        {k: v for k, v in row.items() if v is not None} for row in without_row_id(expected)
    ]


def test_a_parquet_write_that_fails_exits_2_and_leaves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The rows file's folder cannot be made (a file holds its name): exit 2, and neither the
    output nor a temporary file beside it is left."""
    pytest.importorskip("pyarrow.parquet")
    line = {"task_id": BILLING, "messages": chat(GOOD_BILLING, GOOD_BILLING_FINAL)}
    episodes = write(tmp_path / "episodes.jsonl", [line])
    (tmp_path / "taken").write_text("a file, not a folder")
    out = tmp_path / "taken" / "rows.parquet"
    command = ["replay", "--tasks", str(TASKS), "--episodes", str(episodes), "--out", str(out)]
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(command) == 2
    assert "cannot write output" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
