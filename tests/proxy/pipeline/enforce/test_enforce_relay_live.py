"""Enforce mode's relay when things go wrong, through the live proxy on loopback (issue #44):
an upstream that compresses, a hold-back that raises, a client that leaves mid-stream, and
``grading.request_usage``'s chunk filter on the same stream as the hold-back (docs/enforce.md,
Known limits and Streamed answers in detail).

The backend replays the recorded OpenAI streams; a compressed one is those bytes compressed as
an HTTP server compresses them (gzip, zlib deflate, raw deflate). The clients are the openai SDK
and raw aiohttp reads of the wire.
"""

from __future__ import annotations

import asyncio
import gzip
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import openai
import orjson
import pytest
from aiohttp.test_utils import TestServer

from proxy.pipeline.enforce.stream import StreamEnforcer
from proxy.pipeline.forward import ENFORCED_HEADER
from proxy.state import LIFECYCLE, WATCHDOG
from tests.support.backend import SSE, Reply, ScriptedBackend, wire
from tests.support.enforce import PATHS, metrics_text, policy_file, proxied
from tests.support.live import live_proxy
from tests.support.metrics import metric_value
from tests.support.proxy import Client, ProxyFactory, read_rows, rows_of

STREAMS = {
    "chat": wire("openai_parallel_tools.sse"),
    "responses": wire("openai_responses_parallel_tools.sse"),
}
ANSWERS = {
    "chat": wire("openai_parallel_tools.json"),
    "responses": wire("openai_responses_parallel_tools.json"),
}
REQUEST = b'{"model": "gpt-4.1-mini", "stream": true}'
TASK = {"X-Grade-Task": "weather.single"}  # a loaded task: the answer gets a row
# What a client that takes compression offers; the upstream sees it unless a policy acts.
OFFERED = "gzip, deflate, br"
RULE = {"task": "route:tools", "check": "no_time"}
# The forbidden get_time call's id (a Responses event also echoes the request's tools, names
# and all: the id is what only the call carries).
FORBIDDEN = {"chat": b"call_2mLq9sWfY7cTjR0uK4eZ8aBn", "responses": b"fc_68a1b2c3d4e5f6a7b8c9d0e4"}


def _raw_deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


# Content-Encoding, and the body as a server sending it would encode it.
CODINGS: dict[str, tuple[str, Callable[[bytes], bytes]]] = {
    "gzip": ("gzip", gzip.compress),
    "deflate": ("deflate", zlib.compress),
    "raw_deflate": ("deflate", _raw_deflate),
}


def _answer(api: str, stream: bool) -> tuple[bytes, str]:
    """The forbidden-call answer the backend sends for the API, streamed or whole, and its
    content type."""
    return (STREAMS[api], SSE) if stream else (ANSWERS[api], "application/json")


def _reply(body: bytes, content_type: str = SSE, **headers: str) -> Reply:
    return Reply(
        body=body, content_type=content_type, split_at=range(7, len(body), 97), headers=headers
    )


def _sdk(base_url: str, api: str, stream: bool = True) -> tuple[list[str], str]:
    """What the openai SDK makes of the answer: the call names and the text."""
    sdk = openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
    if api == "responses":
        if not stream:
            answer = sdk.responses.create(model="gpt-4.1-mini", input="hi")
            names = [i.name for i in answer.output if i.type == "function_call"]
            return names, answer.output_text
        names, text = [], ""
        with sdk.responses.create(model="gpt-4.1-mini", input="hi", stream=True) as events:
            for event in events:
                if event.type == "response.completed":
                    names = [i.name for i in event.response.output if i.type == "function_call"]
                    text = event.response.output_text
        return names, text
    messages: Any = [{"role": "user", "content": "hi"}]
    if not stream:
        message = sdk.chat.completions.create(model="gpt-4.1-mini", messages=messages)
        calls = message.choices[0].message.tool_calls or []
        return [c.function.name for c in calls if c.type == "function"], ""
    found: dict[int, str] = {}
    content = ""
    for chunk in sdk.chat.completions.create(model="gpt-4.1-mini", messages=messages, stream=True):
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for call in choice.delta.tool_calls or []:
                if call.function is not None and call.function.name:
                    found[call.index] = call.function.name
    return [found[i] for i in sorted(found)], content


async def _post(client: Client, api: str, **headers: str) -> tuple[aiohttp.ClientResponse, bytes]:
    response = await client.post(PATHS[api], data=REQUEST, headers=headers, auto_decompress=False)
    return response, await response.read()


# -- compression ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "asked"),
    [
        pytest.param("off", OFFERED, id="off_passes_the_clients_offer"),
        pytest.param("observe", OFFERED, id="observe_passes_the_clients_offer"),
        pytest.param("block", "identity", id="block_asks_for_identity"),
        pytest.param("strip", "identity", id="strip_asks_for_identity"),
    ],
)
@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_a_policy_that_acts_asks_the_upstream_for_an_uncompressed_answer(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    tmp_path: Path,
    api: str,
    mode: str,
    asked: str,
) -> None:
    client = await proxied(make_proxy, backend, tmp_path, mode)
    backend.replies.append(_reply(STREAMS[api]))
    await _post(client, api, **{"Accept-Encoding": OFFERED})
    assert backend.seen[-1].headers.getall("Accept-Encoding") == [asked]


@pytest.mark.parametrize("coding", sorted(CODINGS))
@pytest.mark.parametrize("mode", ["block", "strip"])
@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_a_compressed_stream_is_judged_and_sent_decoded(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    tmp_path: Path,
    api: str,
    mode: str,
    coding: str,
) -> None:
    """The client gets exactly what the same stream uncompressed gets, without the header."""
    client = await proxied(make_proxy, backend, tmp_path, mode)
    backend.replies.append(_reply(STREAMS[api]))
    _, plain = await _post(client, api)
    header, encode = CODINGS[coding]
    backend.replies.append(_reply(encode(STREAMS[api]), **{"Content-Encoding": header}))
    response, body = await _post(client, api)
    assert "Content-Encoding" not in response.headers
    assert body == plain
    assert FORBIDDEN[api] not in body  # the forbidden call, judged and withheld
    counted = await metrics_text(client)
    withheld = 2 if mode == "block" else 1  # a block withholds both calls of the answer
    assert metric_value(counted, "gradeproxy_enforced_total", **RULE) == 2 * withheld
    assert metric_value(counted, "gradeproxy_enforce_failures_total") == 0


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_a_decoded_stream_reads_in_the_openai_sdk_with_the_call_stripped(
    make_proxy: ProxyFactory, backend: ScriptedBackend, tmp_path: Path, api: str
) -> None:
    client = await proxied(make_proxy, backend, tmp_path, "strip")
    backend.replies.append(_reply(gzip.compress(STREAMS[api]), **{"Content-Encoding": "gzip"}))
    got = await asyncio.to_thread(_sdk, str(client.make_url("/v1")), api)
    assert got == (["get_weather"], "")


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_an_observed_compressed_stream_is_the_upstreams_bytes(
    make_proxy: ProxyFactory, backend: ScriptedBackend, tmp_path: Path, api: str
) -> None:
    client = await proxied(make_proxy, backend, tmp_path, "observe")
    sent = gzip.compress(STREAMS[api])
    backend.replies.append(_reply(sent, **{"Content-Encoding": "gzip"}))
    response, body = await _post(client, api)
    assert (response.headers["Content-Encoding"], body) == ("gzip", sent)
    labels = {"kind": "unreadable", "outcome": "open"}
    counted = await metrics_text(client)
    assert metric_value(counted, "gradeproxy_enforce_failures_total", **labels) == 1


# Bytes the proxy cannot decode, labelled as a coding it has no decoder for (the body is never
# decoded by anyone here: the fail-open client reads it undecoded).
UNDECODABLE = ["br", "zstd"]


@pytest.mark.parametrize("coding", UNDECODABLE)
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_an_undecodable_answer_fails_open_as_it_came(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    tmp_path: Path,
    api: str,
    stream: bool,
    coding: str,
) -> None:
    client = await proxied(make_proxy, backend, tmp_path, "block")
    sent, kind = _answer(api, stream)
    backend.replies.append(_reply(sent, kind, **{"Content-Encoding": coding}))
    response, body = await _post(client, api)
    assert (response.status, response.headers["Content-Encoding"], body) == (200, coding, sent)
    assert ENFORCED_HEADER not in response.headers
    counted = await metrics_text(client)
    labels = {"kind": "unreadable", "outcome": "open"}
    assert metric_value(counted, "gradeproxy_enforce_failures_total", **labels) == 1
    assert metric_value(counted, "gradeproxy_enforced_total") == 0


@pytest.mark.parametrize("coding", UNDECODABLE)
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_an_undecodable_answer_under_fail_closed_is_an_error_not_the_answer(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    tmp_path: Path,
    api: str,
    stream: bool,
    coding: str,
) -> None:
    """Nothing was sent when the coding is known: an HTTP error in OpenAI's shape, which the
    SDK raises and is told not to retry; counted as an enforce failure, not an upstream one."""
    client = await proxied(make_proxy, backend, tmp_path, "block", fail_closed=True)
    sent, kind = _answer(api, stream)
    backend.replies.append(_reply(sent, kind, **{"Content-Encoding": coding}))
    with pytest.raises(openai.APIStatusError) as raised:
        await asyncio.to_thread(_sdk, str(client.make_url("/v1")), api, stream)
    error = raised.value
    assert (error.status_code, error.code) == (502, "enforce_failed")
    assert error.response.headers["x-should-retry"] == "false"
    assert "Content-Encoding" not in error.response.headers
    assert len(backend.seen) == 1  # not retried
    counted = await metrics_text(client)
    labels = {"kind": "unreadable", "outcome": "closed"}
    assert metric_value(counted, "gradeproxy_enforce_failures_total", **labels) == 1
    assert metric_value(counted, "gradeproxy_upstream_errors_total") == 0


async def test_a_stream_that_stops_decoding_ends_with_an_in_band_error(
    make_proxy: ProxyFactory, backend: ScriptedBackend, tmp_path: Path
) -> None:
    """The client was sent identity headers: what cannot be decoded cannot pass either."""
    client = await proxied(make_proxy, backend, tmp_path, "strip")
    packed = gzip.compress(STREAMS["chat"])
    broken = packed[:400] + bytes(b ^ 0xFF for b in packed[400:])
    backend.replies.append(_reply(broken, **{"Content-Encoding": "gzip"}))
    response, body = await _post(client, "chat")
    events = body.split(b"\n\n")
    assert (events[-1], response.status) == (b"", 200)
    assert b'"code":"upstream_protocol_error"' in events[-2]
    assert b"[DONE]" not in body
    counted = await metrics_text(client)
    assert metric_value(counted, "gradeproxy_upstream_errors_total", kind="protocol") == 1


# -- a hold-back that raises ------------------------------------------------------------


def _raising_feed(original: Callable[[StreamEnforcer, bytes], bytes]) -> Any:
    """The hold-back's feed, raising once the forbidden call's first event comes in."""

    def feed(self: StreamEnforcer, data: bytes) -> bytes:
        if any(call in data for call in FORBIDDEN.values()):
            raise RuntimeError("a bug in the hold-back")
        return original(self, data)

    return feed


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("fail_closed", [False, True], ids=["open", "closed"])
async def test_a_hold_back_that_raises_fails_open_or_ends_the_stream(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    tmp_path: Path,
    results_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    api: str,
    fail_closed: bool,
) -> None:
    monkeypatch.setattr(StreamEnforcer, "feed", _raising_feed(StreamEnforcer.feed))
    client = await proxied(make_proxy, backend, tmp_path, "strip", fail_closed=fail_closed)
    backend.replies.append(_reply(STREAMS[api]))
    _, body = await _post(client, api, **TASK)
    if fail_closed:
        events = body.split(b"\n\n")
        assert events[-1] == b""
        assert events[-2].startswith(b'data: {"error":')
        assert orjson.loads(events[-2][6:])["error"]["code"] == "enforce_failed"
        assert FORBIDDEN[api] not in body
        assert b"[DONE]" not in body
        assert b"response.completed" not in body
    else:  # the rest of the stream as it came, unjudged
        assert FORBIDDEN[api] in body
        assert body.endswith(b"data: [DONE]\n\n" if api == "chat" else b"}\n\n")
    counted = await metrics_text(client)
    labels = {"kind": "grader_error", "outcome": "closed" if fail_closed else "open"}
    assert metric_value(counted, "gradeproxy_enforce_failures_total", **labels) == 1
    [row] = await rows_of(client, results_path)
    assert row["enforcement"]["failure"] == "grader_error"
    assert row["enforcement"]["fail_closed"] is fail_closed
    assert row["enforcement"]["received"] == ("halted" if fail_closed else "original")
    assert row["usage"] is not None  # the upstream's answer was read whole for the grade


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_a_hold_back_that_raises_under_fail_closed_stops_the_openai_sdk(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    api: str,
) -> None:
    monkeypatch.setattr(StreamEnforcer, "feed", _raising_feed(StreamEnforcer.feed))
    client = await proxied(make_proxy, backend, tmp_path, "strip", fail_closed=True)
    backend.replies.append(_reply(STREAMS[api]))
    with pytest.raises(openai.APIError) as raised:
        await asyncio.to_thread(_sdk, str(client.make_url("/v1")), api)
    assert raised.value.code == "enforce_failed"


# -- a client that leaves mid-stream ----------------------------------------------------

# Where the backend waits (after the forbidden call is complete), and what the client reads
# before it leaves: for chat the finish (so the answer reached it: graded), for Responses the
# last item it is sent before the terminal event (not a whole answer: no row).
LEAVES = {
    "chat": (b'"choices":[],', b'"finish_reason":"tool_calls"', 1),
    "responses": (b"event: response.completed", b"event: response.output_item.done", 0),
}


def _before(api: str, marker: bytes) -> int:
    """Where the event holding ``marker`` begins."""
    body = STREAMS[api]
    at = body.index(marker)
    return body.rindex(b"\n\n", 0, at) + 2


async def _until(done: Callable[[], bool]) -> None:
    for _ in range(1000):
        if done():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("never happened")


async def _leave(url: str, api: str, marker: bytes) -> None:
    """Read the stream until ``marker`` has come (twice for Responses items), then leave."""
    wanted = 2 if api == "responses" else 1
    async with aiohttp.ClientSession() as session:
        response = await session.post(url + PATHS[api], data=REQUEST, headers=TASK)
        received = b""
        while received.count(marker) < wanted:
            received += await response.content.readany()
        assert FORBIDDEN[api] not in received
        response.close()


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_a_client_that_leaves_mid_stream_still_has_its_judged_calls_counted(
    backend: ScriptedBackend,
    backend_server: TestServer,
    tasks_file: Path,
    results_path: Path,
    tmp_path: Path,
    api: str,
) -> None:
    """Served as ``gradeproxy serve`` serves: the relay notices on its next write."""
    cut, marker, rows = LEAVES[api]
    gate = asyncio.Event()
    split = [_before(api, cut)]
    backend.replies.append(Reply(body=STREAMS[api], content_type=SSE, split_at=split, gate=gate))
    policy = policy_file(tmp_path / "policy.yaml", "strip")
    upstream = str(backend_server.make_url("/v1"))
    async with live_proxy(
        upstream, tasks_file, results_path, enforce={"path": str(policy)}
    ) as live:
        await _leave(live.base, api, marker)
        await _until(lambda: not live.app[WATCHDOG].conns)  # the proxy saw the client go
        gate.set()
        await _until(lambda: not live.app[LIFECYCLE].relays)
        strips = live.metric("gradeproxy_enforced_total", action="strip", **RULE)
        assert strips == 1
        await live.drained()
        found = await asyncio.to_thread(read_rows, results_path)
    assert len(found) == rows
    for row in found:
        assert [c["action"] for c in row["enforcement"]["calls"]] == ["pass", "strip"]


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_a_relay_cancelled_when_its_client_leaves_still_counts_its_judged_calls(
    make_proxy: ProxyFactory, backend: ScriptedBackend, tmp_path: Path, api: str
) -> None:
    """The aiohttp test server cancels the handler of a client that left (the other way a
    relay stops early)."""
    cut, marker, _ = LEAVES[api]
    gate = asyncio.Event()
    split = [_before(api, cut)]
    backend.replies.append(Reply(body=STREAMS[api], content_type=SSE, split_at=split, gate=gate))
    client = await proxied(make_proxy, backend, tmp_path, "strip")
    await _leave(str(client.make_url("")).rstrip("/"), api, marker)
    await _until(lambda: not client.app[LIFECYCLE].relays)
    gate.set()
    counted = await metrics_text(client)
    assert metric_value(counted, "gradeproxy_enforced_total", action="strip", **RULE) == 1


# -- grading.request_usage and a policy on one stream -----------------------------------


@pytest.mark.parametrize(
    ("mode", "calls", "lines"),
    [
        pytest.param("strip", ["get_weather"], 0, id="strip"),
        pytest.param("block", [], 2, id="block"),
    ],
)
@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_request_usage_and_a_policy_share_a_stream(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    tmp_path: Path,
    results_path: Path,
    api: str,
    mode: str,
    calls: list[str],
    lines: int,
) -> None:
    """Chat: the proxy asked for usage, takes the usage it added out of the stream, and the
    hold-back judges what is left; Responses reports usage itself (nothing added). Either way
    the SDK reads a valid stream and the row has the usage."""
    policy = policy_file(tmp_path / "policy.yaml", mode)
    client = await make_proxy(enforce={"path": str(policy)}, grading={"request_usage": True})
    backend.replies.append(_reply(STREAMS[api]))
    _, body = await _post(client, api, **TASK)
    sent = orjson.loads(backend.seen[-1].body)
    if api == "chat":
        assert sent["stream_options"] == {"include_usage": True}
        assert b'"usage"' not in body  # every trace of what the proxy added is gone
        assert body.endswith(b"data: [DONE]\n\n")
    else:
        assert "stream_options" not in sent
    assert FORBIDDEN[api] not in body
    [row] = await rows_of(client, results_path)
    assert row["usage"]["input_tokens"] is not None
    assert row["enforcement"]["received"] == ("stripped" if mode == "strip" else "blocked")
    backend.replies.append(_reply(STREAMS[api]))
    names, text = await asyncio.to_thread(_sdk, str(client.make_url("/v1")), api)
    assert names == calls
    assert text.count("[gradeproxy] withheld tool call") == lines


# Content-Encoding headers a client (httpx, under the openai SDK) decodes as gzip: repeated
# headers and listed values join in order, identity and empty tokens are no coding.
AS_GZIP: list[list[tuple[str, str]]] = [
    [("Content-Encoding", "identity"), ("content-encoding", "gzip")],
    [("Content-Encoding", ""), ("content-encoding", "gzip")],
    [("Content-Encoding", "identity, gzip")],
]


@pytest.mark.parametrize("headers", AS_GZIP, ids=["identity-then-gzip", "empty-then-gzip", "list"])
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_an_answer_every_content_encoding_header_says_is_gzip_is_judged_as_gzip(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    tmp_path: Path,
    api: str,
    stream: bool,
    headers: list[tuple[str, str]],
) -> None:
    """Reading only the first header took the body for uncompressed: judged as bytes that were
    no JSON, it passed, and the SDK inflated it to the forbidden call."""
    client = await proxied(make_proxy, backend, tmp_path, "strip")
    plain, kind = _answer(api, stream)
    sent = gzip.compress(plain)
    backend.replies.append(_reply(sent, kind, **dict(headers)))
    got = await asyncio.to_thread(_sdk, str(client.make_url("/v1")), api, stream)
    assert got[0] == ["get_weather"]
    counted = await metrics_text(client)
    assert metric_value(counted, "gradeproxy_enforced_total", **RULE) == 1


# Answers the openai SDK reads as answers: any 2xx, a streamed request's as SSE and a whole
# one's as JSON, whatever the Content-Type says. (status, Content-Type or None: the API's own)
LABELLED_ODDLY: list[tuple[int, str | None]] = [
    (200, "text/plain"),
    (200, "application/octet-stream"),
    (201, None),
    (203, "text/plain"),
    (200, SSE),
]


@pytest.mark.parametrize(
    ("status", "kind"), LABELLED_ODDLY, ids=[f"{s}-{k}" for s, k in LABELLED_ODDLY]
)
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_a_2xx_answer_of_any_content_type_is_judged_as_the_sdk_reads_it(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    tmp_path: Path,
    api: str,
    stream: bool,
    status: int,
    kind: str | None,
) -> None:
    """Only a 200 labelled text/event-stream or JSON was judged; the rest passed as it came."""
    client = await proxied(make_proxy, backend, tmp_path, "strip")
    body, labelled = _answer(api, stream)
    reply = _reply(body, kind or labelled)
    reply.status = status
    backend.replies.append(reply)
    got = await asyncio.to_thread(_sdk, str(client.make_url("/v1")), api, stream)
    assert got[0] == ["get_weather"]
