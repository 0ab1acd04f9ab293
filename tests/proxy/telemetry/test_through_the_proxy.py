"""Tracing through the proxy on real sockets: what the upstream receives, what the client
receives (byte-equal whatever the collector does), what is counted when export fails.

No timed assertions: a hanging collector is shown harmless by every request completing while
its first export is known to hang, and by the drop counts after a bounded shutdown.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from multidict import CIMultiDict

from tests.support.backend import JSON, SSE, Reply, ScriptedBackend, wire
from tests.support.live import Live, live_proxy
from tests.support.otlp import Receiver, attributes, receiver, refused_port
from tests.support.proxy import read_rows

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_PARENT = f"00-{CLIENT_TRACE}-00f067aa0ba902b7-01"
TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-0[01]")
BODY = b'{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"Weather in Zurich?"}]}'
GRADED = {"X-Grade-Task": "weather.single", "X-Grade-Run": "otel"}


def tracing(endpoint: str, **extra: Any) -> dict[str, Any]:
    return {
        "enabled": True,
        "endpoint": endpoint,
        "sample_ratio": 1.0,
        "schedule_delay_s": 0.05,
        **extra,
    }


@asynccontextmanager
async def proxy(
    backend_server: TestServer, tasks_file: Path, results: Path, **sections: dict[str, Any]
) -> AsyncIterator[Live]:
    async with live_proxy(
        str(backend_server.make_url("/v1")), tasks_file, results, **sections
    ) as live:
        yield live


@asynccontextmanager
async def shadowed(
    backend_server: TestServer, tasks_file: Path, tmp_path: Path, **extra: Any
) -> AsyncIterator[tuple[Live, Receiver]]:
    """A traced proxy whose every graded request is shadowed to the same backend."""
    shadow = {"url": str(backend_server.make_url("/v1")), "sample_rate": 1.0}
    upstream = {"url": str(backend_server.make_url("/v1")), "shadow": shadow}
    async with (
        receiver() as otlp,
        proxy(
            backend_server,
            tasks_file,
            tmp_path / "rows.jsonl",
            upstream=upstream,
            tracing=tracing(otlp.endpoint, **extra),
        ) as live,
    ):
        yield live, otlp


async def post(live: Live, headers: dict[str, str], body: bytes = BODY) -> tuple[int, bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{live.base}/v1/chat/completions", data=body, headers=headers) as response,
    ):
        return response.status, await response.read()


@pytest.mark.parametrize(
    "client_header",
    [CLIENT_PARENT, None, "00-zz-not-hex-01", f"00-{'0' * 32}-00f067aa0ba902b7-01"],
    ids=["valid", "absent", "malformed", "zero-trace-id"],
)
async def test_with_tracing_off_the_trace_headers_pass_unchanged(
    backend: ScriptedBackend,
    backend_server: TestServer,
    tasks_file: Path,
    tmp_path: Path,
    client_header: str | None,
) -> None:
    headers = {**GRADED, "tracestate": "vendor=1"}
    if client_header is not None:
        headers["traceparent"] = client_header
    async with proxy(backend_server, tasks_file, tmp_path / "rows.jsonl") as live:
        assert (await post(live, headers))[0] == 200
    (seen,) = backend.seen
    assert seen.headers.get("traceparent") == client_header
    assert seen.headers.get("tracestate") == "vendor=1"


@pytest.mark.parametrize(
    ("client_header", "continues"),
    [(CLIENT_PARENT, True), (None, False), ("00-zz-not-hex-01", False)],
    ids=["valid", "absent", "malformed"],
)
async def test_with_tracing_on_the_upstream_sees_the_proxy_upstream_span(
    backend: ScriptedBackend,
    backend_server: TestServer,
    tasks_file: Path,
    tmp_path: Path,
    client_header: str | None,
    continues: bool,
) -> None:
    headers = {**GRADED, "baggage": "user.id=alice-7"}
    if client_header is not None:
        headers["traceparent"] = client_header
    async with (
        receiver() as otlp,
        proxy(
            backend_server, tasks_file, tmp_path / "rows.jsonl", tracing=tracing(otlp.endpoint)
        ) as live,
    ):
        assert (await post(live, headers))[0] == 200
        await otlp.until(spans=2)
    (seen,) = backend.seen
    match = TRACEPARENT.fullmatch(seen.headers["traceparent"])
    assert match is not None
    (call,) = otlp.span("chat")
    (server,) = otlp.span("POST")
    assert match.group(1) == call.trace_id.hex()
    assert match.group(2) == call.span_id.hex()  # the upstream's parent is the proxy's span
    assert call.parent_span_id == server.span_id
    assert (call.trace_id.hex() == CLIENT_TRACE) is continues
    assert seen.headers["baggage"] == "user.id=alice-7"  # forwarded, never an attribute
    values = [str(v) for span in otlp.spans for v in attributes(span.attributes).values()]
    assert not [v for v in values if "alice-7" in v]


async def _through(
    live: Live, otlp: Receiver | None, mode: str, requests: int
) -> list[tuple[int, bytes]]:
    """``requests`` answers; with a hanging collector, all but the first are sent while the
    first one's export is known to be stuck."""
    answers = [await post(live, GRADED)]
    if mode == "hang" and otlp is not None:
        await otlp.arrived.wait()
    answers += [await post(live, GRADED) for _ in range(requests - 1)]
    await live.drained()
    return answers


@pytest.mark.parametrize(
    ("mode", "dropped"),
    [
        ("ok", {}),
        ("unavailable", {"export_failed": 6}),
        ("refused", {"export_failed": 6}),
        ("hang", {"shutdown": 6}),
    ],
)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_the_client_gets_the_same_bytes_whatever_the_collector_does(
    backend: ScriptedBackend,
    backend_server: TestServer,
    tasks_file: Path,
    tmp_path: Path,
    mode: str,
    dropped: dict[str, int],
    stream: bool,
) -> None:
    fixture = wire("openai_single_tool.sse" if stream else "openai_single_tool.json")
    reply = Reply(body=fixture, content_type=SSE if stream else JSON, split_at=range(7, 400, 7))
    backend.replies.extend([reply] * 6)
    async with proxy(backend_server, tasks_file, tmp_path / "off.jsonl") as live:
        untraced = await _through(live, None, "ok", 3)
    async with receiver("ok" if mode == "refused" else mode) as otlp:  # type: ignore[arg-type]
        endpoint = f"http://127.0.0.1:{refused_port()}" if mode == "refused" else otlp.endpoint
        settings = tracing(
            endpoint,
            # A hung export is abandoned at shutdown; a failing one is given up within 0.5 s.
            export_timeout_s=120 if mode == "hang" else 0.5,
            shutdown_timeout_s=0.2 if mode == "hang" else 60,
        )
        async with proxy(
            backend_server, tasks_file, tmp_path / "on.jsonl", tracing=settings
        ) as live:
            traced = await _through(live, otlp, mode, 3)
        counted = {
            reason: live.metric("gradeproxy_trace_dropped_total", signal="spans", reason=reason)
            for reason in ("queue_full", "export_failed", "shutdown")
        }
    assert traced == untraced
    assert {k: v for k, v in counted.items() if v} == dropped
    exported = live.metric("gradeproxy_trace_exported_total", signal="spans")
    assert exported == (6 if mode == "ok" else 0)
    if mode == "ok":
        calls = [attributes(span.attributes) for span in otlp.span("chat")]
        response_id = re.search(rb'"id": ?"(chatcmpl-[^"]+)"', fixture)
        assert response_id is not None
        assert {c["gen_ai.response.id"] for c in calls} == {response_id.group(1).decode()}
        assert {c["gen_ai.usage.output_tokens"] for c in calls} == {19}


async def test_a_shadow_leg_is_its_own_trace_linked_to_the_primary(
    backend: ScriptedBackend, backend_server: TestServer, tasks_file: Path, tmp_path: Path
) -> None:
    async with shadowed(backend_server, tasks_file, tmp_path) as (live, otlp):
        assert (await post(live, GRADED))[0] == 200
        await live.drained()
        await otlp.until(spans=4)
    (primary,) = otlp.span("POST")
    (leg,) = otlp.span("shadow POST")
    calls = {span.parent_span_id: span for span in otlp.span("chat")}
    assert [(link.trace_id, link.span_id) for link in leg.links] == [
        (primary.trace_id, primary.span_id)
    ]
    assert leg.trace_id != primary.trace_id
    assert attributes(leg.attributes)["gradeproxy.variant"] == "shadow"
    assert (
        attributes(leg.attributes)["gradeproxy.pair_id"]
        == attributes(primary.attributes)["gradeproxy.pair_id"]
    )
    seen = {s.headers["traceparent"].split("-")[2] for s in backend.seen}
    assert seen == {calls[primary.span_id].span_id.hex(), calls[leg.span_id].span_id.hex()}
    assert [e.name for e in calls[leg.span_id].events] == ["gen_ai.evaluation.result"]


@pytest.mark.parametrize(
    ("headers", "ratio"),
    [
        ({"traceparent": CLIENT_PARENT.replace("-01", "-00"), "tracestate": "vendor=7"}, 1.0),
        ({}, 0.0),
    ],
    ids=["client_not_sampled", "ratio_zero"],
)
async def test_an_unsampled_request_names_fresh_spans_upstream_and_exports_nothing(
    backend: ScriptedBackend,
    backend_server: TestServer,
    tasks_file: Path,
    tmp_path: Path,
    headers: dict[str, str],
    ratio: float,
) -> None:
    """An unsampled request has no span record: the primary and its shadow each get a
    ``traceparent`` of their own with the sampled flag off, and nothing reaches the collector
    (a sampled request after it exports its four spans, and only those)."""
    async with shadowed(backend_server, tasks_file, tmp_path, sample_ratio=ratio) as (live, otlp):
        assert (await post(live, {**GRADED, **headers}))[0] == 200
        await live.drained()
        unsampled = [s.headers for s in backend.seen]
        assert (await post(live, {**GRADED, "traceparent": CLIENT_PARENT}))[0] == 200
        await live.drained()
        await otlp.until(spans=4)
    matches = [TRACEPARENT.fullmatch(h["traceparent"]) for h in unsampled]
    assert all(m is not None and m.group(0).endswith("-00") for m in matches)
    traces = {m.group(1) for m in matches if m is not None}
    spans = {m.group(2) for m in matches if m is not None}
    assert len(spans) == 2  # the shadow never reuses the primary's span
    assert len(traces) == 2  # the shadow is a trace of its own
    if "traceparent" in headers:  # the primary continues the client's trace, state and all
        primary = next(h for h in unsampled if CLIENT_TRACE in h["traceparent"])
        assert primary["tracestate"] == "vendor=7"
        assert "00f067aa0ba902b7" not in spans
    exported = {span.trace_id.hex() for span in otlp.spans}
    assert len(otlp.spans) == 4
    assert CLIENT_TRACE in exported
    assert not exported & traces - {CLIENT_TRACE}


async def test_the_log_form_through_the_proxy_matches_the_result_rows(
    backend: ScriptedBackend, backend_server: TestServer, tasks_file: Path, tmp_path: Path
) -> None:
    results = tmp_path / "rows.jsonl"
    async with receiver() as otlp:
        settings = tracing(otlp.endpoint, evaluation_events="log")
        async with proxy(backend_server, tasks_file, results, tracing=settings) as live:
            assert (await post(live, GRADED))[0] == 200
            await live.drained()
            await otlp.until(spans=2, logs=1)
    (row,) = read_rows(results)
    (call,) = otlp.span("chat")
    assert not call.events
    assert [
        (
            log.span_id,
            attributes(log.attributes)["gen_ai.evaluation.name"],
            attributes(log.attributes)["gen_ai.response.id"],
        )
        for log in otlp.logs
    ] == [
        (call.span_id, column["name"], attributes(call.attributes)["gen_ai.response.id"])
        for column in row["checks"]
    ]


@pytest.mark.parametrize(
    ("client_parent", "ratio"),
    [(CLIENT_PARENT, 1.0), (CLIENT_PARENT.replace("-01", "-00"), 1.0)],
    ids=["sampled", "unsampled"],
)
async def test_a_shadow_leg_never_carries_the_client_tracestate_of_another_trace(
    backend: ScriptedBackend,
    backend_server: TestServer,
    tasks_file: Path,
    tmp_path: Path,
    client_parent: str,
    ratio: float,
) -> None:
    """A ``tracestate`` belongs to the trace of the ``traceparent`` beside it: the primary
    continues the client's trace and keeps it; the shadow leg starts a trace of its own (its
    exported span has no trace state), so its upstream must not see the client's vendors."""
    headers = {**GRADED, "traceparent": client_parent, "tracestate": "vendor=7"}
    async with shadowed(backend_server, tasks_file, tmp_path, sample_ratio=ratio) as (live, _):
        assert (await post(live, headers))[0] == 200
        await live.drained()
    by_trace = {s.headers["traceparent"].split("-")[1]: s.headers for s in backend.seen}
    assert len(by_trace) == 2
    assert by_trace.pop(CLIENT_TRACE).getall("tracestate", []) == ["vendor=7"]
    ((_, leg),) = by_trace.items()
    assert leg.getall("tracestate", []) == []


@pytest.mark.parametrize(
    ("client_states", "upstream_state"),
    [
        (["vendor=1"], "vendor=1"),
        (["vendor=1", "other=2"], "vendor=1,other=2"),  # W3C: several headers, one list
        (["vendor=1", "not a member"], None),  # the list as a whole is invalid
        (["vendor=1", "x=" + "y" * 600], None),  # past the size the proxy accepts
    ],
    ids=["one", "two_valid", "second_invalid", "second_oversized"],
)
async def test_the_upstream_sees_only_a_tracestate_the_proxy_validated(
    backend: ScriptedBackend,
    backend_server: TestServer,
    tasks_file: Path,
    tmp_path: Path,
    client_states: list[str],
    upstream_state: str | None,
) -> None:
    """Several ``tracestate`` headers make one list (RFC 9110 5.3, field order): with tracing
    on, the upstream gets that list only when all of it is valid, never a second header the
    proxy did not read."""
    headers = [*GRADED.items(), ("traceparent", CLIENT_PARENT)]
    headers += [("tracestate", state) for state in client_states]
    async with (
        receiver() as otlp,
        proxy(
            backend_server, tasks_file, tmp_path / "rows.jsonl", tracing=tracing(otlp.endpoint)
        ) as live,
        aiohttp.ClientSession() as session,
        session.post(
            f"{live.base}/v1/chat/completions", data=BODY, headers=CIMultiDict(headers)
        ) as response,
    ):
        assert response.status == 200
    (seen,) = backend.seen
    forwarded = seen.headers.getall("tracestate", [])
    assert (",".join(forwarded) if forwarded else None) == upstream_state


@pytest.mark.parametrize(
    ("headers", "exported_state"),
    [
        ({"traceparent": CLIENT_PARENT, "tracestate": "vendor=7,other=a"}, "vendor=7,other=a"),
        ({"traceparent": CLIENT_PARENT}, ""),
        ({"tracestate": "vendor=7"}, ""),  # no parent: a trace of the proxy's, no state
    ],
    ids=["client_state", "no_state", "state_without_parent"],
)
async def test_the_proxys_spans_carry_the_trace_state_of_the_trace_they_continue(
    backend: ScriptedBackend,
    backend_server: TestServer,
    tasks_file: Path,
    tmp_path: Path,
    headers: dict[str, str],
    exported_state: str,
) -> None:
    """As the SDK's spans do (a child inherits its parent's trace state), and as the upstream
    sees it beside the proxy's ``traceparent``."""
    async with (
        receiver() as otlp,
        proxy(
            backend_server, tasks_file, tmp_path / "rows.jsonl", tracing=tracing(otlp.endpoint)
        ) as live,
    ):
        assert (await post(live, {**GRADED, **headers}))[0] == 200
        await otlp.until(spans=2)
    assert sorted(span.trace_state for span in otlp.spans) == [exported_state] * 2
    (seen,) = backend.seen
    assert seen.headers.get("tracestate", "") == exported_state
