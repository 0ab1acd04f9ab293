"""The span exporter on the SDK's public ``SpanExporter`` interface: the OTLP variables it
reads (as the specification names them), what reaches a real receiver on loopback, and the
retry policy (429/502/503/504 and refused connections retried within the timeout; other
statuses not; nothing after shutdown)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from proxy.telemetry import Tracing
from proxy.telemetry.otlp import encode_spans
from proxy.telemetry.otlp_http import OtlpHttpSpanExporter, OtlpSettings
from proxy.telemetry.spans import build
from tests.support.otlp import receiver, refused_port
from tests.support.spans import ROW, record


def spans() -> list[ReadableSpan]:
    settings = Tracing(enabled=True)
    resource = Resource.create({"service.name": "gradeproxy-test"})
    built, _ = build(record(None), [ROW], {"id": "chatcmpl-1"}, settings, resource)
    return list(built)


@pytest.mark.parametrize(
    ("endpoint", "environ", "expected"),
    [
        pytest.param(None, {}, {"endpoint": "http://localhost:4318/v1/traces",
                                "timeout_s": 10.0, "compression": "none"}, id="defaults"),
        pytest.param(None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"},
                     {"endpoint": "http://c:4318/v1/traces"}, id="base_gets_the_signal_path"),
        pytest.param(None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
                            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:1/custom"},
                     {"endpoint": "http://t:1/custom"}, id="signal_endpoint_as_is"),
        pytest.param("http://arg/v1/traces", {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t"},
                     {"endpoint": "http://arg/v1/traces"}, id="argument_wins"),
        pytest.param(None, {"OTEL_EXPORTER_OTLP_HEADERS": "api-key=a%20b,x=1"},
                     {"headers": {"api-key": "a b", "x": "1"}}, id="headers_url_decoded"),
        pytest.param(None, {"OTEL_EXPORTER_OTLP_HEADERS": "x=1",
                            "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "y=2"},
                     {"headers": {"y": "2"}}, id="signal_headers_replace"),
        pytest.param(None, {"OTEL_EXPORTER_OTLP_TIMEOUT": "2.5"}, {"timeout_s": 2.5},
                     id="timeout_seconds"),
        pytest.param(None, {"OTEL_EXPORTER_OTLP_TIMEOUT": "soon"}, {"timeout_s": 10.0},
                     id="bad_timeout_is_the_default"),
        pytest.param(None, {"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "GZIP"},
                     {"compression": "gzip"}, id="compression"),
        pytest.param(None, {"OTEL_EXPORTER_OTLP_COMPRESSION": "brotli"},
                     {"compression": "none"}, id="unknown_compression_is_none"),
        pytest.param(None, {"OTEL_EXPORTER_OTLP_CERTIFICATE": "/ca.pem",
                            "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": "/c.pem",
                            "OTEL_EXPORTER_OTLP_CLIENT_KEY": "/c.key"},
                     {"verify": "/ca.pem", "cert": ("/c.pem", "/c.key")}, id="mtls_files"),
    ],
)  # fmt: skip
def test_settings_come_from_the_otlp_variables(
    endpoint: str | None, environ: dict[str, str], expected: dict[str, Any]
) -> None:
    settings = OtlpSettings.resolve(endpoint, None, environ)
    assert {name: getattr(settings, name) for name in expected} == expected


def test_it_is_an_sdk_span_exporter() -> None:
    exporter = OtlpHttpSpanExporter("http://127.0.0.1:9/v1/traces", 1.0, environ={})
    assert isinstance(exporter, SpanExporter)
    assert exporter.force_flush()
    exporter.shutdown()


@pytest.mark.parametrize("compression", ["none", "gzip", "deflate"])
async def test_spans_reach_a_receiver_as_encoded(compression: str) -> None:
    batch = spans()
    environ = {"OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20k",
               "OTEL_EXPORTER_OTLP_COMPRESSION": compression}  # fmt: skip
    async with receiver() as otlp:
        exporter = OtlpHttpSpanExporter(f"{otlp.endpoint}/v1/traces", 5.0, environ=environ)
        result = await asyncio.to_thread(exporter.export, batch)
        exporter.shutdown()
    assert result is SpanExportResult.SUCCESS
    [headers] = otlp.headers
    assert headers["content-type"] == "application/x-protobuf"
    assert headers["authorization"] == "Bearer k"
    assert headers.get("content-encoding", "none") == compression
    assert [span.name for span in otlp.spans] == [span.name for span in batch]
    sent = ExportTraceServiceRequest.FromString(encode_spans(batch))
    assert [s.span_id for s in otlp.spans] == [
        s.span_id for r in sent.resource_spans for sc in r.scope_spans for s in sc.spans
    ]


async def test_an_unavailable_collector_is_retried_within_the_timeout() -> None:
    async with receiver("unavailable") as otlp:
        exporter = OtlpHttpSpanExporter(f"{otlp.endpoint}/v1/traces", 2.5, environ={})
        result = await asyncio.to_thread(exporter.export, spans())
        exporter.shutdown()
    assert result is SpanExportResult.FAILURE
    assert otlp.requests >= 2  # the first try, then at least one retry after ~1 s


async def test_a_refused_connection_fails_within_the_timeout() -> None:
    exporter = OtlpHttpSpanExporter(f"http://127.0.0.1:{refused_port()}/v1/traces", 1.5, environ={})
    result = await asyncio.wait_for(asyncio.to_thread(exporter.export, spans()), 10)
    assert result is SpanExportResult.FAILURE


async def test_a_client_error_is_not_retried() -> None:
    async with receiver() as otlp:
        # The receiver has no such path: a 404, which no retry would change.
        exporter = OtlpHttpSpanExporter(f"{otlp.endpoint}/v1/nowhere", 5.0, environ={})
        result = await asyncio.to_thread(exporter.export, spans())
        exporter.shutdown()
    assert result is SpanExportResult.FAILURE
    assert otlp.requests == 0  # the 404 came from the router: nothing was taken


async def test_nothing_is_sent_after_shutdown() -> None:
    async with receiver() as otlp:
        exporter = OtlpHttpSpanExporter(f"{otlp.endpoint}/v1/traces", 5.0, environ={})
        exporter.shutdown()
        result = await asyncio.to_thread(exporter.export, spans())
    assert (result, otlp.requests) == (SpanExportResult.FAILURE, 0)
