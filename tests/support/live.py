"""A proxy served the way ``gradeproxy serve`` serves it (WatchedRunner, real sites on
loopback), for the tests that need the client watchdog, raw sockets or the shutdown path."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from proxy.app import make_app
from proxy.config import Config
from proxy.serve import bound_port, shutdown, start_sites
from proxy.state import METRICS, QUEUE
from tests.support.proxy import build_config, tasks_loaded


@dataclass
class Live:
    config: Config
    app: web.Application
    runners: list[web.AppRunner]
    port: int
    admin_port: int | None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the proxy's samples named ``name`` whose labels include ``labels`` (0.0
        when there is none): a label left out is summed over (``key`` on the request series)."""
        return sum(
            (
                sample.value
                for family in self.app[METRICS].registry.collect()
                for sample in family.samples
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
            ),
            0.0,
        )

    async def drained(self) -> None:
        assert await self.app[QUEUE].drain(10)


@contextlib.asynccontextmanager
async def live_proxy(
    upstream_url: str, tasks: Path | None, results: Path | None, **sections: dict[str, Any]
) -> AsyncIterator[Live]:
    """``results`` None: no results file (the config's default path is replaced by none)."""
    config = build_config(upstream_url, tasks, results, listen_port=0, **sections)
    app = make_app(config)
    runners, sites = await start_sites(config, app)
    live = Live(
        config,
        app,
        runners,
        bound_port(sites[0]),
        bound_port(sites[1]) if len(sites) > 1 else None,
    )
    stopped = False
    try:
        await tasks_loaded(app)
        yield live
        stopped = True
        await shutdown(config, app, runners)
    finally:
        if not stopped:
            for runner in runners:
                await runner.cleanup()


async def raw_exchange(port: int, request: bytes, read_s: float = 5.0) -> bytes:
    """Send raw request bytes on a fresh connection; everything read until close or timeout."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        chunks: list[bytes] = []
        with contextlib.suppress(TimeoutError, ConnectionError):
            async with asyncio.timeout(read_s):
                while chunk := await reader.read(65536):
                    chunks.append(chunk)
                    if whole_response(b"".join(chunks)):
                        break
        return b"".join(chunks)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


def whole_response(data: bytes) -> bool:
    """Whether ``data`` holds a whole response with a Content-Length body."""
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return False


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1]) if response.startswith(b"HTTP/1.1 ") else 0
