"""Upstream idle timeouts: one periodic scan over the open upstream reads, not a timer per read.

``upstream.idle_timeout_s`` (and each route's) is aiohttp's ``sock_read``: the upstream must
send something at least that often, from the request sent to the last body byte. aiohttp
enforces it with a timer per read (each chunk received cancels one ``TimerHandle`` and
schedules another), a cost the bare relay does not pay. Here the upstream session's protocol
only notes the deadline on each read (one ``loop.time()``), and :class:`UpstreamWatch` scans
the protocols waiting on a read every ``tick`` seconds, failing the late ones exactly as
aiohttp's own timer does (``_on_read_timeout``: the same exception, raised at the same read),
so the relay's handling (a 504 before the response starts, an in-band error after) is
unchanged. A read times out between ``idle_timeout_s`` and ``idle_timeout_s + tick`` after the
upstream last sent something.

The protocol is aiohttp's ``ResponseHandler`` with its two timeout methods replaced; the
connector builds it through ``TCPConnector._factory``, the one place aiohttp makes its
protocols (tests/proxy/pipeline/test_upstream_watch.py fails if a new aiohttp stops using it).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from typing import cast

import aiohttp
from aiohttp import web
from aiohttp.client_proto import ResponseHandler

__all__ = ["WATCH", "UpstreamWatch", "WatchedResponseHandler"]


class WatchedResponseHandler(ResponseHandler):
    """aiohttp's client protocol, whose read timeout is a deadline the watch scans."""

    def __init__(self, loop: asyncio.AbstractEventLoop, watch: UpstreamWatch) -> None:
        super().__init__(loop)
        self._watch = watch
        self.idle_deadline = 0.0

    def _reschedule_timeout(self) -> None:
        timeout = self._read_timeout
        if timeout:
            self.idle_deadline = self._loop.time() + timeout
            self._watch.reading.add(self)
        else:
            self._watch.reading.discard(self)

    def _drop_timeout(self) -> None:
        self._watch.reading.discard(self)

    def time_out(self) -> None:
        """What aiohttp's own timer does when it fires."""
        self._on_read_timeout()


class UpstreamWatch:
    """The protocols waiting on an upstream read, and the scan that times them out."""

    def __init__(self, shortest_timeout_s: float) -> None:
        self.reading: set[WatchedResponseHandler] = set()
        self.tick = min(max(shortest_timeout_s / 4, 0.02), 1.0)

    def adopt(self, connector: aiohttp.TCPConnector) -> aiohttp.TCPConnector:
        """``connector``, its new connections watched by this scan."""
        loop = asyncio.get_running_loop()
        factory = functools.partial(WatchedResponseHandler, loop=loop, watch=self)
        connector._factory = cast("functools.partial[ResponseHandler]", factory)
        return connector

    def scan(self, now: float) -> int:
        """Fail every read past its deadline; return how many."""
        late = [protocol for protocol in self.reading if protocol.idle_deadline <= now]
        for protocol in late:
            self.reading.discard(protocol)
            protocol.time_out()
        return len(late)

    async def run(self) -> None:
        """Scan until cancelled (the app's client-session context owns the task)."""
        loop = asyncio.get_running_loop()
        with contextlib.suppress(asyncio.CancelledError):
            while True:
                await asyncio.sleep(self.tick)
                self.scan(loop.time())


WATCH = web.AppKey("upstream_watch", UpstreamWatch)
