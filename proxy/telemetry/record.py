"""What the hot path keeps of a request for its spans: ids, clocks and references, no parsing.

The handler calls :func:`begin` once: one ``os.urandom`` call gives the ids, as hex, and the
``traceparent`` to send upstream is a string joined from them. Only a sampled request gets a
:class:`SpanRecord` (two clock reads, the ids as integers); the handler fills it from what it
already measures, and the spans are built later, in the exporter's thread, from it and the
graded rows. An unsampled request, most of them at the default ratio, gets no record at all: it
pays for its ids and its header and nothing more (bench/otel_bench.py measures both paths).
Nothing here imports OpenTelemetry, so the proxy runs without the ``otel`` extra.

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

from proxy.telemetry.tracecontext import ZERO_SPAN, ZERO_TRACE, TraceContext

__all__ = ["SpanRecord", "SpanSink", "begin"]


@dataclass(slots=True)
class SpanRecord:
    """One sampled request's span data; the upstream span's id is what the upstream saw."""

    trace_id: int
    server_span_id: int
    upstream_span_id: int
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

    def __reduce__(self) -> tuple[Callable[..., SpanRecord], tuple[Any, ...]]:
        """Pickled (a grade job's wire form to the grading process, proxy/pipeline/child.py),
        a record keeps only its span context: the grading process needs no more than to know
        that a span will carry the job's rows (proxy/pipeline/record/recording.py), and must
        not get some thirty fields and the request body again."""
        context = (self.trace_id, self.server_span_id, self.upstream_span_id)
        return SpanRecord, (*context, self.start_ns, self.started, self.parent_span_id)

    @property
    def traceparent(self) -> str:
        """The ``traceparent`` sent upstream: this trace, the proxy's upstream span."""
        return f"00-{self.trace_id:032x}-{self.upstream_span_id:016x}-01"

    def ended(
        self, status: int, outcome: Any, skip: str | None, task_id: str | None, pair: str | None
    ) -> None:
        """Fill in what the handler measured (``outcome``: its
        ``proxy.pipeline.forward.Relay``): numbers and references only, nothing parsed."""
        self.finished = time.perf_counter()
        self.status, self.stream = status or 500, outcome.stream
        self.skip, self.task_id, self.pair_id = skip, task_id, pair
        self.upstream_started = outcome.started_at or None
        self.upstream_finished = outcome.finished_at or None
        self.upstream_failed = outcome.upstream_failed
        self.client_disconnected = outcome.client_disconnected

    def shadow_leg(self, upstream: str, body: bytes, pair_id: str, task_id: str) -> SpanRecord:
        """The record of this request's shadow copy: a trace of its own (sampled, as this
        one is), linked to this request's span (docs/shadow.md)."""
        leg = begin(None, 1.0)[1]
        assert leg is not None  # a ratio of 1 samples every trace
        leg.variant, leg.run = "shadow", self.run
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


class SpanSink(Protocol):
    """Where a finished request's record goes (proxy/telemetry/export.py's ``Telemetry``)."""

    def finish(self, record: SpanRecord, rows: Sequence[Mapping[str, Any]] | None = None) -> None:
        """Hand the record over, with its rows once graded; never waits."""


def begin(trace: TraceContext | None, sample_ratio: float) -> tuple[str, SpanRecord | None]:
    """The ``traceparent`` to send upstream for a request that has just arrived (``trace``:
    its validated headers), and its record when it is sampled.

    Its ids are one ``os.urandom`` call as hex (the trace's, unless it continues the client's,
    then the server span's and the upstream span's), drawn again in the rare case that one is
    zero, which is invalid."""
    parent = trace.traceparent if trace is not None else None
    if parent is not None:
        _version, trace_hex, parent_hex, flags = parent.split("-")[:4]
        while True:
            ids = os.urandom(16).hex()
            server, upstream = ids[:16], ids[16:]
            if server != ZERO_SPAN and upstream != ZERO_SPAN:
                break
        sampled = bool(int(flags, 16) & 1)
    else:
        parent_hex = None
        while True:
            ids = os.urandom(32).hex()
            trace_hex, server, upstream = ids[:32], ids[32:48], ids[48:]
            if trace_hex != ZERO_TRACE and server != ZERO_SPAN and upstream != ZERO_SPAN:
                break
        sampled = int(ids[16:32], 16) < sample_ratio * 2**64
    if not sampled:
        return f"00-{trace_hex}-{upstream}-00", None
    record = SpanRecord(
        trace_id=int(trace_hex, 16),
        server_span_id=int(server, 16),
        upstream_span_id=int(upstream, 16),
        start_ns=time.time_ns(),
        started=time.perf_counter(),
        parent_span_id=None if parent_hex is None else int(parent_hex, 16),
        tracestate=trace.tracestate if trace is not None and parent_hex is not None else None,
    )
    return f"00-{trace_hex}-{upstream}-01", record
