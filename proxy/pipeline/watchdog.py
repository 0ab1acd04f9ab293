"""Client timeouts: one watchdog over every connection, at the protocol level.

aiohttp's server has a keep-alive timeout but no header-read or body-read timeout, so a client
that sends one header byte every few seconds (slowloris), or a body that never ends, holds a
connection (and a handler, and its buffer) for ever. nginx bounds each phase; so does this:

* ``header_timeout_s``: from the first byte of a request to the end of its headers (nginx's
  ``client_header_timeout``), counted from the first byte, so trickling does not extend it.
* ``body_timeout_s``: between two reads of the request body (``client_body_timeout``); the
  response, streamed or not, is never timed: an LLM stream may be silent for minutes.
* ``idle_timeout_s``: a connection with no request in progress, new or kept alive
  (``keepalive_timeout``); a response still being flushed to the socket is not idle.

Each connection's protocol is wrapped in :class:`_Watched`, which notes its phase and the time
of its last progress (one ``loop.time()`` per received chunk while headers or a body are
awaited, nothing otherwise); the request middleware (proxy/pipeline/guard.py) moves it into and out
of the body and handler phases. One task scans all connections every ``tick`` seconds instead of one
timer per read. A header or idle timeout closes the socket (a header timeout answers 408
first); a body timeout fails the body read, so the client gets a 408 in OpenAI's error shape.
Every close is counted in ``gradeproxy_client_timeouts_total{phase}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections.abc import Callable
from typing import Any, cast

import orjson
from aiohttp import StreamReader, web

from proxy.config import Client
from proxy.errors import ClientTimeoutError, ProxyError

__all__ = ["BodyReadTimeoutError", "Conn", "Phase", "Watchdog", "WatchedRunner"]

# Written straight to the transport (no request exists yet), in the error's own shape.
_TIMEOUT_BODY = orjson.dumps(
    ClientTimeoutError("the request headers did not arrive in time").body()
)
_REQUEST_TIMEOUT = (
    b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(_TIMEOUT_BODY), _TIMEOUT_BODY)
)


class BodyReadTimeoutError(ProxyError):
    """Set on a request body whose client stopped sending it."""

    def __init__(self, message: str = "the client stopped sending its request body") -> None:
        super().__init__(message)


class Phase(enum.Enum):
    IDLE = "idle"  # no request in progress (new, or kept alive after a response)
    HEADERS = "header"  # bytes of a request arrived; its headers are not complete
    BODY = "body"  # the handler is reading the request body
    BUSY = "busy"  # the handler runs (upstream wait, streaming): never timed


class Conn:
    """One connection's phase and the loop time of its last progress."""

    __slots__ = ("payload", "phase", "request", "since", "task", "transport")

    def __init__(self, transport: asyncio.Transport, now: float) -> None:
        self.transport = transport
        self.phase = Phase.IDLE
        self.since = now
        self.request: web.BaseRequest | None = None
        self.task: asyncio.Task[object] | None = None  # the handler, while it runs
        self.payload: StreamReader | None = None  # the current request's body stream


class _Watched(asyncio.Protocol):
    """Delegates to aiohttp's protocol, noting progress for the watchdog."""

    __slots__ = ("_conn", "_inner", "_loop", "_watchdog")

    def __init__(self, inner: asyncio.Protocol, watchdog: Watchdog) -> None:
        self._inner = inner
        self._watchdog = watchdog
        self._loop = asyncio.get_running_loop()
        self._conn: Conn | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        real = cast(asyncio.Transport, transport)
        self._conn = self._watchdog.conns[real] = Conn(real, self._loop.time())
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        conn = self._conn
        if conn is not None:
            if conn.phase is Phase.IDLE:
                conn.phase, conn.since = Phase.HEADERS, self._loop.time()
            elif conn.phase is Phase.BODY:
                conn.since = self._loop.time()
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        conn = self._conn
        if conn is not None:
            self._watchdog.conns.pop(conn.transport, None)
            if conn.task is not None and self._watchdog.abandon is not None:
                self._watchdog.abandon(conn.task)
        self._inner.connection_lost(exc)
        if conn is not None and conn.payload is not None and not conn.payload.is_eof():
            # aiohttp lingers up to 10 s reading an unread body (after an early 413 or 401)
            # and, once the connection is gone, nothing ends that read: a flood of such
            # requests would hold every connection's buffers for 10 s. End it now.
            conn.payload.feed_eof()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


class Watchdog:
    """Tracks every connection of the sites it wraps and closes the ones past a timeout."""

    def __init__(self, settings: Client, on_timeout: Callable[[str], None]) -> None:
        self.settings = settings
        self.on_timeout = on_timeout
        self.conns: dict[asyncio.Transport, Conn] = {}
        # Called with the handler of a connection the client closed while it ran: the app
        # decides whether that handler still has anything to deliver (proxy/state.py).
        self.abandon: Callable[[asyncio.Task[object]], None] | None = None
        shortest = min(settings.header_timeout_s, settings.body_timeout_s, settings.idle_timeout_s)
        self.tick = min(max(shortest / 4, 0.05), 1.0)
        self._limits = {
            Phase.IDLE: settings.idle_timeout_s,
            Phase.HEADERS: settings.header_timeout_s,
            Phase.BODY: settings.body_timeout_s,
        }

    def wrap(self, factory: Callable[[], Any]) -> Callable[[], asyncio.Protocol]:
        """A protocol factory for ``loop.create_server`` that watches what ``factory`` makes."""

        def make() -> asyncio.Protocol:
            return _Watched(factory(), self)

        return make

    def conn(self, request: web.BaseRequest) -> Conn | None:
        transport = request.transport
        return None if transport is None else self.conns.get(transport)

    def scan(self, now: float) -> int:
        """Close or fail every connection past its phase's timeout; return how many."""
        cut = 0
        for conn in list(self.conns.values()):
            limit = self._limits.get(conn.phase)
            if limit is None or now - conn.since <= limit:
                continue
            transport = conn.transport
            if conn.phase is Phase.IDLE and transport.get_write_buffer_size() > 0:
                conn.since = now  # still flushing the last response: not idle yet
                continue
            self.on_timeout(conn.phase.value)
            cut += 1
            if conn.phase is Phase.BODY and conn.request is not None:
                conn.phase = Phase.BUSY  # the handler answers 408 and closes
                conn.request.content.set_exception(BodyReadTimeoutError())
                continue
            if conn.phase is Phase.HEADERS and not transport.is_closing():
                transport.write(_REQUEST_TIMEOUT)
            self.conns.pop(transport, None)
            transport.close()
        return cut

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.tick)
            self.scan(loop.time())


class WatchedRunner(web.AppRunner):
    """An AppRunner whose sites hand every new connection to ``watchdog`` first.

    Sites build their listeners from ``runner.server``; this returns the same server's
    protocol factory wrapped, while shutdown still reaches the real server directly.
    """

    def __init__(self, app: web.Application, watchdog: Watchdog, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.watchdog = watchdog

    @property
    def server(self) -> web.Server | None:
        inner = super().server
        if inner is None:
            return None
        return cast(web.Server, self.watchdog.wrap(inner))


async def watch_forever(watchdog: Watchdog) -> None:
    """Run the scan loop until cancelled (the proxy app's cleanup context owns it)."""
    with contextlib.suppress(asyncio.CancelledError):
        await watchdog.run()
