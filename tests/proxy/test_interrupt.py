"""Ctrl-C at a terminal: the first skips the drain delay (streams still finish, rows are still
written), a second exits at once. SIGTERM keeps the Kubernetes drain (test_lifecycle.py)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from grader.json import loads_exact
from tests.support.backend import SSE, Reply, ScriptedBackend, wire
from tests.support.process import Process, free_port, serve_config
from tests.support.process import serving as serve_process

# Far longer than any wait below: a shutdown that sleeps through it fails the test.
LONG_DRAIN_S = 120.0

TAGGED = {"X-Grade-Task": "weather.single"}

pytestmark = pytest.mark.e2e


@asynccontextmanager
async def serving(
    tmp_path: Path, tasks_file: Path, upstream: str
) -> AsyncIterator[tuple[Process, str, Path]]:
    port, results = free_port(), tmp_path / "results.jsonl"
    config = serve_config(
        tmp_path / "config.yaml",
        upstream=upstream,
        port=port,
        tasks=tasks_file,
        results=results,
        drain_delay_s=LONG_DRAIN_S,
        grace_period_s=LONG_DRAIN_S,
    )
    async with serve_process(config, port, stderr=asyncio.subprocess.PIPE) as (process, base):
        yield process, base, results


async def test_first_ctrl_c_skips_the_drain_delay_and_keeps_the_row(
    tmp_path: Path,
    tasks_file: Path,
    backend: ScriptedBackend,
    aiohttp_server: Callable[..., Awaitable[TestServer]],
) -> None:
    server = await aiohttp_server(backend.app())
    body = wire("openai_single_tool.sse")
    backend.replies.append(
        Reply(body=body, content_type=SSE, split_at=range(60, len(body), 60), pause_s=0.05)
    )
    async with serving(tmp_path, tasks_file, str(server.make_url("/v1"))) as (proc, base, rows):
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"{base}/v1/chat/completions",
                data=b"{}",
                headers={"X-Grade-Task": "weather.single"},
            ) as response,
        ):
            first = await response.content.readexactly(60)
            proc.send_signal(signal.SIGINT)
            rest = await response.read()
        assert first + rest == body
        # Well under the 120 s drain delay: the delay was skipped, not slept through.
        assert await asyncio.wait_for(proc.wait(), 30) == 0
        assert proc.stderr is not None
        assert b"Ctrl-C again to exit now" in await proc.stderr.read()
    lines = (await asyncio.to_thread(rows.read_text)).splitlines()
    assert [loads_exact(line)["result"] for line in lines] == ["pass"]


async def test_second_ctrl_c_exits_at_once(
    tmp_path: Path,
    tasks_file: Path,
    backend: ScriptedBackend,
    aiohttp_server: Callable[..., Awaitable[TestServer]],
) -> None:
    server = await aiohttp_server(backend.app())
    body = wire("openai_single_tool.sse")
    gate = asyncio.Event()  # never set: the stream hangs after its first chunk
    backend.replies.append(Reply(body=body, content_type=SSE, split_at=[60], gate=gate))
    async with serving(tmp_path, tasks_file, str(server.make_url("/v1"))) as (proc, base, _):
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"{base}/v1/chat/completions",
                data=b"{}",
                headers={"X-Grade-Task": "weather.single"},
            ) as response,
        ):
            await response.content.readexactly(60)
            proc.send_signal(signal.SIGINT)
            await asyncio.sleep(0.5)
            assert proc.returncode is None  # the first one waits for the hanging stream
            proc.send_signal(signal.SIGINT)
            assert await asyncio.wait_for(proc.wait(), 30) == 130
        gate.set()
        assert proc.stderr is not None
        assert b"second Ctrl-C, exiting now" in await proc.stderr.read()
