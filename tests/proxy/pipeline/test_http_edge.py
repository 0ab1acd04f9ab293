"""The proxy's HTTP edge against the red team's third round (issue 39): malformed requests,
upstream header bytes that are not UTF-8, an upstream status of 000, an answer over the
capture limit, a late unrequested upstream response, the client's credential headers, and
the role header. Each case is a real proxy on loopback against a scripted or raw upstream."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from aiohttp import web
from multidict import CIMultiDict

from proxy.config import ConfigError
from proxy.logs import configure_logging
from proxy.pipeline.upstream import Origin, Timeouts, UpstreamPool
from tests.support.backend import SSE, Reply, ScriptedBackend
from tests.support.live import Live, live_proxy, raw_exchange
from tests.support.proxy import build_config, read_rows

OK_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"


def status_line(response: bytes) -> int:
    """The status of a raw response (aiohttp answers a parse error as HTTP/1.0)."""
    return int(response.split(b" ", 2)[1]) if response.startswith(b"HTTP/1.") else 0


@contextlib.asynccontextmanager
async def scripted(
    tasks: Path | None = None, results: Path | None = None, **sections: dict[str, Any]
) -> AsyncIterator[tuple[ScriptedBackend, Live]]:
    backend = ScriptedBackend()
    runner = web.AppRunner(backend.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with live_proxy(f"http://127.0.0.1:{port}/v1", tasks, results, **sections) as live:
            yield backend, live
    finally:
        await runner.cleanup()


RawUpstream = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def raw_upstream(answer: RawUpstream) -> AsyncIterator[Live]:
    """A proxy in front of a raw socket server that answers each request with ``answer``."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                0,
            )
            await reader.readexactly(length)
            await answer(reader, writer)
            await reader.read()  # the connection stays open until the proxy closes it
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with live_proxy(f"http://127.0.0.1:{port}/v1", None, None) as live:
            yield live
    finally:
        server.close()


def replying(data: bytes) -> RawUpstream:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(data)
        await writer.drain()

    return answer


def request(path: str = "/v1/models", extra: bytes = b"") -> bytes:
    return b"GET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n" + extra + b"\r\n"


# --- (a) malformed requests: one JSON line, no traceback, counted; a bad Expect is a 400 ---


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        pytest.param(request(extra=b"Bad Header\r\n"), 400, id="space_in_header_name"),
        pytest.param(b"G\x01T /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", 400, id="bad_method"),
        pytest.param(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\0" * 40, 400, id="tls"),
        pytest.param(request(extra=b"X-Long: " + b"a" * 70000 + b"\r\n"), 400, id="line_too_long"),
        pytest.param(request(extra=b"Expect: caf\xe9\r\n"), 400, id="expect_not_ascii"),
        pytest.param(request(extra=b"Expect: 200-ok\r\n"), 417, id="expect_unknown"),
        pytest.param(
            request(extra=b"Content-Length: 1\r\nContent-Length: 2\r\n"), 400, id="two_lengths"
        ),
    ],
)
async def test_a_malformed_request_is_one_log_line_and_counted(
    raw: bytes, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    configure_logging("info", "json", cache=False)
    async with scripted() as (backend, live):
        before = live.metric("gradeproxy_requests_total", route="other", code=str(status))
        with structlog.testing.capture_logs() as logs, caplog.at_level(logging.DEBUG):
            answer = await raw_exchange(live.port, raw, read_s=2)
        assert status_line(answer) == status, answer[:200]
        after = live.metric("gradeproxy_requests_total", route="other", code=str(status))
        assert after - before == 1
        assert not backend.seen
    refused = [event for event in logs if event["event"] == "malformed_request"]
    assert len(refused) == 1, logs
    [line] = refused
    assert line["status"] == status
    assert line["reason"]
    assert "\n" not in line["reason"]
    assert len(line["reason"]) <= 200
    assert "exc_info" not in line
    assert "exception" not in line
    # aiohttp's own logger (a plain-text traceback to stderr) says nothing of it.
    assert not [r for r in caplog.records if r.name.startswith("aiohttp")], caplog.records
    json.dumps(line)  # a JSON line: every value serialisable


async def test_a_malformed_request_line_is_json_on_stdout(
    capfd: pytest.CaptureFixture[str],
) -> None:
    from proxy.logs import configure_logging

    configure_logging("info", "json", cache=False)
    async with scripted() as (_, live):
        capfd.readouterr()
        await raw_exchange(live.port, request(extra=b"Bad Header\r\n"), read_s=2)
        out, err = capfd.readouterr()
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert [line["event"] for line in lines] == ["malformed_request"]
    assert "Traceback" not in out + err
    assert len(out) < 400  # one short line, not a traceback 12 times the request


async def test_expect_100_continue_still_works() -> None:
    async with scripted() as (backend, live):
        reader, writer = await asyncio.open_connection("127.0.0.1", live.port)
        writer.write(
            b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
            b"Content-Length: 2\r\n\r\n"
        )
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert interim.startswith(b"HTTP/1.1 100 Continue")
        writer.write(b"{}")
        final = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        writer.close()
        assert status_line(final) == 200
        assert backend.seen[-1].body == b"{}"


# --- (b) upstream header bytes relayed as sent ---


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(b"caf\xe9\xff", id="not_utf8"),
        pytest.param(b"\x80", id="lone_continuation_byte"),
        pytest.param(b"caf\xc3\xa9", id="utf8"),
        pytest.param(b"plain", id="ascii"),
    ],
)
@pytest.mark.parametrize("framing", ["sized", "chunked"])
async def test_upstream_header_bytes_reach_the_client_as_sent(value: bytes, framing: str) -> None:
    if framing == "sized":
        answer = OK_HEAD + b"X-Odd: " + value + b"\r\nContent-Length: 2\r\n\r\n{}"
    else:
        answer = (
            OK_HEAD
            + b"X-Odd: "
            + value
            + b"\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
        )
    async with raw_upstream(replying(answer)) as live:
        response = await raw_exchange(live.port, request(), read_s=2)
    head = response.partition(b"\r\n\r\n")[0]
    assert status_line(response) == 200
    assert b"\r\nX-Odd: " + value + b"\r\n" in head + b"\r\n", head


# --- (c) an upstream status below 100 is a 502 at once, not a 1xx to wait past ---


@pytest.mark.parametrize("status", [b"000", b"099", b"001"])
async def test_an_upstream_status_below_100_is_a_502(status: bytes) -> None:
    answer = b"HTTP/1.1 " + status + b" Nothing\r\nContent-Length: 2\r\n\r\n{}"
    async with raw_upstream(replying(answer)) as live:
        response = await raw_exchange(live.port, request(), read_s=10)
        errors = live.metric("gradeproxy_upstream_errors_total", kind="protocol")
    assert status_line(response) == 502, response[:200]  # before: 504, after the idle timeout
    assert b"upstream_protocol_error" in response
    assert errors == 1


# --- (d) an answer over the capture limit is a skip of its own, not a grading error ---


def long_completion(chars: int) -> bytes:
    message = {"role": "assistant", "content": "x" * chars}
    return json.dumps(
        {
            "id": "c",
            "object": "chat.completion",
            "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        }
    ).encode()


def long_stream(chars: int) -> bytes:
    events = [
        {"id": "c", "object": "chat.completion.chunk", "model": "m",
         "choices": [{"index": 0, "delta": {"content": "x" * 500}, "finish_reason": None}]}
        for _ in range(chars // 500)
    ]  # fmt: skip
    body = "".join(f"data: {json.dumps(event)}\n\n" for event in events)
    return (body + "data: [DONE]\n\n").encode()


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(Reply(body=long_completion(4000), chunked=False), id="sized"),
        pytest.param(Reply(body=long_completion(4000)), id="chunked"),
        pytest.param(Reply(body=long_stream(4000), content_type=SSE), id="stream"),
    ],
)
async def test_an_answer_over_the_capture_limit_is_skipped_as_capture_limit(
    reply: Reply, tasks_file: Path, results_path: Path
) -> None:
    async with scripted(tasks_file, results_path, limits={"max_capture_bytes": 1024}) as (
        backend,
        live,
    ):
        backend.replies.append(reply)
        raw = (
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Grade-Task: weather.single\r\n"
            b"Content-Length: 2\r\n\r\n{}"
        )
        response = await raw_exchange(live.port, raw, read_s=5)
        assert status_line(response) == 200
        assert reply.body[-20:] in response  # relayed whole: only the copy was cut
        await live.drained()
        skipped = live.metric("gradeproxy_grading_skipped_total", reason="capture_limit")
        errors = live.metric("gradeproxy_grading_errors_total", kind="capture")
    assert (skipped, errors) == (1, 0)
    assert read_rows(results_path) == []


# --- (e) a late unrequested response is not taken for the next request's answer ---


class LateExtraUpstream:
    """A threaded raw upstream: each connection's first answer is followed, a few ms later,
    by an extra response nobody asked for; a later request on it gets ``second``."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._connection, args=(sock,), daemon=True).start()

    def _connection(self, sock: socket.socket) -> None:
        with sock, contextlib.suppress(OSError):
            answers = [b"first", b"second", b"third"]
            data = b""
            while answers:
                while b"\r\n\r\n" not in data:
                    chunk = sock.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                data = data.partition(b"\r\n\r\n")[2][2:]  # the head and its 2-byte body
                body = answers.pop(0)
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n" + body[:5])
                if body == b"first":
                    time.sleep(0.005)
                    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nextra")

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def late_extra() -> Iterator[LateExtraUpstream]:
    upstream = LateExtraUpstream()
    yield upstream
    upstream.close()


async def test_a_late_extra_response_is_not_delivered_on_a_reused_connection(
    late_extra: LateExtraUpstream,
) -> None:
    origin = Origin.of(f"http://127.0.0.1:{late_extra.port}/v1")
    pool = UpstreamPool(shortest_idle_s=5)
    timeouts = Timeouts(connect_s=5, idle_s=5)

    async def post() -> bytes:
        response = await pool.request("POST", origin, "/v1/x", CIMultiDict(), b"{}", timeouts)
        try:
            return await response.read()
        finally:
            response.close()

    try:
        assert await post() == b"first"
        # The extra response lands in the socket's buffer while the loop is busy elsewhere
        # (blocked here on purpose): the event loop has not read it when the next request
        # takes a pooled connection.
        time.sleep(0.1)  # noqa: ASYNC251 - the loop must not run meanwhile
        assert await post() == b"first"  # a fresh connection; never b"extra"
        assert late_extra.connections == 2
    finally:
        pool.close()


# --- (f) the client's credentials stay home when the proxy injects its own key ---

CREDENTIALS = {
    "Authorization": "Bearer client-key",
    "api-key": "client-azure-key",
    "X-Api-Key": "client-x-key",
    "Cookie": "session=client",
}


@pytest.mark.parametrize(
    ("upstream", "kept"),
    [
        pytest.param(
            {"api_key_env": "TEST_EDGE_KEY"},
            {"Authorization": "Bearer sk-proxy"},
            id="injected_key_strips_the_defaults",
        ),
        pytest.param(
            {"api_key_env": "TEST_EDGE_KEY", "strip_client_credentials": ["Cookie"]},
            {
                "Authorization": "Bearer sk-proxy",
                "api-key": "client-azure-key",
                "X-Api-Key": "client-x-key",
            },
            id="configured_list",
        ),
        pytest.param({}, CREDENTIALS, id="no_injected_key_forwards_them"),
    ],
)
async def test_client_credentials_are_stripped_when_the_proxy_injects_its_key(
    upstream: dict[str, object], kept: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_EDGE_KEY", "sk-proxy")
    async with scripted(upstream=upstream) as (backend, live):
        extra = b"".join(f"{k}: {v}\r\n".encode() for k, v in CREDENTIALS.items())
        response = await raw_exchange(live.port, request(extra=extra), read_s=5)
    assert status_line(response) == 200
    seen = backend.seen[-1].headers
    assert {name: seen[name] for name in CREDENTIALS if name in seen} == kept


@pytest.mark.parametrize("name", ["Bad Name", "", "x:y", "é"])
def test_a_credential_list_entry_that_is_not_a_header_name_is_refused(name: str) -> None:
    with pytest.raises(ConfigError, match=r"upstream\.strip_client_credentials"):
        build_config(
            "http://127.0.0.1:9/v1", None, None, upstream={"strip_client_credentials": [name]}
        )
