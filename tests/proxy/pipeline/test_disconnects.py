"""Clients that leave early, header bytes no encoder accepts, upstreams that fail mid-stream
and streams cut by shutdown: each is accounted for as what it is, never as a 500."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from proxy.logs import configure_logging
from proxy.pipeline import forward
from proxy.serve import shutdown
from proxy.state import Lifecycle
from tests.support.backend import JSON, SSE, Reply, ScriptedBackend, wire
from tests.support.live import Live, live_proxy, raw_exchange, status_of
from tests.support.proxy import read_rows

CHAT = "gradeproxy_requests_total"


def _chat(extra: bytes = b"", body: bytes = b"{}") -> bytes:
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Grade-Task: weather.single\r\n"
        + extra
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


async def _leave_before_the_answer(
    live: Live, released: asyncio.Event, metric: str, **labels: str
) -> None:
    """Send a graded request and close the connection 0.1 s later; once the backend's hook
    has ``released``, wait (bounded) for ``metric`` to count it, then for the grade queue."""
    _, writer = await asyncio.open_connection("127.0.0.1", live.port)
    writer.write(_chat())
    await writer.drain()
    await asyncio.sleep(0.1)
    writer.close()
    await released.wait()
    for _ in range(100):
        if live.metric(metric, **labels):
            break
        await asyncio.sleep(0.02)
    await live.drained()


@pytest.mark.parametrize("content_type", [JSON, SSE])
async def test_client_gone_before_headers_is_499_ungraded_and_aborts_upstream(
    backend: ScriptedBackend,
    backend_server: TestServer,
    tasks_file: Path,
    results_path: Path,
    content_type: str,
) -> None:
    released = asyncio.Event()
    upstream_aborted: list[bool] = []

    async def slow(request: web.Request) -> None:
        try:
            await asyncio.sleep(0.4)  # the client leaves meanwhile
            transport = request.transport
            upstream_aborted.append(transport is None or transport.is_closing())
        except asyncio.CancelledError:  # the backend's server cancels on a lost connection
            upstream_aborted.append(True)
            raise
        finally:
            released.set()

    backend.hook = slow
    name = "openai_single_tool.sse" if content_type == SSE else "openai_single_tool.json"
    backend.replies.append(Reply(body=wire(name), content_type=content_type, chunked=False))
    async with live_proxy(str(backend_server.make_url("/v1")), tasks_file, results_path) as live:
        await _leave_before_the_answer(live, released, CHAT, route="chat_completions", code="499")
        assert live.metric(CHAT, route="chat_completions", code="499") == 1
        assert live.metric(CHAT, route="chat_completions", code="200") == 0
        assert live.metric(CHAT, route="chat_completions", code="500") == 0
        skipped = live.metric("gradeproxy_grading_skipped_total", reason="client_disconnected")
        assert skipped == 1
    assert read_rows(results_path) == []
    assert upstream_aborted == [True], "the proxy kept the upstream request running"


@pytest.mark.parametrize(
    ("header", "echo"),
    [
        pytest.param(b"X-Request-Id: \xff", b"\\udcff", id="request_id_obs_text"),
        pytest.param(
            b"X-Request-Id: caf\xc3\xa9\xff\xfe",
            b"caf\xc3\xa9\\udcff\\udcfe",
            id="request_id_mixed",
        ),
        pytest.param(b"X-Grade-Run: \x80\x81", None, id="run_obs_text"),
        pytest.param(b"X-Grade-Meta-Team: \xed\xa0\x80", None, id="meta_encoded_surrogate"),
        pytest.param(b"traceparent: \xff", None, id="traceparent_obs_text"),
    ],
)
async def test_obs_text_header_never_500s(
    backend: ScriptedBackend,
    backend_server: TestServer,
    capfdbinary: pytest.CaptureFixture[bytes],
    header: bytes,
    echo: bytes | None,
) -> None:
    """The canonical log line is rendered (at info level) and the answer arrives whole.
    (Grading such a request is the grade queue's concern: no task set here.)"""
    configure_logging("info", "json", cache=False)
    backend.replies.append(Reply(body=wire("openai_single_tool.json"), chunked=False))
    async with live_proxy(str(backend_server.make_url("/v1")), None, None) as live:
        response = await raw_exchange(live.port, _chat(header + b"\r\nConnection: close\r\n"))
    assert status_of(response) == 200
    head, _, body = response.partition(b"\r\n\r\n")
    assert body == wire("openai_single_tool.json")
    if echo is not None:  # the id is echoed, its undecodable bytes escaped
        assert b"\r\nx-request-id: " + echo + b"\r\n" in head + b"\r\n"
    logged = capfdbinary.readouterr().out
    assert b'"event":"request"' in logged
    assert b"Traceback" not in logged


@pytest.mark.parametrize(
    ("header", "seen"),
    [
        pytest.param(b"X-Custom: caf\xe9\xff", ["caf\udce9\udcff"], id="obs_text_bytes"),
        pytest.param(b"X-Custom: caf\xc3\xa9", ["caf\xe9"], id="utf8_bytes"),
        pytest.param(b"X-Custom: a\r\nx-custom: b", ["a", "b"], id="repeated_in_order"),
    ],
)
async def test_client_header_bytes_reach_the_upstream_as_sent(
    backend: ScriptedBackend, backend_server: TestServer, header: bytes, seen: list[str]
) -> None:
    """The upstream client writes the bytes the client sent (aiohttp's dropped obs-text)."""
    backend.replies.append(Reply(body=wire("openai_single_tool.json"), chunked=False))
    async with live_proxy(str(backend_server.make_url("/v1")), None, None) as live:
        response = await raw_exchange(live.port, _chat(header + b"\r\nConnection: close\r\n"))
    assert status_of(response) == 200
    assert backend.seen[0].headers.getall("X-Custom") == seen


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        pytest.param(
            Reply(
                body=wire("openai_single_tool.sse"), content_type=SSE, split_at=[50], fail_after=1
            ),
            "protocol",
            id="connection_dropped",
        ),
        pytest.param(
            Reply(
                body=wire("openai_single_tool.sse"),
                content_type=SSE,
                split_at=[50],
                gate=asyncio.Event(),  # never set: the upstream goes silent
            ),
            "timeout",
            id="silent",
        ),
    ],
)
async def test_mid_stream_upstream_failure_is_counted(
    backend: ScriptedBackend, backend_server: TestServer, reply: Reply, kind: str
) -> None:
    backend.replies.append(reply)
    async with (
        live_proxy(
            str(backend_server.make_url("/v1")), None, None, upstream={"idle_timeout_s": 0.3}
        ) as live,
        aiohttp.ClientSession() as session,
        session.post(live.base + "/v1/chat/completions", data=b"{}") as response,
    ):
        received = await response.read()
        assert response.status == 200
        assert b'"type":"upstream_error"' in received
        assert live.metric("gradeproxy_upstream_errors_total", kind=kind) == 1


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "waiting_for_upstream"])
async def test_shutdown_cuts_at_the_end_of_grace_with_its_own_reason(
    backend: ScriptedBackend, backend_server: TestServer, tasks_file: Path, stream: bool
) -> None:
    never, arrived = asyncio.Event(), asyncio.Event()
    body = wire("openai_single_tool.sse")
    if stream:
        backend.replies.append(Reply(body=body, content_type=SSE, split_at=[60], gate=never))
    else:

        async def stall(_request: web.Request) -> None:
            arrived.set()
            await never.wait()

        backend.hook = stall
    async with (
        live_proxy(
            str(backend_server.make_url("/v1")),
            tasks_file,
            None,
            shutdown={"drain_delay_s": 0.0, "grace_period_s": 0.3},
        ) as live,
        aiohttp.ClientSession() as session,
    ):

        async def call() -> tuple[int, bytes]:
            async with session.post(
                live.base + "/v1/chat/completions",
                data=b"{}",
                headers={"X-Grade-Task": "weather.single"},
            ) as response:
                if stream:
                    assert await response.content.readexactly(60) == body[:60]
                    started.set()
                return response.status, await response.read()

        started = asyncio.Event()
        calling = asyncio.create_task(call())
        if stream:
            await asyncio.wait_for(started.wait(), 5)
        else:
            await asyncio.wait_for(arrived.wait(), 5)
        stopping = asyncio.create_task(shutdown(live.config, live.app, live.runners))
        status, received = await asyncio.wait_for(calling, 5)
        await asyncio.wait_for(stopping, 10)
        never.set()
        assert live.metric(CHAT, route="chat_completions", code="499") == 0
        assert live.metric("gradeproxy_grading_skipped_total", reason="shutdown") == 1
        assert live.metric("gradeproxy_grading_skipped_total", reason="client_disconnected") == 0
        live.runners.clear()  # already shut down: nothing left for the fixture to stop
    assert b'"code":"server_draining"' in received
    if stream:
        assert status == 200
        assert received.endswith(b"\n\n")
        assert b"[DONE]" not in received
    else:
        assert status == 503


async def test_shutdown_cut_while_a_slow_client_reads_is_not_a_499(
    backend: ScriptedBackend, backend_server: TestServer, tasks_file: Path
) -> None:
    """The client stops reading a big stream, so the proxy is blocked writing to it when the
    grace period ends: still accounted as a shutdown cut, never as a client disconnect."""
    event = b'data: {"choices":[{"index":0,"delta":{"content":"' + b"x" * 60000 + b'"}}]}\n\n'
    body = event * 500  # 30 MB, far more than the socket buffers hold
    backend.replies.append(
        Reply(body=body, content_type=SSE, split_at=range(65536, len(body), 65536))
    )
    async with live_proxy(
        str(backend_server.make_url("/v1")),
        tasks_file,
        None,
        shutdown={"drain_delay_s": 0.0, "grace_period_s": 0.3},
    ) as live:
        reader, writer = await asyncio.open_connection("127.0.0.1", live.port, limit=1024)
        writer.write(_chat())
        await reader.readuntil(b"\r\n\r\n")  # then read nothing more
        await asyncio.sleep(0.3)
        await asyncio.wait_for(shutdown(live.config, live.app, live.runners), 10)
        live.runners.clear()
        writer.close()
        assert live.metric("gradeproxy_grading_skipped_total", reason="shutdown") == 1
        assert live.metric(CHAT, route="chat_completions", code="499") == 0
        assert live.metric(CHAT, route="chat_completions", code="200") == 1


async def test_a_sized_answer_whose_client_left_before_it_was_written_is_not_graded(
    monkeypatch: pytest.MonkeyPatch,
    backend: ScriptedBackend,
    backend_server: TestServer,
    tasks_file: Path,
    results_path: Path,
) -> None:
    """The relay writes a sized answer itself: a client gone by then is noticed at the write
    (the gap between the last check and the write forced open here), counted as gone, not
    graded, as on a stream."""
    released = asyncio.Event()

    async def slow(request: web.Request) -> None:
        await asyncio.sleep(0.3)  # the client leaves meanwhile
        released.set()

    monkeypatch.setattr(forward, "client_gone", lambda request: False)
    monkeypatch.setattr(Lifecycle, "abandon", lambda self, task: None)  # the relay runs on
    backend.hook = slow
    backend.replies.append(Reply(body=wire("openai_single_tool.json"), chunked=False))
    async with live_proxy(str(backend_server.make_url("/v1")), tasks_file, results_path) as live:
        await _leave_before_the_answer(
            live, released, "gradeproxy_grading_skipped_total", reason="client_disconnected"
        )
        skipped = live.metric("gradeproxy_grading_skipped_total", reason="client_disconnected")
        assert skipped == 1
    assert read_rows(results_path) == []
