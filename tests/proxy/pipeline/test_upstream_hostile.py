"""The upstream client (proxy/pipeline/upstream/) against hostile or broken upstreams on
loopback: ones that stop reading a large request body, answer before it is written, send
bytes nobody asked for or trailers without end, frame a body by their close, or close a
kept-alive connection; each case is a raw socket server doing exactly that."""

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
from proxy.pipeline.upstream.connection import Connection

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


def answering(first: bytes) -> Behaviour:
    """Answers the first request it gets with ``first`` in one write, every later one (on any
    connection) with 'second'."""
    answers = [first]

    async def behaviour(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            sized = [line for line in head.lower().split(b"\r\n") if b"content-length:" in line]
            await reader.readexactly(int(sized[0].split(b":")[1]) if sized else 0)
            writer.write(answers.pop() if answers else SECOND)
            await writer.drain()

    return behaviour


SECOND = b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond"
OK_2 = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
CHUNKED_OK = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"


@pytest.mark.parametrize(
    "after",
    [
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nbad", id="a_second_response"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nbad\r\n0\r\n\r\n",
            id="a_second_chunked_response",
        ),
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nba", id="half_a_response"),
        pytest.param(b"GARBAGE", id="garbage"),
    ],
)
@pytest.mark.parametrize(
    "first", [pytest.param(OK_2, id="sized"), pytest.param(CHUNKED_OK, id="chunked")]
)
async def test_bytes_after_a_response_are_never_its_body_and_its_connection_is_not_reused(
    first: bytes, after: bytes
) -> None:
    async with upstream(answering(first + after)) as (raw, pool, origin):
        async with asyncio.timeout(10):
            assert await post(pool, origin, b"{}") == (200, b"ok")
            assert await post(pool, origin, b"{}") == (200, b"second")
        assert raw.connections == 2


def answering_then_closing(answer: bytes) -> Behaviour:
    async def behaviour(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(2)  # the tests' b"{}"
        writer.write(answer)
        await writer.drain()

    return behaviour


@pytest.mark.parametrize(
    "framing",
    [
        pytest.param(b"", id="no_framing"),
        pytest.param(b"Transfer-Encoding: identity\r\n", id="identity"),
        pytest.param(b"Transfer-Encoding: gzip\r\n", id="gzip_not_chunked"),
        pytest.param(b"Transfer-Encoding: chunked, gzip\r\n", id="chunked_not_last"),
    ],
)
async def test_a_response_not_ending_in_chunked_is_read_until_the_close(framing: bytes) -> None:
    answer = b"HTTP/1.1 200 OK\r\n" + framing + b"\r\nuntil the close"
    async with upstream(answering_then_closing(answer)) as (_, pool, origin):
        async with asyncio.timeout(10):
            assert await post(pool, origin, b"{}") == (200, b"until the close")


@pytest.mark.parametrize(
    ("behaviour", "status"),
    [
        pytest.param(never_reads, None, id="timed_out"),
        pytest.param(answers_early_then_stops_reading, 413, id="answered_early"),
    ],
)
async def test_a_connection_left_with_unsent_body_bytes_lets_go_of_its_socket(
    behaviour: Behaviour, status: int | None
) -> None:
    """Closing a transport waits for its write buffer to drain first, which an upstream that
    stopped reading never lets happen: the socket (and the unsent bytes) would stay held."""
    async with upstream(behaviour) as (raw, pool, origin):
        lost: list[Connection] = []
        gone = asyncio.Event()
        forget = pool.forget

        def recording(conn: Connection) -> None:  # called from the connection's connection_lost
            lost.append(conn)
            gone.set()
            forget(conn)

        pool.forget = recording  # type: ignore[method-assign]
        async with asyncio.timeout(10):
            if status is None:
                with pytest.raises(UpstreamTimeoutError):
                    await post(pool, origin, LARGE)
            else:
                assert (await post(pool, origin, LARGE))[0] == status
            await gone.wait()
        assert len(lost) == raw.connections == 1


async def answers_then_closes(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers one request on a keep-alive exchange, then closes (an upstream's idle close)."""
    await reader.readuntil(b"\r\n\r\n")
    await reader.readexactly(2)
    writer.write(OK_2)
    await writer.drain()


async def test_a_post_never_takes_a_pooled_connection_whose_close_was_seen() -> None:
    """The upstream's close is seen (the transport closing) a loop turn before its loss is
    delivered; a POST checked out in between went on the dying connection and, never sent
    again, was a 502. Its close is waited for one turn at a time, then the POST goes."""
    async with upstream(answers_then_closes) as (raw, pool, origin):
        response = await pool.request("POST", origin, "/v1/x", CIMultiDict(), b"{}", IDLE)
        conn = response._conn
        assert await response.read() == b"ok"
        response.close()
        assert conn.transport is not None
        async with asyncio.timeout(10):
            while not conn.transport.is_closing():  # noqa: ASYNC110 (a turn at a time)
                await asyncio.sleep(0)
            assert await post(pool, origin, b"{}") == (200, b"ok")
        assert raw.connections == 2


@pytest.mark.parametrize(
    "trailers",
    [
        pytest.param(1, id="one_trailer"),
        pytest.param(20_000, id="trailers_past_the_head_bound"),  # about 1 MiB
    ],
)
async def test_trailers_are_read_past_and_never_kept(trailers: int) -> None:
    """Trailers are not relayed; kept, an upstream sending them without end (the head's 64 KiB
    bound does not reach them) would grow the proxy's memory for as long as it likes."""
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Head: 1\r\n\r\n"
    answer = head + b"2\r\nok\r\n0\r\n" + (b"X-Trailer: " + b"t" * 40 + b"\r\n") * trailers
    async with upstream(answering(answer + b"\r\n")) as (_, pool, origin):
        response = await pool.request("POST", origin, "/v1/x", CIMultiDict(), b"{}", IDLE)
        try:
            assert await response.read() == b"ok"
            assert response._conn.raw == [(b"Transfer-Encoding", b"chunked"), (b"X-Head", b"1")]
        finally:
            response.close()
