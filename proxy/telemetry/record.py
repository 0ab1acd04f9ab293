"""What the hot path keeps of a request for its spans: ids, clocks and references, no parsing.

The handler calls :func:`begin` once (one ``os.urandom`` call, one wall-clock read) and
fills the rest from what it already measures; the spans are built later, in the exporter's
thread, from this record and the graded rows. Nothing here imports OpenTelemetry, so the proxy
runs without the ``otel`` extra while tracing is off.

Sampling is parent-based, as OpenTelemetry's default sampler: a valid client ``traceparent``
decides with its sampled flag, and a trace the proxy starts is kept when the low 64 bits of its
id fall under ``sample_ratio`` (the rule of the SDK's ``TraceIdRatioBased``), so every replica
decides alike. An unsampled request still names the proxy's upstream span in the
``traceparent`` it sends upstream, with the sampled flag off.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from proxy.pipeline.tracecontext import TraceContext

__all__ = ["SpanRecord", "SpanSink", "begin"]

_LOW64 = (1 << 64) - 1


@dataclass(slots=True)
class SpanRecord:
    """One proxied request's span data; the upstream span's id is what the upstream sees."""

    trace_id: int
    server_span_id: int
    upstream_span_id: int
    sampled: bool
    start_ns: int  # wall clock at the handler's start
    started: float  # perf_counter at the handler's start: later clocks are offsets from it
    parent_span_id: int | None = None  # the client's span, when its traceparent was valid
    tracestate: str | None = None
    method: str = ""
    path: str = ""
    route: str = "other"
    request_id: str = ""
    upstream: str = ""
    request_body: bytes = b""  # a reference to the body already read: parsed off the loop
    status: int = 0
    stream: bool = False
    upstream_started: float | None = None  # perf_counter when the upstream request was sent
    upstream_finished: float | None = None  # perf_counter at the upstream's last byte
    finished: float | None = None  # perf_counter when the handler was done
    upstream_failed: str | None = None
    client_disconnected: bool = False
    task_id: str | None = None
    run: str | None = None
    variant: str = "primary"
    skip: str | None = None
    pair_id: str | None = None
    call: dict[str, Any] | None = None  # the parsed copy's id, model and usage, once graded
    extra: dict[str, Any] = field(default_factory=dict)
    done: bool = False  # handed to the exporter (once, whichever path ends the request)

    def __reduce__(self) -> tuple[Callable[..., SpanRecord | None], tuple[Any, ...]]:
        """Pickled (a grade job's wire form to the grading process, proxy/pipeline/child.py),
        a sampled record keeps only its span context, and an unsampled one is nothing (it
        arrives as None): the grading process keeps a job's rows for the exporter only where
        a span arrives (proxy/pipeline/record/recording.py), and the unsampled requests, most
        of them, neither pickle some thirty fields nor send their rows back."""
        if not self.sampled:
            return _nothing, ()
        context = (self.trace_id, self.server_span_id, self.upstream_span_id, True)
        return SpanRecord, (*context, self.start_ns, self.started, self.parent_span_id)

    @property
    def traceparent(self) -> str:
        """The ``traceparent`` sent upstream: this trace, the proxy's upstream span."""
        flags = "01" if self.sampled else "00"
        return f"00-{self.trace_id:032x}-{self.upstream_span_id:016x}-{flags}"

    def ended(
        self, status: int, outcome: Any, skip: str | None, task_id: str | None, pair: str | None
    ) -> None:
        """Fill in what the handler measured (``outcome``: its
        ``proxy.pipeline.forward.Relay``): numbers and references only, nothing parsed.
        Nothing for an unsampled request: its record only named the upstream span."""
        if not self.sampled:
            return
        self.finished = time.perf_counter()
        self.status, self.stream = status or 500, outcome.stream
        self.skip, self.task_id, self.pair_id = skip, task_id, pair
        self.upstream_started = outcome.started_at or None
        self.upstream_finished = outcome.finished_at or None
        self.upstream_failed = outcome.upstream_failed
        self.client_disconnected = outcome.client_disconnected

    def shadow_leg(self, upstream: str, body: bytes, pair_id: str, task_id: str) -> SpanRecord:
        """The record of this request's shadow copy: a trace of its own (sampled alike),
        linked to this request's span (docs/shadow.md)."""
        leg = begin(None, 1.0)
        leg.sampled, leg.variant, leg.run = self.sampled, "shadow", self.run
        leg.method, leg.path, leg.route, leg.request_id = (
            self.method,
            self.path,
            self.route,
            self.request_id,
        )
        leg.upstream, leg.request_body, leg.pair_id, leg.task_id = upstream, body, pair_id, task_id
        leg.extra["link"] = (self.trace_id, self.server_span_id)
        return leg

    def shadow_ended(self, sent: float, finished: float, status: int, stream: bool) -> None:
        """A shadow leg's exchange, read to its last byte (perf_counter readings)."""
        self.upstream_started, self.upstream_finished, self.finished = sent, finished, finished
        self.status, self.stream = status, stream

    def ns(self, perf: float | None) -> int:
        """A perf_counter reading as wall-clock nanoseconds (the handler's start as anchor)."""
        if perf is None:
            return self.start_ns
        return self.start_ns + int((perf - self.started) * 1e9)


def _nothing() -> None:
    return None


class SpanSink(Protocol):
    """Where a finished request's record goes (proxy/telemetry/export.py's ``Telemetry``)."""

    def finish(self, record: SpanRecord, rows: Sequence[Mapping[str, Any]] | None = None) -> None:
        """Hand the record over, with its rows once graded; never waits."""


def _spans(value: int) -> tuple[int, int]:
    """Two span ids: ``value``'s two low 64-bit words."""
    return value >> 64 & _LOW64, value & _LOW64


def begin(trace: TraceContext | None, sample_ratio: float) -> SpanRecord:
    """The record of a request that has just arrived (``trace``: its validated headers).

    Its ids come from one ``os.urandom`` call (the unsampled requests pay for their ids too),
    drawn again in the rare case that one is zero, which is invalid."""
    parent = trace.traceparent if trace is not None else None
    started = time.perf_counter()
    start_ns = time.time_ns()
    if parent is not None:
        _version, trace_hex, span_hex, flags = parent.split("-")[:4]
        server, upstream = 0, 0
        while not (server and upstream):
            server, upstream = _spans(int.from_bytes(os.urandom(16), "big"))
        return SpanRecord(
            trace_id=int(trace_hex, 16),
            server_span_id=server,
            upstream_span_id=upstream,
            sampled=bool(int(flags, 16) & 1),
            start_ns=start_ns,
            started=started,
            parent_span_id=int(span_hex, 16),
            tracestate=trace.tracestate if trace is not None else None,
        )
    trace_id, server, upstream = 0, 0, 0
    while not (trace_id and server and upstream):
        ids = int.from_bytes(os.urandom(32), "big")  # the trace id, then the two span ids
        trace_id, (server, upstream) = ids >> 128, _spans(ids)
    return SpanRecord(
        trace_id=trace_id,
        server_span_id=server,
        upstream_span_id=upstream,
        sampled=(trace_id & _LOW64) < sample_ratio * 2**64,
        start_ns=start_ns,
        started=started,
    )
