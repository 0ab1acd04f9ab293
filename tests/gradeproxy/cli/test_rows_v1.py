"""Row schema v2 added ``row_id``; every command that reads rows still takes a v1 file and gives
the answer it gives for the same rows written as v2 (the ids aside)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from grader.rows import READ_SCHEMA_VERSIONS, ROW_SCHEMA_VERSION
from tests.support.rowcommands import answers
from tests.support.rowsets import as_v1, jsonl, live_rows


def _ids_aside(got: dict[str, Any]) -> dict[str, Any]:
    out = dict(got)
    out["export_columns"] = [c for c in got["export_columns"] if c != "row_id"]
    out["export_rows"] = [
        {k: v for k, v in row.items() if k not in ("row_id", "row_schema_version")}
        for row in got["export_rows"]
    ]
    return out


def test_versions() -> None:
    assert ROW_SCHEMA_VERSION == 3
    assert {1, ROW_SCHEMA_VERSION} <= READ_SCHEMA_VERSIONS


@pytest.mark.parametrize("count", [pytest.param(12, id="12_requests"), pytest.param(31, id="31")])
def test_every_reading_command_gives_the_v2_answer_for_a_v1_file(
    tmp_path: Path, tasks_file: Path, capsys: pytest.CaptureFixture[str], count: int
) -> None:
    rows = live_rows(count)
    v1, v2 = tmp_path / "v1" / "grades.jsonl", tmp_path / "v2" / "grades.jsonl"
    for path, written in ((v1, as_v1(rows)), (v2, rows)):
        path.parent.mkdir()
        path.write_bytes(jsonl(written))
    old = answers([str(v1)], v1.parent, tasks_file, capsys)
    new = answers([str(v2)], v2.parent, tasks_file, capsys)
    assert {r["row_schema_version"] for r in old["export_rows"]} == {1}
    assert "row_id" not in old["export_columns"]
    assert len({r["row_id"] for r in new["export_rows"]}) == 2 * count
    assert old["compare_json"]["pairs"] == count
    assert _ids_aside(old) == _ids_aside(new)
    assert new["compare"]["out"].count("\n") > 2  # a table, not an empty answer
