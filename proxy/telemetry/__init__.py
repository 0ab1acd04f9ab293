"""OpenTelemetry export (issue 20, docs/tracing.md): one span per proxied request, a child span
for the upstream call, one ``gen_ai.evaluation.result`` per graded check column.

Off by default and optional: the ``otel`` extra brings the SDK. This package's top level, the
config section (``settings``) and the hot path's record (``record``) import no OpenTelemetry;
``export`` and ``spans`` do, and are imported only when ``tracing.enabled`` is on.
"""

from proxy.config.tracing import EvaluationForm, Tracing, tracing_problems
from proxy.telemetry.record import SpanRecord, begin

__all__ = ["EvaluationForm", "SpanRecord", "Tracing", "begin", "tracing_problems"]
