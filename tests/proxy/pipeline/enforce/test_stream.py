"""StreamEnforcer over real wire-format streams: what the client receives per mode and decision,
that text is never held, and that any chunking of the upstream bytes gives the same output."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk

from proxy.pipeline.enforce.decision import PASS, Decision, Enforced
from proxy.pipeline.enforce.stream import (
    ODD_INDEX_REASON,
    SIBLING_REASON,
    StreamEnforcer,
    notice_line,
)
from tests.support.enforce_streams import (
    CALL_ITEMS,
    CHAT,
    CHAT_TABLE,
    NOTICE,
    RESPONSES,
    RESPONSES_TABLE,
    WEATHER,
    call_args,
    call_names,
    call_start,
    calls_stream,
    chat_calls,
    chunk,
    custom_input,
    custom_start,
    delta,
    events_of,
    forbid,
    read_chat,
    read_responses,
    responses_calls,
    responses_text,
    run,
    sse,
)

NOTICE_ID = "msg_gradeproxy_notice"


def _line(name: str, forbidden: str) -> str:
    if name == forbidden:
        return notice_line(
            name, Decision("block", check=f"no_{name}", reason=f"forbidden call '{name}'")
        )
    return notice_line(
        name,
        Decision(
            "block",
            check=f"no_{forbidden}",
            reason="withheld with the blocked call in the same answer",
        ),
    )


@pytest.mark.parametrize(
    ("stream", "forbidden", "mode", "calls", "finish", "notice"),
    CHAT_TABLE,
    ids=[f"{r[0]}-{r[2]}-{r[1]}" for r in CHAT_TABLE],
)
def test_chat_client_gets_only_allowed_calls(
    stream: str,
    forbidden: str,
    mode: str,
    calls: dict[int, list[str]],
    finish: dict[int, str | None],
    notice: list[str] | None,
) -> None:
    body = CHAT[stream]
    out, outcomes = run("chat", mode, forbid(forbidden), body)
    before, after = read_chat(body), read_chat(out)
    assert {n: chat_calls(after, n) for n in after.choices} == calls
    assert {n: c.finish for n, c in after.choices.items()} == finish
    assert after.done == before.done
    assert after.usage == before.usage
    for number, choice in after.choices.items():
        # text is kept whole; a notice is appended after it (on a line of its own)
        original = before.choices[number].content
        assert choice.content.startswith(original)
        added = choice.content[len(original) :].lstrip("\n")
        if notice is not None and number == 0:
            assert added == "\n".join(_line(name, forbidden) for name in notice)
        else:
            assert added == ""
        if not calls[number]:
            assert not choice.legacy, "a legacy function_call of a removed call was kept"
        for index, call in choice.calls.items():
            original_call = next(
                c for c in before.choices[number].calls.values() if c["id"] == call["id"]
            )
            assert call == original_call, f"call {index} changed"
    assert {o.name for o in outcomes} == call_names(before)


def test_chat_judge_sees_arguments_as_sent_even_invalid_json() -> None:
    seen: list[tuple[str, str]] = []

    def judge(name: str, arguments: str) -> Decision:
        seen.append((name, arguments))
        return PASS

    run("chat", "strip", judge, CHAT["invalid_json_args"], cuts=[50, 51, 300])
    assert seen == [("delete_payment", '{"payment_id": "pay_10')]


def test_chat_custom_call_kept_is_renumbered() -> None:
    """A custom call the judge passes keeps its fragments, moved to index 0 when the function
    call before it is stripped; the judge reads its ``input`` as the arguments (the openai
    SDK's chat stream helper cannot build a custom call itself, so this is not an SDK row)."""
    body = sse(
        *calls_stream([WEATHER], done=False),
        chunk(delta(tool_calls=[custom_start(1, "delete_payment", "call_1")])),
        chunk(delta(tool_calls=[custom_input(1, "pay_1002")])),
        chunk(delta(finish="tool_calls")),
        "[DONE]",
    )
    seen: list[tuple[str, str]] = []

    def judge(name: str, arguments: str) -> Decision:
        seen.append((name, arguments))
        return forbid("get_weather", action="strip")(name, arguments)

    out, _ = run("chat", "strip", judge, body)
    read = read_chat(out)
    assert read.choices[0].calls == {
        0: {"id": "call_1", "name": "delete_payment", "args": "pay_1002"}
    }
    assert read.choices[0].finish == "tool_calls"
    assert seen == [WEATHER, ("delete_payment", "pay_1002")]


def _sdk_name(fragments: list[str]) -> str:
    """The name the openai SDK's stream accumulation assembles from these fragments."""
    state: ChatCompletionStreamState[None] = ChatCompletionStreamState()
    for number, fragment in enumerate(fragments):
        entry: dict[str, Any] = {"index": 0, "function": {"name": fragment}}
        if number == 0:
            entry |= {"id": "call_0", "type": "function"}
        state.handle_chunk(ChatCompletionChunk.model_validate(chunk(delta(tool_calls=[entry]))))
    [call] = state.current_completion_snapshot.choices[0].message.tool_calls or []
    assert call.type == "function"
    return call.function.name


# (name fragments, the name judged where it is not the SDK's: a restatement)
NAME_FRAGMENTS: list[tuple[str, list[str], str | None]] = [
    ("pieces", ["delete_", "payment"], None),
    # a piece that is a prefix of the name so far, then more (the rule before judged "reun")
    ("a-prefix-piece", ["re", "r", "un"], None),
    # a piece that begins with the name so far (the rule before judged "get_weather")
    ("a-piece-beginning-with-the-name", ["get", "get_weather"], None),
    ("a-piece-ending-the-name", ["get_weather", "weather"], None),
    # llama-cpp-python restates the whole name in every chunk: judged once, where the SDK
    # assembles "get_weatherget_weatherget_weather" (a name no request declares)
    ("restated-in-every-chunk", ["get_weather", "get_weather", "get_weather"], "get_weather"),
    ("restated-after-growing", ["get_", "weather", "get_weather"], "get_weather"),
]


@pytest.mark.parametrize(
    ("fragments", "restated"),
    [row[1:] for row in NAME_FRAGMENTS],
    ids=[row[0] for row in NAME_FRAGMENTS],
)
def test_chat_judges_the_name_the_openai_sdk_assembles(
    fragments: list[str], restated: str | None
) -> None:
    entries = [call_start(0, fragments[0], "call_0")]
    entries += [{"index": 0, "function": {"name": f}} for f in fragments[1:]]
    body = sse(
        chunk(delta(role="assistant", content="")),
        *(chunk(delta(tool_calls=[e])) for e in entries),
        chunk(delta(tool_calls=[call_args(0, "{}")])),
        chunk(delta(finish="tool_calls")),
        "[DONE]",
    )
    seen: list[str] = []

    def judge(name: str, arguments: str) -> Decision:
        seen.append(name)
        return PASS

    run("chat", "strip", judge, body)
    sdk = _sdk_name(fragments)
    assert sdk == "".join(fragments)  # the SDK concatenates
    assert seen == [sdk if restated is None else restated]


# An index that is there but no non-negative integer: clients disagree on the call it joins
# (the SDK's helper raises on a string, reads True as 1 and -1 from the end; the Agents SDK keys
# a dict by it), so in an acting mode its call is withheld whatever the verdict (observe counts
# it as such). A missing index is the entry's position, as a server that omits it lists calls in
# order.
ODD_INDICES: list[tuple[str, Any]] = [
    ("string", "0"),
    ("bool", True),
    ("negative", -1),
    ("fractional", 0.5),
    ("object", {"i": 0}),
]


_MISSING = object()


def _indexed(index: Any) -> bytes:
    start: dict[str, Any] = call_start(0, "get_weather", "call_0")
    more: dict[str, Any] = call_args(0, '{"city":"Paris"}')
    if index is _MISSING:
        del start["index"], more["index"]
    else:
        start["index"] = more["index"] = index
    return sse(
        chunk(delta(role="assistant", content="")),
        chunk(delta(tool_calls=[start])),
        chunk(delta(tool_calls=[more])),
        chunk(delta(finish="tool_calls")),
        "[DONE]",
    )


_WITHHELD_ODD = Decision("strip", "unreadable", ODD_INDEX_REASON)


@pytest.mark.parametrize("index", [i for _, i in ODD_INDICES], ids=[n for n, _ in ODD_INDICES])
def test_chat_call_at_an_odd_index_is_withheld_in_an_acting_mode(index: Any) -> None:
    body = _indexed(index)
    out, outcomes = run("chat", "strip", lambda n, a: PASS, body)
    assert b"get_weather" not in out
    assert read_chat(out).choices[0].finish == "stop"
    assert outcomes == (Enforced("get_weather", _WITHHELD_ODD),)
    blocked, _ = run("chat", "block", lambda n, a: PASS, body)
    line = notice_line("get_weather", Decision("block", "unreadable", ODD_INDEX_REASON))
    assert read_chat(blocked).choices[0].content == line
    watched, outcomes = run("chat", "observe", lambda n, a: PASS, body)
    assert watched == body
    would = Decision("observe", "unreadable", ODD_INDEX_REASON, would="block")
    assert outcomes == (Enforced("get_weather", would),)


def test_chat_call_with_no_index_is_judged_at_its_position() -> None:
    body = _indexed(_MISSING)
    assert run("chat", "strip", lambda n, a: PASS, body)[0] == body
    out, outcomes = run("chat", "strip", forbid("get_weather", action="strip"), body)
    assert b"get_weather" not in out
    assert [o.name for o in outcomes] == ["get_weather"]


# A stream cut before finish_reason and [DONE]: held calls are judged as complete at EOF, kept
# calls released as they came, and nothing (no finish_reason, no [DONE]) is invented.
@pytest.mark.parametrize(
    ("mode", "forbidden", "calls", "notice"),
    [
        ("strip", "delete_payment", ["get_weather"], False),
        ("strip", "nothing", ["get_weather", "delete_payment"], False),
        ("block", "delete_payment", [], True),
        ("observe", "delete_payment", ["get_weather", "delete_payment"], False),
    ],
)
def test_chat_upstream_cut_resolves_held_calls_at_close(
    mode: str, forbidden: str, calls: list[str], notice: bool
) -> None:
    body = CHAT["cut_before_finish"]
    enforcer = StreamEnforcer("chat", forbid(forbidden), mode)  # type: ignore[arg-type]
    during = enforcer.feed(body)
    out = during + enforcer.close()
    read = read_chat(out)
    assert chat_calls(read) == calls
    assert read.choices[0].finish is None
    assert not read.done
    assert (NOTICE in read.choices[0].content) is notice
    assert [o.name for o in enforcer.outcomes] == ["get_weather", "delete_payment"]
    if mode in ("strip", "block"):
        # the last call was still held when the upstream cut: only close() released it
        assert b"delete_payment" not in during


@pytest.mark.parametrize("marker", [b"[DONE]", b"[DONE]x", b"[DONE] ", b"[DONE]{}"])
@pytest.mark.parametrize("mode", ["strip", "observe"])
def test_chat_calls_held_at_a_done_marker_go_before_it(marker: bytes, mode: str) -> None:
    """The openai SDK stops at any data starting with ``[DONE]``: a call still held there must
    be written before the marker, or the client never reads it."""
    body = CHAT["cut_before_finish"] + b"data: " + marker + b"\n\n"
    enforcer = StreamEnforcer("chat", forbid("nothing"), mode)  # type: ignore[arg-type]
    during = enforcer.feed(body)
    done_at = during.index(b"data: " + marker)
    assert b"get_weather" in during[:done_at]
    assert b"delete_payment" in during[:done_at]
    assert enforcer.close() == b""


@pytest.mark.parametrize("stream", sorted(CHAT))
def test_chat_observe_is_byte_identical_and_records(stream: str) -> None:
    body = CHAT[stream]
    out, outcomes = run("chat", "observe", forbid("delete_payment", "get_time"), body, [13, 200])
    assert out == body
    assert {o.name for o in outcomes} == call_names(read_chat(body))
    for outcome in outcomes:
        assert outcome.decision.action == (
            "block" if outcome.name in {"delete_payment", "get_time"} else "pass"
        )


# Where a pass is not byte-identical, by design: a chunk mixing text with a call is split (the
# text goes at once), and another choice's text overtakes a call still held. What the client
# accumulates is the same.
REORDERED = {"mixed_chunk", "two_choices"}


@pytest.mark.parametrize("stream", sorted(set(CHAT) - REORDERED))
@pytest.mark.parametrize("mode", ["block", "strip"])
def test_chat_pass_is_byte_identical(stream: str, mode: str) -> None:
    body = CHAT[stream]
    assert run("chat", mode, lambda n, a: PASS, body)[0] == body


@pytest.mark.parametrize("stream", sorted(REORDERED))
@pytest.mark.parametrize("mode", ["block", "strip"])
def test_chat_pass_of_split_or_interleaved_stream_reads_the_same(stream: str, mode: str) -> None:
    body = CHAT[stream]
    out = run("chat", mode, lambda n, a: PASS, body)[0]
    assert out != body
    assert read_chat(out) == read_chat(body)


@pytest.mark.parametrize("stream", ["text_then_delete", "mixed_chunk"])
def test_chat_text_is_written_as_soon_as_it_arrives(stream: str) -> None:
    """Each text event comes out of the feed that completed it, before the call is judged."""
    body = CHAT[stream]
    enforcer = StreamEnforcer("chat", forbid("delete_payment"), "block")
    text = ""
    for raw in body.split(b"\n\n")[:-1]:
        if b'"finish_reason":"tool_calls"' in raw:
            break
        out = enforcer.feed(raw + b"\n\n")
        for _, data in events_of(out):
            for choice in json.loads(data).get("choices", []):
                text += (choice.get("delta") or {}).get("content") or ""
        expected = read_chat(raw + b"\n\n").choices
        sent = "".join(c.content for c in expected.values())
        if sent:
            assert text.endswith(sent), "text held back"
    assert text == read_chat(body).choices[0].content


def test_chat_text_only_stream_passes_each_event_unchanged_at_once() -> None:
    body = CHAT["openai_text"]
    enforcer = StreamEnforcer("chat", forbid("get_weather"), "block")
    for raw in body.split(b"\n\n")[:-1]:
        assert enforcer.feed(raw + b"\n\n") == raw + b"\n\n"
    assert enforcer.close() == b""


# -- Responses ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stream", "forbidden", "mode", "calls", "notice"),
    RESPONSES_TABLE,
    ids=[f"{r[0]}-{r[2]}-{r[1]}" for r in RESPONSES_TABLE],
)
def test_responses_client_gets_only_allowed_calls(
    stream: str, forbidden: str, mode: str, calls: list[str], notice: list[str] | None
) -> None:
    body = RESPONSES[stream]
    out, _ = run("responses", mode, forbid(forbidden), body)
    # (an upstream's terminal output may hold a call it never streamed)
    before, original_terminal = read_responses(body, whole=False)
    events, terminal = read_responses(out)
    # a call only the terminal output holds is not among the events
    assert responses_calls(events) == [c for c in calls if c in responses_calls(before)]
    assert terminal is not None
    assert [i.get("name") for i in terminal["output"] if i["type"] in CALL_ITEMS] == calls
    assert original_terminal is not None
    # the output is the upstream's, less the removed calls; a block notice (a message item)
    # takes the place of the first withheld call, as in a non-streamed answer
    expected = [
        item["id"]
        for item in original_terminal["output"]
        if item["type"] not in CALL_ITEMS or item["name"] in calls
    ]
    if notice is not None:
        first = next(
            i for i, item in enumerate(original_terminal["output"]) if item["type"] in CALL_ITEMS
        )
        expected.insert(first, NOTICE_ID)
    assert [item["id"] for item in terminal["output"]] == expected
    text = "\n".join(_line(n, forbidden) for n in notice or [])
    if notice is not None:
        [message] = [item for item in terminal["output"] if item["id"] == NOTICE_ID]
        assert message["content"][0]["text"] == text
    assert responses_text(events).replace(text, "") == responses_text(before)
    # everything else the upstream said (reasoning, text, usage, status) is kept
    assert terminal["status"] == "completed"
    assert terminal["usage"] == original_terminal["usage"]


@pytest.mark.parametrize(
    ("mode", "forbidden", "calls", "notice"),
    [
        ("strip", "get_weather", ["delete_payment"], False),
        ("strip", "nothing", ["delete_payment", "get_weather"], False),
        ("block", "delete_payment", [], True),
    ],
)
def test_responses_upstream_cut_resolves_held_calls_at_close(
    mode: str, forbidden: str, calls: list[str], notice: bool
) -> None:
    body = RESPONSES["cut_before_item_done"]
    out, outcomes = run("responses", mode, forbid(forbidden), body)
    events, terminal = read_responses(out)
    added = [e["item"].get("name") for e in events if e["type"] == "response.output_item.added"]
    assert [n for n in added if n] == calls
    assert terminal is None  # nothing invented
    assert (NOTICE in responses_text(events)) is notice
    assert [o.name for o in outcomes] == ["delete_payment", "get_weather"]


@pytest.mark.parametrize("stream", sorted(RESPONSES))
@pytest.mark.parametrize("mode", ["block", "strip"])
def test_responses_pass_is_byte_identical(stream: str, mode: str) -> None:
    body = RESPONSES[stream]
    assert run("responses", mode, lambda n, a: PASS, body)[0] == body


@pytest.mark.parametrize("stream", sorted(RESPONSES))
def test_responses_observe_is_byte_identical_and_records(stream: str) -> None:
    body = RESPONSES[stream]
    out, outcomes = run("responses", "observe", forbid("delete_payment"), body, [5, 999])
    assert out == body
    # every call streamed, and every one only the terminal output holds
    events, terminal = read_responses(body, whole=False)
    names = {
        e["item"]["id"]: e["item"]["name"]
        for e in events
        if e["type"] == "response.output_item.added" and e["item"]["type"] in CALL_ITEMS
    }
    names |= {
        i["id"]: i["name"] for i in (terminal or {}).get("output", ()) if i["type"] in CALL_ITEMS
    }
    assert sorted(o.name for o in outcomes) == sorted(names.values())


def test_responses_text_before_a_call_is_not_held() -> None:
    body = RESPONSES["text_then_delete"]
    enforcer = StreamEnforcer("responses", forbid("delete_payment"), "block")
    for raw in body.split(b"\n\n")[:-1]:
        out = enforcer.feed(raw + b"\n\n")
        if b"function_call" in raw:
            break
        assert out == raw + b"\n\n"


# -- any chunking ---------------------------------------------------------------------------

ALL = [("chat", name) for name in sorted(CHAT)] + [("responses", n) for n in sorted(RESPONSES)]
IDENTICAL = [case for case in ALL if case[1] not in REORDERED or case[0] == "responses"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=st.sampled_from(ALL),
    mode=st.sampled_from(["observe", "block", "strip"]),
    forbidden=st.sampled_from(["delete_payment", "get_weather", "get_time", "nothing"]),
    data=st.data(),
)
def test_any_chunking_gives_the_output_of_one_feed(
    case: tuple[str, str], mode: str, forbidden: str, data: st.DataObject
) -> None:
    api, name = case
    body = (CHAT if api == "chat" else RESPONSES)[name]
    cuts = data.draw(st.lists(st.integers(1, len(body) - 1), max_size=40))
    whole, outcomes = run(api, mode, forbid(forbidden), body)
    chopped, chopped_outcomes = run(api, mode, forbid(forbidden), body, cuts)
    assert chopped == whole
    assert chopped_outcomes == outcomes


@settings(max_examples=60, deadline=None)
@given(case=st.sampled_from(IDENTICAL), mode=st.sampled_from(["block", "strip"]), data=st.data())
def test_pass_output_is_the_input_for_any_chunking(
    case: tuple[str, str], mode: str, data: st.DataObject
) -> None:
    api, name = case
    body = (CHAT if api == "chat" else RESPONSES)[name]
    cuts = data.draw(st.lists(st.integers(1, len(body) - 1), max_size=40))
    assert run(api, mode, lambda n, a: PASS, body, cuts)[0] == body


@pytest.mark.parametrize("case", [("chat", "openai_parallel"), ("responses", "parallel")])
def test_a_call_split_at_every_byte_boundary(case: tuple[str, str]) -> None:
    api, name = case
    body = (CHAT if api == "chat" else RESPONSES)[name]
    whole, _ = run(api, "strip", forbid("get_time"), body)
    for cut in range(1, len(body)):
        assert run(api, "strip", forbid("get_time"), body, [cut])[0] == whole, cut


def test_crlf_and_cr_line_ends_split_anywhere() -> None:
    body = CHAT["openai_parallel"]
    for ending in (b"\r\n", b"\r"):
        converted = body.replace(b"\n", ending)
        whole, _ = run("chat", "strip", forbid("get_time"), converted)
        assert chat_calls(read_chat(whole)) == ["get_weather"]
        for cut in range(1, len(converted), 97):
            assert run("chat", "strip", forbid("get_time"), converted, [cut, cut + 1])[0] == whole


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=st.sampled_from(ALL),
    mode=st.sampled_from(["observe", "block", "strip"]),
    forbidden=st.sampled_from(["delete_payment", "get_weather", "get_time"]),
    data=st.data(),
)
def test_a_stream_cut_at_any_byte_gives_the_output_of_one_feed(
    case: tuple[str, str], mode: str, forbidden: str, data: st.DataObject
) -> None:
    """Upstream EOF anywhere (inside an event too): chunking still does not matter, observe
    still gives the bytes that came, and no removed call leaks through close()."""
    api, name = case
    full = (CHAT if api == "chat" else RESPONSES)[name]
    body = full[: data.draw(st.integers(1, len(full)))]
    cuts = data.draw(st.lists(st.integers(1, max(1, len(body) - 1)), max_size=20))
    whole, outcomes = run(api, mode, forbid(forbidden), body)
    chopped, chopped_outcomes = run(api, mode, forbid(forbidden), body, cuts)
    assert chopped == whole
    assert chopped_outcomes == outcomes
    if mode == "observe":
        assert whole == body
    elif mode == "strip":
        refused = {o.name for o in outcomes if o.decision.action != "pass"}
        for _, event_data in events_of(whole):
            if event_data != "[DONE]":
                assert not refused & _called_names(json.loads(event_data))


def _called_names(obj: Any) -> set[str]:
    """Names of calls an event hands the client (a tool_calls entry, a function_call item)."""
    names: set[str] = set()
    for choice in obj.get("choices") or []:
        delta = choice.get("delta") or {}
        for entry in delta.get("tool_calls") or []:
            names.add((entry.get("function") or {}).get("name") or "")
        names.add((delta.get("function_call") or {}).get("name") or "")
    item = obj.get("item") or {}
    if item.get("type") == "function_call":
        names.add(item.get("name") or "")
    return names - {""}


@pytest.mark.parametrize(
    ("tail", "mode", "kept"),
    [
        (b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}', "block", True),
        (b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}', "observe", True),
        (b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":1}]}}]}', "strip", False),
        (b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":1}]}}]}', "observe", True),
        (b"data: [DO", "strip", True),
    ],
)
def test_an_unterminated_last_event_passes_unless_it_carries_a_call(
    tail: bytes, mode: str, kept: bool
) -> None:
    body = CHAT["openai_text"].removesuffix(b"data: [DONE]\n\n") + tail
    out, _ = run("chat", mode, forbid("delete_payment"), body)
    assert out.endswith(tail) is kept
    assert out.removesuffix(tail) == body.removesuffix(tail)


def test_responses_sequence_numbers_continue_from_the_upstreams_first() -> None:
    """A stream whose numbering starts at 5 (a relay that resumed) keeps its base."""
    body = re.sub(
        rb'"sequence_number":(\d+)',
        lambda m: b'"sequence_number":%d' % (int(m[1]) + 5),
        RESPONSES["parallel"],
    )
    assert run("responses", "strip", lambda n, a: PASS, body)[0] == body
    for mode in ("strip", "block"):
        out, _ = run("responses", mode, forbid("get_time"), body)
        numbers = [json.loads(data)["sequence_number"] for _, data in events_of(out)]
        assert numbers == list(range(5, 5 + len(numbers)))


# -- whatever the backend sends -------------------------------------------------------------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
# (floats: NaN and Infinity, which json.dumps writes and only a lenient reader takes)
_ODD = st.one_of(
    _JSON, st.integers(0, 3), st.floats(), st.sampled_from(["get_weather", "delete_payment"])
)
_FUNCTION = st.one_of(_JSON, st.fixed_dictionaries({"name": _ODD, "arguments": _ODD}))
_CUSTOM = st.one_of(_JSON, st.fixed_dictionaries({"name": _ODD, "input": _ODD}))
_TOOL_CALLS = st.lists(
    st.fixed_dictionaries({"index": _ODD, "id": _ODD, "function": _FUNCTION, "custom": _CUSTOM}),
    max_size=3,
)
_DELTA = st.fixed_dictionaries(
    {"content": _ODD, "function_call": _FUNCTION, "tool_calls": st.one_of(_JSON, _TOOL_CALLS)}
)
_CHOICE = st.fixed_dictionaries(
    {
        "index": _ODD,
        "delta": st.one_of(_JSON, _DELTA),
        "finish_reason": st.one_of(_ODD, st.just("tool_calls")),
    }
)
_CHAT_EVENT = st.fixed_dictionaries({"choices": st.one_of(_JSON, st.lists(_CHOICE, max_size=3))})
_ITEM = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["function_call", "custom_tool_call"]),
        "id": _ODD,
        "call_id": _ODD,
        "name": _ODD,
        "arguments": _ODD,
        "input": _ODD,
    }
)
_RESPONSES_EVENT = st.fixed_dictionaries(
    {
        "type": st.sampled_from(
            [
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.custom_tool_call_input.delta",
                "response.custom_tool_call_input.done",
                "response.output_item.done",
                "response.completed",
                "response.output_text.delta",
            ]
        ),
        "sequence_number": _ODD,
        "output_index": _ODD,
        "item": st.one_of(_JSON, _ITEM),
        "delta": _ODD,
        "arguments": _ODD,
        "input": _ODD,
        "response": st.one_of(
            _JSON, st.fixed_dictionaries({"output": st.lists(st.one_of(_JSON, _ITEM), max_size=3)})
        ),
    }
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    api=st.sampled_from(["chat", "responses"]),
    mode=st.sampled_from(["observe", "block", "strip"]),
    data=st.data(),
)
def test_whatever_the_backend_sends_never_raises(api: str, mode: str, data: st.DataObject) -> None:
    """Odd types anywhere, broken JSON, stray bytes: no exception, chunking still irrelevant."""
    strategy = _CHAT_EVENT if api == "chat" else _RESPONSES_EVENT
    events = data.draw(st.lists(st.one_of(strategy, _JSON, st.just("[DONE]")), max_size=8))
    body = b"".join(
        b"data: " + (e.encode() if isinstance(e, str) else json.dumps(e).encode()) + b"\n\n"
        for e in events
    ) + data.draw(st.binary(max_size=20))
    cuts = data.draw(st.lists(st.integers(1, max(1, len(body) - 1)), max_size=6))
    whole, outcomes = run(api, mode, forbid("delete_payment"), body)
    assert run(api, mode, forbid("delete_payment"), body, cuts) == (whole, outcomes)
    if mode == "observe":
        assert whole == body


@pytest.mark.parametrize("mode", ["block", "strip"])
def test_responses_done_marker_comes_after_what_was_held(mode: str) -> None:
    """A Responses-compatible server that ends with ``[DONE]`` and no terminal event."""
    body = RESPONSES["cut_before_item_done"] + b"data: [DONE]\n\n"
    out, _ = run("responses", mode, forbid("delete_payment"), body)
    assert out.endswith(b"data: [DONE]\n\n")
    events, _ = read_responses(out.removesuffix(b"data: [DONE]\n\n"))
    added = [
        e["item"]["name"]
        for e in events
        if e["type"] == "response.output_item.added" and e["item"]["type"] == "function_call"
    ]
    assert added == ([] if mode == "block" else ["get_weather"])
    assert (NOTICE in responses_text(events)) is (mode == "block")


@pytest.mark.parametrize(
    ("api", "stream"), [("chat", "openai_parallel"), ("responses", "parallel")]
)
@pytest.mark.parametrize("mode", ["block", "strip", "observe"])
def test_outcomes_are_the_decisions_as_applied(api: str, stream: str, mode: str) -> None:
    """As the non-streamed path records them: in a block every call of the refused answer reads
    ``block`` (the sibling with the refused call's check); otherwise the judge's own decision."""
    body = (CHAT if api == "chat" else RESPONSES)[stream]
    judge = forbid("get_time", action="strip")  # a strip verdict in block mode blocks
    _, outcomes = run(api, mode, judge, body)
    refused = Decision("strip", check="no_get_time", reason="forbidden call 'get_time'")
    if mode == "block":
        expected = [
            Enforced("get_weather", Decision("block", "no_get_time", SIBLING_REASON)),
            Enforced("get_time", Decision("block", "no_get_time", "forbidden call 'get_time'")),
        ]
    else:
        expected = [Enforced("get_weather", PASS), Enforced("get_time", refused)]
    assert list(outcomes) == expected


@pytest.mark.parametrize(("mode", "delivered"), [("strip", False), ("observe", True)])
def test_a_call_after_the_finish_is_judged_never_leaked(mode: str, delivered: bool) -> None:
    """A backend that sends a call after the choice's finish_reason (a protocol slip)."""
    late = sse(
        chunk(delta(tool_calls=[call_start(1, "delete_payment", "call_9")])),
        chunk(delta(tool_calls=[call_args(1, '{"payment_id":"pay_1"}')])),
    )
    body = CHAT["openai_single"].replace(b"data: [DONE]", late.rstrip(b"\n") + b"\n\ndata: [DONE]")
    out, outcomes = run("chat", mode, forbid("delete_payment"), body)
    assert [o.name for o in outcomes] == ["get_weather", "delete_payment"]
    assert (b"delete_payment" in out) is delivered
