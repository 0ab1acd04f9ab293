"""The exporter: finished requests leave the event loop through one bounded queue.

On the loop, :meth:`Telemetry.finish` is one ``put_nowait`` of a sampled request's record (and
its graded rows; an unsampled request has no record and never gets here): a full queue drops
the request, counted, and never waits. One thread takes the records off, builds their spans
(proxy/telemetry/spans.py), batches them and exports them over OTLP/HTTP (protobuf): spans
encoded by proxy/telemetry/otlp.py and sent by the SDK's exporter, log records by the SDK's
own, both reading the ``OTEL_EXPORTER_OTLP_*`` variables. A collector that is slow, down,
refusing or answering 503 costs that thread its export timeout per batch (the SDK retries
within it), and costs the client nothing; what a
failed export carried is counted as dropped.

The SDK's own ``BatchSpanProcessor`` is not used: it takes built spans (so they would be built
on the loop), drops the *oldest* span when its queue is full and reports drops only through
OpenTelemetry's own metrics, not through the proxy's ``/metrics``. The batching rules are the
same (``max_export_batch_size``, ``schedule_delay_s``).

Shutdown is bounded: :meth:`Telemetry.shutdown` waits at most ``shutdown_timeout_s`` for the
last batches, then stops the exporter (which cuts its retry back-off short) and counts what
never left as dropped (``reason="shutdown"``). The thread is a daemon: an export still blocked
on a socket never holds the process past its exit.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from proxy.config.tracing import Tracing
from proxy.telemetry.annotations import PhoenixAnnotations, span_annotations
from proxy.telemetry.otlp_http import span_exporter as otlp_span_exporter
from proxy.telemetry.record import SpanRecord, begin
from proxy.telemetry.semconv import MAX_PARSED_BODY
from proxy.telemetry.spans import build
from proxy.telemetry.tracecontext import TraceContext

__all__ = ["DropReason", "Signal", "Telemetry"]

Signal = Literal["spans", "logs", "annotations"]
DropReason = Literal["queue_full", "export_failed", "shutdown"]
OnDrop = Callable[[Signal, DropReason, int], None]
OnExport = Callable[[Signal, int], None]
Item = tuple[SpanRecord, Sequence[Mapping[str, Any]] | None, Mapping[str, Any] | None]

log = logging.getLogger("gradeproxy.telemetry")
SPANS_PER_REQUEST = 2  # the server span and the upstream call


def _signal_url(base: str | None, path: str) -> str | None:
    return f"{base.rstrip('/')}/{path}" if base else None


def evaluation_count(rows: Sequence[Mapping[str, Any]] | None) -> int:
    """How many evaluation results ``rows`` make (one per check column)."""
    if not rows:
        return 0
    return sum(len(row.get("columns") or row.get("checks") or ()) for row in rows)


class Telemetry:
    """The request spans' way out: :meth:`begin` and :meth:`finish` on the loop, the rest in
    one thread. ``on_drop``/``on_export`` count in the proxy's metrics (thread-safe)."""

    def __init__(
        self,
        settings: Tracing,
        on_drop: OnDrop,
        on_export: OnExport | None = None,
        *,
        span_exporter: SpanExporter | None = None,
        log_exporter: LogRecordExporter | None = None,
    ) -> None:
        self.settings = settings
        self._on_drop = on_drop
        self._on_export = on_export or (lambda signal, count: None)
        self.resource = Resource.create(
            {
                "service.name": settings.service_name
                or os.environ.get("OTEL_SERVICE_NAME")
                or "gradeproxy"
            }
        )
        self._spans = span_exporter or otlp_span_exporter(
            _signal_url(settings.endpoint, "v1/traces"), settings.export_timeout_s
        )
        self._logs: LogRecordExporter | None = None
        if settings.evaluation_events == "log":
            self._logs = log_exporter or OTLPLogExporter(
                endpoint=_signal_url(settings.endpoint, "v1/logs"),
                timeout=settings.export_timeout_s,
            )
        self._phoenix: PhoenixAnnotations | None = None
        if settings.phoenix_url is not None:
            self._phoenix = PhoenixAnnotations(
                settings.phoenix_url, settings.export_timeout_s or 10.0
            )
        self._queue: queue.Queue[Item | None] = queue.Queue(maxsize=settings.max_queue_size)
        self._lock = threading.Lock()
        # Built, not yet exported.
        self._held: dict[Signal, int] = {"spans": 0, "logs": 0, "annotations": 0}
        self._abandoned = False  # shutdown gave up waiting: what is held was counted
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="gradeproxy-otel", daemon=True)

    # -- on the event loop -------------------------------------------------------------------

    def begin(self, trace: TraceContext | None) -> tuple[str, SpanRecord | None]:
        """The ``traceparent`` for the upstream, and the record of a sampled request."""
        return begin(trace, self.settings.sample_ratio)

    def finish(
        self,
        record: SpanRecord,
        rows: Sequence[Mapping[str, Any]] | None = None,
        call: Mapping[str, Any] | None = None,
    ) -> None:
        """Hand a finished request (and its rows, once graded) to the exporter; never waits.
        ``call``: the response's facts, else those the grade queue left on the record."""
        call = record.call if call is None else call
        if record.done:
            return
        record.done = True
        if self._closing:
            self._drop_item(rows, "shutdown")
            return
        if len(record.request_body) > MAX_PARSED_BODY:  # never read: never held in the queue
            record.request_body = b""
        try:
            self._queue.put_nowait((record, rows, call))
        except queue.Full:
            self._drop_item(rows, "queue_full")

    def _drop_item(self, rows: Sequence[Mapping[str, Any]] | None, reason: DropReason) -> None:
        self._on_drop("spans", reason, SPANS_PER_REQUEST)
        count = evaluation_count(rows)
        if self._logs is not None and count:
            self._on_drop("logs", reason, count)
        if self._phoenix is not None and count:
            self._on_drop("annotations", reason, count)

    # -- lifetime ----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def shutdown(self) -> None:
        """Export what is queued within ``shutdown_timeout_s``; count the rest as dropped.

        Blocking (call it off the loop): it joins the exporter's thread for at most the timeout.
        """
        self._closing = True
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)  # a full queue: the thread sees `_closing` instead
        deadline = time.monotonic() + self.settings.shutdown_timeout_s
        self._thread.join(max(deadline - time.monotonic(), 0.0))
        if self._thread.is_alive():
            with self._lock:
                self._abandoned = True
                held = dict(self._held)
            for signal, count in held.items():
                if count:
                    self._on_drop(signal, "shutdown", count)
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    self._drop_item(item[1], "shutdown")
            log.warning("otel_export_abandoned_at_shutdown")
        for exporter in (self._spans, self._logs):
            if exporter is not None:
                with contextlib.suppress(Exception):
                    exporter.shutdown()

    # -- the exporter's thread ---------------------------------------------------------------

    def _run(self) -> None:
        spans: list[ReadableSpan] = []
        logs: list[ReadableLogRecord] = []
        notes: list[dict[str, Any]] = []
        due: float | None = None
        batch = self.settings.max_export_batch_size
        while True:
            wait = self.settings.schedule_delay_s if due is None else due - time.monotonic()
            stop = False
            try:
                item = self._queue.get(timeout=max(wait, 0.0))
                stop = item is None
            except queue.Empty:
                item = None
                stop = self._closing
            if item is not None:
                self._build(item, spans, logs, notes)
                due = due or time.monotonic() + self.settings.schedule_delay_s
            if (
                stop
                or len(spans) >= batch
                or len(logs) >= batch
                or (due is not None and time.monotonic() >= due)
            ):
                self._export(spans, logs, notes, batch)
                spans, logs, notes, due = [], [], [], None
            if stop:
                return

    def _build(
        self,
        item: Item,
        spans: list[ReadableSpan],
        logs: list[ReadableLogRecord],
        notes: list[dict[str, Any]],
    ) -> None:
        record, rows, call = item
        try:
            built_spans, built_logs = build(record, rows, call, self.settings, self.resource)
            built_notes = span_annotations(record, rows or ()) if self._phoenix is not None else []
        except Exception:  # a span that cannot be built must not end the thread
            log.exception("otel_span_build_failed")
            self._drop_item(rows, "export_failed")
            return
        spans.extend(built_spans)
        logs.extend(built_logs)
        notes.extend(built_notes)
        with self._lock:
            self._held["spans"] += len(built_spans)
            self._held["logs"] += len(built_logs)
            self._held["annotations"] += len(built_notes)

    def _export(
        self,
        spans: list[ReadableSpan],
        logs: list[ReadableLogRecord],
        notes: list[dict[str, Any]],
        batch: int,
    ) -> None:
        exported = True
        for start in range(0, len(spans), batch):
            chunk = spans[start : start + batch]
            sent = self._send_spans(chunk)
            exported = exported and sent
            self._settle("spans", len(chunk), sent)
        if self._phoenix is not None:  # after their spans: Phoenix annotates spans it holds
            for start in range(0, len(notes), batch):
                some = notes[start : start + batch]
                self._settle("annotations", len(some), exported and self._phoenix.send(some))
        if self._logs is not None:
            for start in range(0, len(logs), batch):
                part = logs[start : start + batch]
                self._settle("logs", len(part), self._send_logs(part))

    def _send_spans(self, chunk: list[ReadableSpan]) -> bool:
        try:
            return self._spans.export(chunk) is SpanExportResult.SUCCESS
        except Exception:  # the SDK's exporter logs its own failures
            return False

    def _send_logs(self, chunk: list[ReadableLogRecord]) -> bool:
        assert self._logs is not None
        try:
            return self._logs.export(chunk) is LogRecordExportResult.SUCCESS
        except Exception:
            return False

    def _settle(self, signal: Signal, count: int, ok: bool) -> None:
        with self._lock:
            self._held[signal] -= count
            if self._abandoned:  # shutdown counted these already
                return
        if ok:
            self._on_export(signal, count)
        else:
            self._on_drop(signal, "export_failed", count)
