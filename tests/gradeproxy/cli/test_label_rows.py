"""``calibrate --results`` and ``export`` read the review queue's label rows: the judge's verdict
joined from the labelled row by row_id, the split a hash of that row_id, the latest label per
row; the same from a file and from the rows database (a real PostgreSQL)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pyarrow.parquet as pq
import pytest

from gradeproxy.cli import main
from grader.json import dumps
from grader.labels import label_row, split_of
from proxy.rowsdb import columns_of, write_batch
from tests.support.files import write_jsonl
from tests.support.postgres import PASSWORD, PostgresServer
from tests.support.review import answer_row, judge_column, rid
from tests.support.rowcommands import answers
from tests.support.rowsets import jsonl, live_rows

JUDGE = "judge-2024-08-06"
AT = "2026-12-04T18:{:02d}:00+00:00"


def judged(n: int, judge: bool) -> dict[str, Any]:
    return answer_row(n, f"t.{n}", [judge_column(judge, "judge_pass" if judge else "judge_fail")])


def label(n: int, verdict: str, minute: int = 0, **extra: Any) -> dict[str, Any]:
    return label_row(labels=rid(n), draft=None, verdict=verdict, at=AT.format(minute), **extra)


def corpus(count: int = 400) -> tuple[list[dict[str, Any]], Counter[tuple[str, str]]]:
    """Judged rows and one label each (the judge wrong on every fifth row), and the expected
    confusion counts per split: (split, tp|fn|tn|fp)."""
    rows: list[dict[str, Any]] = []
    expected: Counter[tuple[str, str]] = Counter()
    for n in range(1, count + 1):
        human = n % 2 == 0
        judge = human if n % 5 else not human
        rows.append(judged(n, judge))
        rows.append(label(n, "pass" if human else "fail"))
        cell = ("tp" if judge else "fn") if human else ("fp" if judge else "tn")
        expected[(split_of(rid(n)), cell)] += 1
    return rows, expected


def figures(capsys: pytest.CaptureFixture[str], args: list[str]) -> tuple[int, dict[str, Any]]:
    code = main(["calibrate", "--judge-model", JUDGE, "--json", *args])
    return code, json.loads(capsys.readouterr().out)


def test_calibrate_joins_the_judge_verdict_by_row_id_and_splits_by_its_hash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows, expected = corpus()
    results = write_jsonl(tmp_path / "grades.jsonl", rows)
    code, report = figures(capsys, ["--results", str(results)])
    assert code == 0, report
    for split in ("train", "dev", "test"):
        got = report["splits"][split]
        assert {k: got[k] for k in ("tp", "fn", "tn", "fp")} == {
            cell: expected[(split, cell)] for cell in ("tp", "fn", "tn", "fp")
        }
    assert report["splits"]["test"]["n"] == pytest.approx(160, abs=25)  # about 40% of 400
    assert report["headline_split"] == "test"


def test_the_latest_label_counts_and_draft_labels_and_edits_are_not_a_judge_calibration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows, _ = corpus(200)
    # Row 2 (human pass, judge pass) relabelled fail later: one tp becomes one fp.
    relabel = label(2, "fail", minute=30)
    draft = label_row(labels=None, draft="d.1", verdict="pass", at=AT.format(1))
    edit = label_row(labels=None, draft="d.1", verdict="edit", at=AT.format(2),
                     expected=[{"name": "f", "arguments": {}}])  # fmt: skip
    before = write_jsonl(tmp_path / "before.jsonl", rows)
    after = write_jsonl(tmp_path / "after.jsonl", [*rows, relabel, draft, edit])
    _, old = figures(capsys, ["--results", str(before)])
    code, new = figures(capsys, ["--results", str(after)])
    assert code == 0
    split = split_of(rid(2))
    assert new["splits"][split]["tp"] == old["splits"][split]["tp"] - 1
    assert new["splits"][split]["fp"] == old["splits"][split]["fp"] + 1
    assert sum(s["n"] for s in new["splits"].values()) == 200


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        pytest.param([label(9999, "pass")], "not among the rows given", id="row_not_given"),
        pytest.param(
            [answer_row(9998, "nj", [{"name": "c", "type": "tool_call", "passed": True}]),
             label(9998, "pass")],
            "no judge verdict", id="row_without_a_judge",
        ),
        pytest.param(
            [{"kind": "label", "labels": rid(1), "verdict": "meh", "at": AT.format(0)}],
            "'verdict' must be", id="unusable_label_row",
        ),
    ],
)  # fmt: skip
def test_a_label_that_cannot_be_joined_is_skipped_and_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[dict[str, Any]], reason: str
) -> None:
    rows, _ = corpus(200)
    results = write_jsonl(tmp_path / "grades.jsonl", [*rows, *extra])
    code, report = figures(capsys, ["--results", str(results)])
    assert code == 1
    assert report["input"]["problem_rows"] == 1
    assert reason in report["input"]["problems"][0]["message"]
    assert sum(s["n"] for s in report["splits"].values()) == 200


def test_labels_in_another_workers_file_and_the_old_labels_file_still_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows, _ = corpus(200)
    write_jsonl(tmp_path / "grades.w0.jsonl", [r for r in rows if r["kind"] == "answer"])
    write_jsonl(tmp_path / "grades.w1.jsonl", [r for r in rows if r["kind"] == "label"])
    code, split = figures(capsys, ["--results", str(tmp_path / "grades.w*.jsonl")])
    assert code == 0
    merged = write_jsonl(tmp_path / "merged.jsonl", rows)
    assert figures(capsys, ["--results", str(merged)])[1]["splits"] == split["splits"]
    old = write_jsonl(tmp_path / "labels.jsonl", [{"judge": True, "human": True}] * 3
                      + [{"judge": False, "human": False}] * 3)  # fmt: skip
    code, report = figures(capsys, ["--labels", str(old)])
    assert (code, report["headline_split"], report["n"]) == (0, "unsplit", 6)


def test_export_joins_the_latest_label_onto_each_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [judged(1, True), judged(2, False), judged(3, True)]
    labels = [
        label(1, "fail", 0, note="wrong tool", reviewer="alice"),
        label(1, "pass", 5),
        label(2, "fail", 1, note="<b>bad</b>"),
    ]
    results = write_jsonl(tmp_path / "grades.jsonl", [*rows, *labels])
    out = tmp_path / "rows.parquet"
    assert main(["export", "--results", str(results), "--parquet", str(out)]) == 0
    table = pq.read_table(out).to_pylist()
    joined = {r["row_id"]: (r["label"], r["label_note"], r["label_at"]) for r in table
              if r["kind"] == "answer"}  # fmt: skip
    assert joined == {
        rid(1): ("pass", None, AT.format(5)),
        rid(2): ("fail", "<b>bad</b>", AT.format(1)),
        rid(3): (None, None, None),
    }
    assert sum(r["kind"] == "label" for r in table) == 3  # the label rows are exported too
    plain = write_jsonl(tmp_path / "plain.jsonl", rows)
    assert main(["export", "--results", str(plain), "--parquet", str(out)]) == 0
    assert "label" not in pq.read_table(out).column_names  # no labels: the columns as before


@pytest.mark.usefixtures("pg_password")
def test_calibrate_reads_labels_from_the_rows_database(
    postgres: PostgresServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = postgres.database()
    assert main(["db", "migrate", url]) == 0
    rows, _ = corpus(200)
    with psycopg.connect(url, password=PASSWORD) as conn:
        write_batch(conn, [columns_of(row, dumps(row).decode()) for row in rows])
    capsys.readouterr()
    code, from_db = figures(capsys, ["--results", url])
    assert code == 0
    _, from_file = figures(capsys, ["--results", str(write_jsonl(tmp_path / "g.jsonl", rows))])
    assert from_db["splits"] == from_file["splits"]


def read_past(answer: Any) -> Any:
    """An answer with the count of rows read left out (the label rows are read), and no
    problem row anywhere."""
    if isinstance(answer, dict):
        given = answer.get("input")
        if isinstance(given, dict):
            assert given["problem_rows"] == 0
        return {k: read_past(v) for k, v in answer.items() if k != "input"}
    if isinstance(answer, str) and answer.startswith("{"):
        return read_past(json.loads(answer))
    if isinstance(answer, str):
        return re.sub(r"input: \d+ rows?", "input: N rows", answer)
    return answer


def test_label_rows_change_no_verdict_command(
    tmp_path: Path, tasks_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """compare (table, --json), compare --gate and regrade read past label rows: the same
    answers with or without them; export keeps them as rows of their own kind."""
    graded = live_rows(12)
    marks = [
        label_row(labels=row["row_id"], draft=None, verdict="fail", at=AT.format(n), note="x")
        for n, row in enumerate(graded[:4])
    ]
    plain = tmp_path / "plain.jsonl"
    plain.write_bytes(jsonl(graded))
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_bytes(jsonl(graded[:5] + marks[:2] + graded[5:] + marks[2:]))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    without = answers([str(plain)], tmp_path / "a", tasks_file, capsys)
    labelled = answers([str(mixed)], tmp_path / "b", tasks_file, capsys)
    for name in ("compare_json", "gate_live", "gate_runs", "regrade", "regrade_diff"):
        assert read_past(labelled[name]) == read_past(without[name]), name
    assert labelled["compare_json"]["input"]["rows"] == len(graded) + 4  # read, not bad
    assert labelled["compare"]["code"] == without["compare"]["code"] == 0
    kinds = [row["kind"] for row in labelled["export_rows"]]
    assert kinds.count("label") == 4
    assert len(kinds) == len(graded) + 4
