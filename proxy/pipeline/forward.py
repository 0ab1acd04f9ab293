"""Forwarding: relay a request upstream and its response back, byte for byte.

The client gets the upstream's status, end-to-end headers and body bytes unchanged; nothing is
re-serialised. Streams are relayed chunk by chunk as they arrive, and a graded response keeps
only *references* to the chunks it relayed, parsed later by the grade queue, so grading adds
no work between two chunks and no time to the first one.
"""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from proxy.errors import (
    DrainingError,
    ProxyError,
    UpstreamProtocolError,
    UpstreamTimeoutError,
    UpstreamUnreachableError,
    in_band_error,
)
from proxy.logs import escape_text
from proxy.pipeline.decoding import CaptureBuffer

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
# aiohttp sets Host and Content-Length itself. Accept-Encoding passes as the client sent it
# (and none is added when it sent none), so Content-Encoding comes back to the client that
# asked for it, undecoded: the proxy never inflates what it relays (proxy/pipeline/decoding.py).
_REQUEST_DROP = HOP_BY_HOP | {"host", "content-length"}
_NO_AUTO_HEADERS = frozenset({"Accept-Encoding"})
# aiohttp re-frames the body (Content-Length or chunked); Content-Encoding passes through.
_RESPONSE_DROP = HOP_BY_HOP | {"content-length"}
# Non-streamed bodies up to this size are read whole and sent with a Content-Length; larger or
# unsized ones are relayed as they arrive.
BUFFER_MAX_BYTES = 4 * 1024 * 1024
_LARGE_BODY = 1024 * 1024
# The most decoded bytes of one response kept for grading (limits.max_capture_bytes).
CAPTURE_MAX_BYTES = 16 * 1024 * 1024
_EVENT_ENDS = (b"\n\n", b"\r\r", b"\r\n\r\n")


def _connection_named(headers: CIMultiDictProxy[str]) -> set[str]:
    named: set[str] = set()
    for value in headers.getall("Connection", []):
        named.update(token.strip().lower() for token in value.split(",") if token.strip())
    return named


def request_headers(
    incoming: CIMultiDictProxy[str],
    private_prefixes: Iterable[str],
    private_names: Iterable[str],
    api_key: str | None,
    request_id: str,
) -> CIMultiDict[str]:
    """Headers for the upstream request: end-to-end only, never the proxy's own."""
    drop = _REQUEST_DROP | _connection_named(incoming) | {n.lower() for n in private_names}
    prefixes = tuple(p.lower() for p in private_prefixes)
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in incoming.items():
        lower = name.lower()
        if lower in drop or lower.startswith(prefixes):
            continue
        out.add(name, value)
    if api_key is not None:
        out["Authorization"] = f"Bearer {api_key}"
    out["x-request-id"] = request_id
    return out


PROXY_REQUEST_ID_HEADER = "X-Gradeproxy-Request-Id"


def response_headers(upstream: CIMultiDictProxy[str], request_id: str) -> CIMultiDict[str]:
    """Headers for the client: end-to-end only; the upstream's x-request-id wins if it sent one.

    ``X-Gradeproxy-Request-Id`` always carries the proxy's own id (the row's ``request_id``);
    the upstream's ``x-request-id`` is relayed as sent (the row's ``upstream_request_id``).
    """
    drop = _RESPONSE_DROP | _connection_named(upstream)
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in upstream.items():
        if name.lower() not in drop:
            out.add(name, value)
    if "x-request-id" not in out:
        # The client's own id, echoed: escaped if it holds bytes no UTF-8 writer can send.
        out["x-request-id"] = escape_text(request_id)
    # The id the result row records as ``request_id``, whatever the upstream sent.
    out[PROXY_REQUEST_ID_HEADER] = escape_text(request_id)
    return out


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
    cut: str | None = None  # set by shutdown when it ends this relay at the end of the grace
    at_event_boundary: bool = True  # whether the bytes relayed so far end an SSE event
    started_at: float = 0.0  # perf_counter when the upstream request was sent
    finished_at: float = 0.0


def upstream_url(base: str, raw_path: str) -> URL:
    """``base`` (ending in /v1) plus the client's raw path after /v1 and its raw query."""
    return URL(base.rstrip("/") + raw_path[len("/v1") :], encoded=True)


async def relay(
    request: web.Request,
    session: aiohttp.ClientSession,
    url: URL,
    headers: CIMultiDict[str],
    body: bytes,
    capture: bool,
    request_id: str,
    out: Relay,
    client_timeout: aiohttp.ClientTimeout,
    capture_limit: int = CAPTURE_MAX_BYTES,
) -> web.StreamResponse:
    """Send the request upstream and relay the response, recording into ``out`` as it goes
    (so a cancelled handler still knows how far it got); raise ProxyError before it starts."""
    sent = out.started_at = time.perf_counter()
    # aiohttp sends large byte strings in one blocking write; a BytesIO is sent in pieces.
    data: bytes | io.BytesIO | None = body or None
    if len(body) > _LARGE_BODY:
        data = io.BytesIO(body)
    try:
        async with session.request(
            request.method,
            url,
            headers=headers,
            data=data,
            allow_redirects=False,
            timeout=client_timeout,
            skip_auto_headers=_NO_AUTO_HEADERS,
        ) as upstream:
            out.ttfb_s = out.upstream_wait_s = time.perf_counter() - sent
            out.status = upstream.status
            out.upstream_request_id = upstream.headers.get("x-request-id")
            headers_out = response_headers(upstream.headers, request_id)
            out.stream = upstream.content_type == "text/event-stream"
            length = upstream.content_length
            copy = CaptureBuffer(upstream.headers.get("Content-Encoding"), capture_limit)
            if capture:
                out.parts = copy.parts
            try:
                if not out.stream and length is not None and length <= BUFFER_MAX_BYTES:
                    return await _buffered(request, upstream, headers_out, out, copy, capture)
                return await _streamed(request, upstream, headers_out, out, copy, capture)
            finally:
                out.capture_truncated = copy.truncated
    except TimeoutError as exc:
        if out.status:
            raise  # pragma: no cover - reads after the start are handled in the relay loops
        raise UpstreamTimeoutError(
            f"the upstream did not answer in time: {exc or 'timeout'}"
        ) from None
    except aiohttp.ClientConnectorError as exc:
        raise UpstreamUnreachableError(f"cannot connect to the upstream: {exc.os_error}") from None
    except aiohttp.ClientError as exc:
        if out.status:
            raise
        raise UpstreamProtocolError(f"the upstream broke the exchange: {exc}") from None


def client_gone(request: web.Request) -> bool:
    """Whether the client's connection is already closed (it left before its answer)."""
    transport = request.transport
    return transport is None or transport.is_closing()


async def _buffered(
    request: web.Request,
    upstream: aiohttp.ClientResponse,
    headers: CIMultiDict[str],
    out: Relay,
    copy: CaptureBuffer,
    capture: bool,
) -> web.StreamResponse:
    started = time.perf_counter()
    try:
        data = await upstream.read()
    except TimeoutError:
        raise UpstreamTimeoutError("the upstream stopped sending its response") from None
    except aiohttp.ClientError as exc:
        raise UpstreamProtocolError(f"the upstream broke its response: {exc}") from None
    out.upstream_wait_s += time.perf_counter() - started
    out.body_bytes = len(data)
    if capture:
        copy.add(data)
    out.finished_at = time.perf_counter()
    if client_gone(request):
        # Nobody will read this answer: not delivered, so neither logged 200 nor graded.
        out.client_disconnected = True
    else:
        out.headers_sent = True  # aiohttp writes it whole right after the handler returns
    return web.Response(status=upstream.status, body=data, headers=headers)


async def _streamed(
    request: web.Request,
    upstream: aiohttp.ClientResponse,
    headers: CIMultiDict[str],
    out: Relay,
    copy: CaptureBuffer,
    capture: bool,
) -> web.StreamResponse:
    if out.stream:
        headers.setdefault("Cache-Control", "no-cache")
        headers["X-Accel-Buffering"] = "no"
    response = web.StreamResponse(status=upstream.status, headers=headers)
    try:
        await response.prepare(request)
    except ConnectionResetError:  # the client left before the response headers
        out.client_disconnected = True
        out.finished_at = time.perf_counter()
        return response
    out.headers_sent = True
    chunks = upstream.content.iter_any()
    while True:
        waited = time.perf_counter()
        try:
            chunk = await chunks.__anext__()
        except StopAsyncIteration:
            break
        except asyncio.CancelledError:
            if out.cut is None:
                raise
            await _end_cut(response, out)
            break
        except (TimeoutError, aiohttp.ClientError) as exc:
            error: ProxyError = (
                UpstreamTimeoutError("the upstream stopped sending the stream")
                if isinstance(exc, TimeoutError)
                else UpstreamProtocolError(f"the upstream broke the stream: {exc}")
            )
            out.upstream_failed = error.code
            if out.stream:
                # End a half-relayed event first, so the error is an event of its own.
                prefix = b"" if out.at_event_boundary else b"\n\n"
                await _write_quietly(response, prefix + in_band_error(error), out)
            break
        finally:
            out.upstream_wait_s += time.perf_counter() - waited
        try:
            await response.write(chunk)
        except ConnectionResetError:  # the client went away: stop reading the upstream
            out.client_disconnected = True
            break
        except asyncio.CancelledError:  # cut while a slow client was still reading
            if out.cut is None:
                raise
            await _end_cut(response, out)
            break
        out.body_bytes += len(chunk)
        out.at_event_boundary = chunk.endswith(_EVENT_ENDS)
        if capture:
            copy.add(chunk)
    if not out.client_disconnected:
        try:
            await response.write_eof()
        except ConnectionResetError:
            out.client_disconnected = True
    out.finished_at = time.perf_counter()
    return response


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
