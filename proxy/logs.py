"""structlog set-up: JSON lines on stdout, one canonical line per request.

Never log ``Authorization``, API keys or bodies: the canonical line carries ids, sizes,
statuses and timings only.

The canonical request line is the one log call on the hot path, so it skips structlog's
processor chain: :data:`request_log` renders the same fields in the same order (the event's
fields, then ``event``, the bound contextvars such as a worker's ``worker``, then ``level`` and
``timestamp``) with orjson, to the same stdout that structlog writes to. It falls back to
structlog for the console format (and when the chain was changed since
:func:`configure_logging`, as by tests that capture its events), and does nothing below
``info``.

Header values may hold any byte (RFC 9110 obs-text; aiohttp decodes them with
surrogateescape), so a log line can carry a lone surrogate that no UTF-8 encoder accepts. The
renderers escape such strings (``\udcff``) at this boundary only, and only when the fast path
fails: values are never altered before they are logged.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import IO, Any

import orjson
import structlog
from structlog.contextvars import merge_contextvars

from proxy.utctime import utc_iso

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def configure_logging(level: str = "info", fmt: str = "json", cache: bool = True) -> None:
    """Configure structlog once at start (tests pass ``cache=False`` so they can reconfigure)."""
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.dict_tracebacks,
    ]
    if fmt == "console":
        processors.append(_escaping(structlog.dev.ConsoleRenderer(colors=sys.stdout.isatty())))
        factory: Any = structlog.PrintLoggerFactory(sys.stdout)
    else:
        processors.append(structlog.processors.JSONRenderer(serializer=_dumps))
        factory = structlog.BytesLoggerFactory(sys.stdout.buffer)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=factory,
        cache_logger_on_first_use=cache,
    )
    request_log.configure(
        sys.stdout.buffer if fmt == "json" else None,
        enabled=_LEVELS[level] <= logging.INFO,
        processors=structlog.get_config()["processors"],
    )
    # aiohttp's own access log is replaced by our canonical line.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


_INT64 = -(2**63)


def escape_text(value: str) -> str:
    """``value`` with every lone surrogate written as a ``\\udxxx`` escape (valid UTF-8)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def escape_values(value: Any) -> Any:
    """A copy of ``value`` (str, dict, list, tuple, others as they are) with strings escaped."""
    if isinstance(value, str):
        return escape_text(value)
    if isinstance(value, dict):
        return {escape_values(k): escape_values(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [escape_values(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and not _INT64 <= value < -_INT64:
        return str(value)  # orjson refuses integers beyond 64 bits
    return value


def _dumps(event: Any, **kwargs: Any) -> bytes:
    try:
        return orjson.dumps(event, **kwargs)
    except TypeError:  # a lone surrogate (or another value orjson refuses): escape, retry
        kwargs.setdefault("default", repr)
        return orjson.dumps(escape_values(event), **kwargs)


def _escaping(renderer: Callable[..., Any]) -> Callable[..., Any]:
    def render(logger: Any, name: str, event: dict[str, Any]) -> Any:
        return renderer(logger, name, escape_values(event))

    return render


def get_logger(name: str) -> Any:
    return structlog.get_logger(name)


def _timestamp() -> str:
    """Now, as structlog's ``TimeStamper(fmt="iso", utc=True)`` writes it."""
    return utc_iso(time.time(), "Z")


class RequestLog:
    """``info`` for the canonical request line: orjson straight to stdout (see the module's
    docstring), structlog's own logger wherever the fast path cannot be the same line.

    Every line is flushed as it is written. Flushing once per event-loop iteration instead (a
    ``call_soon``) measured more CPU per forwarded request at 16 connections (docs/performance.md):
    the extra callback costs more than the writes it saves."""

    __slots__ = ("_enabled", "_fallback", "_out", "_processors", "_renderer")

    def __init__(self, name: str) -> None:
        self._fallback = get_logger(name)
        self._out: IO[bytes] | None = None
        self._enabled = True
        self._processors: list[Any] = []
        self._renderer: Any = None

    def configure(self, out: IO[bytes] | None, enabled: bool, processors: list[Any]) -> None:
        """Called by :func:`configure_logging`: ``out`` None means render through structlog.
        ``processors`` is structlog's own list, which it edits in place (capture_logs)."""
        self._out, self._enabled = out, enabled
        self._processors, self._renderer = processors, processors[-1]

    def info(self, event: str, **fields: Any) -> None:
        self.write(event, fields)

    def write(self, event: str, fields: dict[str, Any]) -> None:
        """``info`` for a dict built by the caller (which it takes over): one dict, not two."""
        out = self._out
        # structlog's chain was changed since (structlog.testing.capture_logs): it decides.
        if out is None or self._processors[-1] is not self._renderer:
            self._fallback.info(event, **fields)
            return
        if not self._enabled:
            return
        fields["event"] = event
        merge_contextvars(None, "info", fields)  # what workers bind (worker=N), as the chain does
        fields["level"] = "info"
        fields["timestamp"] = _timestamp()
        out.write(_dumps(fields) + b"\n")
        out.flush()


request_log = RequestLog("gradeproxy.request")
