"""The ``fast`` transport: the proxy's own HTTP/1.1 client (proxy/pipeline/upstream/), plus a
cap on the connections open to one origin.

The client itself is untouched: this wraps :class:`UpstreamPool`, adding only what a
deployment needs around it, a per-origin connection cap (aiohttp's ``limit_per_host``). A
request in flight holds one connection and the pool opens a new one only when none is idle, so
capping the requests in flight per origin caps its connections. A request past the cap waits
for a slot within the route's ``connect_timeout_s`` (as aiohttp's connector counts a wait for
a pooled connection as connecting) and is counted, so a cap set too low shows on a dashboard.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from multidict import CIMultiDict, CIMultiDictProxy

from proxy.errors import UpstreamTimeoutError
from proxy.pipeline.upstream import Origin, Timeouts, UpstreamPool, UpstreamResponse

__all__ = ["FastTransport"]


class FastTransport:
    """Requests through an :class:`UpstreamPool`, at most ``max_per_origin`` at once to one
    origin (0: no cap); ``waited`` is called for each request that found the cap reached."""

    def __init__(
        self, pool: UpstreamPool, max_per_origin: int = 0, waited: Callable[[], None] = lambda: None
    ) -> None:
        self.pool = pool
        self.max_per_origin = max_per_origin
        self._waited = waited
        self._slots: dict[tuple[str, int, bool], asyncio.Semaphore] = {}

    async def request(
        self,
        method: str,
        origin: Origin,
        path: str,
        headers: CIMultiDict[str],
        body: bytes,
        timeouts: Timeouts,
    ) -> UpstreamResponse | _Capped:
        if not self.max_per_origin:
            return await self.pool.request(method, origin, path, headers, body, timeouts)
        key = (origin.host, origin.port, origin.tls)
        slots = self._slots.get(key)
        if slots is None:
            slots = self._slots[key] = asyncio.Semaphore(self.max_per_origin)
        if slots.locked():
            self._waited()
            try:
                async with asyncio.timeout(timeouts.connect_s or None):
                    await slots.acquire()
            except TimeoutError:
                why = (
                    f"no connection to the upstream came free in {timeouts.connect_s:g} s"
                    f" (upstream.max_connections_per_origin: {self.max_per_origin})"
                )
                raise UpstreamTimeoutError(why) from None
        else:
            await slots.acquire()  # free: returns at once
        try:
            response = await self.pool.request(method, origin, path, headers, body, timeouts)
        except BaseException:
            slots.release()
            raise
        return _Capped(response, slots)

    async def aclose(self) -> None:
        self.pool.close()


class _Capped:
    """A response that gives its origin's slot back when it is closed (once)."""

    __slots__ = ("_response", "_slots")

    def __init__(self, response: UpstreamResponse, slots: asyncio.Semaphore) -> None:
        self._response: UpstreamResponse | None = response
        self._slots = slots

    @property
    def _open(self) -> UpstreamResponse:
        assert self._response is not None, "the response was closed"
        return self._response

    @property
    def status(self) -> int:
        return self._open.status

    @property
    def headers(self) -> CIMultiDictProxy[str]:
        return self._open.headers

    @property
    def content_type(self) -> str:
        return self._open.content_type

    @property
    def content_length(self) -> int | None:
        return self._open.content_length

    @property
    def raw_values(self) -> bool:
        return self._open.raw_values

    async def read(self) -> bytes:
        return await self._open.read()

    async def chunk(self) -> bytes:
        return await self._open.chunk()

    def close(self) -> None:
        response, self._response = self._response, None
        if response is not None:
            response.close()
            self._slots.release()
