"""Upstream idle timeouts by one scan (proxy/pipeline/upstream_watch.py): the session's reads
are watched, and a scan fails exactly the reads past their deadline, as aiohttp's timer would."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp.client_exceptions import SocketTimeoutError

from proxy.pipeline.upstream_watch import WATCH, UpstreamWatch, WatchedResponseHandler
from tests.support.backend import ScriptedBackend
from tests.support.proxy import ProxyFactory, held_streams


@pytest.mark.parametrize("held", [1, 2], ids=["one_stream", "two_streams"])
async def test_reads_in_progress_are_watched_then_dropped(
    make_proxy: ProxyFactory, backend: ScriptedBackend, held: int
) -> None:
    client = await make_proxy()
    responses, gate = await held_streams(client, backend, held)
    watch = client.app[WATCH]
    waiting = set(watch.reading)
    gate.set()
    for response in responses:
        assert await response.read()
    assert len(waiting) == held
    assert all(isinstance(protocol, WatchedResponseHandler) for protocol in waiting)
    assert watch.reading == set()  # a finished response leaves nothing to time out


@pytest.mark.parametrize(
    ("ages", "late"),
    [
        pytest.param([1.0, 2.0], [False, False], id="none_late"),
        pytest.param([-0.5, 2.0], [True, False], id="one_late"),
        pytest.param([-1.0, 0.0], [True, True], id="deadline_reached_is_late"),
    ],
)
async def test_scan_fails_exactly_the_reads_past_their_deadline(
    ages: list[float], late: list[bool]
) -> None:
    loop = asyncio.get_running_loop()
    watch = UpstreamWatch(shortest_timeout_s=60)
    now = loop.time()
    protocols = [WatchedResponseHandler(loop, watch) for _ in ages]
    for protocol, age in zip(protocols, ages, strict=True):
        protocol.read_timeout = 60
        protocol.start_timeout()  # what aiohttp calls once the request is sent
        protocol.idle_deadline = now + age
    assert watch.scan(now) == sum(late)
    for protocol, expected in zip(protocols, late, strict=True):
        assert isinstance(protocol.exception(), SocketTimeoutError) == expected
        assert (protocol in watch.reading) == (not expected)
