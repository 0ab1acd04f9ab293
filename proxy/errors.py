"""The proxy's exception tree: every error ``proxy`` raises derives from :class:`ProxyError`.

Each class renders itself in OpenAI's error shape (``body``, ``response``), and a raised error
becomes a response in one place, :func:`render` (the app's middleware and the scoring routes
both call it; the guard answers its early 413 and 408 with the classes' ``response`` too, and
the watchdog's raw 408 is ``ClientTimeoutError``'s body). Classes that never reach a client
still take the common root, so ``except ProxyError`` means "the proxy's own failure"; each
keeps the builtin base its callers have always caught (``ConfigError`` is a ``ValueError``,
``ResultsWriteError`` an ``OSError``), as aiohttp's ``client_exceptions`` does::

    ProxyError                      500 proxy_error         proxy.errors
    ├── UpstreamError               502 upstream_error      proxy.errors     (kind: the label)
    │   ├── UpstreamUnreachableError   502 upstream_unreachable     connect
    │   ├── UpstreamTimeoutError       504 upstream_timeout         timeout
    │   └── UpstreamProtocolError      502 upstream_protocol_error  protocol
    ├── BodyTooLargeError           413 request_too_large   proxy.errors
    ├── BadTargetError              400 invalid_request_target
    ├── BadExpectError              400 invalid_expect_header (not ASCII)
    ├── ExpectationError            417 expectation_failed (not 100-continue)
    ├── InvalidKeyError             401 invalid_api_key
    ├── RateLimitedError            429 rate_limit_exceeded (a key's rpm or tpm; Retry-After)
    ├── ClientTimeoutError          408 request_timeout
    ├── DrainingError               503 server_draining (with Retry-After)
    ├── BadRequestError             400 invalid_request_error (the scoring API; param, code)
    ├── TasksNotReadyError          503 tasks_not_loaded (with Retry-After)
    ├── EnforceFailedError          502 enforce_failed (fail_closed: an answer not judged)
    ├── ConfigError(ValueError)            proxy.config.coerce         the config is unusable
    ├── StartupError                       proxy.serve                 ``serve`` cannot start
    ├── ListenError                        proxy.listeners             a port cannot be held
    ├── DemoStartError                     proxy.demo.start            a demo command cannot start
    ├── EventLoopError                     proxy.eventloop             uvloop asked, not installed
    ├── BodyReadTimeoutError               proxy.pipeline.watchdog     a body stopped arriving
    ├── CaptureError                       proxy.pipeline.capture      a response is unreadable
    │   └── UpstreamReportedError          proxy.pipeline.capture      it reports an error
    ├── GradingProcessDiedError(RuntimeError)  proxy.pipeline.offload  the child died with it
    │   └── GradingDeadlineError               proxy.pipeline.offload  held past its deadline
    ├── GraderError(RuntimeError)          proxy.pipeline.offload      grade_job raised in the child
    ├── NotPicklableError(TypeError)       proxy.pipeline.offload      it cannot cross to the child
    ├── ResultsWriteError(OSError)         proxy.pipeline.record       rows not appended
    ├── StoreError(RuntimeError)           proxy.pipeline.record.sinks a batch the store refused
    ├── RowsDatabaseError(ValueError)      proxy.rowsdb                a rows-database URL or read
    ├── JudgeHTTPError(RuntimeError)       proxy.judge_client          the judge endpoint failed
    └── ApiError                           proxy.demo.requests         the demo backend's 4xx/5xx

Upstream error responses are *not* ProxyErrors: they pass through to the client untouched (the
demo backend, which plays an upstream, answers its ``ApiError`` itself; the proxy never renders it).
An upstream failure's ``kind`` is data on its class (``gradeproxy_upstream_errors_total``'s
label), never read back from a message. ``tests/proxy/test_errors.py`` keeps this drawing
equal to the classes the package defines.
"""

from __future__ import annotations

from typing import ClassVar, Final, Literal

import orjson
from aiohttp import web

UpstreamErrorKind = Literal["connect", "timeout", "protocol"]


class ProxyError(Exception):
    """An error the proxy raises; answered by the proxy itself when it reaches a client."""

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


class UpstreamError(ProxyError):
    """The upstream could not be reached or broke the exchange; ``kind`` is its metric label."""

    status = 502
    type = "upstream_error"
    code = "upstream_error"
    kind: ClassVar[UpstreamErrorKind] = "protocol"


class UpstreamUnreachableError(UpstreamError):
    code = "upstream_unreachable"
    kind = "connect"
    should_retry = True


class UpstreamTimeoutError(UpstreamError):
    status = 504
    code = "upstream_timeout"
    kind = "timeout"
    should_retry = True


class UpstreamProtocolError(UpstreamError):
    code = "upstream_protocol_error"
    kind = "protocol"


# An upstream failure after the response began is recorded by code (``Relay.upstream_failed``);
# its kind is read off the class of that code, so the two never disagree.
UPSTREAM_KIND_OF: Final[dict[str, UpstreamErrorKind]] = {
    cls.code: cls.kind
    for cls in (UpstreamUnreachableError, UpstreamTimeoutError, UpstreamProtocolError)
}


class BodyTooLargeError(ProxyError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class BadTargetError(ProxyError):
    """A request target the proxy will not forward: dot segments, absolute or authority form."""

    status = 400
    type = "invalid_request_error"
    code = "invalid_request_target"


class BadExpectError(ProxyError):
    """An ``Expect`` value that is not ASCII: a malformed request (proxy/pipeline/malformed.py)."""

    status = 400
    type = "invalid_request_error"
    code = "invalid_expect_header"


class ExpectationError(ProxyError):
    """An ``Expect`` other than ``100-continue`` (417, as aiohttp answers it)."""

    status = 417
    type = "invalid_request_error"
    code = "expectation_failed"


class InvalidKeyError(ProxyError):
    """No inbound key, or a wrong one (the message never echoes what was sent)."""

    status = 401
    type = "invalid_request_error"
    code = "invalid_api_key"

    def extra_headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": 'Bearer realm="gradeproxy"'}


class RateLimitedError(ProxyError):
    """A key over its requests- or tokens-per-minute limit (proxy/pipeline/limits.py): OpenAI's
    429, whose ``type`` says which limit (``requests`` or ``tokens``)."""

    status = 429
    code = "rate_limit_exceeded"
    should_retry = True

    def __init__(self, message: str, limit_type: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.limit_type = limit_type
        self.retry_after_s = retry_after_s

    def body(self) -> dict[str, dict[str, str | None]]:
        return {
            "error": {
                "message": self.message,
                "type": self.limit_type,
                "param": None,
                "code": self.code,
            }
        }

    def extra_headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}


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


class BadRequestError(ProxyError):
    """A malformed scoring request; ``param`` names the field, ``code`` says what is wrong."""

    status = 400
    type = "invalid_request_error"
    code = "invalid_request_error"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.error_code = code or type(self).code

    def body(self) -> dict[str, dict[str, str | None]]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.error_code,
            }
        }


class TasksNotReadyError(ProxyError):
    """A scoring request names a task while the task set is still loading."""

    status = 503
    type = "server_error"
    code = "tasks_not_loaded"
    should_retry = True

    def extra_headers(self) -> dict[str, str]:
        return {"Retry-After": "1"}


class EnforceFailedError(ProxyError):
    """An enforce policy with ``fail_closed: true`` could not judge an answer, so it is not
    relayed (docs/enforce.md): raised before a response begins (a coding the proxy cannot
    decode), or sent in-band once a stream has begun (its hold-back failed). Not retried: the
    same request meets the same failure. Counted in ``gradeproxy_enforce_failures_total``, never
    as an upstream error."""

    status = 502
    type = "server_error"
    code = "enforce_failed"


def render(
    error: ProxyError | web.HTTPException, request_id: str | None, body_limit: int | None
) -> web.Response | None:
    """The response for an error a handler raised, or None for one to re-raise (a redirect).

    aiohttp's own 4xx/5xx (a body over ``client_max_size``, a method not allowed) are answered
    in the same shape, so a client reads every error the proxy makes one way.
    """
    if isinstance(error, ProxyError):
        return error.response(request_id)
    if isinstance(error, web.HTTPRequestEntityTooLarge):
        limit = (
            "too large" if body_limit is None else f"larger than the limit of {body_limit} bytes"
        )
        return BodyTooLargeError(f"request body is {limit} ({error.text})").response(request_id)
    if error.status < 400:
        return None
    response = ProxyError(error.reason).response(request_id)
    response.set_status(error.status, error.reason)
    return response


def in_band_error(error: ProxyError) -> bytes:
    """The SSE event that reports a failure after a stream has started (no [DONE] after it)."""
    return b"data: " + orjson.dumps(error.body()) + b"\n\n"
