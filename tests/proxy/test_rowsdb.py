"""The offline commands read the rows database as they read the merged files: the same answer,
filters in the URL's query, the password never printed. A real PostgreSQL (tests/support)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from gradeproxy.cli import main
from grader.json import dumps, loads_exact
from proxy.rowsdb import columns_of, parse_url, read_rows, write_batch
from tests.support.postgres import PASSWORD, PostgresServer
from tests.support.rowcommands import answers
from tests.support.rowsets import jsonl, live_rows

pytestmark = pytest.mark.usefixtures("pg_password")


def migrated(server: PostgresServer, capsys: pytest.CaptureFixture[str]) -> str:
    url = server.database()
    assert main(["db", "migrate", url]) == 0
    assert "-> version 1" in capsys.readouterr().out
    return url


def insert(url: str, rows: list[dict[str, Any]]) -> None:
    batch = [columns_of(row, dumps(row).decode()) for row in rows]
    with psycopg.connect(url, password=PASSWORD) as conn:
        write_batch(conn, batch)


def test_migrate_creates_then_keeps_the_schema(
    postgres: PostgresServer, capsys: pytest.CaptureFixture[str]
) -> None:
    url = postgres.database()
    assert main(["db", "status", url]) == 0
    assert "schema version none" in capsys.readouterr().out
    assert main(["db", "migrate", url]) == 0
    assert "schema created -> version 1" in capsys.readouterr().out
    assert main(["db", "migrate", url]) == 0  # idempotent: a second Job run changes nothing
    assert "schema version 1 -> version 1" in capsys.readouterr().out
    assert main(["db", "status", url]) == 0
    assert "schema version 1 (this gradeproxy writes 1), rows 0" in capsys.readouterr().out


def test_a_password_in_the_url_is_never_printed(
    postgres: PostgresServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = migrated(postgres, capsys).replace("gradeproxy@", f"gradeproxy:{PASSWORD}@")
    assert main(["db", "status", url]) == 0
    assert main(["compare", "--json", "--results", url]) == 0
    bad = url.replace(f":{PASSWORD}@", ":wrong-pw@")
    assert main(["export", "--results", bad, "--parquet", str(tmp_path / "x.parquet")]) == 2
    out = capsys.readouterr()
    assert PASSWORD not in out.out + out.err
    assert "wrong-pw" not in out.err
    assert "gradeproxy:***@" in out.err


@pytest.mark.parametrize(
    "files", [pytest.param(1, id="one_file"), pytest.param(3, id="3_replicas")]
)
def test_every_command_over_the_database_equals_the_merged_files(
    postgres: PostgresServer,
    tmp_path: Path,
    tasks_file: Path,
    capsys: pytest.CaptureFixture[str],
    files: int,
) -> None:
    url = migrated(postgres, capsys)
    rows = live_rows(40)
    paths = []
    for index in range(files):
        mine = rows[index::files]
        path = tmp_path / f"grades.w{index}.jsonl"
        path.write_bytes(jsonl(mine))
        paths.append(str(path))
        insert(url, mine)
    insert(url, rows[:7])  # a retried batch: kept once
    from_files = answers(paths, tmp_path, tasks_file, capsys)
    from_db = answers([url], tmp_path, tasks_file, capsys)
    for got in (from_files, from_db):  # rows from several replicas interleave differently
        got["export_rows"].sort(key=lambda row: row["row_id"])
        got["regrade_diff"].sort(key=dumps)
    assert len(from_db["export_rows"]) == len(rows)
    assert from_db == from_files


FILTERS = [
    pytest.param("run=nightly", lambda r: r["run"] == "nightly", id="run"),
    pytest.param("variant=shadow", lambda r: r["variant"] == "shadow", id="variant"),
    pytest.param("task=weather.", lambda r: r["task_id"].startswith("weather."), id="task_prefix"),
    pytest.param("task=weather_", lambda r: r["task_id"].startswith("weather_"), id="like_escaped"),
    pytest.param(
        "since=2026-12-02T00:00:00Z&until=2026-12-03T00:00:00Z",
        lambda r: "2026-12-02" <= r["time"] < "2026-12-03",
        id="time_range",
    ),
    pytest.param(
        "run=other&variant=primary",
        lambda r: r["run"] == "other" and r["variant"] == "primary",
        id="run_and_variant",
    ),
]


@pytest.mark.parametrize(("query", "keep"), FILTERS)
def test_url_filters_select_what_they_say(
    postgres: PostgresServer, capsys: pytest.CaptureFixture[str], query: str, keep: Any
) -> None:
    url = migrated(postgres, capsys)
    rows = live_rows(18) + live_rows(9, run="other")
    other = rows[36:]
    for row in other:  # distinct requests: other ids
        row["row_id"] = row["row_id"][:-4] + "ffff"
    insert(url, rows)
    got = [row for _, row in read_rows(parse_url(f"{url}?{query}"))]
    expected = [row for row in rows if keep(row)]
    assert got == expected
    assert len(got) > 0 or query.startswith("task=weather_")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        pytest.param("postgresql://h/db?since=yesterday", "'since' must be an ISO 8601", id="time"),
        pytest.param("postgresql://h/db?variant=both", "'variant' must be primary", id="variant"),
        pytest.param("postgresql://h/db?run=a&run=b", "'run' given twice", id="twice"),
    ],
)
def test_bad_filters_are_usage_errors(
    url: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["compare", "--results", url])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_an_unmigrated_database_is_a_clear_error(
    postgres: PostgresServer, capsys: pytest.CaptureFixture[str], tmp_path: Path, tasks_file: Path
) -> None:
    url = postgres.database()
    out = str(tmp_path / "o")
    assert main(["regrade", "--results", url, "--tasks", str(tasks_file), "--out", out]) == 2
    assert "no rows table" in capsys.readouterr().err
    assert main(["compare", "--results", url]) == 2
    assert "no rows table: run 'gradeproxy db migrate URL'" in capsys.readouterr().err


def test_rows_read_back_are_the_rows_written(
    postgres: PostgresServer, capsys: pytest.CaptureFixture[str]
) -> None:
    url = migrated(postgres, capsys)
    rows = live_rows(5)
    rows[0]["meta"] = {"odd": "a\u0000b \ud800 é", "big": 12345678901234567890}
    rows[1]["answer"] = "1.0e+00 and 0.1"
    insert(url, rows)
    got = [row for _, row in read_rows(parse_url(url))]
    assert [dumps(row) for row in got] == [dumps(row) for row in rows]
    assert [list(row) for row in got] == [list(row) for row in rows]  # key order kept
    assert loads_exact(dumps(got[0]["meta"]).decode())["big"] == 12345678901234567890
