"""``serve`` processes writing to one rows database: start, load, count what the database holds.

Each process has its own port and spill file and reads the database password from an
environment variable (``results.sink_password_env``), as a deployment would from a Secret.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import psycopg

from tests.support.paths import REPO
from tests.support.postgres import PASSWORD
from tests.support.process import Process, free_port, reap, wait_ready

PASSWORD_ENV = "GRADEPROXY_TEST_PG_PASSWORD"
GRADED = {"X-Grade-Task": "weather.single"}
REQUEST = b'{"model":"m","messages":[{"role":"user","content":"weather?"}]}'


@dataclass
class Replica:
    process: Process
    base: str
    spill: Path
    config: Path


@dataclass
class Fleet:
    replicas: list[Replica] = field(default_factory=list)
    request_ids: list[str] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)


def write_config(
    path: Path, port: int, upstream: str, tasks: Path, url: str, spill: Path, grace_s: float
) -> Path:
    path.write_text(
        f"upstream:\n  url: {upstream}\n"
        f"listen:\n  port: {port}\n"
        f"tasks:\n  path: {tasks}\n"
        f"results:\n  sink: {url}\n  sink_password_env: {PASSWORD_ENV}\n"
        f"  spill_path: {spill}\n  sink_retry_s: 0.2\n  sink_timeout_s: 2\n"
        f"shutdown:\n  drain_delay_s: 0\n  grace_period_s: {grace_s}\n"
        "logging:\n  level: info\n"
    )
    return path


async def start_replica(config: Path, port: int, log: Path) -> Process:
    with log.open("ab") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gradeproxy.cli", "serve", "--config", str(config),
            env={**os.environ, "PYTHONPATH": str(REPO), PASSWORD_ENV: PASSWORD},
            stdout=out, stderr=out,
        )  # fmt: skip
    await wait_ready(f"http://127.0.0.1:{port}/readyz", attempts=600)
    return process


@asynccontextmanager
async def fleet(
    tmp: Path, count: int, upstream: str, tasks: Path, url: str, grace_s: float = 10.0
) -> AsyncIterator[Fleet]:
    """``count`` ready ``serve`` processes on one database; reaped on the way out."""
    running = Fleet()
    async with AsyncExitStack() as stack:
        for index in range(count):
            port = free_port()
            spill = tmp / f"r{index}" / "spill.jsonl"
            spill.parent.mkdir(parents=True, exist_ok=True)
            config = write_config(
                tmp / f"r{index}.yaml", port, upstream, tasks, url, spill, grace_s
            )
            process = await start_replica(config, port, tmp / f"r{index}.log")
            stack.push_async_callback(reap, process)
            running.replicas.append(Replica(process, f"http://127.0.0.1:{port}", spill, config))
        yield running


async def load(running: Fleet, requests: int, concurrency: int = 8) -> None:
    """``requests`` graded requests spread round-robin over the replicas; every status and the
    proxy's request id (``X-Gradeproxy-Request-Id``) kept."""
    sem = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession() as session:

        async def one(index: int) -> None:
            base = running.replicas[index % len(running.replicas)].base
            async with (
                sem,
                session.post(
                    f"{base}/v1/chat/completions", data=REQUEST, headers=GRADED
                ) as response,
            ):
                await response.read()
                running.statuses.append(response.status)
                running.request_ids.append(response.headers.get("X-Gradeproxy-Request-Id", ""))

        await asyncio.gather(*(one(i) for i in range(requests)))


def db_counts(url: str) -> tuple[int, int]:
    """Rows in the table, and distinct request ids among them."""
    with psycopg.connect(url, password=PASSWORD) as conn:
        got = conn.execute("SELECT count(*), count(DISTINCT request_id) FROM gradeproxy_rows")
        row = got.fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def db_request_ids(url: str) -> set[str]:
    with psycopg.connect(url, password=PASSWORD) as conn:
        return {r[0] for r in conn.execute("SELECT request_id FROM gradeproxy_rows")}


async def eventually(check: Callable[[], Any], what: str, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = await asyncio.to_thread(check)
        if last:
            return last
        await asyncio.sleep(0.2)
    raise AssertionError(f"{what}: never true (last {last!r})")


async def readyz(base: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.get(f"{base}/readyz") as response:
        return response.status, await response.json()


async def metric(base: str, name: str) -> float:
    """The sum of a metric's samples on a replica's ``/metrics``."""
    async with aiohttp.ClientSession() as session, session.get(f"{base}/metrics") as response:
        text = await response.text()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (line[len(name)] in " {"):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def terminate(process: Process, timeout_s: float = 30.0) -> int:
    process.send_signal(signal.SIGTERM)
    return await asyncio.wait_for(process.wait(), timeout_s)


def spill_lines(path: Path) -> int:
    return len(path.read_bytes().splitlines()) if path.exists() else 0
