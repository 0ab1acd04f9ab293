"""OTLP/protobuf for the proxy's spans, written directly as protobuf's wire format.

The SDK's encoder (``opentelemetry.exporter.otlp.proto.common``) builds a protobuf message
object for every span, attribute, value and event, and hashes each span's resource (a JSON dump
of its attributes) to group them: most of what tracing costs at 100% sampling
(`python -m bench otel` prints both encoders' figures; docs/performance.md).
This module writes the same ``ExportTraceServiceRequest`` bytes with a few byte joins per field:
every span the proxy exports shares one resource and one scope, so those are encoded once per
batch. The output is checked against the SDK's encoder by parsing both (tests/proxy/telemetry/
test_otlp.py, a property test over attribute values of every type the SDK takes).

Field numbers are those of ``opentelemetry/proto/trace/v1/trace.proto`` and ``common.proto``
(opentelemetry-proto 1.x, wire-stable). Only what the proxy's spans use is written: no dropped
counts (the proxy never drops attributes).

It only encodes: proxy/telemetry/otlp_http.py sends the bytes (its exporter implements the
SDK's public ``SpanExporter`` interface, so no SDK release can unplug the encoder).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanKind

from grader.json import well_formed

__all__ = ["encode_spans"]

log = logging.getLogger("gradeproxy.telemetry")

_DOUBLE = struct.Struct("<d")
_FIXED64 = struct.Struct("<Q")
_FIXED32 = struct.Struct("<I")
_KIND = {
    SpanKind.INTERNAL: 1,
    SpanKind.SERVER: 2,
    SpanKind.CLIENT: 3,
    SpanKind.PRODUCER: 4,
    SpanKind.CONSUMER: 5,
}
# SpanFlags: the context's is_remote is known (0x100), and set (0x200).
_HAS_IS_REMOTE = 0x100
_IS_REMOTE = 0x200
_SMALL = [bytes((n,)) for n in range(128)]
_KEYS: dict[str, bytes] = {}
_MAX_KEYS = 4096  # a cache of the keys' encodings, bounded whatever keys arrive


def _varint(value: int) -> bytes:
    if value < 128:
        return _SMALL[value]
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _text(text: str) -> bytes:
    """A name, a status message or a trace state as UTF-8. A lone surrogate (a client's model
    parsed by the stdlib's JSON parser, in a span's name) becomes U+FFFD: the SDK's encoder
    would raise and lose the whole batch, every other request's spans with it."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return well_formed(text).encode()


def _delimited(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2): its tag, its length, its bytes."""
    return tag + _varint(len(payload)) + payload


def _value(value: Any) -> bytes:
    """An ``AnyValue``'s fields, as the SDK's ``_encode_value`` chooses them."""
    if value is None:
        return b""
    if value is True:
        return b"\x10\x01"
    if value is False:
        return b"\x10\x00"
    if isinstance(value, str):
        return _delimited(b"\x0a", value.encode("utf-8"))
    if isinstance(value, int):
        if not -(1 << 63) <= value < 1 << 63:
            raise ValueError(f"{value} is out of int64's range")
        return b"\x18" + _varint(value & 0xFFFFFFFFFFFFFFFF)
    if isinstance(value, float):
        return b"\x21" + _DOUBLE.pack(value)
    if isinstance(value, bytes):
        return _delimited(b"\x3a", value)
    if isinstance(value, Sequence):
        items = b"".join(_delimited(b"\x0a", _value(item)) for item in value)
        return _delimited(b"\x2a", items)
    if isinstance(value, Mapping):
        pairs = b"".join(_delimited(b"\x0a", _pair(str(k), v)) for k, v in value.items())
        return _delimited(b"\x32", pairs)
    raise TypeError(f"an attribute value of type {type(value).__name__}")


def _key(key: str) -> bytes:
    """A ``KeyValue``'s key field (1), encoded once: the proxy's keys are a fixed few."""
    encoded = _KEYS.get(key)
    if encoded is None:
        encoded = _delimited(b"\x0a", key.encode("utf-8")) if key else b""  # proto3: "" is left out
        if len(_KEYS) < _MAX_KEYS:
            _KEYS[key] = encoded
    return encoded


def _pair(key: str, value: Any) -> bytes:
    """A ``KeyValue``: key (1), value (2)."""
    return _key(key) + _delimited(b"\x12", _value(value))


def _attributes(tag: bytes, attributes: Mapping[str, Any] | None) -> bytes:
    """Repeated ``KeyValue`` fields; strings, the most of them, written inline."""
    if not attributes:
        return b""
    parts = []
    for key, value in attributes.items():
        try:
            if type(value) is str:
                text = value.encode("utf-8")
                size = len(text)
                any_value = b"\x0a" + (_SMALL[size] if size < 128 else _varint(size)) + text
                size += 1 + (1 if size < 128 else len(_varint(size)))
                pair = _key(key) + b"\x12" + (_SMALL[size] if size < 128 else _varint(size))
                pair += any_value
            else:
                pair = _pair(key, value)
        except Exception as error:  # as the SDK does (any Exception): that attribute only
            # (a lone surrogate, say, from an upstream's JSON: UnicodeEncodeError; a key that
            # is not a str; a value nested past the stack: RecursionError)
            log.error(
                "otlp_attribute_not_encoded",
                extra={"key": ascii(key)[:100], "error": ascii(error)[:200]},
            )
            continue
        size = len(pair)
        parts.append(tag + (_SMALL[size] if size < 128 else _varint(size)) + pair)
    return b"".join(parts)


def _span(span: ReadableSpan) -> bytes:
    """A ``Span``, its fields in number order."""
    context = span.get_span_context()
    assert context is not None
    parts = [
        b"\x0a\x10" + context.trace_id.to_bytes(16, "big"),  # trace_id (1)
        b"\x12\x08" + context.span_id.to_bytes(8, "big"),  # span_id (2)
    ]
    if context.trace_state:
        state = ",".join(f"{key}={value}" for key, value in context.trace_state.items())
        parts.append(_delimited(b"\x1a", _text(state)))  # trace_state (3)
    parent = span.parent
    if parent is not None:
        parts.append(b"\x22\x08" + parent.span_id.to_bytes(8, "big"))  # parent_span_id (4)
    if span.name:  # proto3 leaves a field at its default out: "", 0
        parts.append(_delimited(b"\x2a", _text(span.name)))  # name (5)
    parts.append(b"\x30" + _SMALL[_KIND[span.kind]])  # kind (6)
    if span.start_time:
        parts.append(b"\x39" + _FIXED64.pack(span.start_time))  # start_time_unix_nano (7)
    if span.end_time:
        parts.append(b"\x41" + _FIXED64.pack(span.end_time))  # end_time_unix_nano (8)
    parts.append(_attributes(b"\x4a", span.attributes))  # attributes (9)
    for event in span.events:  # events (11): time (1), name (2), attributes (3)
        body = b"\x09" + _FIXED64.pack(event.timestamp) if event.timestamp else b""
        if event.name:
            body += _delimited(b"\x12", _text(event.name))
        parts.append(_delimited(b"\x5a", body + _attributes(b"\x1a", event.attributes)))
    for link in span.links:  # links (13): trace_id (1), span_id (2), attributes (4), flags (6)
        linked = link.context
        flags = _HAS_IS_REMOTE | (_IS_REMOTE if linked.is_remote else 0)
        body = (
            b"\x0a\x10"
            + linked.trace_id.to_bytes(16, "big")
            + b"\x12\x08"
            + linked.span_id.to_bytes(8, "big")
            + _attributes(b"\x22", link.attributes)
            + b"\x35"
            + _FIXED32.pack(flags)
        )
        parts.append(_delimited(b"\x6a", body))
    status = span.status  # status (15): message (2), code (3)
    message = status.description or ""
    body = (_delimited(b"\x12", _text(message)) if message else b"") + (
        b"\x18" + _SMALL[status.status_code.value] if status.status_code.value else b""
    )
    parts.append(_delimited(b"\x7a", body))
    flags = _HAS_IS_REMOTE | (_IS_REMOTE if parent is not None and parent.is_remote else 0)
    parts.append(b"\x85\x01" + _FIXED32.pack(flags))  # flags (16)
    return b"".join(parts)


def _scope(scope: InstrumentationScope | None) -> bytes:
    """An ``InstrumentationScope``: name (1), version (2), attributes (3)."""
    if scope is None:
        return b""
    name = _delimited(b"\x0a", _text(scope.name)) if scope.name else b""
    version = _delimited(b"\x12", _text(scope.version)) if scope.version else b""
    return name + version + _attributes(b"\x1a", scope.attributes)


def encode_spans(spans: Sequence[ReadableSpan]) -> bytes:
    """An ``ExportTraceServiceRequest`` holding ``spans``, grouped by resource and scope (by
    identity: the proxy's spans share one of each), in the order they first appear."""
    groups: dict[int, tuple[Resource, dict[int, tuple[InstrumentationScope | None, list[bytes]]]]]
    groups = {}
    for span in spans:
        resource, scope = span.resource, span.instrumentation_scope
        _, scopes = groups.setdefault(id(resource), (resource, {}))
        scopes.setdefault(id(scope), (scope, []))[1].append(_delimited(b"\x12", _span(span)))
    out: list[bytes] = []
    for resource, scopes in groups.values():
        body = [_delimited(b"\x0a", _attributes(b"\x0a", resource.attributes))]  # resource (1)
        for scope, encoded in scopes.values():  # scope_spans (2): scope (1), spans (2), url (3)
            inner = [_delimited(b"\x0a", _scope(scope)), *encoded]
            if scope is not None and scope.schema_url:
                inner.append(_delimited(b"\x1a", _text(scope.schema_url)))
            body.append(_delimited(b"\x12", b"".join(inner)))
        if resource.schema_url:  # schema_url (3)
            body.append(_delimited(b"\x1a", _text(resource.schema_url)))
        out.append(_delimited(b"\x0a", b"".join(body)))  # resource_spans (1)
    return b"".join(out)
