"""``gradeproxy serve --workers N`` as a real process tree on loopback, for the tests.

The supervisor runs as ``python -m gradeproxy.cli serve`` with its log lines (JSON, one a line) read
from stdout as they come, so a test can wait for an event (``workers_ready``, a worker's
``stopped``) instead of sleeping. Every wait is on a condition with a generous timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from tests.support.paths import REPO

ROOT = REPO
WAIT_S = 90.0  # spawning N interpreters on a loaded two-core machine takes seconds


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive ports free on loopback now (worker i: first + i)."""
    for _ in range(200):
        with contextlib.ExitStack() as stack:
            first = stack.enter_context(socket.socket())
            first.bind(("127.0.0.1", 0))
            base: int = first.getsockname()[1]
            if base + count > 65535:
                continue
            try:
                for offset in range(1, count):
                    stack.enter_context(socket.socket()).bind(("127.0.0.1", base + offset))
            except OSError:
                continue
            return base
    raise RuntimeError(f"no {count} consecutive free ports")


async def wait_until(check: Callable[[], Any], what: str, timeout_s: float = WAIT_S) -> Any:
    """Poll ``check`` (sync or async) until it returns something truthy."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


@dataclass
class Supervised:
    process: asyncio.subprocess.Process
    port: int
    admin_ports: list[int]
    results: Path
    events: list[dict[str, Any]] = field(default_factory=list)
    stderr: bytes = b""

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def admin(self, index: int) -> str:
        return f"http://127.0.0.1:{self.admin_ports[index]}"

    def event(self, name: str, **labels: Any) -> dict[str, Any] | None:
        for event in self.events:
            if event.get("event") == name and all(event.get(k) == v for k, v in labels.items()):
                return event
        return None

    async def wait_event(self, name: str, **labels: Any) -> dict[str, Any]:
        found: dict[str, Any] = await wait_until(
            lambda: self.event(name, **labels), f"log event {name} {labels}"
        )
        return found

    async def samples(self, index: int, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        """Worker ``index``'s samples of ``name``, by their labels."""
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{self.admin(index)}/metrics") as response,
        ):
            text = await response.text()
        found: dict[tuple[tuple[str, str], ...], float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name:
                    found[tuple(sorted(sample.labels.items()))] = sample.value
        return found

    async def total(self, name: str, **labels: str) -> float:
        """``name`` summed over every worker (and every series matching ``labels``)."""
        total = 0.0
        for index in range(len(self.admin_ports)):
            for key, value in (await self.samples(index, name)).items():
                if all(dict(key).get(k) == v for k, v in labels.items()):
                    total += value
        return total

    async def board(self, index: int) -> dict[str, Any]:
        """The live page's scoreboard as worker ``index``'s admin port serves it."""
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{self.admin(index)}/ui/scoreboard.json") as response,
        ):
            board: dict[str, Any] = await response.json()
        return board

    async def wait_status(self, index: int, status: int | None) -> None:
        """Until worker ``index``'s /readyz answers ``status`` (None: nothing listens)."""

        async def check() -> bool:
            return await self.ready(index) == status

        await wait_until(check, f"worker {index} /readyz {status}")

    async def ready(self, index: int) -> int | None:
        """Worker ``index``'s /readyz status, or None while nothing listens there."""
        try:
            async with (
                aiohttp.ClientSession() as session,
                session.get(f"{self.admin(index)}/readyz") as response,
            ):
                return response.status
        except aiohttp.ClientConnectionError:
            return None


def config_text(
    upstream: str,
    tasks: Path,
    results: Path,
    port: int,
    admin: int,
    workers: int,
    extra: str = "",
    results_options: str = "",
) -> str:
    return (
        f"upstream:\n  url: {upstream}\n"
        f"listen:\n  port: {port}\n  workers: {workers}\n"
        f"admin:\n  port: {admin}\n"
        f"tasks:\n  path: {tasks}\n"
        f"results:\n  path: {results}\n{results_options}"
        "logging:\n  level: info\n"
        + (extra or "shutdown:\n  drain_delay_s: 0.5\n  grace_period_s: 20\n")
    )


@contextlib.asynccontextmanager
async def supervised(
    tmp_path: Path,
    upstream: str,
    tasks: Path,
    port: int | None = None,
    admin: int | None = None,
    workers: int = 2,
    extra: str = "",
    wait_ready: bool = True,
    results_options: str = "",
) -> AsyncIterator[Supervised]:
    """The supervisor and its workers, ready (every admin /readyz answers 200); ports default to
    free ones (the admin ports: ``workers`` consecutive ones)."""
    port = free_ports(1) if port is None else port  # 0: the supervisor picks one
    admin = admin or free_ports(workers)
    results = tmp_path / "results" / "grades.jsonl"
    config = tmp_path / "workers.yaml"
    config.write_text(
        config_text(upstream, tasks, results, port, admin, workers, extra, results_options)
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gradeproxy.cli",
        "serve",
        "--config",
        str(config),
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    run = Supervised(process, port, [admin + i for i in range(workers)], results)

    async def read_logs() -> None:
        assert process.stdout is not None
        async for line in process.stdout:
            with contextlib.suppress(ValueError):
                run.events.append(json.loads(line))

    async def read_errors() -> None:
        assert process.stderr is not None
        run.stderr = await process.stderr.read()

    readers = [asyncio.create_task(read_logs()), asyncio.create_task(read_errors())]
    try:
        if wait_ready:
            ready = await run.wait_event("workers_ready")
            run.port = int(ready["url"].rsplit(":", 1)[1].split("/")[0])
            for index in range(workers):
                await run.wait_status(index, 200)
        yield run
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
        for pid in _worker_pids(run):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        await asyncio.wait(readers, timeout=10)


def _worker_pids(run: Supervised) -> list[int]:
    return [
        pid
        for event in run.events
        if event.get("event") == "workers_ready"
        for pid in event.get("pids", [])
    ]
