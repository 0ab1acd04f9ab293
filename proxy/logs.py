"""structlog set-up: JSON lines on stdout, one canonical line per request.

Never log ``Authorization``, API keys or bodies: the canonical line carries ids, sizes,
statuses and timings only.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import orjson
import structlog

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
        processors.append(structlog.dev.ConsoleRenderer(colors=sys.stdout.isatty()))
        factory: Any = structlog.PrintLoggerFactory(sys.stdout)
    else:
        processors.append(structlog.processors.JSONRenderer(serializer=orjson.dumps))
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
