"""The upstream client (proxy/pipeline/upstream/) against hostile or broken upstreams on
loopback: ones that stop reading a large request body, answer before it is written, or send
bytes nobody asked for; each case is a raw socket server doing exactly that."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest
from multidict import CIMultiDict

from proxy.errors import UpstreamTimeoutError
from proxy.pipeline.upstream import Origin, Timeouts, UpstreamPool

IDLE = Timeouts(connect_s=5, idle_s=0.5)
LARGE = b"x" * (32 << 20)  # far past what the sockets' buffers hold on loopback
EARLY_413 = b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 3\r\n\r\nbig"
Behaviour = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@dataclass
class Upstream:
    behaviour: Behaviour
    connections: int = 0
    writers: list[asyncio.StreamWriter] = field(default_factory=list)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            await self.behaviour(reader, writer)
        writer.close()


@asynccontextmanager
async def upstream(behaviour: Behaviour) -> AsyncIterator[tuple[Upstream, UpstreamPool, Origin]]:
    raw = Upstream(behaviour)
    server = await asyncio.start_server(raw.handle, "127.0.0.1", 0)
    origin = Origin.of(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1")
    pool = UpstreamPool(shortest_idle_s=IDLE.idle_s)
    scan = asyncio.create_task(pool.run())
    try:
        yield raw, pool, origin
    finally:
        scan.cancel()
        pool.close()
        server.close()
        for writer in raw.writers:
            writer.close()
        await server.wait_closed()
        await asyncio.sleep(0.01)


async def never_reads(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await asyncio.sleep(3600)


async def answers_early_then_stops_reading(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.write(EARLY_413)
    await writer.drain()
    await asyncio.sleep(3600)


async def answers_early_then_reads_on(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Answers before the body, then reads it and everything after it (a keep-alive server
    that would take whatever follows for the next request)."""
    await reader.readuntil(b"\r\n\r\n")
    writer.write(EARLY_413)
    await writer.drain()
    while await reader.read(1 << 16):
        pass


async def post(pool: UpstreamPool, origin: Origin, body: bytes) -> tuple[int, bytes]:
    response = await pool.request("POST", origin, "/v1/x", CIMultiDict(), body, IDLE)
    try:
        return response.status, await response.read()
    finally:
        response.close()


async def test_an_upstream_that_stops_reading_a_large_body_times_out() -> None:
    async with upstream(never_reads) as (_, pool, origin):
        with pytest.raises(UpstreamTimeoutError):
            async with asyncio.timeout(10):  # a hang fails here, not at pytest's timeout
                await post(pool, origin, LARGE)


@pytest.mark.parametrize(
    "behaviour",
    [
        pytest.param(answers_early_then_stops_reading, id="stops_reading"),
        pytest.param(answers_early_then_reads_on, id="reads_on"),
    ],
)
async def test_an_early_answer_to_a_large_body_is_relayed_and_its_connection_not_reused(
    behaviour: Behaviour,
) -> None:
    async with upstream(behaviour) as (raw, pool, origin):
        async with asyncio.timeout(10):
            assert await post(pool, origin, LARGE) == (413, b"big")
            assert await post(pool, origin, b"{}") == (413, b"big")  # on a fresh connection
        assert raw.connections == 2
