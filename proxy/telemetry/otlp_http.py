"""OTLP/HTTP export of the proxy's spans, on the SDK's public ground only.

The SDK's own ``OTLPSpanExporter`` encodes with its slow message-object encoder, and the fast
encoder (proxy/telemetry/otlp.py) could only be plugged into it through private attributes
(``_client``, ``_shutdown``, ``_max_request_size``), which any minor SDK release may rename.
This exporter implements the public ``SpanExporter`` interface itself: :func:`encode_spans`'s
bytes, POSTed with ``requests`` (a keep-alive session) from the telemetry thread.

What it keeps of the SDK's exporter, read from the variables the OTLP exporter specification
names (not from the SDK's code): the endpoint (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` as is,
else ``OTEL_EXPORTER_OTLP_ENDPOINT`` plus ``v1/traces``), headers, timeout (seconds, as the
Python SDK reads it), ``gzip``/``deflate`` compression, the CA bundle and client certificate,
and the retry policy (429, 502, 503, 504 and connection failures retried with exponential
backoff and jitter within the timeout). A batch over 64 MiB encoded is refused, as the SDK
refuses it. It must never raise out of :meth:`export`: a failure is ``FAILURE``, logged once.
"""

from __future__ import annotations

import gzip
import logging
import os
import random
import threading
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import requests
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.util.re import parse_env_headers

from proxy.telemetry.otlp import encode_spans

__all__ = ["MAX_REQUEST_BYTES", "OtlpHttpSpanExporter", "OtlpSettings", "span_exporter"]

log = logging.getLogger("gradeproxy.otlp")

DEFAULT_ENDPOINT: Final = "http://localhost:4318/"
DEFAULT_TIMEOUT_S: Final = 10.0
MAX_REQUEST_BYTES: Final = 64 * 1024 * 1024  # encoded, before compression (the SDK's limit)
RETRYABLE: Final = frozenset({429, 502, 503, 504})  # the OTLP/HTTP specification's list
_COMPRESSIONS: Final = ("none", "gzip", "deflate")


def _env(environ: Mapping[str, str], signal_name: str, general: str) -> str | None:
    """The signal's variable, else the general one (empty means unset, as the SDK reads it)."""
    return environ.get(signal_name) or environ.get(general) or None


@dataclass(frozen=True, slots=True)
class OtlpSettings:
    """Where and how the traces go: the constructor's arguments, else the environment."""

    endpoint: str
    timeout_s: float
    headers: dict[str, str] = field(default_factory=dict)
    compression: str = "none"
    verify: bool | str = True  # a CA bundle's path, or True for the system's
    cert: tuple[str, str] | str | None = None  # the client certificate (and key) for mTLS

    @classmethod
    def resolve(
        cls,
        endpoint: str | None,
        timeout_s: float | None,
        environ: Mapping[str, str] | None = None,
    ) -> OtlpSettings:
        env = os.environ if environ is None else environ
        if endpoint is None:
            endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or None
        if endpoint is None:
            base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or DEFAULT_ENDPOINT
            endpoint = f"{base.removesuffix('/')}/v1/traces"
        if timeout_s is None:
            raw = _env(env, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")
            try:
                timeout_s = float(raw) if raw else DEFAULT_TIMEOUT_S
            except ValueError:
                log.warning("otlp_timeout_invalid", extra={"value": raw})
                timeout_s = DEFAULT_TIMEOUT_S
        text = _env(env, "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")
        headers = parse_env_headers(text or "", liberal=True)
        compression = (
            (
                _env(env, "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION")
                or "none"
            )
            .strip()
            .lower()
        )
        if compression not in _COMPRESSIONS:
            log.warning("otlp_compression_unsupported", extra={"value": compression})
            compression = "none"
        ca = _env(env, "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "OTEL_EXPORTER_OTLP_CERTIFICATE")
        cert = _env(
            env,
            "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE",
            "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
        )
        key = _env(env, "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", "OTEL_EXPORTER_OTLP_CLIENT_KEY")
        return cls(
            endpoint=endpoint,
            timeout_s=timeout_s,
            headers=dict(headers),
            compression=compression,
            verify=ca or True,
            cert=(cert, key) if cert and key else cert,
        )


class OtlpHttpSpanExporter(SpanExporter):
    """The proxy's span exporter: its own encoder, a ``requests`` session, the spec's retries."""

    def __init__(
        self,
        endpoint: str | None = None,
        timeout_s: float | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        session: requests.Session | None = None,
    ) -> None:
        self.settings = OtlpSettings.resolve(endpoint, timeout_s, environ)
        self._session = session or requests.Session()
        self._headers = {
            **self.settings.headers,
            "Content-Type": "application/x-protobuf",
            "User-Agent": "gradeproxy-otlp",
        }
        if self.settings.compression != "none":
            self._headers["Content-Encoding"] = self.settings.compression
        self._stopped = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._stopped.is_set():
            return SpanExportResult.FAILURE
        try:
            data = encode_spans(spans)
        except Exception:  # an attribute of a type OTLP has no value for
            log.exception("otlp_encode_failed")
            return SpanExportResult.FAILURE
        if len(data) > MAX_REQUEST_BYTES:
            log.warning("otlp_batch_too_large", extra={"bytes": len(data)})
            return SpanExportResult.FAILURE
        return self._send(self._compress(data))

    def _compress(self, data: bytes) -> bytes:
        if self.settings.compression == "gzip":
            return gzip.compress(data, compresslevel=6)
        if self.settings.compression == "deflate":
            return zlib.compress(data)
        return data

    def _send(self, body: bytes) -> SpanExportResult:
        settings = self.settings
        deadline = time.monotonic() + settings.timeout_s
        why = f"no answer within {settings.timeout_s:g} s"
        for attempt in range(64):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                response = self._session.post(
                    settings.endpoint,
                    data=body,
                    headers=self._headers,
                    timeout=remaining,
                    verify=settings.verify,
                    cert=settings.cert,
                )
            except requests.RequestException as exc:  # refused, reset, timed out: retried
                why, retry = str(exc), True
            else:
                if response.ok:
                    return SpanExportResult.SUCCESS
                why = f"{response.status_code} {response.reason}"
                retry = response.status_code in RETRYABLE
            if not retry:
                break
            # Exponential backoff with jitter (1 s, 2 s, 4 s, ... times 0.8-1.2), never past
            # the deadline; shutdown ends the wait at once.
            delay = min(2**attempt * random.uniform(0.8, 1.2), deadline - time.monotonic())
            if delay <= 0 or self._stopped.wait(delay):
                break
        log.warning("otlp_export_failed", extra={"endpoint": settings.endpoint, "error": why})
        return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self._stopped.set()
        self._session.close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True  # nothing is held here: each export is sent before it returns


def span_exporter(endpoint: str | None, timeout_s: float | None) -> SpanExporter:
    """The proxy's span exporter for ``endpoint`` (None: the ``OTEL_EXPORTER_OTLP_*``
    variables decide)."""
    return OtlpHttpSpanExporter(endpoint, timeout_s)
