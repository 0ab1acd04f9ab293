"""One upstream connection: the socket, llhttp's parser (``httptools``) and the exchange in
progress, and the response the relay reads from it (proxy/pipeline/upstream/__init__.py says
why the proxy has its own client).

Data flows one way: llhttp's callbacks append header pairs and body chunks; the relay takes
them through :class:`UpstreamResponse` (whole, or everything buffered so far). Past
``READ_HIGH`` buffered bytes the socket is paused, so a slow client slows the upstream instead
of growing memory; a body wanted whole (sized, and within the relay's buffering limit) is never
paused. A failure is kept and raised once the bytes received before it are taken.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Final, cast

import httptools
from multidict import CIMultiDict, CIMultiDictProxy

from proxy.errors import UpstreamError, UpstreamProtocolError, UpstreamTimeoutError

__all__ = ["MAX_HEAD_BYTES", "READ_HIGH", "WRITE_SLICE", "Connection", "UpstreamResponse"]

READ_HIGH: Final = 256 * 1024  # bytes buffered from one upstream before its socket is paused
WRITE_SLICE: Final = 256 * 1024  # a large request body is written in slices, waiting on drain
MAX_HEAD_BYTES: Final = 64 * 1024  # a response's status line and headers (aiohttp: 8 KiB a line)


class UpstreamResponse:
    """The response's status and headers; its body read whole or as it arrives. ``close``
    gives the connection back to the pool when the response ended on a keep-alive exchange."""

    __slots__ = (
        "_conn",
        "_release",
        "content_length",
        "content_type",
        "headers",
        "raw_values",
        "status",
    )

    def __init__(self, conn: Connection, release: Callable[[Connection], None]) -> None:
        self._conn, self._release = conn, release
        status, raw = conn.status, conn.raw
        self.status = status
        # Values decoded as aiohttp's parser does (obs-text kept by surrogateescape).
        pairs = [(n.decode("latin-1"), v.decode("utf-8", "surrogateescape")) for n, v in raw]
        headers: CIMultiDict[str] = CIMultiDict(pairs)
        # A value that is not valid UTF-8 holds escapes aiohttp's writer would drop: the relay
        # writes that head itself (proxy/pipeline/rawhead.py). ASCII heads skip the check.
        self.raw_values = not all(v.isascii() for _, v in raw) and not all(_utf8(v) for _, v in raw)
        self.headers = CIMultiDictProxy(headers)
        kind = headers.get("Content-Type")
        media = kind.split(";", 1)[0].strip().lower() if kind else ""
        self.content_type = media or "application/octet-stream"
        length = headers.get("Content-Length")
        self.content_length = int(length) if length is not None and length.isdigit() else None

    async def read(self) -> bytes:
        """The whole body (the relay asks only for a sized one, up to its buffering limit)."""
        conn = self._conn
        conn.whole = True  # no pause: the body is wanted whole
        conn.resume()
        while not conn.done:
            await conn.wait()
        data = b"".join(conn.chunks)
        conn.chunks.clear()
        return data

    async def chunk(self) -> bytes:
        """Everything received since the last call, waiting for something; ``b""`` at the end."""
        conn = self._conn
        while not conn.chunks:
            if conn.done:
                return b""
            await conn.wait()
        return conn.take()

    def close(self) -> None:
        self._release(self._conn)


class Connection(asyncio.Protocol):
    """One upstream connection: the socket, llhttp's parser, and the exchange in progress."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        reading: set[Connection],
        key: tuple[str, int, bool],
        forget: Callable[[Connection], None],
    ) -> None:
        self.loop = loop
        self.reading = reading  # the pool's: the reads its scan times out
        self.key = key
        self._forget = forget
        self.transport: asyncio.Transport | None = None
        self.parser: httptools.HttpResponseParser | None = None
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.lost = False
        self.failure: UpstreamError | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.write_full = False  # the transport asked to stop writing (pause_writing)
        self.idle_deadline = 0.0
        self.idle_since = 0.0
        self.paused = False
        self._exchange_state(head_request=False, idle_s=0.0)

    def begin(self, head_request: bool, idle_s: float) -> None:
        """Ready for a new exchange: a fresh parser (it cannot be told a HEAD has no body)."""
        self.parser = httptools.HttpResponseParser(self)
        self._exchange_state(head_request, idle_s)

    def _exchange_state(self, head_request: bool, idle_s: float) -> None:
        """What one request and its response keep, from a clean slate."""
        self.raw: list[tuple[bytes, bytes]] = []
        self.status = 0
        self.head_done = self.done = self.keep_alive = False
        self.framed = True  # the body's end is in the framing, not the connection's close
        self.head_request, self.idle_s = head_request, idle_s
        self.whole = False  # the body is wanted whole: never paused
        self.unsent = False  # the request's body is not all written
        self.received = False  # anything at all arrived in this exchange
        self.head_bytes = self.head_fed = 0  # the headers parsed; all bytes fed before their end

    async def send(self, head: bytes, body: bytes) -> None:
        transport = self.transport
        assert transport is not None
        if len(body) <= WRITE_SLICE:
            transport.write(head + body)
            return
        # Each wait on the socket's drain is bounded by idle_s, as a read is (an upstream that
        # stops reading must not hold the relay forever); a response arriving early (a 413)
        # ends the writing, and the connection, its request unfinished, is not reused.
        self.unsent = True
        transport.write(head)
        view = memoryview(body)
        for start in range(0, len(body), WRITE_SLICE):
            while self.write_full and not self.head_done:
                await self.wait()
            if self.head_done:
                self.keep_alive = False
                return
            transport.write(view[start : start + WRITE_SLICE])
        self.unsent = False

    async def wait(self) -> None:
        """Wait for the upstream to send something, within ``idle_s``; raise what broke it."""
        if self.failure is not None:
            raise self.failure
        loop = self.loop
        waiter = self.waiter = loop.create_future()
        reading = self.reading
        if self.idle_s:
            self.idle_deadline = loop.time() + self.idle_s
            reading.add(self)
        try:
            await waiter
        finally:
            self.waiter = None
            reading.discard(self)
        self._raise_unless_buffered()

    def _raise_unless_buffered(self) -> None:
        """Raise what broke the exchange once the bytes received before it are taken."""
        if self.failure is not None and not self.chunks:
            raise self.failure

    def take(self) -> bytes:
        chunks = self.chunks
        data = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self.buffered = 0
        self.resume()
        return data

    def resume(self) -> None:
        """Read the socket again if the buffer's mark paused it."""
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()

    def fail(self, error: UpstreamError) -> None:
        if self.failure is None and not self.done:
            self.failure = error
        self.keep_alive = False
        self.shut()
        self._wake()

    def shut(self) -> None:
        """Close the socket, dropping what is still buffered to be written: an upstream that
        stopped reading would hold a closing transport, its socket and the unsent part of a
        request's body, for as long as it keeps the connection open."""
        transport = self.transport
        # A lost connection has nothing left to close (a lost TLS transport cannot even say
        # its buffer's size: asyncio's sslproto drops its protocol on the loss).
        if transport is not None and not self.lost:
            if transport.get_write_buffer_size():
                transport.abort()
            else:
                transport.close()

    def time_out(self) -> None:
        self.fail(UpstreamTimeoutError(f"the upstream sent nothing for {self.idle_s:g} s"))

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without deriving from it.
        self.transport = cast("asyncio.Transport", transport)

    def data_received(self, data: bytes) -> None:
        parser = self.parser
        if parser is None or self.done:  # bytes nobody asked for: the connection is unusable
            self.keep_alive = False
            if self.transport is not None:
                self.transport.close()
            return
        self.received = True
        if self.waiter is not None:
            self.idle_deadline = self.loop.time() + self.idle_s
        try:
            parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.fail(UpstreamProtocolError("the upstream switched protocols"))
        except httptools.HttpParserError as exc:
            self.fail(UpstreamProtocolError(f"the upstream sent a malformed response: {exc}"))
        if not self.head_done:  # every byte so far is the head's (one header may grow in llhttp)
            self.head_fed += len(data)
            if self.head_fed > MAX_HEAD_BYTES:
                self._head_too_large()

    def _head_too_large(self) -> None:
        self.fail(
            UpstreamProtocolError(
                f"the upstream's response head exceeds {MAX_HEAD_BYTES // 1024} KiB"
            )
        )

    def eof_received(self) -> bool:
        if self.head_done and not self.done and not self.framed:
            self._complete(keep_alive=False)  # a body delimited by the connection's close
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._forget(self)
        if not self.done:
            why = f": {exc}" if exc else ""
            self.fail(UpstreamProtocolError(f"the upstream closed the connection{why}"))
        self.resume_writing()  # a body still being written stops waiting on a dead socket

    def pause_writing(self) -> None:
        self.write_full = True

    def resume_writing(self) -> None:
        self.write_full = False
        self._wake()

    # llhttp's callbacks (httptools)

    def on_message_begin(self) -> None:
        if self.done:  # a second response to one request: the connection is not reused
            self.keep_alive = False

    # A second response that came in the same bytes as the first is parsed on by llhttp: its
    # head and body are ignored, never added to the first's (head_done stays set until the
    # next exchange begins).

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.head_done:  # a trailer (never relayed) or the next response's: not kept, so
            return  # an upstream sending trailers without end cannot grow the proxy's memory
        self.raw.append((name, value))
        self.head_bytes += len(name) + len(value) + 4

    def on_headers_complete(self) -> None:
        if self.done:
            return
        assert self.parser is not None
        status = self.parser.get_status_code()
        if status < 100:  # "000" and the like: no status at all, a 502 now (not a 1xx wait)
            self.fail(UpstreamProtocolError(f"the upstream sent an invalid status: {status:03d}"))
            return
        if status < 200:  # 1xx: informational, the real response follows
            self.raw = []
            return
        if self.head_bytes > MAX_HEAD_BYTES:
            self._head_too_large()
            return
        self.status, self.head_done = status, True
        if self.head_request:
            self._complete(self.parser.should_keep_alive())
            return
        if status not in (204, 304):
            self.framed = _framed(self.raw)
        self._wake()

    def on_body(self, body: bytes) -> None:
        if self.done:
            return
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > READ_HIGH and not self.paused and not self.whole and self.transport:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self.head_done and not self.done:
            assert self.parser is not None
            self._complete(self.parser.should_keep_alive())

    def _complete(self, keep_alive: bool) -> None:
        self.done, self.keep_alive = True, keep_alive and not self.unsent
        self._wake()


def _utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _framed(raw: list[tuple[bytes, bytes]]) -> bool:
    """Whether a response's body ends by its framing: a Content-Length, or a Transfer-Encoding
    whose final coding is chunked. Any other Transfer-Encoding (``gzip``, ``identity``) is read
    until the connection closes (RFC 9112 §6.3), as llhttp does."""
    coding = b""
    for name, value in raw:
        lower = name.lower()
        if lower == b"content-length":
            return True
        if lower == b"transfer-encoding":
            coding = value.rsplit(b",", 1)[-1].strip().lower()
    return coding == b"chunked"
