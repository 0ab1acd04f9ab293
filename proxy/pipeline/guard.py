"""The request guard: what every request must pass before any handler or route sees it.

In order, each step cheap and before the body is read:

1. **Target hygiene.** Only origin-form targets (``/path?query``) are served: an absolute-form
   (``GET http://evil.example/v1/models``), authority-form (``CONNECT host:443``) or asterisk
   target is refused, as is any path with a dot segment, plain or percent-encoded
   (``/v1/../metrics``, ``/v1/%2e%2e/admin``, ``/v1/..%2fx``), because the upstream would
   resolve it to a path the proxy never routed. 400 in OpenAI's error shape, before the /v1
   check, so no such request reaches the upstream or the admin routes.
2. **Inbound keys** (``auth.keys``, ``auth.keys_env``: proxy/config/keys.py): a key in
   ``X-Gradeproxy-Key`` or ``Authorization: Bearer``, compared in constant time with every
   configured key; 401 otherwise. The matched key's id (a named key's; none for an
   ``auth.keys_env`` key) is set as ``request[KEY_ID]``, for rows and metric labels; the page's
   login session (proxy/uisession.py) resolves to the key it was issued for the same way.
   /livez, /readyz and /health are always open, /metrics unless ``auth.protect_metrics``; so are
   the page's shell, its login form and its icon, while the page's JSON also takes the login
   session's cookie. The header that carried the key is never forwarded (see :data:`STRIP`).
   A key with ``rpm`` or ``tpm`` is then checked against its window (proxy/pipeline/limits.py)
   for ``/v1/`` requests: 429 over the limit, before the body is read.
3. **Trace headers**, validated once (proxy/telemetry/tracecontext.py) into ``request[TRACE]``.
4. **An early 413** from a declared ``Content-Length`` over ``limits.max_body_bytes``, before
   one byte of the body is read, with ``Connection: close``.
5. **The body read**, under the watchdog's body timeout (proxy/pipeline/watchdog.py): a client that
   stops sending gets a 408. Handlers then get the body from aiohttp's cache.
"""

from __future__ import annotations

import asyncio
import hmac
import re
from collections.abc import Awaitable, Callable

from aiohttp import web

from proxy.config.keys import InboundKey
from proxy.errors import (
    BadTargetError,
    BodyTooLargeError,
    ClientTimeoutError,
    InvalidKeyError,
    RateLimitedError,
)
from proxy.pipeline.limits import KeyLimits, Limiters, Refusal
from proxy.pipeline.watchdog import BodyReadTimeoutError, Conn, Phase, Watchdog
from proxy.telemetry.tracecontext import TraceContext, trace_context
from proxy.uisession import COOKIE, SESSION_PATHS, Sessions

__all__ = ["KEY_HEADER", "KEY_ID", "LIMITS", "STRIP", "TRACE", "Guard", "dot_segment"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

KEY_HEADER = "X-Gradeproxy-Key"
OPEN_PATHS = frozenset(
    {"/livez", "/readyz", "/health", "/ui", "/ui/login", "/ui/review", "/favicon.ico"}
)
TRACE = web.RequestKey("trace", TraceContext)
# The id of the named key a request (or the page's session) was let in with; absent when auth
# is off or the key has no id (``auth.keys_env``).
KEY_ID = web.RequestKey("key_id", str)
# That key's limits, when it has a tpm limit: the handler spends the response's tokens there.
LIMITS = web.RequestKey("key_limits", KeyLimits)
# Told of every refusal: (the key's id, "rpm" or "tpm"); the app counts it.
Refused = Callable[[str, str], None]
# Names of request headers that must not be forwarded (the one that carried the inbound key).
STRIP = web.RequestKey("strip_headers", tuple)
_ENCODED = re.compile(r"%(2e|2f|5c)", re.IGNORECASE)
_DECODED = {"2e": ".", "2f": "/", "5c": "/"}
_DOTS = frozenset({".", ".."})


def dot_segment(raw_path: str) -> bool:
    """Whether the path part of a raw target has a ``.`` or ``..`` segment once its encoded
    dots and slashes (``%2e``, ``%2f``, ``%5c``) and backslashes are decoded."""
    path = raw_path.partition("?")[0].partition("#")[0]
    if "." not in path and "%" not in path:
        return False  # the common case: no work
    decoded = _ENCODED.sub(lambda m: _DECODED[m[1].lower()], path).replace("\\", "/")
    return any(segment in _DOTS for segment in decoded.split("/"))


def _check_target(request: web.Request) -> None:
    raw = request.raw_path
    if not raw.startswith("/"):
        raise BadTargetError(
            "only origin-form request targets (a path starting with /) are served; "
            "absolute-form, authority-form and asterisk targets are refused"
        )
    if dot_segment(raw):
        raise BadTargetError("request paths with dot segments (. or .., even encoded) are refused")


def _bearer(value: str | None) -> str | None:
    if value is None:
        return None
    scheme, _, token = value.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


class Guard:
    """The middleware (an instance is one: aiohttp's new-style marker is on the class),
    built once from the config and shared by the proxy and admin apps."""

    __middleware_version__ = 1

    def __init__(
        self,
        keys: tuple[InboundKey, ...],
        protect_metrics: bool,
        max_body_bytes: int,
        watchdog: Watchdog | None,
        refused: Refused | None = None,
    ) -> None:
        self.limiters = Limiters()
        self.use_keys(keys)
        self._open = OPEN_PATHS if protect_metrics else OPEN_PATHS | {"/metrics"}
        self.max_body_bytes = max_body_bytes
        self.watchdog = watchdog
        self.refused = refused

    def use_keys(self, keys: tuple[InboundKey, ...]) -> None:
        """Serve with ``keys`` from now on (start, and a SIGHUP that re-read the secrets); the
        limit windows of the ids that stay are kept."""
        self._keys = keys
        self.keyed = bool(keys)
        self.sessions: Sessions[InboundKey] = Sessions(keys)
        self.limiters.configure((k.id, k.rpm, k.tpm) for k in keys if k.id is not None)

    def _presented(self, request: web.Request) -> tuple[str, str | None]:
        """(the header that carried a key, the key), the dedicated header first."""
        given = request.headers.get(KEY_HEADER)
        if given is not None:
            return KEY_HEADER, given
        return "Authorization", _bearer(request.headers.get("Authorization"))

    def _matches(self, given: str) -> bool:
        return self._match(given) is not None

    def _match(self, given: str) -> InboundKey | None:
        candidate = given.encode("utf-8", "surrogateescape")
        found: InboundKey | None = None
        for key in self._keys:  # every key compared, so timing says nothing about which
            if hmac.compare_digest(candidate, key.secret):
                found = key
        return found

    def has_valid_key(self, request: web.Request) -> bool:
        """Whether keys are configured and ``request`` carries one of them: what lets a remote
        client read the failure inspector (proxy/surfaces/ui.py) on the traffic port. Without keys
        configured, no request has one. A named key's id is set as ``request[KEY_ID]`` (also on
        the open paths, which the guard itself does not check)."""
        if not self._keys:
            return False
        given = self._presented(request)[1]
        key = None if given is None else self._match(given)
        if key is not None and key.id is not None:
            request[KEY_ID] = key.id
        return key is not None

    def has_session(self, request: web.Request) -> bool:
        """Whether ``request`` is for the page's JSON and carries a valid login cookie (then
        ``request[KEY_ID]`` is the id of the key the session was issued for, if it has one)."""
        if request.path not in SESSION_PATHS:
            return False
        key = self.sessions.key_of(request.cookies.get(COOKIE))
        if key is None:
            return False
        if key.id is not None:
            request[KEY_ID] = key.id
        return True

    def key_is_valid(self, given: str) -> bool:
        """Whether ``given`` is one of the inbound keys (the page's login form)."""
        return bool(self._keys) and self._matches(given)

    def _authorise(self, request: web.Request) -> None:
        if not self._keys or request.path in self._open or self.has_session(request):
            return
        via, given = self._presented(request)
        if given is None:
            raise InvalidKeyError(
                f"this proxy needs a key: send it in {KEY_HEADER} or as Authorization: Bearer"
            )
        key = self._match(given)
        if key is None:
            raise InvalidKeyError("the proxy key provided is not valid")
        request[STRIP] = (via,)
        if key.id is None:
            return
        request[KEY_ID] = key.id
        limits = self.limiters.get(key.id)
        if limits is None or not request.path.startswith("/v1/"):
            return
        refusal = limits.admit()
        if refusal is not None:
            self._refuse(key.id, refusal)
        if limits.tpm is not None:
            request[LIMITS] = limits

    def _refuse(self, key_id: str, refusal: Refusal) -> None:
        if self.refused is not None:
            self.refused(key_id, refusal.limit)
        if refusal.limit == "rpm":
            raise RateLimitedError(
                f"key {key_id} is over its limit of requests per minute; retry after "
                f"{refusal.retry_after_s} s",
                "requests",
                refusal.retry_after_s,
            )
        raise RateLimitedError(
            f"key {key_id} has spent its tokens per minute; retry after {refusal.retry_after_s} s",
            "tokens",
            refusal.retry_after_s,
        )

    async def __call__(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        conn = self.watchdog.conn(request) if self.watchdog is not None else None
        if conn is None:  # not served through WatchedRunner (tests' TestServer)
            return await self._guarded(request, handler, None)
        # Headers complete: out of the header phase whatever happens next, and idle after.
        conn.phase, conn.payload = Phase.BUSY, request.content
        try:
            return await self._guarded(request, handler, conn)
        finally:
            conn.task = conn.request = None
            conn.phase, conn.since = Phase.IDLE, asyncio.get_running_loop().time()

    async def _guarded(
        self, request: web.Request, handler: Handler, conn: Conn | None
    ) -> web.StreamResponse:
        _check_target(request)
        self._authorise(request)
        request[TRACE] = trace_context(request.headers)
        declared = request.content_length
        if declared is not None and declared > self.max_body_bytes:
            response = BodyTooLargeError(
                f"request body declares {declared} bytes; the limit is {self.max_body_bytes}"
            ).response(request.headers.get("x-request-id"))
            response.force_close()  # the body is never read: the connection cannot be reused
            return response
        if conn is None:
            await request.read()
            return await handler(request)
        conn.phase, conn.since, conn.request = (
            Phase.BODY,
            asyncio.get_running_loop().time(),
            request,
        )
        try:
            await request.read()
        except BodyReadTimeoutError:
            response = ClientTimeoutError(
                "the request body stopped arriving for longer than client.body_timeout_s"
            ).response(request.headers.get("x-request-id"))
            response.force_close()
            return response
        finally:
            conn.request = None
            conn.phase = Phase.BUSY
        conn.task = asyncio.current_task()
        return await handler(request)
