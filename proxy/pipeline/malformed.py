"""Requests aiohttp's server refuses before any handler runs: one JSON line each, and counted.

aiohttp answers a request it cannot parse (a bad header token, a line too long, a bad method)
with a 400 of its own and logs it through ``logging`` with a full traceback: about 500 bytes
of plain text for a request a tenth of that size, outside the JSON log, and not in the request
metrics. :class:`ServerLog` is the logger the proxy hands aiohttp's request handler instead:
for such a client error it writes one ``malformed_request`` line (status and reason, no
traceback) and counts the request in ``gradeproxy_requests_total{route="other"}``; anything
else (a handler that raised: the proxy's own bug) keeps its traceback, as a JSON line.

:func:`expect_handler` replaces aiohttp's ``Expect`` handling on the proxied routes: its
default put the header's value in the text of a 417 and failed to encode a non-ASCII byte,
answering 500. Here ``100-continue`` is honoured as before, a value that is not ASCII is a
400 and any other expectation a 417, both in OpenAI's error shape.

Never raises from a log call: aiohttp calls it while answering the client.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from proxy.errors import BadExpectError, ExpectationError, ProxyError
from proxy.logs import escape_text, get_logger
from proxy.pipeline.record.metrics import ProxyMetrics

__all__ = ["REASON_CHARS", "ServerLog", "expect_handler", "server_log"]

ExpectHandler = Callable[[web.Request], Awaitable[web.StreamResponse | None]]

REASON_CHARS = 200  # the longest reason a line keeps (aiohttp quotes the offending bytes)

log = get_logger("gradeproxy.server")


def reason_of(error: HttpProcessingError) -> str:
    """The parser's message on one line: its first line, without aiohttp's byte excerpt."""
    text = str(error.message or type(error).__name__).strip()
    first = text.splitlines()[0].strip() if text else type(error).__name__
    return escape_text(first.rstrip(":"))[:REASON_CHARS]


class ServerLog:
    """The ``logger`` of aiohttp's request handler (``AppRunner(..., logger=...)``)."""

    def __init__(self, count: Callable[[int], None]) -> None:
        self._count = count  # one refused request, by the status it was answered with

    def _refused(self, args: tuple[Any, ...], exc_info: Any) -> bool:
        if not isinstance(exc_info, HttpProcessingError):
            return False
        status = exc_info.code if 400 <= exc_info.code < 600 else 400
        remote = args[1] if len(args) > 1 else None
        log.info(
            "malformed_request",
            status=status,
            reason=reason_of(exc_info),
            error=type(exc_info).__name__,
            remote=remote,
        )
        self._count(status)
        return True

    def exception(self, *args: Any, exc_info: Any = True, **kwargs: Any) -> None:
        if not self._refused(args, exc_info):
            message = (args[0] % args[1:]) if len(args) > 1 else (args[0] if args else "")
            log.error("server_error", message=message, exc_info=exc_info)

    def debug(self, *args: Any, exc_info: Any = None, **kwargs: Any) -> None:
        # aiohttp logs a bad method on a connection's first request here (a scanner, TLS on
        # the plain port): refused and counted like any other malformed request.
        self._refused(args, exc_info)

    def error(self, *args: Any, exc_info: Any = None, **kwargs: Any) -> None:
        if not self._refused(args, exc_info):
            message = (args[0] % args[1:]) if len(args) > 1 else (args[0] if args else "")
            log.error("server_error", message=message, exc_info=exc_info)

    def warning(self, *args: Any, **kwargs: Any) -> None:
        message = (args[0] % args[1:]) if len(args) > 1 else (args[0] if args else "")
        log.warning("server_warning", message=message)

    info = warning


def server_log(metrics: ProxyMetrics) -> ServerLog:
    """The server's logger, counting each refused request in the request metrics."""
    return ServerLog(lambda status: metrics.request_done("other", status, 0.0, None, 0.0))


def expect_handler(metrics: ProxyMetrics) -> ExpectHandler:
    """The proxied routes' ``Expect`` handling (aiohttp calls it before any middleware, so
    before the request has an id), counting what it refuses in ``metrics``."""

    async def handle(request: web.Request) -> web.StreamResponse | None:
        expect = request.headers.get("Expect", "")
        if request.version != (1, 1):
            return None
        if expect.lower() == "100-continue":
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            request.writer.output_size = 0  # the interim response is not the answer (aiohttp)
            return None
        error: ProxyError
        if not expect.isascii():
            error = BadExpectError("the Expect header holds a byte that is not ASCII")
        else:
            error = ExpectationError(f"unknown Expect: {expect[:REASON_CHARS]}")
        log.info("malformed_request", status=error.status, reason=error.message, error=error.code)
        metrics.request_done("other", error.status, 0.0, None, 0.0)
        return error.response()

    return handle
