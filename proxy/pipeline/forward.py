"""Forwarding: relay a request upstream and its response back, byte for byte.

The client gets the upstream's status, end-to-end headers and body bytes unchanged; nothing is
re-serialised, except an answer an enforce policy acts on (docs/enforce.md): a non-streamed
one is read whole, judged within its budget and, when a call is withheld, sent rewritten
(``proxy/pipeline/enforce/``); a compressed stream such a policy holds is decoded as it is
relayed. Streams are relayed chunk by chunk as they arrive, and a graded response keeps only
*references* to the chunks it relayed, parsed later by the grade queue, so grading adds no
work between two chunks and no time to the first one.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from proxy.errors import (
    DrainingError,
    ProxyError,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamTimeoutError,
    in_band_error,
)
from proxy.logs import escape_text
from proxy.pipeline.decoding import CaptureBuffer, StreamDecoder, content_coding, decodable
from proxy.pipeline.rawhead import RawHeadResponse, RawHeadStreamResponse
from proxy.pipeline.streamusage import UsageChunkFilter
from proxy.pipeline.transport.base import Reply, Transport
from proxy.pipeline.upstream import Origin, Timeouts

# RFC 9110 §7.6.1 plus the non-standard Proxy-Connection; every header named in Connection too.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
# The upstream client sets Host and Content-Length itself (proxy/pipeline/upstream/) and adds
# nothing else: Accept-Encoding passes as the client sent it (none when it sent none), so
# Content-Encoding comes back to the client that asked for it, undecoded: the proxy never
# inflates what it relays (proxy/pipeline/decoding.py). The exceptions are the handler's:
# grading.request_usage and an enforce policy that acts ask for identity, and a gzip or deflate
# stream such a policy judges is relayed decoded (docs/enforce.md).
_REQUEST_DROP = HOP_BY_HOP | {"host", "content-length"}


# aiohttp's server re-frames the body (Content-Length or chunked); Content-Encoding passes.
_RESPONSE_DROP = HOP_BY_HOP | {"content-length"}
# Non-streamed bodies up to this size are read whole and sent with a Content-Length; larger or
# unsized ones are relayed as they arrive.
BUFFER_MAX_BYTES = 4 * 1024 * 1024
# The most decoded bytes of one response kept for grading (limits.max_capture_bytes).
CAPTURE_MAX_BYTES = 16 * 1024 * 1024
_EVENT_ENDS = (b"\n\n", b"\r\r", b"\r\n\r\n")


def _connection_named(headers: CIMultiDictProxy[str]) -> set[str]:
    named: set[str] = set()
    for value in headers.getall("Connection", []):
        named.update(token.strip().lower() for token in value.split(",") if token.strip())
    return named


# The drop set and private prefixes for each (prefixes, names) the handler passes: computed
# once per configuration instead of once per request. Bounded: reloads cannot grow it forever.
_FILTERS: dict[tuple[tuple[str, ...], tuple[str, ...]], tuple[frozenset[str], tuple[str, ...]]] = {}
_FILTERS_MAX = 64


def _request_filter(
    private_prefixes: Iterable[str], private_names: Iterable[str]
) -> tuple[frozenset[str], tuple[str, ...]]:
    key = (tuple(private_prefixes), tuple(private_names))
    found = _FILTERS.get(key)
    if found is None:
        if len(_FILTERS) >= _FILTERS_MAX:
            _FILTERS.clear()
        drop = _REQUEST_DROP | {name.lower() for name in key[1]}
        found = _FILTERS[key] = (drop, tuple(prefix.lower() for prefix in key[0]))
    return found


def request_headers(
    incoming: CIMultiDictProxy[str],
    private_prefixes: Iterable[str],
    private_names: Iterable[str],
    api_key: str | None,
    request_id: str,
) -> CIMultiDict[str]:
    """Headers for the upstream request: end-to-end only, never the proxy's own (one pass)."""
    drop, prefixes = _request_filter(private_prefixes, private_names)
    if "Connection" in incoming:
        drop = drop | _connection_named(incoming)
    out: CIMultiDict[str] = CIMultiDict(
        [
            (name, value)
            for name, value in incoming.items()
            if (lower := name.lower()) not in drop and not lower.startswith(prefixes)
        ]
    )
    if api_key is not None:
        out["Authorization"] = f"Bearer {api_key}"
    out["x-request-id"] = request_id
    return out


PROXY_REQUEST_ID_HEADER = "X-Gradeproxy-Request-Id"
# On an answer enforce mode rewrote: ``<action>; check=<check>`` (docs/enforce.md).
ENFORCED_HEADER = "X-Gradeproxy-Enforced"


def response_headers(upstream: CIMultiDictProxy[str], request_id: str) -> CIMultiDict[str]:
    """Headers for the client: end-to-end only; the upstream's x-request-id wins if it sent one.

    ``X-Gradeproxy-Request-Id`` always carries the proxy's own id (the row's ``request_id``);
    the upstream's ``x-request-id`` is relayed as sent (the row's ``upstream_request_id``).
    """
    drop = _RESPONSE_DROP
    if "Connection" in upstream:
        drop = drop | _connection_named(upstream)
    out: CIMultiDict[str] = CIMultiDict(
        [(name, value) for name, value in upstream.items() if name.lower() not in drop]
    )
    shown = escape_text(request_id)  # escaped if it holds bytes no UTF-8 writer can send
    if "x-request-id" not in out:
        out["x-request-id"] = shown  # the client's own id, echoed
    # The id the result row records as ``request_id``, whatever the upstream sent.
    out[PROXY_REQUEST_ID_HEADER] = shown
    return out


class EnforceHook(Protocol):
    """What the relay asks of enforce mode for one request (proxy/pipeline/enforce/relay.py):
    a whole answer judged before it is sent (or, observing, after), or a stream fed through
    the hold-back."""

    @property
    def holds(self) -> bool:
        """Whether a whole answer waits for :meth:`answer` (False: observed once sent)."""
        ...

    @property
    def streamed(self) -> bool:
        """Whether the request asked for a stream (``"stream": true``): the openai SDK then
        reads the answer as SSE whatever its ``Content-Type``, and a whole one as JSON."""
        ...

    def observe(self, data: bytes, coding: str) -> None:
        """Judge an answer the client already has, to count what would have been done."""
        ...

    async def answer(self, data: bytes, coding: str) -> tuple[bytes, str | None]:
        """The body to send, and the ``X-Gradeproxy-Enforced`` value when it was rewritten."""
        ...

    def open_stream(self, coding: str) -> bool:
        """Whether this stream is fed through :meth:`feed` (False: relayed as it comes)."""
        ...

    def feed(self, data: bytes) -> bytes:
        """The bytes to write to the client now (text at once, tool calls once complete)."""
        ...

    def close(self) -> bytes:
        """At the end of the upstream body: whatever is still held, resolved."""
        ...

    def settle(self) -> None:
        """The relay stopped before the upstream's end: record what was judged so far."""
        ...

    @property
    def halted(self) -> ProxyError | None:
        """Set when the hook failed closed mid-stream: the in-band error that ends the stream
        (nothing more of the upstream's body is relayed)."""
        ...


@dataclass(slots=True)
class Relay:
    """What happened while relaying one response, for metrics, logs and grading."""

    status: int = 0
    stream: bool = False
    ttfb_s: float = 0.0
    upstream_wait_s: float = 0.0  # ttfb plus every wait for an upstream read
    body_bytes: int = 0
    parts: list[bytes] = field(default_factory=list)  # kept only when capture is on
    upstream_request_id: str | None = None
    upstream_failed: str | None = None  # set when the upstream failed after the response began
    client_disconnected: bool = False
    headers_sent: bool = False  # the response's status line reached the client's socket
    capture_truncated: bool = False  # the capture copy was cut at the limit (or undecodable)
    capture_over_limit: bool = False  # cut at the limit (not a decoding error): a skip
    cut: str | None = None  # set by shutdown when it ends this relay at the end of the grace
    at_event_boundary: bool = True  # whether the bytes relayed so far end an SSE event
    started_at: float = 0.0  # perf_counter when the upstream request was sent
    finished_at: float = 0.0
    enforced: bool = False  # an enforce hook judged this answer (docs/enforce.md)


def upstream_url(base: str, raw_path: str) -> URL:
    """``base`` (ending in /v1) plus the client's raw path after /v1 and its raw query."""
    return URL(base.rstrip("/") + raw_path[len("/v1") :], encoded=True)


async def relay(
    request: web.Request,
    transport: Transport,
    origin: Origin,
    headers: CIMultiDict[str],
    body: bytes,
    capture: bool,
    request_id: str,
    out: Relay,
    timeouts: Timeouts,
    capture_limit: int = CAPTURE_MAX_BYTES,
    enforce: EnforceHook | None = None,
    strip_usage: bool = False,
) -> web.StreamResponse:
    """Send the request upstream and relay the response, recording into ``out`` as it goes
    (so a cancelled handler still knows how far it got); raise ProxyError before it starts.
    With an enforce plan, a successful non-streamed JSON answer is judged before it is sent.
    ``strip_usage``: the proxy added ``include_usage`` to the request, so a plain (not
    compressed) event stream reaches the client without what it added (the capture keeps it:
    proxy/pipeline/streamusage.py)."""
    sent = out.started_at = time.perf_counter()
    path = origin.base_path + request.raw_path[len("/v1") :]
    upstream = await transport.request(request.method, origin, path, headers, body, timeouts)
    try:
        out.ttfb_s = out.upstream_wait_s = time.perf_counter() - sent
        out.status = upstream.status
        out.upstream_request_id = upstream.headers.get("x-request-id")
        headers_out = response_headers(upstream.headers, request_id)
        out.stream = upstream.content_type == "text/event-stream"
        length = upstream.content_length
        coding = content_coding(upstream.headers.getall("Content-Encoding", ()))
        copy = CaptureBuffer(coding, capture_limit)
        if capture:
            out.parts = copy.parts
        # Any 2xx is an answer to the SDK (it raises only on the others), and it reads a
        # streamed request's answer as SSE and a whole one as JSON whatever the Content-Type:
        # a policy that acts judges it so (docs/enforce.md).
        acting = enforce is not None and enforce.holds and 200 <= upstream.status < 300
        # observe keeps to a 200: it never changes when the client gets a byte
        covered = acting or (enforce is not None and upstream.status == 200)
        judged = covered and (
            (not out.stream and "json" in upstream.content_type)
            or (acting and enforce is not None and not enforce.streamed)
        )
        try:
            if judged:  # read whole, whatever its size: it is judged before it is sent
                return await _buffered(request, upstream, headers_out, out, copy, capture, enforce)
            if not out.stream and length is not None and length <= BUFFER_MAX_BYTES:
                return await _buffered(request, upstream, headers_out, out, copy, capture)
            sse = out.stream or (acting and enforce is not None and enforce.streamed)
            held = enforce if sse and covered else None
            # A gzip or deflate stream an acting policy covers is judged as text and sent so
            # (docs/enforce.md); any other stream is relayed in the coding it came in.
            decoder = (
                StreamDecoder(coding)
                if held is not None and held.holds and coding != "identity" and decodable(coding)
                else None
            )
            usage = (
                UsageChunkFilter()
                if strip_usage and out.stream and (coding == "identity" or decoder is not None)
                else None
            )
            return await _streamed(
                request, upstream, headers_out, out, copy, capture, held, usage, decoder
            )
        finally:
            out.capture_truncated = copy.truncated
            out.capture_over_limit = copy.truncated and copy.error is None
    finally:
        upstream.close()


def client_gone(request: web.Request) -> bool:
    """Whether the client's connection is already closed (it left before its answer)."""
    transport = request.transport
    return transport is None or transport.is_closing()


async def _buffered(
    request: web.Request,
    upstream: Reply,
    headers: CIMultiDict[str],
    out: Relay,
    copy: CaptureBuffer,
    capture: bool,
    enforce: EnforceHook | None = None,
) -> web.StreamResponse:
    started = time.perf_counter()
    data = await upstream.read()  # an UpstreamError here is a 502 or 504: nothing was sent
    out.upstream_wait_s += time.perf_counter() - started
    out.body_bytes = len(data)
    if capture:
        copy.add(data)
    observed, coding = data, ""  # what an observing hook judges once the client has it
    if enforce is not None:
        out.enforced = True
        coding = content_coding(headers.getall("Content-Encoding", ()))
        if enforce.holds:  # judged before it is sent
            data, action = await enforce.answer(data, coding)
            if action is not None:  # rewritten: sent uncompressed, and the client told why
                headers.popall("Content-Encoding", None)
                headers[ENFORCED_HEADER] = escape_text(action)
    kind = RawHeadResponse if upstream.raw_values else web.Response
    response = kind(status=upstream.status, body=data, headers=headers)
    if client_gone(request):
        # Nobody will read this answer: not delivered, so neither logged 200 nor graded.
        out.client_disconnected = True
        out.finished_at = time.perf_counter()
        return response
    # Written here rather than by aiohttp once the handler returns: what follows the relay
    # (the grade job, the metrics, the request's log line) then runs after the client has its
    # last byte instead of before it, and a client gone meanwhile is noticed, as on a stream.
    out.headers_sent = True
    try:
        await response.prepare(request)
        await response.write_eof()
    except ConnectionResetError:
        out.client_disconnected = True
    out.finished_at = time.perf_counter()
    if enforce is not None and not enforce.holds:
        enforce.observe(observed, coding)  # observe never holds an answer back
    return response


async def _streamed(
    request: web.Request,
    upstream: Reply,
    headers: CIMultiDict[str],
    out: Relay,
    copy: CaptureBuffer,
    capture: bool,
    enforce: EnforceHook | None = None,
    usage: UsageChunkFilter | None = None,
    decoder: StreamDecoder | None = None,
) -> web.StreamResponse:
    """Relay a body as it arrives, through the enforce hook when one holds it. However the
    relay stops (the end, an upstream failure, the client gone, a cut), the hook is settled, so
    the calls it judged reach the row and the counters."""
    if decoder is not None:  # sent as it is judged: decoded
        headers.popall("Content-Encoding", None)
    if enforce is not None:
        coding = content_coding(headers.getall("Content-Encoding", ()))
        out.enforced = True
        if not enforce.open_stream(coding):  # fail-closed on a coding it cannot read: raises
            enforce = None
    try:
        return await _stream_body(
            request, upstream, headers, out, copy, capture, enforce, usage, decoder
        )
    finally:
        if enforce is not None:
            enforce.settle()  # stopped early (the client left, a cut): what was judged counts


async def _stream_body(
    request: web.Request,
    upstream: Reply,
    headers: CIMultiDict[str],
    out: Relay,
    copy: CaptureBuffer,
    capture: bool,
    enforce: EnforceHook | None,
    usage: UsageChunkFilter | None,
    decoder: StreamDecoder | None,
) -> web.StreamResponse:
    if out.stream:
        headers.setdefault("Cache-Control", "no-cache")
        headers["X-Accel-Buffering"] = "no"
    kind = RawHeadStreamResponse if upstream.raw_values else web.StreamResponse
    response = kind(status=upstream.status, headers=headers)
    try:
        await response.prepare(request)
    except ConnectionResetError:  # the client left before the response headers
        out.client_disconnected = True
        out.finished_at = time.perf_counter()
        return response
    out.headers_sent = True
    ended = False  # write_eof done: a fail-closed stop ends the client's body at once
    while True:
        waited = time.perf_counter()
        try:
            chunk = await upstream.chunk()
        except asyncio.CancelledError:
            if out.cut is None:
                raise
            await _end_cut(response, out)
            break
        except UpstreamError as failure:
            what = "stopped sending" if isinstance(failure, UpstreamTimeoutError) else "broke"
            await _failed(
                response,
                out,
                type(failure)(f"the upstream {what} the stream: {failure}"),
                usage,
                enforce,
            )
            break
        finally:
            out.upstream_wait_s += time.perf_counter() - waited
        if not chunk:
            rest = _ending(usage, enforce, decoder.flush() if decoder is not None else b"")
            if enforce is not None and enforce.halted is not None:
                rest = _halt_event(rest, out, enforce.halted)
            if rest:
                await _write_quietly(response, rest, out)
                out.body_bytes += len(rest)
            break
        # Decoded when the relay sends it decoded; what the proxy added for request_usage is
        # taken out; then, enforced, a tool call is held until it is complete (b""); text
        # passes at once.
        pieces = (chunk,) if decoder is None else decoder.pieces(chunk)
        try:
            for piece in pieces:
                sent = piece if usage is None else usage.feed(piece)
                if enforce is not None and sent:
                    sent = enforce.feed(sent)
                if sent:
                    await response.write(sent)
                    out.body_bytes += len(sent)
                    out.at_event_boundary = sent.endswith(_EVENT_ENDS)
                if enforce is not None and enforce.halted is not None:
                    break
        except zlib.error as exc:  # the client was sent identity: the rest cannot pass either
            await _failed(
                response,
                out,
                UpstreamProtocolError(
                    f"the upstream's compressed stream could not be decoded: {exc}"
                ),
                usage,
                enforce,
            )
            break
        except ConnectionResetError:  # the client went away: stop reading the upstream
            out.client_disconnected = True
            break
        except asyncio.CancelledError:  # cut while a slow client was still reading
            if out.cut is None:
                raise
            await _end_cut(response, out)
            break
        if capture:
            copy.add(chunk)  # the model's answer as the upstream sent it: what is graded
        if enforce is not None and enforce.halted is not None:
            # Fail-closed: the client's stream ends with the error, the upstream's answer is
            # still read whole for the grade (nothing more of it is relayed).
            await _write_quietly(response, _halt_event(b"", out, enforce.halted), out)
            await _end_quietly(response, out)
            ended = True
            if capture:
                await _drain(upstream, out, copy)
            break
    if not out.client_disconnected and not ended:
        await _end_quietly(response, out)
    out.finished_at = time.perf_counter()
    return response


def _halt_event(rest: bytes, out: Relay, error: ProxyError) -> bytes:
    """``rest``, then ``error`` as an in-band event of its own (after a half-relayed event)."""
    ended = rest.endswith(_EVENT_ENDS) if rest else out.at_event_boundary
    return rest + (b"" if ended else b"\n\n") + in_band_error(error)


async def _failed(
    response: web.StreamResponse,
    out: Relay,
    error: UpstreamError,
    usage: UsageChunkFilter | None,
    enforce: EnforceHook | None,
) -> None:
    """The upstream failed mid-stream: the half event as it came, held calls resolved, then
    the error in-band (no [DONE] after it)."""
    out.upstream_failed = error.code
    if out.stream:
        await _write_quietly(response, _halt_event(_ending(usage, enforce), out, error), out)


async def _drain(upstream: Reply, out: Relay, copy: CaptureBuffer) -> None:
    """Read the rest of the upstream's body into the capture only (nothing is relayed)."""
    while True:
        waited = time.perf_counter()
        try:
            chunk = await upstream.chunk()
        except asyncio.CancelledError:
            if out.cut is None:
                raise
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()  # shutdown's cut: the client's stream has already ended
            return
        except UpstreamError as failure:
            out.upstream_failed = failure.code
            return
        finally:
            out.upstream_wait_s += time.perf_counter() - waited
        if not chunk:
            return
        copy.add(chunk)


async def _end_quietly(response: web.StreamResponse, out: Relay) -> None:
    try:
        await response.write_eof()
    except ConnectionResetError:
        out.client_disconnected = True


def _ending(
    usage: UsageChunkFilter | None, enforce: EnforceHook | None, last: bytes = b""
) -> bytes:
    """At the end of the upstream's body: its ``last`` decoded bytes and what the usage filter
    still holds (a last event that never ended, passed as it came), through the enforce hook,
    and whatever calls it held."""
    if usage is not None:
        last = usage.feed(last) + usage.flush() if last else usage.flush()
    if enforce is None:
        return last
    return (enforce.feed(last) if last else b"") + enforce.close()


async def _end_cut(response: web.StreamResponse, out: Relay) -> None:
    """End a stream that shutdown cut at the end of its grace period: an in-band error of its
    own (``server_draining``), so the client can tell it from an upstream failure."""
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()  # the cancellation was shutdown's request to stop, now honoured
    if out.stream:
        prefix = b"" if out.at_event_boundary else b"\n\n"
        error = DrainingError("the proxy shut down before the stream ended; retry the request")
        await _write_quietly(response, prefix + in_band_error(error), out)


async def _write_quietly(response: web.StreamResponse, data: bytes, out: Relay) -> None:
    try:
        await response.write(data)
    except ConnectionResetError:
        out.client_disconnected = True
