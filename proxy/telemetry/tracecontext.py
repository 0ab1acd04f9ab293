"""W3C trace context headers from clients, validated before the proxy uses any of them.

``traceparent``, ``tracestate`` and ``baggage`` come from the client, so they are as hostile as
any other header: any size, any bytes. The proxy forwards them unchanged (it is not yet a trace
participant, and forwarded bytes are never altered), but everything the proxy itself reads from
them (the canonical log line's ``trace_id`` today, the trace exporter when it lands) goes
through :func:`trace_context`, which keeps a header only if it has the format and size the W3C
specifications allow (Trace Context level 1, Baggage): a malformed ``traceparent`` also
invalidates ``tracestate``, as the specification requires.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["TraceContext", "trace_context"]

# version-traceid-parentid-flags; version ff is invalid; a future version may append fields.
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
# simple-key: lcalpha then 0*255; multi-tenant-key: (lcalpha / DIGIT) 0*240 "@" system-id
_STATE_KEY = re.compile(
    r"[a-z][_0-9a-z\-*/]{0,255}|[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13}"
)
_STATE_VALUE = re.compile(r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]")
_BAGGAGE_KEY = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BAGGAGE_VALUE = re.compile(r"[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*")
MAX_TRACEPARENT = 512
MAX_TRACESTATE = 512  # what vendors must propagate; longer ones are dropped whole
MAX_STATE_MEMBERS = 32
MAX_BAGGAGE = 8192
MAX_BAGGAGE_MEMBERS = 64
ZERO_TRACE = "0" * 32  # all-zero ids are invalid (W3C Trace Context)
ZERO_SPAN = "0" * 16


@dataclass(frozen=True, slots=True)
class TraceContext:
    """The valid trace headers of one request (``None`` where absent or invalid)."""

    traceparent: str | None = None
    tracestate: str | None = None
    baggage: str | None = None
    invalid: tuple[str, ...] = ()  # names of headers present but refused

    @property
    def trace_id(self) -> str | None:
        return self.traceparent.split("-", 2)[1] if self.traceparent else None


def _traceparent(value: str) -> bool:
    if len(value) > MAX_TRACEPARENT:
        return False
    match = _TRACEPARENT.fullmatch(value.strip())
    if match is None:
        return False
    version, trace_id, span_id, _flags, rest = match.groups()
    if version == "ff" or trace_id == ZERO_TRACE or span_id == ZERO_SPAN:
        return False
    return version != "00" or rest is None


def _tracestate(value: str) -> bool:
    if len(value) > MAX_TRACESTATE:
        return False
    members = [m.strip() for m in value.split(",") if m.strip()]
    if len(members) > MAX_STATE_MEMBERS:
        return False
    keys: set[str] = set()
    for member in members:
        key, eq, val = member.partition("=")
        if not eq or not _STATE_KEY.fullmatch(key) or not _STATE_VALUE.fullmatch(val):
            return False
        if key in keys:  # a key appears once in a list
            return False
        keys.add(key)
    return True


def _baggage(value: str) -> bool:
    if len(value.encode("utf-8", "surrogateescape")) > MAX_BAGGAGE:
        return False
    members = value.split(",")
    if len(members) > MAX_BAGGAGE_MEMBERS:
        return False
    for member in members:
        pair = member.split(";", 1)[0]
        key, eq, val = pair.partition("=")
        if not eq or not _BAGGAGE_KEY.fullmatch(key.strip()):
            return False
        if not _BAGGAGE_VALUE.fullmatch(val.strip()):
            return False
    return True


def trace_context(headers: Mapping[str, str]) -> TraceContext:
    """Validate the request's trace headers; cheap when a request carries none."""
    parent = headers.get("traceparent")
    state = headers.get("tracestate")
    if state is not None:
        state = _combined(headers, "tracestate", state)
    baggage = headers.get("baggage")
    if parent is None and state is None and baggage is None:
        return _EMPTY
    invalid: list[str] = []
    if parent is not None and not _traceparent(parent):
        invalid.append("traceparent")
        parent = None
    if state is not None and (parent is None or not _tracestate(state)):
        invalid.append("tracestate")
        state = None
    if baggage is not None and not _baggage(baggage):
        invalid.append("baggage")
        baggage = None
    return TraceContext(parent.strip() if parent else None, state, baggage, tuple(invalid))


def _combined(headers: Mapping[str, str], name: str, first: str) -> str:
    """A list header sent as several headers, as the one value HTTP makes of them (RFC 9110
    5.3, field order): validating the first alone would let the others through unread."""
    getall = getattr(headers, "getall", None)  # a multidict: aiohttp's request headers
    values: list[str] = [first] if getall is None else getall(name)
    return first if len(values) == 1 else ",".join(values)


_EMPTY = TraceContext()
