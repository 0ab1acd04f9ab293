"""The access record of every forwarded request: its request metrics and its one log line.

Written once per request, graded or not, when the relay ends (in the handler's ``finally``), so
a request that failed, was cut or lost its client is counted and logged like one that did
not.
"""

from __future__ import annotations

from aiohttp import web

from proxy.logs import request_log
from proxy.pipeline.admit import Route, SkipReason
from proxy.pipeline.forward import Relay
from proxy.pipeline.guard import KEY_ID, TRACE
from proxy.pipeline.record.metrics import ProxyMetrics

log = request_log  # the canonical line, rendered without structlog's chain (proxy/logs.py)


def record_request(
    request: web.Request,
    metrics: ProxyMetrics,
    request_id: str,
    route: Route,
    status: int,
    total: float,
    outcome: Relay,
    skip: SkipReason | None,
    task_id: str | None,
    pair_id: str | None,
) -> None:
    overhead = max(total - outcome.upstream_wait_s, 0.0)
    key_id = request.get(KEY_ID)
    metrics.request_done(
        route,
        status or 500,
        total,
        outcome.ttfb_s if outcome.status else None,
        overhead,
        metrics.key_label(key_id),
    )
    trace = request.get(TRACE)
    log.write(
        "request",
        {
            "request_id": request_id,
            "key_id": key_id,
            "upstream_request_id": outcome.upstream_request_id,
            "method": request.method,
            "path": request.path,
            "route": route,
            "status": status or 500,
            "stream": outcome.stream,
            "bytes": outcome.body_bytes,
            "duration_ms": _ms(total),
            "ttfb_ms": _ms(outcome.ttfb_s),
            "overhead_ms": _ms(overhead),
            "task": task_id,
            "graded": route != "other" and skip is None and not outcome.upstream_failed,
            "skip": skip,
            "upstream_failed": outcome.upstream_failed,
            "client_disconnected": outcome.client_disconnected,
            "cut": outcome.cut,
            "capture_truncated": outcome.capture_truncated or None,
            "pair_id": pair_id,  # set when a shadow copy was started
            "trace_id": trace.trace_id if trace else None,
        },
    )


def _ms(seconds: float) -> float:
    """``seconds`` in milliseconds to the microsecond: ``round(seconds * 1000, 3)`` but by an
    integer round (a float ``round`` to digits goes through a decimal conversion)."""
    return round(seconds * 1_000_000) / 1000
