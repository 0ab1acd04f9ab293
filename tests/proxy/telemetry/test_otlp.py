"""The hand-written OTLP encoder writes the very bytes the SDK's encoder writes.

Compared byte for byte with ``opentelemetry.exporter.otlp.proto.common``'s ``encode_spans``
(field order, defaults left out, empty messages kept), over generated spans of every shape the
SDK takes: attribute values of each type (nested lists and maps, int64's edges, floats with
NaN and infinities, values it refuses), events, links, parents remote and local, trace state,
each status, several resources and scopes. Bytes compared rather than parsed messages, so that
NaN and field order count too.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as sdk_encode
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.span import TraceState

from proxy.telemetry import Tracing
from proxy.telemetry.otlp import encode_spans
from proxy.telemetry.spans import build
from tests.support.spans import ROW, record

INT64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
SCALARS = st.one_of(
    st.text(max_size=40),
    st.booleans(),
    INT64,
    st.floats(allow_nan=True, allow_infinity=True),
    st.binary(max_size=20),
    st.none(),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=8), inner, max_size=4),
    ),
    max_leaves=12,
)
KEYS = st.text(min_size=1, max_size=30)
ATTRIBUTES = st.dictionaries(KEYS, VALUES, max_size=8)
IDS = st.integers(min_value=1, max_value=(1 << 64) - 1)
TRACE_IDS = st.integers(min_value=1, max_value=(1 << 128) - 1)
TIMES = st.integers(min_value=0, max_value=(1 << 64) - 1)
STATE_KEYS = st.from_regex(r"[a-z][a-z0-9_\-*/]{0,10}", fullmatch=True)
STATE_VALUES = st.from_regex(r"[!-+\--<>-~]{1,10}", fullmatch=True)
STATES = st.dictionaries(STATE_KEYS, STATE_VALUES, max_size=3)
RESOURCES = [
    Resource.create({"service.name": "gradeproxy"}),
    Resource({"service.name": "other", "n": 3}, schema_url="https://example.test/schema"),
]
SCOPES = [
    InstrumentationScope("gradeproxy", "1.0.0", "https://opentelemetry.io/schemas/1.37.0"),
    InstrumentationScope("other", None, None, {"a": "b"}),
    None,
]


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


@st.composite
def spans(draw: st.DrawFn) -> ReadableSpan:
    trace_id = draw(TRACE_IDS)
    state = draw(STATES)
    context = SpanContext(
        trace_id,
        draw(IDS),
        is_remote=False,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
        trace_state=TraceState(list(state.items())),
    )
    parent = draw(
        st.one_of(
            st.none(),
            st.builds(lambda i, r: SpanContext(trace_id, i, is_remote=r), IDS, st.booleans()),
        )
    )
    events = draw(
        st.lists(
            st.builds(lambda n, a, t: Event(n, a, t), st.text(max_size=30), ATTRIBUTES, TIMES),
            max_size=3,
        )
    )
    links = draw(
        st.lists(
            st.builds(
                lambda t, i, r, a: Link(SpanContext(t, i, is_remote=r), a),
                TRACE_IDS,
                IDS,
                st.booleans(),
                st.one_of(st.none(), ATTRIBUTES),
            ),
            max_size=2,
        )
    )
    status = draw(
        st.one_of(
            st.just(Status(StatusCode.UNSET)),
            st.just(Status(StatusCode.OK)),
            st.builds(lambda d: Status(StatusCode.ERROR, d), st.one_of(st.none(), st.text())),
        )
    )
    start = draw(TIMES)
    return ReadableSpan(
        name=draw(st.text(max_size=40)),
        context=context,
        parent=parent,
        resource=draw(st.sampled_from(RESOURCES)),
        attributes=draw(ATTRIBUTES),
        events=events,
        links=links,
        kind=draw(st.sampled_from(list(SpanKind))),
        status=status,
        start_time=start,
        end_time=draw(st.one_of(st.just(start), TIMES)),
        instrumentation_scope=draw(st.sampled_from(SCOPES)),
    )


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(spans(), max_size=5))
def test_generated_spans_encode_to_the_sdks_bytes(batch: list[ReadableSpan]) -> None:
    assert encode_spans(batch) == sdk_encode(batch).SerializeToString()


@pytest.fixture
def interpreter_recursion_limit() -> Iterator[None]:
    """The interpreter's own limit (1000) while the case runs: "past the stack" is measured
    against it, and a library that raised it earlier in the run (mypy's ``main`` does, and
    never restores it) would let one encoder nest deeper than the other."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


@pytest.mark.parametrize(
    "attributes",
    [
        {"big": 1 << 63, "kept": "x"},  # past int64: the SDK leaves that attribute out
        {"small": -(1 << 63) - 1, "kept": 1},
        {"object": object(), "kept": True},
        {"nested": [1, [2, object()]], "kept": 2.5},
        {"int64_edges": [-(1 << 63), (1 << 63) - 1, 0, -1]},
        {"empty_list": [], "empty_map": {}, "none": None, "empty": ""},
        # A lone surrogate (an upstream's JSON, parsed by the stdlib) cannot be UTF-8: the
        # SDK leaves that attribute out, and must not lose the batch with it.
        {"gen_ai.response.model": "gpt-\ud800", "kept": "x"},
        {"key-\udcff": "v", "kept": "x"},
        {"nested": ["ok", {"k": "\ud800"}], "kept": 1},
        # Whatever else one attribute raises costs that attribute, as in the SDK (which
        # catches every Exception there), never the batch: a key that is not a string (a
        # maintainer's slip; ReadableSpan takes any mapping), a value nested past the stack.
        {1: "x", "kept": "y"},
        {("a", "b"): 1, "kept": 2},
        {"deep": _nested(3000), "kept": 3},
    ],
    ids=[
        "above_int64",
        "below_int64",
        "object",
        "nested_object",
        "int64_edges",
        "empties",
        "surrogate_value",
        "surrogate_key",
        "nested_surrogate",
        "int_key",
        "tuple_key",
        "nested_past_the_stack",
    ],
)
@pytest.mark.usefixtures("interpreter_recursion_limit")
def test_values_the_sdk_refuses_or_edges_it_keeps_encode_as_it_does(
    attributes: dict[Any, Any],
) -> None:
    span = ReadableSpan(
        name="s",
        context=SpanContext(1, 2, is_remote=False),
        resource=RESOURCES[0],
        attributes=attributes,
        start_time=1,
        end_time=2,
    )
    assert encode_spans([span]) == sdk_encode([span]).SerializeToString()


def test_a_lone_surrogate_in_a_name_costs_that_character_not_the_batch() -> None:
    """A client's model parsed by the stdlib (a body with a 19-digit number) can hold a lone
    surrogate, and becomes the call span's name: the SDK's encoder raises on it, losing every
    span in the batch; this encoder writes U+FFFD in its place."""
    named = ReadableSpan(
        name="chat gpt-\ud800?",
        context=SpanContext(1, 2, is_remote=False),
        resource=RESOURCES[0],
        status=Status(StatusCode.ERROR, "upstream \udcff"),
        start_time=1,
        end_time=2,
    )
    with pytest.raises(UnicodeEncodeError, match="surrogates not allowed"):
        sdk_encode([named])
    parsed = ExportTraceServiceRequest.FromString(encode_spans([named]))
    (span,) = parsed.resource_spans[0].scope_spans[0].spans
    assert (span.name, span.status.message) == ("chat gpt-\ufffd?", "upstream \ufffd")


@pytest.mark.parametrize("rows", [None, [ROW]], ids=["ungraded", "graded"])
@pytest.mark.parametrize(
    "traceparent", [None, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"]
)
def test_the_proxys_own_spans_encode_to_the_sdks_bytes(
    rows: list[dict[str, Any]] | None, traceparent: str | None
) -> None:
    settings = Tracing(enabled=True, capture_content=True)
    resource = Resource.create({"service.name": "gradeproxy"})
    built, _ = build(record(traceparent), rows, {"id": "chatcmpl-1"}, settings, resource)
    assert len(built) == 2
    assert encode_spans(built) == sdk_encode(built).SerializeToString()
