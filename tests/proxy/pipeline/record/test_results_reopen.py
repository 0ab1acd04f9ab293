"""The results file is the operator's: moved, deleted or replaced, the next rows go to its path.

Red team, round 3: moved or deleted, the proxy kept appending into the unlinked inode and SIGHUP
did not help, so rows were lost without a count. The writer now checks its path before each
append and reopens it (SIGHUP asks for a reopen too, as nginx's USR1); a row it cannot write
because the path cannot be opened again is a counted ``results_write`` error, never silent.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from grader.json import loads_exact
from proxy.pipeline.record.results import ResultsWriteError, ResultWriter
from tests.support.backend import ScriptedBackend
from tests.support.metrics import metric_value
from tests.support.process import free_port, serve_config, serving
from tests.support.proxy import ProxyFactory, rows_of

TAGGED = {"X-Grade-Task": "weather.single"}


def read(path: Path) -> list[int]:
    return [loads_exact(line)["n"] for line in path.read_text().splitlines()]


def moved(path: Path) -> None:
    path.rename(path.with_name("moved.jsonl"))


def deleted(path: Path) -> None:
    path.unlink()


def replaced(path: Path) -> None:
    other = path.with_name("other.jsonl")
    other.write_text('{"n": -1}\n')
    other.rename(path)  # an operator's file put in its place: rows follow the path


OPERATIONS: list[tuple[str, Callable[[Path], None], list[int], dict[str, list[int]]]] = [
    ("moved", moved, [1], {"moved.jsonl": [0]}),
    ("deleted", deleted, [1], {}),
    ("replaced", replaced, [-1, 1], {}),
]


@pytest.mark.parametrize(
    ("operation", "at_path", "elsewhere"),
    [o[1:] for o in OPERATIONS],
    ids=[o[0] for o in OPERATIONS],
)
def test_rows_follow_the_path_after_the_file_changed(
    tmp_path: Path,
    operation: Callable[[Path], None],
    at_path: list[int],
    elsewhere: dict[str, list[int]],
) -> None:
    path = tmp_path / "grades.jsonl"
    writer = ResultWriter(path, max_bytes=1 << 20, backups=1)
    writer.write([{"n": 0}])
    operation(path)
    writer.write([{"n": 1}])
    assert read(path) == at_path
    for name, rows in elsewhere.items():
        assert read(tmp_path / name) == rows
    assert (writer.reopens, writer.rows_written) == (1, 2)
    writer.close()


def test_a_reopen_asked_keeps_appending_to_the_same_file(tmp_path: Path) -> None:
    path = tmp_path / "grades.jsonl"
    writer = ResultWriter(path, max_bytes=1 << 20, backups=1)
    writer.write([{"n": 0}])
    writer.reopen()  # what SIGHUP does
    writer.write([{"n": 1}])
    writer.write([{"n": 2}])
    assert read(path) == [0, 1, 2]
    assert writer.reopens == 1
    writer.close()


def test_rows_that_cannot_reach_the_path_fail_counted_then_writing_resumes(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "results"
    path = folder / "grades.jsonl"
    writer = ResultWriter(path, max_bytes=1 << 20, backups=1)
    writer.write([{"n": 0}])
    path.unlink()
    folder.rmdir()  # the path cannot be opened again: no row goes into the unlinked inode
    with pytest.raises(ResultsWriteError) as failed:
        writer.write([{"n": 1}, {"n": 2}])
    assert failed.value.rows == 2
    folder.mkdir()
    writer.write([{"n": 3}])
    assert read(path) == [3]
    assert writer.rows_written == 2
    writer.close()


def test_rotation_after_the_file_was_moved_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "grades.jsonl"
    writer = ResultWriter(path, max_bytes=40, backups=2)
    writer.write([{"n": 0, "pad": "x" * 20}])
    moved(path)
    for n in range(1, 4):
        writer.write([{"n": n, "pad": "x" * 20}])
    files = [path, *(path.with_name(f"{path.name}.{i}") for i in (1, 2))]
    found = sorted(n for file in files if file.exists() for n in read(file))
    assert found + read(tmp_path / "moved.jsonl") == [1, 2, 3, 0]
    writer.close()


async def test_the_live_proxy_writes_to_a_moved_files_path(
    make_proxy: ProxyFactory, results_path: Path
) -> None:
    client = await make_proxy()
    for index in range(2):
        response = await client.post("/v1/chat/completions", data=b"{}", headers=TAGGED)
        await response.read()
        await rows_of(client, results_path)  # graded and written before the move
        if index == 0:
            await asyncio.to_thread(moved, results_path)
    assert len(await rows_of(client, results_path)) == 1
    assert len(await asyncio.to_thread(read_rows_at, results_path.with_name("moved.jsonl"))) == 1
    text = await (await client.get("/metrics")).text()
    assert metric_value(text, "gradeproxy_grading_errors_total", kind="results_write") == 0


def read_rows_at(path: Path) -> list[Any]:
    return path.read_text().splitlines()


def rows_at_least(path: Path) -> list[Any]:
    return read_rows_at(path) if path.exists() else []


async def test_sighup_reopens_the_results_file_of_a_serve_process(
    tmp_path: Path, tasks_file: Path, backend: ScriptedBackend, aiohttp_server: Any
) -> None:
    upstream = await aiohttp_server(backend.app())
    port = free_port()
    results = tmp_path / "grades.jsonl"
    config = serve_config(
        tmp_path / "config.yaml",
        upstream=str(upstream.make_url("/v1")),
        port=port,
        tasks=tasks_file,
        results=results,
        drain_delay_s=0,
        grace_period_s=5,
    )
    async with serving(config, port) as (process, base), aiohttp.ClientSession() as session:

        async def answered() -> None:
            url = f"{base}/v1/chat/completions"
            async with session.post(url, data=b"{}", headers=TAGGED) as response:
                assert response.status == 200
                await response.read()

        async def lines(path: Path, count: int) -> None:
            for _ in range(500):
                if len(await asyncio.to_thread(rows_at_least, path)) >= count:
                    return
                await asyncio.sleep(0.01)
            pytest.fail(f"{path.name} never held {count} row(s)")

        await answered()
        await lines(results, 1)
        await asyncio.to_thread(moved, results)
        process.send_signal(signal.SIGHUP)
        await answered()
        await lines(results, 1)
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 20) == 0
    assert len(read_rows_at(results)) == 1
    assert len(read_rows_at(results.with_name("moved.jsonl"))) == 1
    assert os.stat(results).st_size > 0
