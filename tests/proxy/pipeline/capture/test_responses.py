"""Answers captured from Responses API (``/v1/responses``) bodies and streams.

The fixtures are tests/support/responses_wire.py's (proved with the SDK in
tests/conformance/test_responses_wire.py); each stream is replayed whole, byte by byte, cut at
every byte boundary and at random ones, and must give the answer the chat completions capture
would give for the same calls.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.pipeline.capture.chat import Answer, CaptureResult
from proxy.pipeline.capture.responses import ResponsesStreamCapture, responses_from_body
from tests.support import responses_wire as rw

FILES = rw.files()
STREAMS = sorted(name for name in FILES if name.endswith(".sse"))
BODIES = sorted(name for name in FILES if name.endswith(".json"))


def capture(chunks: list[bytes]) -> CaptureResult:
    stream = ResponsesStreamCapture()
    for chunk in chunks:
        stream.feed(chunk)
    return stream.finish()


def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


@dataclass(frozen=True)
class Expect:
    answer: Answer | None  # None: no answer captured
    finish_reason: str | None = None
    error: str | None = None


def usage(output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": 81,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 81 + output_tokens,
    }


_SINGLE = {"tool_calls": [call("call_k3RnV0aYbW2sX9dQ4mZfT1pL", "get_weather", rw.ZURICH)]}
_PARALLEL = {
    "tool_calls": [
        call("call_Vt4dJ0kOx2m6ZrVb8hXn2Qp1", "get_weather", '{"city":"Paris","unit":"celsius"}'),
        call("call_2mLq9sWfY7cTjR0uK4eZ8aBn", "get_time", '{"timezone":"Asia/Tokyo"}'),
    ]
}
_TEXT = "It’s 12°C and sunny in Zürich."
_CUT = {"tool_calls": [call("call_Q8wE4rT6yU0iO2pA5sD7fG9h", "get_weather", '{"city":"Zü')]}

EXPECTED: dict[str, Expect] = {}
for _kind in ("sse", "json"):
    EXPECTED[f"openai_responses_single_tool.{_kind}"] = Expect(_SINGLE, "tool_calls")
    EXPECTED[f"openai_responses_parallel_tools.{_kind}"] = Expect(_PARALLEL, "tool_calls")
    EXPECTED[f"openai_responses_text.{_kind}"] = Expect(_TEXT, "stop")
    EXPECTED[f"openai_responses_incomplete.{_kind}"] = Expect(_CUT, "length")
EXPECTED["openai_responses_failed.sse"] = Expect(
    None, error="upstream error: The model failed to generate a response."
)
EXPECTED["openai_responses_error_event.sse"] = Expect(
    None, error="upstream error: Something went wrong"
)


def check(result: CaptureResult, name: str) -> None:
    expect = EXPECTED[name]
    assert result.error == expect.error
    if expect.error is not None:
        return
    case = rw.CASES[name.split("_", 2)[2].rsplit(".", 1)[0]]
    assert result.answers == {0: expect.answer}
    assert result.finish_reasons == {0: expect.finish_reason}
    assert (result.model, result.usage, result.done) == (rw.MODEL, usage(case.output_tokens), True)


def test_every_responses_fixture_is_checked() -> None:
    assert set(FILES) == set(EXPECTED)


@pytest.mark.parametrize("name", STREAMS)
def test_stream_fixture_fed_whole(name: str) -> None:
    check(capture([FILES[name]]), name)


@pytest.mark.parametrize("name", STREAMS)
def test_stream_fixture_fed_byte_by_byte(name: str) -> None:
    data = FILES[name]
    check(capture([data[i : i + 1] for i in range(len(data))]), name)


@pytest.mark.parametrize("name", STREAMS)
def test_stream_fixture_split_at_every_byte_boundary(name: str) -> None:
    data = FILES[name]
    whole = capture([data])
    for cut in range(len(data) + 1):
        assert capture([data[:cut], data[cut:]]) == whole, cut


@settings(max_examples=25, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=40))
@pytest.mark.parametrize("name", STREAMS)
def test_stream_fixture_random_chunking(name: str, cuts: list[int]) -> None:
    data = FILES[name]
    points = sorted({min(c, len(data)) for c in cuts})
    parts = [data[a:b] for a, b in itertools.pairwise([0, *points, len(data)])]
    assert capture(parts) == capture([data])


@pytest.mark.parametrize("name", BODIES)
def test_body_fixture(name: str) -> None:
    check(responses_from_body(FILES[name]), name)


@pytest.mark.parametrize("case", [n for n, c in rw.CASES.items() if c.status != "failed"])
def test_stream_and_body_of_one_case_give_the_same_capture(case: str) -> None:
    streamed = capture([FILES[f"openai_responses_{case}.sse"]])
    assert streamed == responses_from_body(FILES[f"openai_responses_{case}.json"])


def _events(case: str = "single_tool") -> list[dict[str, Any]]:
    return copy.deepcopy(rw.events(rw.CASES[case]))


def _without_output(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    del events[-1]["response"]["output"]
    return events


def _drop(events: list[dict[str, Any]], *types: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] not in types]


def _replace_terminal_arguments(events: list[dict[str, Any]], arguments: str) -> list[Any]:
    events[-1]["response"]["output"][0]["arguments"] = arguments
    return events


def _raw(events: list[dict[str, Any]], *extra: bytes) -> bytes:
    return rw.sse(events) + b"".join(extra)


def _untyped(events: list[dict[str, Any]]) -> bytes:
    """The stream with ``type`` only on the ``event:`` line, not in the data."""
    text = rw.sse(events).decode()
    for event in events:
        text = text.replace(f'"type":"{event["type"]}",', "", 1)
    return text.encode()


def _incomplete(reason: str) -> list[dict[str, Any]]:
    events = _events("incomplete")
    events[-1]["response"]["incomplete_details"] = {"reason": reason}
    return events


_DONE_ITEM = "response.output_item.done"
_ARGS_DONE = "response.function_call_arguments.done"
_ADDED = "response.output_item.added"
_TRAILING_ITEM = (
    b'event: response.output_item.added\ndata: {"type":"response.output_item.added",'
    b'"output_index":1,"item":{"type":"function_call","call_id":"c2","name":"x"}}\n\n'
)

QUIRKS = [
    pytest.param(
        _raw(_without_output(_events())),
        Expect(_SINGLE, "tool_calls"),
        id="terminal_output_omitted",
    ),
    pytest.param(
        _raw(_drop(_without_output(_events()), _DONE_ITEM, _ARGS_DONE)),
        Expect(_SINGLE, "tool_calls"),
        id="only_added_and_deltas",
    ),
    pytest.param(
        _raw(
            _drop(
                _without_output(_events("text")),
                _DONE_ITEM,
                "response.output_text.done",
                "response.content_part.done",
            )
        ),
        Expect(_TEXT, "stop"),
        id="text_only_from_deltas",
    ),
    pytest.param(
        _raw(_drop(_without_output(_events()), _ADDED, _DONE_ITEM)),
        Expect({"tool_calls": [{**call("", "", rw.ZURICH), "id": None}]}, "tool_calls"),
        id="no_added_event_keeps_the_arguments_nameless",
    ),
    pytest.param(
        _raw(_replace_terminal_arguments(_events(), '{"city":"Bern"}')),
        Expect(
            {
                "tool_calls": [
                    call("call_k3RnV0aYbW2sX9dQ4mZfT1pL", "get_weather", '{"city":"Bern"}')
                ]
            },
            "tool_calls",
        ),
        id="terminal_output_wins_as_in_the_sdk",
    ),
    pytest.param(
        _raw(_events(), b"data: [DONE]\n\n"), Expect(_SINGLE, "tool_calls"), id="trailing_done"
    ),
    pytest.param(
        _raw(_events(), _TRAILING_ITEM), Expect(_SINGLE, "tool_calls"), id="events_after_terminal"
    ),
    pytest.param(
        _raw(_events()).replace(b"\n\n", b"\n\n: keep-alive\n\n"),
        Expect(_SINGLE, "tool_calls"),
        id="comments",
    ),
    pytest.param(_raw(_events()).replace(b"\n", b"\r\n"), Expect(_SINGLE, "tool_calls"), id="crlf"),
    pytest.param(
        _raw(_events()).replace(b"\n\n", b"\n\ndata: \xe3\x80\x80\n\n", 1),
        Expect(_SINGLE, "tool_calls"),
        id="unicode_whitespace_data_is_no_event",
    ),
    pytest.param(
        _raw(_events()[:2]) + b"data: \xff{}\n\n",
        Expect(None, error="event 3: invalid JSON"),
        id="invalid_utf8_outside_a_string_is_invalid_json",
    ),
    pytest.param(_untyped(_events()), Expect(_SINGLE, "tool_calls"), id="type_only_on_event_line"),
    pytest.param(
        _raw(_incomplete("content_filter")),
        Expect(_CUT, "content_filter"),
        id="incomplete_content_filter",
    ),
    pytest.param(
        _raw(_events()[:-1]),
        Expect(_SINGLE, None, "stream ended before response.completed"),
        id="cut_before_terminal",
    ),
    pytest.param(b"", Expect(None, error="stream ended before response.completed"), id="empty"),
    pytest.param(
        _raw(_events()[:2]) + b'event: response.output_item.added\ndata: {"type":',
        Expect(None, error="event 3: invalid JSON"),
        id="cut_inside_an_event",
    ),
    pytest.param(
        _raw(_events()[:4], b'data: {"error":{"message":"upstream broke the stream"}}\n\n'),
        Expect(None, error="upstream error: upstream broke the stream"),
        id="chat_style_in_band_error",
    ),
    pytest.param(
        _raw([*_events()[:2], {"type": "response.failed", "response": {"status": "failed"}}]),
        Expect(None, error="upstream error: response failed"),
        id="failed_without_error_object",
    ),
]


@pytest.mark.parametrize(("data", "expect"), QUIRKS)
def test_stream_quirk(data: bytes, expect: Expect) -> None:
    result = capture([data])
    if expect.error is None:
        assert result.error is None
    else:
        assert result.error is not None
        assert result.error.startswith(expect.error)
    if expect.answer is not None:
        assert result.answers == {0: expect.answer}
        assert result.finish_reasons == {0: expect.finish_reason}


def _body(**changes: Any) -> bytes:
    response = rw.response_json(rw.CASES["single_tool"])
    response.update(changes)
    return orjson.dumps(response)


BODY_CASES = [
    pytest.param(
        _body(output=[{**rw.item_json(rw.CASES["single_tool"].items[0]), "arguments": {"a": 1}}]),
        Expect(
            {"tool_calls": [call("call_k3RnV0aYbW2sX9dQ4mZfT1pL", "get_weather", '{"a":1}')]},
            "tool_calls",
        ),
        id="arguments_as_an_object",
    ),
    pytest.param(
        _body(
            output=[
                rw.item_json(rw.Reasoning("rs_1")),
                rw.item_json(rw.Text("a", "m1")),
                rw.item_json(rw.Text("b", "m2")),
            ]
        ),
        Expect("ab", "stop"),
        id="text_of_every_message_item_in_order",
    ),
    pytest.param(
        _body(output=[{"type": "message", "content": [{"type": "refusal", "refusal": "No."}]}]),
        Expect("", "stop"),
        id="refusal_is_no_text",
    ),
    pytest.param(
        _body(output=[{"type": "web_search_call", "id": "ws_1", "status": "completed"}]),
        Expect("", "stop"),
        id="built_in_tool_call_is_not_an_answer",
    ),
    pytest.param(
        _body(status="queued", output=[]), Expect(None), id="background_queued_has_no_answer"
    ),
    pytest.param(
        _body(status="failed", error={"code": "server_error", "message": "boom"}),
        Expect(None, error="upstream error: boom"),
        id="failed",
    ),
    pytest.param(_body(output=None), Expect(None, error="body has no output list"), id="no_output"),
    pytest.param(
        _body(output=[1]), Expect(None, error="an output item is not"), id="output_item_not_object"
    ),
    pytest.param(b"[]", Expect(None, error="body is not a JSON object"), id="not_an_object"),
    pytest.param(b"Internal Server Error", Expect(None, error="invalid JSON"), id="not_json"),
]


@pytest.mark.parametrize(("data", "expect"), BODY_CASES)
def test_body_case(data: bytes, expect: Expect) -> None:
    result = responses_from_body(data)
    if expect.error is None:
        assert result.error is None
    else:
        assert result.error is not None
        assert result.error.startswith(expect.error)
    expected = {} if expect.answer is None else {0: expect.answer}
    assert result.answers == expected


@settings(max_examples=200, deadline=None)
@given(
    data=st.binary(max_size=400)
    | st.sampled_from(STREAMS).flatmap(
        lambda name: st.integers(0, len(FILES[name])).map(lambda n: FILES[name][:n])
    ),
    cuts=st.lists(st.integers(0, 400), max_size=8),
)
def test_any_bytes_give_a_result_never_an_exception(data: bytes, cuts: list[int]) -> None:
    points = sorted({min(c, len(data)) for c in cuts})
    parts = [data[a:b] for a, b in itertools.pairwise([0, *points, len(data)])]
    result = capture(parts)
    assert result.error is not None or result.done
    assert responses_from_body(data).error is not None or responses_from_body(data).done


@pytest.mark.parametrize("action", ["finish_twice", "feed_after_finish"])
def test_capture_lifecycle(action: str) -> None:
    stream = ResponsesStreamCapture()
    stream.feed(FILES["openai_responses_single_tool.sse"])
    first = stream.finish()
    if action == "feed_after_finish":
        stream.feed(rw.sse([{"type": "error", "message": "late"}]))
    assert stream.finish() == first
    assert first.answers == {0: _SINGLE}


@pytest.mark.parametrize("surface", ["stream", "body"])
def test_internal_bug_is_reported_not_raised(surface: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(output: list[Any]) -> tuple[Answer, bool]:
        raise KeyError("bug")

    monkeypatch.setattr("proxy.pipeline.capture.responses._output_answer", broken)
    name = "openai_responses_single_tool." + ("sse" if surface == "stream" else "json")
    if surface == "stream":
        stream = ResponsesStreamCapture()
        stream.feed(FILES[name])
        result = stream.finish()
    else:
        result = responses_from_body(FILES[name])
    assert result.error is not None
    assert result.error.startswith("internal capture error: KeyError")
