"""The SSE decoder against the WHATWG interpretation rules, under any chunking."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.pipeline.capture.sse import SSEDecoder, SSEEvent


def _decode(chunks: list[bytes], *, flush: bool = False) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    events.extend(decoder.close(flush=flush))
    return events


def _ev(
    data: str, event: str = "message", id: str | None = None, retry: int | None = None
) -> SSEEvent:
    return SSEEvent(event=event, data=data, id=id, retry=retry)


WHATWG_CASES = [
    pytest.param(b"data: a\n\ndata: b\n\n", [_ev("a"), _ev("b")], id="lf-framing"),
    pytest.param(b"data: a\r\n\r\ndata: b\r\n\r\n", [_ev("a"), _ev("b")], id="crlf-framing"),
    pytest.param(b"data: a\r\rdata: b\r\r", [_ev("a"), _ev("b")], id="cr-framing"),
    pytest.param(b"data: a\r\ndata: b\rdata: c\n\r\n", [_ev("a\nb\nc")], id="mixed-line-ends"),
    pytest.param(b"data: a\n\rdata: b\n\n", [_ev("a"), _ev("b")], id="lf-then-cr-is-two-ends"),
    pytest.param(b": keep-alive\n\ndata: x\n: mid\n\n", [_ev("x")], id="comments-ignored"),
    pytest.param(b":\n:\n\n", [], id="comment-only-stream"),
    pytest.param(b"data: a\ndata: b\ndata:\n\n", [_ev("a\nb\n")], id="data-lines-join-with-lf"),
    pytest.param(b"data:  two\n\n", [_ev(" two")], id="only-one-leading-space-removed"),
    pytest.param(b"data:x\n\n", [_ev("x")], id="no-space-after-colon"),
    pytest.param(b"data: a: b\n\n", [_ev("a: b")], id="later-colons-kept"),
    pytest.param(b"data\n\n", [_ev("")], id="field-without-colon-has-empty-value"),
    pytest.param(b"data:\n\n", [_ev("")], id="empty-data-line-dispatches-empty-data"),
    pytest.param(b"event: ping\n\nid: 7\n\n", [], id="block-without-data-not-dispatched"),
    pytest.param(b"\n\n\ndata: a\n\n", [_ev("a")], id="leading-blank-lines"),
    pytest.param(b"event: update\ndata: x\n\n", [_ev("x", "update")], id="event-type"),
    pytest.param(
        b"event: update\ndata: x\n\ndata: y\n\n",
        [_ev("x", "update"), _ev("y")],
        id="event-type-resets-after-dispatch",
    ),
    pytest.param(b"event: lost\n\ndata: y\n\n", [_ev("y")], id="event-type-resets-on-empty-block"),
    pytest.param(b"event:\ndata: x\n\n", [_ev("x")], id="empty-event-type-is-message"),
    pytest.param(
        b"id: 1\ndata: a\n\ndata: b\n\n",
        [_ev("a", id="1"), _ev("b", id="1")],
        id="id-persists-across-events",
    ),
    pytest.param(
        b"id: 1\ndata: a\n\nid\ndata: b\n\n",
        [_ev("a", id="1"), _ev("b", id="")],
        id="empty-id-resets-to-empty",
    ),
    pytest.param(
        b"id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\n",
        [_ev("a", id="1"), _ev("b", id="1")],
        id="id-with-nul-ignored",
    ),
    pytest.param(b"id: 5\n\ndata: a\n\n", [_ev("a", id="5")], id="id-from-empty-block-kept"),
    pytest.param(b"retry: 3000\ndata: a\n\n", [_ev("a", retry=3000)], id="retry-digits"),
    pytest.param(
        b"retry: 3s\ndata: a\n\nretry: -1\ndata: b\n\nretry:  10\ndata: c\n\n",
        [_ev("a"), _ev("b"), _ev("c")],
        id="retry-non-digits-ignored",
    ),
    pytest.param(
        "retry: \u0663\ndata: a\n\n".encode(), [_ev("a")], id="retry-non-ascii-digits-ignored"
    ),
    pytest.param(
        b"retry: 10\ndata: a\n\ndata: b\n\n",
        [_ev("a", retry=10), _ev("b")],
        id="retry-belongs-to-its-block",
    ),
    pytest.param(b"foo: bar\ndata: a\n\n", [_ev("a")], id="unknown-field-ignored"),
    pytest.param(b"Data: a\n\n", [], id="field-names-case-sensitive"),
    pytest.param(b" data: a\n\n", [], id="space-before-field-name-not-stripped"),
    pytest.param(b"\xef\xbb\xbfdata: a\n\n", [_ev("a")], id="bom-stripped-at-start"),
    pytest.param(b"\xef\xbb\xbf\xef\xbb\xbfdata: a\n\n", [], id="bom-stripped-only-once"),
    pytest.param(
        b"data: a\n\n\xef\xbb\xbfdata: b\n\n", [_ev("a")], id="bom-mid-stream-not-stripped"
    ),
    pytest.param(
        b"data: a\n\xef\xbb\xbfdata: b\n\n", [_ev("a")], id="bom-on-the-second-line-not-stripped"
    ),
    pytest.param(b"data: a\n\ndata: b\n", [_ev("a")], id="unterminated-event-discarded"),
    pytest.param(b"data: a\n\ndata: b", [_ev("a")], id="unterminated-line-discarded"),
    pytest.param(b"data: \xff\xfe ok\n\n", [_ev("\ufffd\ufffd ok")], id="invalid-utf8-replaced"),
    pytest.param(b"data: \xc3\n\n", [_ev("\ufffd")], id="cut-multibyte-before-lf-replaced"),
    pytest.param("data: Zürich 東京 🌍\n\n".encode(), [_ev("Zürich 東京 🌍")], id="multibyte-utf8"),
    pytest.param(b"data: a\x00b\n\n", [_ev("a\x00b")], id="nul-in-data-kept"),
    pytest.param(b"data: [DONE]\n\n", [_ev("[DONE]")], id="done-sentinel-is-plain-data"),
]


@pytest.mark.parametrize(("stream", "expected"), WHATWG_CASES)
def test_whatwg_case_fed_whole(stream: bytes, expected: list[SSEEvent]) -> None:
    assert _decode([stream]) == expected


@pytest.mark.parametrize(("stream", "expected"), WHATWG_CASES)
def test_whatwg_case_split_at_every_byte_boundary(stream: bytes, expected: list[SSEEvent]) -> None:
    for cut in range(len(stream) + 1):
        assert _decode([stream[:cut], stream[cut:]]) == expected, cut


@pytest.mark.parametrize(("stream", "expected"), WHATWG_CASES)
def test_whatwg_case_fed_byte_by_byte(stream: bytes, expected: list[SSEEvent]) -> None:
    assert _decode([stream[i : i + 1] for i in range(len(stream))]) == expected


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        pytest.param([b"data: a\r", b"\ndata: b\r\n\r\n"], [_ev("a\nb")], id="crlf-split"),
        pytest.param(
            [b"data: a\r", b"", b"\n\r", b"", b"\n"], [_ev("a")], id="empty-chunks-keep-crlf-state"
        ),
        pytest.param([b"data: a\r", b"\r"], [_ev("a")], id="cr-then-cr-across-chunks"),
        pytest.param([b"\xef", b"\xbb", b"\xbfdata: a\n\n"], [_ev("a")], id="bom-split"),
        pytest.param([b"data: \xe6\x9d", b"\xb1\n\n"], [_ev("東")], id="utf8-char-split"),
    ],
)
def test_chunk_boundaries(chunks: list[bytes], expected: list[SSEEvent]) -> None:
    assert _decode(chunks) == expected


@pytest.mark.parametrize(
    ("stream", "expected"),
    [
        pytest.param(b"data: a", [_ev("a")], id="unterminated-line-flushed"),
        pytest.param(b"data: a\n", [_ev("a")], id="unterminated-event-flushed"),
        pytest.param(b"data: a\r", [_ev("a")], id="event-ended-by-cr-flushed"),
        pytest.param(b"data: a\n\n", [], id="nothing-pending-nothing-flushed"),
        pytest.param(b": keep-alive", [], id="comment-not-flushed-as-event"),
        pytest.param(b"event: x\n", [], id="block-without-data-not-flushed"),
        pytest.param(b"", [], id="empty-stream"),
    ],
)
def test_close_flush_dispatches_the_pending_event(stream: bytes, expected: list[SSEEvent]) -> None:
    decoder = SSEDecoder()
    decoder.feed(stream)
    assert decoder.close(flush=True) == expected


@pytest.mark.parametrize(
    ("stream", "attribute", "expected"),
    [
        pytest.param(b": a\n: b\n\n:c\n", "comments", 3, id="comments-counted"),
        pytest.param(b"id: 9\ndata: a\n\n", "last_event_id", "9", id="last-event-id"),
        pytest.param(b"data: a\n\n", "last_event_id", None, id="no-id-yet"),
        pytest.param(b"retry: 250\n\n", "retry", 250, id="retry-kept-without-event"),
        pytest.param(b"retry: x\n\n", "retry", None, id="invalid-retry-not-kept"),
        pytest.param(b"data: a", "pending", True, id="pending-partial-line"),
        pytest.param(b"data: a\n", "pending", True, id="pending-undispatched-data"),
        pytest.param(b"data: a\n\n", "pending", False, id="nothing-pending"),
    ],
)
def test_decoder_state(stream: bytes, attribute: str, expected: object) -> None:
    decoder = SSEDecoder()
    decoder.feed(stream)
    assert getattr(decoder, attribute) == expected


@pytest.mark.parametrize(
    ("action", "outcome"),
    [
        pytest.param("close-twice", [], id="second-close-returns-nothing"),
        pytest.param("feed-after-close", ValueError, id="feed-after-close-is-a-bug"),
    ],
)
def test_lifecycle(action: str, outcome: object) -> None:
    decoder = SSEDecoder()
    decoder.feed(b"data: a\n")
    decoder.close()
    if action == "close-twice":
        assert decoder.close(flush=True) == outcome
    else:
        with pytest.raises(ValueError, match="after close"):
            decoder.feed(b"\n")


_MEGABYTE_LINE = b"data: " + b"x" * (1 << 20) + b"\n\n"


@pytest.mark.parametrize(
    "chunk_size",
    [
        pytest.param(len(_MEGABYTE_LINE), id="whole"),
        pytest.param(65536, id="64KiB-chunks"),
        pytest.param(4093, id="odd-sized-chunks"),
        pytest.param(1, id="byte-by-byte"),
    ],
)
def test_megabyte_data_line_decodes(chunk_size: int) -> None:
    chunks = [_MEGABYTE_LINE[i : i + chunk_size] for i in range(0, len(_MEGABYTE_LINE), chunk_size)]
    (event,) = _decode(chunks)
    assert event.data == "x" * (1 << 20)


# Streams built mostly from the bytes that matter to the grammar, so that random examples hit
# line ends, field names, colons, BOMs and multi-byte characters rather than noise.
_TOKENS = st.sampled_from(
    [
        b"data",
        b"event",
        b"id",
        b"retry",
        b":",
        b": ",
        b" ",
        b"\r",
        b"\n",
        b"\r\n",
        b"\n\n",
        b"x",
        b"42",
        b"\x00",
        b"\xef\xbb\xbf",
        "é東🌍".encode(),
        b"\xc3",
        b"\xff",
    ]
)
_STREAMS = st.lists(_TOKENS | st.binary(max_size=4), max_size=60).map(b"".join)


def _split(stream: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(cut, len(stream)) for cut in cuts})
    bounds = [0, *points, len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(bounds)]


@settings(max_examples=300, deadline=None)
@given(stream=_STREAMS, cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=20))
@pytest.mark.parametrize(
    "flush", [pytest.param(False, id="discard"), pytest.param(True, id="flush")]
)
def test_random_chunking_never_changes_events(stream: bytes, cuts: list[int], flush: bool) -> None:
    assert _decode(_split(stream, cuts), flush=flush) == _decode([stream], flush=flush)


@settings(max_examples=300, deadline=None)
@given(chunks=st.lists(st.binary(max_size=64), max_size=20), flush=st.booleans())
def test_arbitrary_bytes_never_raise(chunks: list[bytes], flush: bool) -> None:
    for event in _decode(chunks, flush=flush):
        assert isinstance(event.data, str)


_LINE_ENDS = st.sampled_from(["\n", "\r", "\r\n"])


@settings(max_examples=200, deadline=None)
@given(
    datas=st.lists(
        st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=["Cs"])),
        min_size=1,
        max_size=5,
    ),
    ends=st.lists(_LINE_ENDS, min_size=1),
    cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=10),
)
def test_encoded_events_round_trip(datas: list[str], ends: list[str], cuts: list[int]) -> None:
    lines: list[str] = []
    for position, data in enumerate(datas):
        end = ends[position % len(ends)]
        lines.append(f"data: {data}{end}{end}")
    stream = "".join(lines).encode()
    assert [event.data for event in _decode(_split(stream, cuts))] == datas


def _reference(stream: bytes) -> list[SSEEvent]:
    """The WHATWG interpretation written the plain way, as the oracle for the decoder's byte-level
    shortcuts: the text decoded line by line, fields split on text, data joined as text."""
    if stream.startswith(b"\xef\xbb\xbf"):
        stream = stream[3:]
    *lines, _unterminated = re.split(rb"\r\n|\r|\n", stream)  # discarded at close (no flush)
    events: list[SSEEvent] = []
    data: list[str] = []
    event, last_id, retry = "", None, None
    for raw in lines:
        line = raw.decode("utf-8", "replace")
        if not line:
            if data:
                events.append(SSEEvent(event or "message", "\n".join(data), last_id, retry))
            data, event, retry = [], "", None
            continue
        if line.startswith(":"):
            continue
        name, colon, value = line.partition(":")
        value = value[1:] if colon and value.startswith(" ") else value
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
        elif name == "id" and "\0" not in value:
            last_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            retry = int(value)
    return events


_FIELDS = st.sampled_from(
    [b"data: ", b"data:", b"data", b"event: ", b"id: ", b"id", b"retry: ", b":", b"", b"x: ",
     b"\xef\xbb\xbfdata: ", b"dat\xffa: "]
)  # fmt: skip
_VALUES = st.sampled_from(
    [b"12", b"x", b" ", b":", b"{}", b"\x00", b"\xef\xbb\xbf", b"\xe2\x82", b"\xac", b"\xff",
     b"\xf0\x9f\x98", b"\xc3\xa9", b"\xe3\x80\x80", b"\xd9\xa3"]
)  # fmt: skip
# Mostly LF, as servers send: the decoder takes a shortcut for chunks without a CR.
_ENDS = st.sampled_from([b"\n"] * 12 + [b"\r", b"\r\n"])
_LINE = st.tuples(_FIELDS, st.lists(_VALUES, max_size=4), _ENDS)
_LINES = st.lists(st.one_of(_LINE, st.just((b"", [], b"\n"))), max_size=16)  # blank: dispatch


@settings(max_examples=500, deadline=None)
@given(lines=_LINES, cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=8))
def test_byte_level_decoding_matches_the_text_reference(
    lines: list[tuple[bytes, list[bytes], bytes]], cuts: list[int]
) -> None:
    stream = b"".join(field + b"".join(value) + end for field, value, end in lines)
    assert _decode(_split(stream, cuts)) == _reference(stream)
