"""Properties of the guard's parsers: the dot-segment check agrees with RFC 3986's
remove_dot_segments on the decoded path, and trace-header validation never raises and keeps
only what fits the W3C formats and sizes."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.pipeline.guard import dot_segment
from proxy.telemetry.tracecontext import MAX_BAGGAGE, MAX_TRACESTATE, trace_context

_DECODE = re.compile(r"%(2e|2f|5c)", re.IGNORECASE)


def remove_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4, written from the RFC's steps (an independent reference)."""
    source, output = path, ""
    while source:
        if source.startswith("../"):
            source = source[3:]
        elif source.startswith(("./", "/./")):
            source = source[2:]
        elif source == "/.":
            source = "/"
        elif source.startswith("/../"):
            source = source[3:]
            output = output[: output.rfind("/")] if "/" in output else ""
        elif source == "/..":
            source = "/"
            output = output[: output.rfind("/")] if "/" in output else ""
        elif source in (".", ".."):
            source = ""
        else:
            start = 1 if source.startswith("/") else 0
            end = source.find("/", start)
            end = len(source) if end == -1 else end
            output += source[:end]
            source = source[end:]
    return output


def decoded(raw: str) -> str:
    path = raw.partition("?")[0]
    return _DECODE.sub(lambda m: {"2e": ".", "2f": "/", "5c": "/"}[m[1].lower()], path).replace(
        "\\", "/"
    )


@settings(max_examples=1000)
@given(tail=st.text(alphabet="/.%2eEfF5cCa\\?", max_size=20))
def test_dot_segment_iff_the_path_does_not_resolve_to_itself(tail: str) -> None:
    raw = "/v1/" + tail
    path = decoded(raw)
    assert dot_segment(raw) == (remove_dot_segments(path) != path)


header_text = st.text(max_size=9000) | st.text(alphabet="0123456789abcdef-=,;", max_size=80)


@settings(max_examples=500)
@given(parent=header_text, state=header_text, baggage=header_text)
def test_trace_validation_never_raises_and_keeps_only_valid_headers(
    parent: str, state: str, baggage: str
) -> None:
    context = trace_context({"traceparent": parent, "tracestate": state, "baggage": baggage})
    if context.traceparent is not None:
        pattern = r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-.*)?"
        assert re.fullmatch(pattern, parent.strip())
        assert context.trace_id is not None
        assert len(context.trace_id) == 32
    else:
        assert "traceparent" in context.invalid
    if context.tracestate is not None:
        assert context.traceparent is not None
        assert len(context.tracestate) <= MAX_TRACESTATE
    if context.baggage is not None:
        assert len(context.baggage.encode("utf-8", "surrogateescape")) <= MAX_BAGGAGE


@given(
    trace_id=st.text(alphabet="0123456789abcdef", min_size=32, max_size=32),
    span_id=st.text(alphabet="0123456789abcdef", min_size=16, max_size=16),
    flags=st.sampled_from(["00", "01"]),
)
def test_every_well_formed_traceparent_is_kept(trace_id: str, span_id: str, flags: str) -> None:
    parent = f"00-{trace_id}-{span_id}-{flags}"
    zero = set(trace_id) == {"0"} or set(span_id) == {"0"}
    assert (trace_context({"traceparent": parent}).traceparent == parent) is not zero
