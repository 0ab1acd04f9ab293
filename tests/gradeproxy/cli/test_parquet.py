"""Parquet rows: real Parquet or exit 2 naming the extra, typed columns, the canonical checks
column, the wide view's escaping, export of live rotations, and DuckDB reading differing files
together and joining them to a metadata table by sample_id."""

from __future__ import annotations

import builtins
import os
import stat
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gradeproxy.cli import main
from gradeproxy.cli.parquet import escape_name
from tests.support.files import write_jsonl

TASKS = [
    {"id": "a", "expected": {"name": "f", "arguments": {"x": 1}}},
    {
        "id": "c",
        "checks": [
            {"type": "string_check", "name": "is.yes", "operation": "eq",
             "input": "{{ sample.output_text }}", "reference": "yes"},
            {"type": "string_check", "name": "100%", "operation": "ne",
             "input": "{{ sample.output_text }}", "reference": "no"},
        ],
    },
]  # fmt: skip
GOOD = '{"name": "f", "arguments": {"x": 1}}'


def grade(tmp_path: Path, name: str, answers: list[dict[str, Any]], out: str) -> Path:
    tasks = write_jsonl(tmp_path / "tasks.jsonl", TASKS)
    answers_file = write_jsonl(tmp_path / f"{name}.answers.jsonl", answers)
    target = tmp_path / out
    code = main(
        ["grade", "--tasks", str(tasks), "--answers", str(answers_file), "--out", str(target)]
    )
    assert code == 0
    return target


RUN_A: list[dict[str, Any]] = [
    {"task_id": "a", "answer": GOOD, "sample_id": "s1", "model": "m-2024-01-01",
     "sampling": {"temperature": 0.0}},
    {"task_id": "c", "answer": "yes", "sample_id": "s2", "model": "m-2024-01-01",
     "sampling": {"temperature": 0.7}},
    {"task_id": "a", "answer": "no call", "sample_id": "s3", "model": "m-2024-01-01"},
]  # fmt: skip
RUN_B: list[dict[str, Any]] = [
    {"task_id": "a", "answer": GOOD, "sample_id": "s1", "attempt": 2, "seed": 1.5},
    {"task_id": "c", "answer": "no", "sample_id": "s2", "attempt": 1, "seed": 2},
]


def test_out_parquet_writes_typed_parquet_with_the_canonical_checks_column(
    tmp_path: Path,
) -> None:
    old = os.umask(0o022)
    try:
        path = grade(tmp_path, "a", RUN_A, "rows.parquet")
    finally:
        os.umask(old)
    assert path.read_bytes()[:4] == b"PAR1"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    table = pq.read_table(path)
    schema = table.schema
    assert schema.field("passed").type == pa.bool_()
    assert schema.field("row_schema_version").type == pa.int32()
    assert schema.field("sample_id").type == pa.string()
    assert schema.field("sampling").type == pa.string()  # nested metadata: JSON text
    checks = schema.field("checks").type
    assert pa.types.is_list(checks)
    assert {"name", "type", "passed", "score", "reason_code", "digest"} <= {
        f.name for f in checks.value_type
    }
    rows = table.to_pylist()
    assert [r["result"] for r in rows] == ["pass", "pass", "fail"]
    assert [c["name"] for c in rows[1]["checks"]] == ["is.yes", "100%"]
    assert rows[0]["sampling"] == '{"temperature":0.0}'
    assert rows[2]["sampling"] is None


def test_without_pyarrow_grade_and_export_exit_2_naming_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real_import = builtins.__import__

    def no_pyarrow(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("pyarrow"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    tasks = write_jsonl(tmp_path / "tasks.jsonl", TASKS)
    answers = write_jsonl(tmp_path / "answers.jsonl", RUN_A)
    out = tmp_path / "rows.parquet"
    assert main(["grade", "--tasks", str(tasks), "--answers", str(answers), "--out", str(out)]) == 2
    assert "gradeproxy[parquet]" in capsys.readouterr().err
    assert not out.exists()
    rows = write_jsonl(tmp_path / "rows.jsonl", [{"task_id": "a", "result": "pass"}])
    assert main(["export", "--results", str(rows), "--parquet", str(out)]) == 2
    assert "gradeproxy[parquet]" in capsys.readouterr().err
    assert not out.exists()


def test_export_reads_live_rotations_oldest_first_and_adds_the_wide_view(tmp_path: Path) -> None:
    base = tmp_path / "grades.jsonl"
    rows = grade(tmp_path, "a", RUN_A, "rows.jsonl").read_bytes().splitlines(keepends=True)
    (tmp_path / "grades.jsonl.2").write_bytes(rows[0])
    (tmp_path / "grades.jsonl.1").write_bytes(rows[1])
    base.write_bytes(rows[2])
    out = tmp_path / "export.parquet"
    assert main(["export", "--results", str(base), "--parquet", str(out), "--wide"]) == 0
    table = pq.read_table(out).to_pylist()
    assert [r["sample_id"] for r in table] == ["s1", "s2", "s3"]
    assert table[1]["check.is%2Eyes.passed"] is True
    assert table[1]["check.100%25.passed"] is True
    assert table[0]["check.is%2Eyes.passed"] is None  # task a has no such column


def test_duckdb_reads_differing_files_together_and_joins_metadata_by_sample_id(
    tmp_path: Path,
) -> None:
    first = grade(tmp_path, "a", RUN_A, "a.parquet")
    second = grade(tmp_path, "b", RUN_B, "b.parquet")
    assert pq.read_schema(first) != pq.read_schema(second)
    meta = write_jsonl(
        tmp_path / "meta.jsonl",
        [{"sample_id": "s1", "split": "test"}, {"sample_id": "s2", "split": "dev"}],
    )
    con = duckdb.connect()
    got = con.execute(
        f"""
        SELECT r.sample_id, m.split, r.result, r.model, r.attempt,
               json_extract(r.sampling, '$.temperature')::DOUBLE AS temperature,
               len(r.checks) AS columns
        FROM read_parquet(['{first}', '{second}'], union_by_name = true) r
        JOIN read_json_auto('{meta}') m USING (sample_id)
        ORDER BY r.sample_id, r.attempt NULLS FIRST
        """
    ).fetchall()
    assert got == [
        ("s1", "test", "pass", "m-2024-01-01", None, 0.0, 1),
        ("s1", "test", "pass", None, 2, None, 1),
        ("s2", "dev", "pass", "m-2024-01-01", None, 0.7, 2),
        ("s2", "dev", "fail", None, 1, None, 2),
    ]


@given(st.text(min_size=1, max_size=30), st.text(min_size=1, max_size=30))
def test_escaped_check_names_never_hold_a_dot_and_never_collide(a: str, b: str) -> None:
    assert "." not in escape_name(a)
    assert (escape_name(a) == escape_name(b)) is (a == b)


def test_a_carried_field_that_clashes_with_a_known_type_becomes_json_text(tmp_path: Path) -> None:
    answers: list[dict[str, Any]] = [
        {"task_id": "a", "answer": GOOD, "sample_id": "s1", "model": 5, "choice": "first"},
        {"task_id": "a", "answer": GOOD, "sample_id": "s2", "model": "m", "choice": None},
    ]
    rows = pq.read_table(grade(tmp_path, "x", answers, "rows.parquet")).to_pylist()
    assert [(r["model"], r["choice"]) for r in rows] == [("5", "first"), ("m", None)]


def test_grade_out_parquet_takes_the_wide_view_too(tmp_path: Path) -> None:
    tasks = write_jsonl(tmp_path / "tasks.jsonl", TASKS)
    answers = write_jsonl(tmp_path / "answers.jsonl", RUN_A)
    out = tmp_path / "wide.parquet"
    args = ["grade", "--tasks", str(tasks), "--answers", str(answers), "--out", str(out)]
    assert main([*args, "--wide"]) == 0
    rows = pq.read_table(out).to_pylist()
    assert [r["check.tool_call.passed"] for r in rows] == [True, None, False]
    assert rows[1]["check.100%25.reason_code"] == "string_match"
