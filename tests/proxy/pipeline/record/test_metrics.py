"""``gradeproxy_in_flight_requests`` counts the requests being served at scrape time (read from
the relays in progress, not updated per request), and the skip counters count every reason."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.backend import SSE, Reply, ScriptedBackend, wire
from tests.support.metrics import exposition_value
from tests.support.proxy import ProxyFactory


@pytest.mark.parametrize("held", [0, 1, 3], ids=["none_held", "one_held", "three_held"])
async def test_in_flight_counts_held_streams_then_zero(
    make_proxy: ProxyFactory, backend: ScriptedBackend, held: int
) -> None:
    gate = asyncio.Event()
    for _ in range(held):
        backend.replies.append(
            Reply(body=wire("openai_single_tool.sse"), content_type=SSE, split_at=[40], gate=gate)
        )
    client = await make_proxy()
    responses = [await client.post("/v1/chat/completions", data=b"{}") for _ in range(held)]
    for response in responses:
        await response.content.readany()  # the first chunk arrived: the relay is in progress
    during = await (await client.get("/metrics")).text()
    gate.set()
    for response in responses:
        assert await response.read()
    after = await (await client.get("/metrics")).text()
    assert exposition_value(during, "gradeproxy_in_flight_requests") == held
    assert exposition_value(after, "gradeproxy_in_flight_requests") == 0


@pytest.mark.parametrize(
    ("headers", "reason", "times"),
    [
        pytest.param({}, "no_task_header", 3, id="no_task_header"),
        pytest.param({"X-Grade-Task": "nope"}, "unknown_task", 2, id="unknown_task"),
    ],
)
async def test_skips_are_counted_per_reason_every_time(
    make_proxy: ProxyFactory, headers: dict[str, str], reason: str, times: int
) -> None:
    client = await make_proxy()
    for _ in range(times):
        response = await client.post("/v1/chat/completions", data=b"{}", headers=headers)
        await response.read()
    text = await (await client.get("/metrics")).text()
    skipped = exposition_value(text, "gradeproxy_grading_skipped_total", reason=reason)
    assert skipped == times
