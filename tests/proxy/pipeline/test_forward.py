"""Forwarding: status, end-to-end headers and body bytes arrive unchanged; framing and the
proxy's own headers never cross; streams are relayed as they arrive. Every case runs through
both upstream transports (``upstream.client``: fast and aiohttp)."""

from __future__ import annotations

import asyncio
import gzip
import io
import socket
import time
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer

from proxy import handler
from tests.support.backend import JSON, SSE, Reply, ScriptedBackend, wire
from tests.support.fixtures import by_client
from tests.support.live import live_proxy, whole_response
from tests.support.proxy import ProxyFactory


@pytest.fixture(params=["fast", "aiohttp"])
def make_proxy(make_proxy: ProxyFactory, request: pytest.FixtureRequest) -> ProxyFactory:
    return by_client(make_proxy, request.param)


# Bytes a re-serialiser would change: a >64-bit integer, an exponent, escapes, key order.
FRAGILE = (
    b'{"id":"x","object":"chat.completion","big":123456789012345678901234567890,'
    b'"exp":1.0e0,"esc":"\\u00e9\\/","z":1,"a":2, "space" : true}'
)


@pytest.mark.parametrize(
    ("reply", "path"),
    [
        pytest.param(
            Reply(body=FRAGILE, chunked=False), "/v1/chat/completions", id="fragile_json_sized"
        ),
        pytest.param(Reply(body=FRAGILE), "/v1/chat/completions", id="fragile_json_chunked"),
        pytest.param(
            Reply(
                body=wire("openai_single_tool.sse"), content_type=SSE, split_at=range(1, 4000, 13)
            ),
            "/v1/chat/completions",
            id="sse_split_every_13_bytes",
        ),
        pytest.param(
            Reply(
                body=b'{"error":{"message":"bad","type":"BadRequestError","code":400}}', status=400
            ),
            "/v1/chat/completions",
            id="vllm_error_passes_through",
        ),
        pytest.param(
            Reply(body=b"not json at all", status=500, content_type="text/plain"),
            "/v1/chat/completions",
            id="plain_500_passes_through",
        ),
        pytest.param(
            Reply(body=b'{"object":"list","data":[]}'),
            "/v1/models?limit=2&q=a%20b+c&u=%C3%BC",
            id="other_route_with_raw_query",
        ),
    ],
)
async def test_status_and_bytes_unchanged(
    make_proxy: ProxyFactory, backend: ScriptedBackend, reply: Reply, path: str
) -> None:
    backend.replies.append(reply)
    client = await make_proxy()
    method = "GET" if "models" in path else "POST"
    response = await client.request(method, path, data=b'{"model":"m","messages":[]}')
    assert response.status == reply.status
    assert await response.read() == reply.body
    assert backend.seen[-1].path_qs == path


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "PATCH", "DELETE"])
async def test_every_method_and_body_forwarded(
    make_proxy: ProxyFactory, backend: ScriptedBackend, method: str
) -> None:
    client = await make_proxy()
    body = b"\x00\x01binary\xff" if method not in ("GET", "DELETE") else b""
    await client.request(method, "/v1/files/abc", data=body)
    seen = backend.seen[-1]
    assert (seen.method, seen.path_qs, seen.body) == (method, "/v1/files/abc", body)


async def test_request_headers_hygiene(make_proxy: ProxyFactory, backend: ScriptedBackend) -> None:
    client = await make_proxy()
    await client.post(
        "/v1/chat/completions",
        data=b"{}",
        headers={
            "Authorization": "Bearer client-key",
            "OpenAI-Organization": "org-1",
            "X-Grade-Task": "weather.single",
            "X-Grade-Run": "r1",
            "X-Grade-Meta-Team": "search",
            "Connection": "keep-alive, X-Hop",
            "X-Hop": "must go",
            "Keep-Alive": "timeout=5",
            "Proxy-Authorization": "Basic x",
            "X-Request-Id": "client-chosen-id",
        },
    )
    headers = backend.seen[-1].headers
    assert headers["Authorization"] == "Bearer client-key"
    assert headers["OpenAI-Organization"] == "org-1"
    assert headers["X-Request-Id"] == "client-chosen-id"
    for gone in (
        "X-Grade-Task",
        "X-Grade-Run",
        "X-Grade-Meta-Team",
        "X-Hop",
        "Keep-Alive",
        "Proxy-Authorization",
    ):
        assert gone not in headers, gone


async def test_configured_api_key_replaces_client_authorization(
    make_proxy: ProxyFactory, backend: ScriptedBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_UPSTREAM_KEY", "sk-from-env")
    client = await make_proxy(upstream={"api_key_env": "TEST_UPSTREAM_KEY"})
    await client.post(
        "/v1/chat/completions", data=b"{}", headers={"Authorization": "Bearer client"}
    )
    assert backend.seen[-1].headers["Authorization"] == "Bearer sk-from-env"


@pytest.mark.parametrize(
    ("upstream_headers", "sent_id", "want_id"),
    [
        pytest.param({}, None, "generated", id="created_when_absent"),
        pytest.param({}, "mine", "mine", id="client_id_kept"),
        pytest.param(
            {"x-request-id": "req_upstream"}, "mine", "req_upstream", id="upstream_id_wins"
        ),
    ],
)
async def test_request_id(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    upstream_headers: dict[str, str],
    sent_id: str | None,
    want_id: str,
) -> None:
    backend.replies.append(Reply(headers=upstream_headers))
    client = await make_proxy()
    response = await client.post(
        "/v1/chat/completions", data=b"{}", headers={"X-Request-Id": sent_id} if sent_id else {}
    )
    got = response.headers["x-request-id"]
    if want_id == "generated":
        assert len(got) == 32
        assert backend.seen[-1].headers["X-Request-Id"] == got
    else:
        assert got == want_id


async def test_response_headers_end_to_end_only(
    make_proxy: ProxyFactory, backend: ScriptedBackend
) -> None:
    backend.replies.append(
        Reply(
            headers={
                "openai-processing-ms": "321",
                "x-ratelimit-remaining-requests": "99",
                "retry-after-ms": "10",
                "Connection": "X-Private",
                "X-Private": "hop",
                "Keep-Alive": "timeout=3",
            }
        )
    )
    client = await make_proxy()
    response = await client.post("/v1/chat/completions", data=b"{}")
    assert response.headers["openai-processing-ms"] == "321"
    assert response.headers["x-ratelimit-remaining-requests"] == "99"
    assert response.headers["retry-after-ms"] == "10"
    assert "X-Private" not in response.headers
    assert "Keep-Alive" not in response.headers


async def test_gzip_from_upstream_is_relayed_encoded(
    make_proxy: ProxyFactory, backend: ScriptedBackend
) -> None:
    """The proxy never inflates what it relays: the client that asked for gzip decodes it."""
    body = wire("openai_single_tool.json")
    backend.replies.append(
        Reply(body=gzip.compress(body), headers={"Content-Encoding": "gzip"}, chunked=False)
    )
    client = await make_proxy()
    response = await client.post(
        "/v1/chat/completions",
        data=b"{}",
        headers={"Accept-Encoding": "gzip"},
        auto_decompress=False,
    )
    assert response.headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(await response.read()) == body


async def test_stream_chunks_are_not_held_back(
    make_proxy: ProxyFactory, backend: ScriptedBackend
) -> None:
    """The first chunk reaches the client while the backend is still holding the rest."""
    gate = asyncio.Event()
    body = wire("openai_single_tool.sse")
    first_event_end = body.index(b"\n\n") + 2
    backend.replies.append(
        Reply(body=body, content_type=SSE, split_at=[first_event_end], gate=gate)
    )
    client = await make_proxy()
    response = await client.post("/v1/chat/completions", data=b"{}")
    assert response.headers["X-Accel-Buffering"] == "no"
    assert response.headers["Content-Type"].startswith(SSE)
    first = await asyncio.wait_for(response.content.readexactly(first_event_end), timeout=5)
    assert first == body[:first_event_end]
    gate.set()
    assert first + await response.read() == body


async def test_one_megabyte_sse_frame_passes(
    make_proxy: ProxyFactory, backend: ScriptedBackend
) -> None:
    frame = (
        b'data: {"choices":[{"index":0,"delta":{"content":"'
        + b"x" * (1024 * 1024)
        + b'"}}]}\n\ndata: [DONE]\n\n'
    )
    backend.replies.append(
        Reply(body=frame, content_type=SSE, split_at=range(1, len(frame), 65536))
    )
    client = await make_proxy()
    response = await client.post("/v1/chat/completions", data=b"{}")
    assert await response.read() == frame


async def test_large_request_body_accepted_and_limit_enforced(
    make_proxy: ProxyFactory, backend: ScriptedBackend
) -> None:
    client = await make_proxy(limits={"max_body_bytes": 4 * 1024 * 1024})
    big = b'{"pad":"' + b"y" * (3 * 1024 * 1024) + b'"}'
    assert (await client.post("/v1/chat/completions", data=io.BytesIO(big))).status == 200
    assert backend.seen[-1].body == big
    too_big = await client.post("/v1/chat/completions", data=io.BytesIO(b"z" * (5 * 1024 * 1024)))
    assert too_big.status == 413
    error = (await too_big.json())["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "request_too_large")
    assert set(error) == {"message", "type", "param", "code"}


async def test_upstream_unreachable_is_502_in_openai_shape(make_proxy: ProxyFactory) -> None:
    client = await make_proxy(upstream={"url": "http://127.0.0.1:9/v1"})
    response = await client.post("/v1/chat/completions", data=b"{}")
    assert response.status == 502
    assert response.headers["x-should-retry"] == "true"
    body = await response.json()
    assert body["error"]["code"] == "upstream_unreachable"


async def test_upstream_silent_is_504(make_proxy: ProxyFactory, backend: ScriptedBackend) -> None:
    async def stall(_request: object) -> None:
        await asyncio.sleep(3)

    backend.hook = stall
    client = await make_proxy(upstream={"idle_timeout_s": 0.3})
    response = await client.post("/v1/chat/completions", data=b"{}")
    assert response.status == 504
    assert (await response.json())["error"]["code"] == "upstream_timeout"


@pytest.mark.parametrize("mid_event", [False, True], ids=["at_event_boundary", "mid_event"])
async def test_upstream_failure_mid_stream_is_an_in_band_error(
    make_proxy: ProxyFactory, backend: ScriptedBackend, mid_event: bool
) -> None:
    body = wire("openai_single_tool.sse")
    second_event_end = body.index(b"\n\n", body.index(b"\n\n") + 2) + 2
    cut = second_event_end - 10 if mid_event else second_event_end
    backend.replies.append(Reply(body=body, content_type=SSE, split_at=[cut], fail_after=1))
    client = await make_proxy()
    response = await client.post("/v1/chat/completions", data=b"{}")
    assert response.status == 200
    received = await response.read()
    assert received.startswith(body[:cut])
    events = received.split(b"\n\n")
    assert events[-1] == b""
    assert events[-2].startswith(b'data: {"error":{"message":')
    assert b"upstream_protocol_error" in events[-2]
    assert b"[DONE]" not in received


async def test_unknown_non_v1_path_is_openai_shaped_404(make_proxy: ProxyFactory) -> None:
    client = await make_proxy()
    response = await client.get("/nope")
    assert response.status == 404
    assert "error" in await response.json()


@pytest.mark.parametrize("content_type", [JSON, SSE])
async def test_client_disconnect_stops_upstream_read(
    make_proxy: ProxyFactory, backend: ScriptedBackend, content_type: str
) -> None:
    gate = asyncio.Event()
    body = wire("openai_single_tool.sse")
    backend.replies.append(Reply(body=body, content_type=content_type, split_at=[100], gate=gate))
    client = await make_proxy()
    response = await client.post(
        "/v1/chat/completions", data=b"{}", headers={"X-Grade-Task": "weather.single"}
    )
    await response.content.readexactly(100)
    response.close()
    await asyncio.sleep(0.05)
    gate.set()
    await asyncio.sleep(0.1)
    metrics = (await (await make_proxy()).get("/metrics")).status
    assert metrics == 200


async def test_upstream_silent_mid_stream_is_an_in_band_timeout(
    make_proxy: ProxyFactory, backend: ScriptedBackend
) -> None:
    """The idle bound applies between chunks: a stream that stalls gets an in-band error."""
    body = wire("openai_single_tool.sse")
    first_event_end = body.index(b"\n\n") + 2
    never = asyncio.Event()
    backend.replies.append(
        Reply(body=body, content_type=SSE, split_at=[first_event_end], gate=never)
    )
    client = await make_proxy(upstream={"idle_timeout_s": 0.3})
    response = await client.post("/v1/chat/completions", data=b"{}")
    received = await asyncio.wait_for(response.read(), timeout=10)
    assert received.startswith(body[:first_event_end])
    assert b'"code":"upstream_timeout"' in received
    assert b"[DONE]" not in received


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_slow_but_steady_upstream_is_not_cut(
    make_proxy: ProxyFactory, backend: ScriptedBackend, stream: bool
) -> None:
    """Silence between chunks stays under the idle bound, the whole exchange exceeds it."""
    body = wire("openai_single_tool.sse" if stream else "openai_single_tool.json")
    backend.replies.append(
        Reply(
            body=body,
            content_type=SSE if stream else JSON,
            split_at=range(len(body) // 6, len(body), len(body) // 6),
            pause_s=0.1,
        )
    )
    client = await make_proxy(upstream={"idle_timeout_s": 0.35})
    response = await client.post("/v1/chat/completions", data=b"{}")
    assert response.status == 200
    assert await response.read() == body


HOLD_S = 0.5  # how long the step after the relay blocks the event loop in the test below


def _exchange_blocking(port: int, request: bytes) -> float:
    """Send ``request`` from a thread of its own (the event loop is held meanwhile); the
    ``perf_counter`` at which the whole response (sized or chunked) had arrived."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while not (whole_response(data) or data.endswith(b"\r\n0\r\n\r\n")):
            chunk = sock.recv(65536)
            assert chunk, f"the proxy closed the connection after {data!r}"
            data += chunk
        return time.perf_counter()


@pytest.mark.parametrize(
    ("reply", "graded", "held"),
    [
        pytest.param(
            Reply(body=wire("openai_single_tool.json"), chunked=False),
            True,
            "submit",
            id="sized_answer_before_its_grade_job",
        ),
        pytest.param(
            Reply(body=wire("openai_single_tool.json"), chunked=False),
            False,
            "record_request",
            id="sized_answer_before_its_log_line_and_metrics",
        ),
        pytest.param(
            Reply(body=wire("openai_single_tool.sse"), content_type=SSE),
            True,
            "submit",
            id="stream_before_its_grade_job",
        ),
    ],
)
async def test_the_client_has_its_last_byte_before_the_proxy_records_the_request(
    monkeypatch: pytest.MonkeyPatch,
    backend: ScriptedBackend,
    backend_server: TestServer,
    tasks_file: Path,
    results_path: Path,
    reply: Reply,
    graded: bool,
    held: str,
) -> None:
    """What follows the relay (the grade job, the request's metrics and log line) never delays
    the answer: with that step holding the event loop for HOLD_S, a client in a thread of its
    own already has the whole response before the hold ends."""
    holds: list[tuple[float, float]] = []
    owner = handler._Exchange if held == "submit" else handler
    original = getattr(owner, held)

    def holding(*args: object, **kwargs: object) -> object:
        began = time.perf_counter()
        time.sleep(HOLD_S)  # blocks the event loop: nothing more is written meanwhile
        holds.append((began, time.perf_counter()))
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, held, holding)
    backend.replies.append(reply)
    task = b"X-Grade-Task: weather.single\r\n" if graded else b""
    body = b'{"model":"m","messages":[]}'
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
        + task
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    async with live_proxy(str(backend_server.make_url("/v1")), tasks_file, results_path) as live:
        arrived = await asyncio.to_thread(_exchange_blocking, live.port, request)
        await live.drained()
    assert len(holds) == 1, f"{held} ran {len(holds)} times"
    began, ended = holds[0]
    assert arrived < ended, (
        f"the whole answer arrived {arrived - began:.3f} s after {held} began holding the "
        f"loop for {HOLD_S} s: it waited for {held}"
    )
