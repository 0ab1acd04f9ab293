"""Replicas writing rows to one PostgreSQL: nothing lost, nothing twice, whatever the database
does. Real ``serve`` processes, a real server (tests/support/postgres.py), a scripted backend."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer

from gradeproxy.cli import main
from tests.support.backend import ScriptedBackend
from tests.support.fleet import (
    db_counts,
    db_request_ids,
    eventually,
    fleet,
    load,
    metric,
    readyz,
    spill_lines,
    start_replica,
    terminate,
)
from tests.support.postgres import PASSWORD, PostgresServer

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("pg_password")]
ServerFactory = Callable[..., Awaitable[TestServer]]


async def upstream(aiohttp_server: ServerFactory) -> str:
    return str((await aiohttp_server(ScriptedBackend().app())).make_url("/v1"))


def migrated(server: PostgresServer) -> str:
    url = server.database()
    assert main(["db", "migrate", url]) == 0
    return url


@pytest.mark.parametrize(
    ("replicas", "requests"),
    [pytest.param(3, 90, id="3_replicas"), pytest.param(1, 30, id="1_replica")],
)
async def test_every_graded_request_is_one_row(
    postgres: PostgresServer,
    aiohttp_server: ServerFactory,
    tasks_file: Path,
    tmp_path: Path,
    replicas: int,
    requests: int,
) -> None:
    url = migrated(postgres)
    async with fleet(tmp_path, replicas, await upstream(aiohttp_server), tasks_file, url) as run:
        await load(run, requests)
        assert run.statuses == [200] * requests
        await eventually(lambda: db_counts(url) == (requests, requests), "rows == requests")
        assert db_request_ids(url) == set(run.request_ids)
        status, body = await readyz(run.replicas[0].base)
        assert status == 200
        assert body["rows_sink"]["state"] == "ok"
        written = [await metric(r.base, "gradeproxy_sink_rows_written_total") for r in run.replicas]
        assert sum(written) == requests
        assert [spill_lines(r.spill) for r in run.replicas] == [0] * replicas


async def test_a_database_outage_mid_load_loses_nothing_and_fails_no_client(
    own_postgres: PostgresServer,
    aiohttp_server: ServerFactory,
    tasks_file: Path,
    tmp_path: Path,
) -> None:
    url = migrated(own_postgres)
    async with fleet(tmp_path, 3, await upstream(aiohttp_server), tasks_file, url) as run:
        await load(run, 30)
        await eventually(lambda: db_counts(url)[0] == 30, "rows before the outage")
        own_postgres.stop()
        await load(run, 45)  # while the database is down
        status, body = await readyz(run.replicas[0].base)
        assert status == 200  # spilling is not a reason to stop serving
        assert body["rows_sink"]["state"] == "spilling"
        await eventually(
            lambda: sum(spill_lines(r.spill) for r in run.replicas) == 45, "outage rows spilled"
        )
        own_postgres.start()
        await load(run, 15)  # while the backfill runs
        assert run.statuses == [200] * 90
        await eventually(lambda: db_counts(url) == (90, 90), "rows == requests after backfill")
        assert db_request_ids(url) == set(run.request_ids)
        await eventually(
            lambda: [spill_lines(r.spill) for r in run.replicas] == [0, 0, 0], "spills emptied"
        )
        backfilled = [
            await metric(r.base, "gradeproxy_sink_rows_backfilled_total") for r in run.replicas
        ]
        assert sum(backfilled) >= 45
        assert await metric(run.replicas[0].base, "gradeproxy_rows_dropped_total") == 0
    for index in range(3):
        assert PASSWORD not in (tmp_path / f"r{index}.log").read_text()


async def test_a_database_down_at_start_is_spilled_to_then_backfilled(
    own_postgres: PostgresServer,
    aiohttp_server: ServerFactory,
    tasks_file: Path,
    tmp_path: Path,
) -> None:
    url = migrated(own_postgres)
    own_postgres.stop()
    async with fleet(tmp_path, 1, await upstream(aiohttp_server), tasks_file, url) as run:
        (replica,) = run.replicas
        await load(run, 20)
        assert run.statuses == [200] * 20
        await eventually(lambda: spill_lines(replica.spill) == 20, "every row spilled")
        status, body = await readyz(replica.base)
        assert (status, body["rows_sink"]["state"]) == (200, "spilling")
        assert body["rows_sink"]["reason"].startswith("unavailable")
        assert await metric(replica.base, "gradeproxy_sink_spill_bytes") > 0
        own_postgres.start()
        await eventually(lambda: db_counts(url) == (20, 20), "backfilled")
        await eventually(lambda: spill_lines(replica.spill) == 0, "spill emptied")
        assert await metric(replica.base, "gradeproxy_sink_rows_spilled_total") == 20


async def test_sigterm_in_an_outage_keeps_every_row_for_the_next_start(
    own_postgres: PostgresServer,
    aiohttp_server: ServerFactory,
    tasks_file: Path,
    tmp_path: Path,
) -> None:
    url = migrated(own_postgres)
    backend = await upstream(aiohttp_server)
    async with fleet(tmp_path, 1, backend, tasks_file, url, grace_s=2.0) as run:
        (replica,) = run.replicas
        await load(run, 10)
        await eventually(lambda: db_counts(url)[0] == 10, "rows before the outage")
        own_postgres.stop()
        await load(run, 25)
        assert await terminate(replica.process) == 0
        assert spill_lines(replica.spill) == 25  # the rows the database never got
    own_postgres.start()
    port = int(replica.base.rsplit(":", 1)[1])
    process = await start_replica(replica.config, port, tmp_path / "again.log")
    try:
        await eventually(lambda: db_counts(url) == (35, 35), "the next start backfilled")
        await eventually(lambda: spill_lines(replica.spill) == 0, "spill emptied")
        assert db_request_ids(url) == set(run.request_ids)
    finally:
        assert await terminate(process) == 0


async def test_an_unmigrated_database_is_spilled_to_until_it_is_migrated(
    postgres: PostgresServer,
    aiohttp_server: ServerFactory,
    tasks_file: Path,
    tmp_path: Path,
) -> None:
    url = postgres.database()  # never migrated: serve must not migrate it itself
    async with fleet(tmp_path, 1, await upstream(aiohttp_server), tasks_file, url) as run:
        (replica,) = run.replicas
        await load(run, 12)
        status, body = await readyz(replica.base)
        assert (status, body["rows_sink"]["state"]) == (200, "spilling")
        assert body["rows_sink"]["reason"] == "schema_missing: run 'gradeproxy db migrate'"
        assert (
            await metric(replica.base, 'gradeproxy_sink_write_failures_total{reason="schema"}') >= 1
        )
        await eventually(lambda: spill_lines(replica.spill) == 12, "spilled")
        assert main(["db", "migrate", url]) == 0
        await eventually(lambda: db_counts(url) == (12, 12), "backfilled once migrated")
        log = (tmp_path / "r0.log").read_text()
        assert "rows_sink_spilling" in log
        assert "schema_missing" in log
        assert PASSWORD not in log  # read from the environment, never logged
