"""structlog set-up: JSON lines on stdout, one canonical line per request.

Never log ``Authorization``, API keys or bodies: the canonical line carries ids, sizes,
statuses and timings only.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import orjson
import structlog

from grader._json import printable

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def _serialize(value: Any, **kw: Any) -> bytes:
    """orjson, or the stdlib where a field holds what orjson refuses (a lone surrogate from a
    header decoded with ``surrogateescape``, an integer beyond 64 bits): a log line that
    cannot render would otherwise raise inside whichever request or worker logged it."""
    try:
        return orjson.dumps(value, **kw)
    except TypeError:
        text = json.dumps(value, ensure_ascii=False, default=kw.get("default"))  # noqa: TID251
        return text.encode("utf-8", "backslashreplace")


def _printable_fields(
    logger: Any, method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """For the console renderer, which writes text: lone surrogates spelled as escapes."""
    for key, value in event.items():
        if isinstance(value, str):
            event[key] = printable(value)
    return event


def configure_logging(level: str = "info", fmt: str = "json", cache: bool = True) -> None:
    """Configure structlog once at start (tests pass ``cache=False`` so they can reconfigure)."""
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.dict_tracebacks,
    ]
    if fmt == "console":
        processors.append(_printable_fields)
        processors.append(structlog.dev.ConsoleRenderer(colors=sys.stdout.isatty()))
        factory: Any = structlog.PrintLoggerFactory(sys.stdout)
    else:
        processors.append(structlog.processors.JSONRenderer(serializer=_serialize))
        factory = structlog.BytesLoggerFactory(sys.stdout.buffer)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=factory,
        cache_logger_on_first_use=cache,
    )
    # aiohttp's own access log is replaced by our canonical line.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def get_logger(name: str) -> Any:
    return structlog.get_logger(name)
