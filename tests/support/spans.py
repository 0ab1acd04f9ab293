"""A graded request's span record and rows, and a drop counter: what the exporter tests feed
the exporter (tests/proxy/telemetry)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from proxy.telemetry import SpanRecord, begin
from proxy.telemetry.tracecontext import trace_context

BODY = b'{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"hi"}],"temperature":0.2}'


def column(name: str, passed: bool | None, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "passed": passed,
        "score": None,
        "reason": "",
        "reason_code": "ok",
        "error": None,
        **extra,
    }


ROW: dict[str, Any] = {
    "kind": "answer",
    "model": "gpt-4.1-mini-2025-04-14",
    "choice": 0,
    "finish_reason": "tool_calls",
    "checks": [
        column(
            "call",
            False,
            reason="value differs",
            reason_code="value_mismatch",
            details={"path": "arguments.unit"},
        ),
        column("schema", True),
        column("legacy", False, reason_code="stale_schema", details={"staleSchemaUsed": True}),
        column("judge", None, reason_code="judge_unavailable", error="judge timed out"),
        column("similar", True, score=0.875),
    ],
}


def record(traceparent: str | None = None) -> SpanRecord:
    """A sampled request's record, filled as the handler fills it."""
    headers = {"traceparent": traceparent} if traceparent else {}
    _, span = begin(trace_context(headers), 1.0)
    assert span is not None, "an unsampled request has no record"
    span.method, span.path, span.route = "POST", "/v1/chat/completions", "chat_completions"
    span.request_id, span.upstream, span.request_body = "req-1", "http://127.0.0.1:9/v1", BODY
    span.status, span.task_id, span.run = 200, "weather.single", "nightly"
    span.upstream_started = span.started + 0.001
    span.upstream_finished = span.finished = span.started + 0.01
    return span


class Drops:
    def __init__(self) -> None:
        self.dropped: Counter[tuple[str, str]] = Counter()
        self.exported: Counter[str] = Counter()

    def drop(self, signal: str, reason: str, count: int) -> None:
        self.dropped[signal, reason] += count

    def export(self, signal: str, count: int) -> None:
        self.exported[signal] += count
