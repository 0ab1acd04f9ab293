"""``gradeproxy serve`` as a real process: a free port, a config file, start, readiness, reap.

For the tests that need what only a process has (signals, exit codes, stderr at start-up);
everything else runs the app in-process (:mod:`tests.support.fixtures`, :mod:`tests.support.live`).
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support.paths import REPO

Process = asyncio.subprocess.Process


def free_port() -> int:
    """A port free on loopback now, for servers the tests start as processes."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def serve_config(
    path: Path,
    *,
    upstream: str,
    port: int,
    tasks: Path,
    results: Path,
    drain_delay_s: float,
    grace_period_s: float,
) -> Path:
    """A config file for ``serve``: one upstream, one listener, one task file, one results file."""
    path.write_text(
        f"upstream:\n  url: {upstream}\n"
        f"listen:\n  port: {port}\n"
        f"tasks:\n  path: {tasks}\n"
        f"results:\n  path: {results}\n"
        f"shutdown:\n  drain_delay_s: {drain_delay_s}\n  grace_period_s: {grace_period_s}\n"
        "logging:\n  level: warning\n"
    )
    return path


async def spawn_serve(config: Path, **streams: Any) -> Process:
    """``python -m gradeproxy.cli serve --config <config>`` from this checkout; ``streams`` are
    :func:`asyncio.create_subprocess_exec`'s ``stdout``/``stderr``."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gradeproxy.cli",
        "serve",
        "--config",
        str(config),
        env={**os.environ, "PYTHONPATH": str(REPO)},
        **streams,
    )


async def wait_ready(url: str, attempts: int = 400, interval_s: float = 0.05) -> None:
    """Poll a readiness URL (the proxy's ``/readyz``, Prometheus' ``/-/ready``) until 200; fail
    the test when it never comes."""
    async with aiohttp.ClientSession() as session:
        for _ in range(attempts):
            try:
                async with session.get(url) as ready:
                    if ready.status == 200:
                        return
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(interval_s)
    pytest.fail(f"{url} never answered 200")


async def reap(process: Process) -> None:
    """Kill a process the test did not see exit, and wait for it: no stray servers."""
    if process.returncode is None:
        process.kill()
        await process.wait()


@asynccontextmanager
async def serving(config: Path, port: int, **streams: Any) -> AsyncIterator[tuple[Process, str]]:
    """A ready ``serve`` process and its base URL; reaped on the way out."""
    process = await spawn_serve(config, **streams)
    try:
        base = f"http://127.0.0.1:{port}"
        await wait_ready(f"{base}/readyz")
        yield process, base
    finally:
        await reap(process)
