"""The proxy's own errors, each rendered in OpenAI's error shape by one middleware.

::

    ProxyError                     (status, type, code)
    ├── UpstreamUnreachableError        502 upstream_unreachable
    ├── UpstreamTimeoutError            504 upstream_timeout
    ├── UpstreamProtocolError      502 upstream_protocol_error
    ├── BodyTooLargeError               413 request_too_large
    ├── BadTargetError             400 invalid_request_target
    ├── InvalidKeyError                 401 invalid_api_key
    ├── ClientTimeoutError              408 request_timeout
    └── DrainingError                   503 server_draining (with Retry-After)

Upstream error responses are *not* ProxyErrors: they pass through to the client untouched.
"""

from __future__ import annotations

from typing import ClassVar

import orjson
from aiohttp import web


class ProxyError(Exception):
    """An error the proxy answers itself."""

    status: ClassVar[int] = 500
    type: ClassVar[str] = "proxy_error"
    code: ClassVar[str] = "proxy_error"
    should_retry: ClassVar[bool] = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def body(self) -> dict[str, dict[str, str | None]]:
        return {
            "error": {"message": self.message, "type": self.type, "param": None, "code": self.code}
        }

    def response(self, request_id: str | None = None) -> web.Response:
        headers = {"x-should-retry": "true" if self.should_retry else "false"}
        if request_id:
            # escaped: a client's id may hold obs-text bytes (proxy/logs.py)
            headers["x-request-id"] = request_id.encode("utf-8", "backslashreplace").decode()
        headers.update(self.extra_headers())
        return web.Response(
            status=self.status,
            body=orjson.dumps(self.body()),
            content_type="application/json",
            headers=headers,
        )

    def extra_headers(self) -> dict[str, str]:
        return {}


class UpstreamUnreachableError(ProxyError):
    status = 502
    type = "upstream_error"
    code = "upstream_unreachable"
    should_retry = True


class UpstreamTimeoutError(ProxyError):
    status = 504
    type = "upstream_error"
    code = "upstream_timeout"
    should_retry = True


class UpstreamProtocolError(ProxyError):
    status = 502
    type = "upstream_error"
    code = "upstream_protocol_error"


class BodyTooLargeError(ProxyError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class BadTargetError(ProxyError):
    """A request target the proxy will not forward: dot segments, absolute or authority form."""

    status = 400
    type = "invalid_request_error"
    code = "invalid_request_target"


class InvalidKeyError(ProxyError):
    """No inbound key, or a wrong one (the message never echoes what was sent)."""

    status = 401
    type = "invalid_request_error"
    code = "invalid_api_key"

    def extra_headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": 'Bearer realm="gradeproxy"'}


class ClientTimeoutError(ProxyError):
    """The client stopped sending its request body for longer than client.body_timeout_s."""

    status = 408
    type = "invalid_request_error"
    code = "request_timeout"


class DrainingError(ProxyError):
    status = 503
    type = "server_error"
    code = "server_draining"
    should_retry = True

    def __init__(self, message: str, retry_after_s: int = 5) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s

    def extra_headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}


def in_band_error(error: ProxyError) -> bytes:
    """The SSE event that reports a failure after a stream has started (no [DONE] after it)."""
    return b"data: " + orjson.dumps(error.body()) + b"\n\n"
