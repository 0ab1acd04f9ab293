"""The ``tracing`` config section: off by default, and importable without the ``otel`` extra.

The exporter's destination is not here: the standard ``OTEL_EXPORTER_OTLP_*`` environment
variables choose it (endpoint, headers, timeout, compression, certificates), as every
OpenTelemetry SDK reads them, so a deployment that already sets them for other services needs
nothing new. ``endpoint`` is only for a config file that wants to name it itself.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

__all__ = ["EvaluationForm", "Tracing", "tracing_problems"]

# span: `gen_ai.evaluation.result` span events on the evaluated call's span (Phoenix, Langfuse,
# Tempo, Jaeger, Datadog APM read them); log: OTLP log records with that event name, parented
# to the span by trace and span id (the 2026 conventions' form; needs a logs pipeline).
EvaluationForm = Literal["span", "log"]


@dataclass(frozen=True, slots=True)
class Tracing:
    """OpenTelemetry export of one span per request (docs/tracing.md); needs ``[otel]``."""

    enabled: bool = False
    # Of traces the proxy starts; a client's sampled flag decides for the traces it continues.
    # Not 1.0: the SDK's encoder costs a few hundred microseconds per request (docs/tracing.md).
    sample_ratio: float = 0.05
    service_name: str | None = None  # unset: OTEL_SERVICE_NAME, else "gradeproxy"
    # A base URL like OTEL_EXPORTER_OTLP_ENDPOINT (the signal paths /v1/traces, /v1/logs are
    # added); unset: the OTEL_EXPORTER_OTLP_* variables, else http://localhost:4318.
    endpoint: str | None = None
    # `gen_ai.provider.name`: the proxy speaks OpenAI's wire format to any upstream.
    provider_name: str = "openai"
    # Prompt and answer text on the spans (the conventions make content opt-in), each cut here.
    capture_content: bool = False
    max_content_chars: int = 4096
    evaluation_events: EvaluationForm = "span"
    # An Arize Phoenix base URL (http://phoenix:6006): evaluation results are also written as
    # its span annotations, which its evaluation columns read (proxy/telemetry/annotations.py).
    phoenix_url: str | None = None
    max_queue_size: int = 2048  # finished requests waiting for export; more are dropped
    max_export_batch_size: int = 512  # spans (or log records) per export request
    schedule_delay_s: float = 1.0  # the longest a finished span waits for its batch
    # One export request, its retries included; unset: OTEL_EXPORTER_OTLP_TIMEOUT, else 10 s.
    export_timeout_s: float | None = None
    shutdown_timeout_s: float = 5.0  # the most shutdown waits for the last batches


def _sdk_installed() -> bool:
    try:  # the parent package missing raises rather than answering None
        return importlib.util.find_spec("opentelemetry.sdk") is not None
    except ModuleNotFoundError:
        return False


def _http_url(url: str | None) -> bool:
    """Unset, or a URL the exporters can send to: ``http(s)://host[:port]...``, refused here
    rather than at the first export (``http://[::1`` or ``http://h:99999`` raise in urllib)."""
    if url is None:
        return True
    try:
        parts = urlsplit(url)
        _ = parts.port  # ValueError for a port out of range or not a number
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def tracing_problems(tracing: Tracing) -> list[str]:
    """What is wrong with a ``tracing`` section, each ``field: message``; empty: usable."""
    checks = [
        (0.0 <= tracing.sample_ratio <= 1.0, "sample_ratio: must be within 0..1"),
        (
            tracing.service_name is None or tracing.service_name.strip() != "",
            "service_name: must not be empty",
        ),
        (tracing.max_content_chars >= 0, "max_content_chars: must be >= 0"),
        (tracing.max_queue_size >= 1, "max_queue_size: must be >= 1"),
        (tracing.max_export_batch_size >= 1, "max_export_batch_size: must be >= 1"),
        (tracing.schedule_delay_s > 0, "schedule_delay_s: must be > 0"),
        (
            tracing.export_timeout_s is None or tracing.export_timeout_s > 0,
            "export_timeout_s: must be > 0",
        ),
        (tracing.shutdown_timeout_s >= 0, "shutdown_timeout_s: must be >= 0"),
        (_http_url(tracing.endpoint), "endpoint: must be an http(s) URL with a host"),
        (_http_url(tracing.phoenix_url), "phoenix_url: must be an http(s) URL with a host"),
    ]
    if tracing.enabled and not _sdk_installed():
        checks.append((False, "enabled: needs the otel extra: pip install 'gradeproxy[otel]'"))
    return [f"tracing.{message}" for ok, message in checks if not ok]
