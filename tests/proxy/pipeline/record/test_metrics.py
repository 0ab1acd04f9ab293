"""``gradeproxy_in_flight_requests`` counts the requests being served at scrape time (read from
the relays in progress, not updated per request), and the skip counters count every reason."""

from __future__ import annotations

import pytest

from tests.support.backend import ScriptedBackend
from tests.support.metrics import exposition_value
from tests.support.proxy import ProxyFactory, held_streams


@pytest.mark.parametrize("held", [0, 1, 3], ids=["none_held", "one_held", "three_held"])
async def test_in_flight_counts_held_streams_then_zero(
    make_proxy: ProxyFactory, backend: ScriptedBackend, held: int
) -> None:
    client = await make_proxy()
    responses, gate = await held_streams(client, backend, held)
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
