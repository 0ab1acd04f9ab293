"""Client timeouts (proxy/pipeline/watchdog.py): slow headers, slow bodies and idle sockets
are closed and counted; a slow but steady client and a silent streamed response are never cut."""

from __future__ import annotations

import asyncio
import contextlib
import time

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestServer

from tests.support.backend import SSE, Reply, ScriptedBackend, wire
from tests.support.live import Live, live_proxy, status_of

FAST = {"header_timeout_s": 0.3, "body_timeout_s": 0.3, "idle_timeout_s": 0.3}
HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


async def _until_closed(
    live: Live, first: bytes, trickle: bytes = b"", every_s: float = 0.0, limit_s: float = 5.0
) -> tuple[bytes, float]:
    """Send ``first``, then ``trickle`` every ``every_s`` s; what came back, and when it closed."""
    reader, writer = await asyncio.open_connection("127.0.0.1", live.port)
    started = time.monotonic()
    writer.write(first)
    received = b""

    async def feed() -> None:
        while trickle:
            await asyncio.sleep(every_s)
            writer.write(trickle)

    feeder = asyncio.create_task(feed())
    try:
        async with asyncio.timeout(limit_s):
            while chunk := await reader.read(65536):
                received += chunk
    except (TimeoutError, ConnectionError):
        pass
    finally:
        feeder.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError):
            await feeder
        writer.close()
    return received, time.monotonic() - started


@pytest.mark.parametrize(
    ("first", "trickle", "phase", "status"),
    [
        pytest.param(b"", b"", "idle", 0, id="connect_and_say_nothing"),
        pytest.param(HEAD, b"", "header", 408, id="headers_never_end"),
        pytest.param(HEAD, b"X-A: b\r\n", "header", 408, id="slowloris_trickle_no_extension"),
        pytest.param(HEAD + b"Content-Length: 100\r\n\r\n{", b"", "body", 408, id="body_stalls"),
    ],
)
async def test_slow_or_idle_clients_are_cut_and_counted(
    backend: ScriptedBackend,
    backend_server: TestServer,
    first: bytes,
    trickle: bytes,
    phase: str,
    status: int,
) -> None:
    async with live_proxy(str(backend_server.make_url("/v1")), None, None, client=FAST) as live:
        received, took = await _until_closed(live, first, trickle, every_s=0.1)
        assert took < 3.0, "the connection stayed open"
        assert live.metric("gradeproxy_client_timeouts_total", phase=phase) == 1
    assert status_of(received) == status
    if status:  # a whole response: its body is exactly the declared length, in OpenAI's shape
        head, _, body = received.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        assert len(body) == length
        assert orjson.loads(body)["error"]["code"] == "request_timeout"
    assert backend.seen == []


async def test_keep_alive_connection_is_closed_when_idle(backend_server: TestServer) -> None:
    async with live_proxy(str(backend_server.make_url("/v1")), None, None, client=FAST) as live:
        reader, writer = await asyncio.open_connection("127.0.0.1", live.port)
        writer.write(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        assert status_of(head) == 200
        started = time.monotonic()
        with contextlib.suppress(ConnectionError):
            async with asyncio.timeout(5):
                while await reader.read(65536):
                    pass
        writer.close()
        assert time.monotonic() - started < 3.0
        assert live.metric("gradeproxy_client_timeouts_total", phase="idle") == 1


async def test_slow_but_steady_body_is_not_cut(
    backend: ScriptedBackend, backend_server: TestServer
) -> None:
    """A byte every 0.1 s for 1.2 s: each gap is under the 0.3 s body timeout."""
    body = b'{"model":"m","messages":[],"x":1}'
    first = HEAD + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
    async with live_proxy(str(backend_server.make_url("/v1")), None, None, client=FAST) as live:
        reader, writer = await asyncio.open_connection("127.0.0.1", live.port)
        writer.write(first)
        for start in range(0, len(body), 3):
            writer.write(body[start : start + 3])
            await asyncio.sleep(0.1)
        response = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        assert live.metric("gradeproxy_client_timeouts_total", phase="body") == 0
    assert status_of(response) == 200
    assert backend.seen[-1].body == body


async def test_silent_streamed_response_is_never_timed(
    backend: ScriptedBackend, backend_server: TestServer
) -> None:
    """The upstream pauses 1 s mid-stream, three client timeouts long: the stream arrives."""
    body = wire("openai_single_tool.sse")
    backend.replies.append(
        Reply(body=body, content_type=SSE, split_at=[body.index(b"\n\n") + 2], pause_s=1.0)
    )
    async with (
        live_proxy(str(backend_server.make_url("/v1")), None, None, client=FAST) as live,
        aiohttp.ClientSession() as session,
        session.post(live.base + "/v1/chat/completions", data=b"{}") as response,
    ):
        assert await response.read() == body
        assert (
            sum(
                live.metric("gradeproxy_client_timeouts_total", phase=p)
                for p in ("header", "body", "idle")
            )
            == 0
        )


async def test_connection_kept_after_a_refused_request_times_out_as_idle(
    backend_server: TestServer,
) -> None:
    """A 400 from the guard leaves the connection between requests: idle, not slow headers."""
    async with live_proxy(str(backend_server.make_url("/v1")), None, None, client=FAST) as live:
        received, took = await _until_closed(live, b"GET /v1/../x HTTP/1.1\r\nHost: x\r\n\r\n")
        assert took < 3.0
        assert live.metric("gradeproxy_client_timeouts_total", phase="idle") == 1
        assert live.metric("gradeproxy_client_timeouts_total", phase="header") == 0
    assert status_of(received) == 400
