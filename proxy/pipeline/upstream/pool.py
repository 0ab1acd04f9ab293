"""The pool of keep-alive upstream connections, the request head, and the scan that times out
idle reads (proxy/pipeline/upstream/__init__.py says why the proxy has its own client)."""

from __future__ import annotations

import asyncio
import contextlib
import select
import ssl
from dataclasses import dataclass
from typing import Final

from multidict import CIMultiDict
from yarl import URL

from proxy.errors import UpstreamProtocolError, UpstreamTimeoutError, UpstreamUnreachableError
from proxy.pipeline.upstream.connection import Connection, UpstreamResponse

__all__ = ["KEEPALIVE_S", "Origin", "Timeouts", "UpstreamPool"]

KEEPALIVE_S: Final = 60.0
# Methods whose empty body goes without a Content-Length (as aiohttp sends them).
_BODILESS: Final = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
# Sent again, once, when a reused connection turns out closed before any answer (as aiohttp
# does); a POST never is: the upstream may have acted on it.
_IDEMPOTENT: Final = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})


@dataclass(frozen=True, slots=True)
class Timeouts:
    """``connect_s`` bounds opening a connection; ``idle_s`` each wait for the upstream."""

    connect_s: float
    idle_s: float


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a base URL's requests go, parsed once per configured upstream, not per request."""

    host: str
    port: int
    tls: bool
    host_header: str  # ``Host``: the port only when it is not the scheme's default
    base_path: str  # the base URL's path without its trailing slash ("/v1")

    @classmethod
    def of(cls, base: str) -> Origin:
        url = URL(base)
        if url.scheme not in ("http", "https") or not url.raw_host or url.port is None:
            raise ValueError(f"not an http(s) URL with a host: {base!r}")
        host = url.raw_host
        shown = f"[{host}]" if ":" in host else host  # an IPv6 literal in brackets
        default = url.explicit_port is None or url.is_default_port()
        header = shown if default else f"{shown}:{url.port}"
        return cls(host, url.port, url.scheme == "https", header, url.raw_path.rstrip("/"))


class UpstreamPool:
    """Keep-alive connections per origin, and the scan that times out idle reads."""

    def __init__(
        self,
        shortest_idle_s: float,
        keepalive_s: float = KEEPALIVE_S,
        tls: ssl.SSLContext | None = None,  # https upstreams: the system's CAs unless given
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.keepalive_s = keepalive_s
        self.tick = min(max(shortest_idle_s / 4, 0.02), 1.0)
        self.reading: set[Connection] = set()
        self._idle: dict[tuple[str, int, bool], list[Connection]] = {}
        self._tls = tls

    async def request(
        self,
        method: str,
        origin: Origin,
        path: str,
        headers: CIMultiDict[str],
        body: bytes,
        timeouts: Timeouts,
    ) -> UpstreamResponse:
        """Send the request; return once the response's headers are in."""
        head = _head(method, path, origin.host_header, headers, body)
        conn = self._checkout(origin)
        if conn is not None:
            try:
                return await self._exchange(conn, method, head, body, timeouts)
            except UpstreamProtocolError:
                # The upstream had closed it before answering: once more, on a new connection,
                # when sending it twice is harmless.
                if method not in _IDEMPOTENT or conn.received or not conn.lost:
                    raise
        conn = await self._connect(origin, timeouts.connect_s)
        return await self._exchange(conn, method, head, body, timeouts)

    async def _exchange(
        self, conn: Connection, method: str, head: bytes, body: bytes, timeouts: Timeouts
    ) -> UpstreamResponse:
        conn.begin(method == "HEAD", timeouts.idle_s)
        try:
            await conn.send(head, body)
            while not conn.head_done:
                await conn.wait()
        except BaseException:
            self.release(conn)
            raise
        return UpstreamResponse(conn, self.release)

    def release(self, conn: Connection) -> None:
        """Back to the pool after a whole keep-alive exchange; closed otherwise."""
        transport = conn.transport
        reusable = conn.done and conn.keep_alive and not conn.lost
        if reusable and transport is not None and not transport.is_closing():
            conn.parser = None
            conn.chunks.clear()
            conn.buffered = 0
            conn.resume()  # so an idle connection sees its close
            conn.idle_since = self.loop.time()
            self._idle.setdefault(conn.key, []).append(conn)
        else:
            conn.shut()

    def forget(self, conn: Connection) -> None:
        idle = self._idle.get(conn.key)
        if idle and conn in idle:
            idle.remove(conn)
        self.reading.discard(conn)

    def scan(self, now: float) -> int:
        """Fail every read past its deadline and close connections idle too long; return how
        many reads failed."""
        late = [conn for conn in self.reading if conn.idle_deadline <= now]
        for conn in late:
            self.reading.discard(conn)
            conn.time_out()
        for idle in self._idle.values():
            while idle and now - idle[0].idle_since >= self.keepalive_s:
                idle.pop(0).shut()
        return len(late)

    async def run(self) -> None:
        """Scan until cancelled (the app's upstream context owns the task)."""
        with contextlib.suppress(asyncio.CancelledError):
            while True:
                await asyncio.sleep(self.tick)
                self.scan(self.loop.time())

    def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.shut()
        self._idle.clear()

    def _checkout(self, origin: Origin) -> Connection | None:
        idle = self._idle.get((origin.host, origin.port, origin.tls))
        now = self.loop.time()
        while idle:
            conn = idle.pop()  # the most recently used: the least likely to be closed by now
            transport = conn.transport
            fresh = now - conn.idle_since < self.keepalive_s
            # A closing transport (the upstream's close seen, its loss not yet delivered) would
            # take the request and fail it: a POST is never sent again.
            if (
                not conn.lost
                and fresh
                and transport is not None
                and not transport.is_closing()
                and not _readable(transport)
            ):
                return conn
            conn.shut()
        return None

    async def _connect(self, origin: Origin, connect_s: float) -> Connection:
        key = (origin.host, origin.port, origin.tls)
        tls = None
        if origin.tls:
            tls = self._tls = self._tls or ssl.create_default_context()
        try:
            async with asyncio.timeout(connect_s or None):
                _, conn = await self.loop.create_connection(
                    lambda: Connection(self.loop, self.reading, key, self.forget),
                    origin.host,
                    origin.port,
                    ssl=tls,
                )
        except TimeoutError:
            why = f"cannot connect to the upstream in {connect_s:g} s"
            raise UpstreamTimeoutError(why) from None
        except OSError as exc:
            raise UpstreamUnreachableError(f"cannot connect to the upstream: {exc}") from None
        return conn


def _readable(transport: asyncio.Transport) -> bool:
    """Whether an idle connection's socket holds bytes (or its close) the event loop has not
    read yet: an unrequested response sent late would otherwise be taken for the answer to
    the next request (nginx has the same window; this narrows it to the moment of reuse).
    One ``poll`` with no wait; a socket that cannot be polled counts as not readable."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return False
    try:
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN | select.POLLPRI)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return False


def _head(method: str, path: str, host: str, headers: CIMultiDict[str], body: bytes) -> bytes:
    """The request's head, the headers' bytes as they arrived (obs-text via surrogateescape).
    A CR or LF inside a value (only a misconfigured key could hold one) is refused."""
    lines = [f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n"]
    lines += [f"{name}: {value}\r\n" for name, value in headers.items()]
    if body or method not in _BODILESS:
        lines.append(f"Content-Length: {len(body)}\r\n")
    text = "".join(lines)
    if text.count("\n") != len(lines) + 1 or text.count("\r") != len(lines) + 1:
        raise UpstreamProtocolError("a request header holds a line break; nothing was sent")
    return (text + "\r\n").encode("utf-8", "surrogateescape")
