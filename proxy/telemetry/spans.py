"""A finished request's spans (and, in the log form, its evaluation records), built at once.

Run in the exporter's thread, never on the event loop: the server span continues the client's
``traceparent``; its child is the upstream call, a GenAI ``chat`` span whose id is the one the
upstream received in its ``traceparent``; the graded rows' check columns become
``gen_ai.evaluation.result`` events on that child (or log records parented to it). Both spans
carry explicit start and end times taken from the request's own clocks, so building them late
changes no timing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry._logs import LogRecord
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    Link,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
)

from grader.version import __version__
from proxy.config.tracing import Tracing
from proxy.telemetry import semconv
from proxy.telemetry.record import SpanRecord

__all__ = ["Built", "build"]

SCOPE = InstrumentationScope("gradeproxy", __version__, semconv.SCHEMA_URL)
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)

Built = tuple[list[ReadableSpan], list[ReadableLogRecord]]


def _context(record: SpanRecord, span_id: int, state: TraceState | None) -> SpanContext:
    return SpanContext(
        record.trace_id, span_id, is_remote=False, trace_flags=_SAMPLED, trace_state=state
    )


def _server_attributes(record: SpanRecord) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "http.request.method": record.method,
        "url.path": record.path[:1024],
        "http.route": record.path if record.route != "other" else "/v1/*",
        "gradeproxy.request_id": record.request_id[:256],
        "gradeproxy.route": record.route,
        "gradeproxy.variant": record.variant,
        "gradeproxy.graded": record.skip is None and record.task_id is not None,
    }
    if record.status:
        attributes["http.response.status_code"] = record.status
    optional = {
        "gradeproxy.task": record.task_id,
        "gradeproxy.run": record.run,
        "gradeproxy.skip": record.skip,
        "gradeproxy.pair_id": record.pair_id,
        "gradeproxy.upstream_failed": record.upstream_failed,
    }
    attributes.update({k: v[:256] for k, v in optional.items() if v})
    if record.client_disconnected:
        attributes["gradeproxy.client_disconnected"] = True
    return attributes


def _status(record: SpanRecord, server: bool) -> Status:
    if record.upstream_failed or record.status >= 500 or (not server and record.status >= 400):
        return Status(StatusCode.ERROR)
    return Status(StatusCode.UNSET)


def _upstream_attributes(
    record: SpanRecord,
    request: Mapping[str, Any] | None,
    rows: Sequence[Mapping[str, Any]],
    call: Mapping[str, Any],
    settings: Tracing,
) -> dict[str, Any]:
    attributes = semconv.request_attributes(request, settings.provider_name)
    url = urlsplit(record.upstream)
    if url.hostname:
        attributes["server.address"] = url.hostname
        attributes["server.port"] = url.port or (443 if url.scheme == "https" else 80)
    if record.status:
        attributes["http.response.status_code"] = record.status
    if record.upstream_failed:
        attributes["error.type"] = record.upstream_failed
    elif record.status >= 400:
        attributes["error.type"] = str(record.status)
    attributes.update(semconv.response_attributes(rows, call))
    if settings.capture_content:
        attributes.update(semconv.content_attributes(request, rows, settings.max_content_chars))
    return attributes


def build(
    record: SpanRecord,
    rows: Sequence[Mapping[str, Any]] | None,
    call: Mapping[str, Any] | None,
    settings: Tracing,
    resource: Resource,
) -> Built:
    """The request's two spans, and its evaluation log records in the ``log`` form."""
    rows = rows or ()
    call = call or {}
    request = semconv.request_json(record.request_body)
    # A span continuing a trace carries its trace state, as the SDK's do (the client's,
    # validated: proxy/telemetry/tracecontext.py), the one the upstream saw beside its parent.
    state = TraceState.from_header([record.tracestate]) if record.tracestate else None
    upstream_context = _context(record, record.upstream_span_id, state)
    server_context = _context(record, record.server_span_id, state)
    parent = None
    if record.parent_span_id is not None:
        parent = SpanContext(record.trace_id, record.parent_span_id, True, _SAMPLED)
    end_ns = record.ns(record.finished)
    as_events = settings.evaluation_events == "span"
    evaluations = semconv.evaluations(rows, None if as_events else call.get("id"))
    events: list[Event] = []
    logs: list[ReadableLogRecord] = []
    if as_events:
        events = [Event(semconv.EVALUATION_EVENT, attrs, end_ns) for attrs in evaluations]
    else:
        span_in = trace.set_span_in_context(trace.NonRecordingSpan(upstream_context))
        logs = [
            ReadableLogRecord(
                LogRecord(
                    timestamp=end_ns,
                    observed_timestamp=end_ns,
                    context=span_in,
                    event_name=semconv.EVALUATION_EVENT,
                    attributes=attrs,
                ),
                resource,
                SCOPE,
            )
            for attrs in evaluations
        ]
    attributes = _upstream_attributes(record, request, rows, call, settings)
    model = attributes.get("gen_ai.request.model")
    links: list[Link] = []
    shadow = record.variant == "shadow"
    if shadow and record.extra.get("link") is not None:
        trace_id, span_id = record.extra["link"]
        links = [Link(SpanContext(trace_id, span_id, False, _SAMPLED))]
    upstream = ReadableSpan(
        name=f"chat {model}" if model else "chat",
        context=upstream_context,
        parent=server_context,
        resource=resource,
        attributes=attributes,
        events=events,
        kind=SpanKind.CLIENT,
        status=_status(record, server=False),
        start_time=record.ns(record.upstream_started),
        end_time=record.ns(record.upstream_finished or record.finished),
        instrumentation_scope=SCOPE,
    )
    server_attributes = _server_attributes(record)
    route = server_attributes["http.route"]
    server = ReadableSpan(
        name=f"shadow {record.method} {route}" if shadow else f"{record.method} {route}",
        context=server_context,
        parent=parent,
        resource=resource,
        attributes=server_attributes,
        links=links,
        kind=SpanKind.INTERNAL if shadow else SpanKind.SERVER,
        status=_status(record, server=True),
        start_time=record.start_ns,
        end_time=end_ns,
        instrumentation_scope=SCOPE,
    )
    return [server, upstream], logs
