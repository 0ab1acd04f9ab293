"""Streams for the enforce tests, in the exact wire shapes of real servers, and readers that
check what a client would check.

The chat streams are the recorded or reference fixtures of ``tests/fixtures/wire`` plus a few
built here in OpenAI's chunk shape (text before a call, a chunk mixing text and a call, two
choices with calls, arguments that are not JSON, a stream cut before its finish); the Responses
streams come from ``tests.support.responses_wire``, which writes the API reference's shapes.
The readers decode with the house SSE decoder and assert the invariants a client relies on
(contiguous tool-call indices, sequence numbers, output indices), so every table row checks
them.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

from proxy.pipeline.capture.sse import SSEDecoder
from proxy.pipeline.enforce.decision import PASS, CallJudge, Decision, Enforced
from proxy.pipeline.enforce.stream import StreamEnforcer
from tests.support.backend import wire
from tests.support.responses_wire import Call, Case, CustomCall, Reasoning, Text, events
from tests.support.responses_wire import sse as responses_sse
from tests.support.responses_wire import stream as responses_stream

_ENVELOPE = {
    "id": "chatcmpl-enf1",
    "object": "chat.completion.chunk",
    "created": 1764547200,
    "model": "gpt-4.1-mini-2025-04-14",
    "system_fingerprint": "fp_79b79be41f",
}


def chunk(*choices: dict[str, Any], usage: Any = None) -> dict[str, Any]:
    return {**_ENVELOPE, "choices": list(choices), "usage": usage}


def delta(index: int = 0, finish: str | None = None, **fields: Any) -> dict[str, Any]:
    return {"index": index, "delta": fields, "logprobs": None, "finish_reason": finish}


def call_start(index: int, name: str, call_id: str) -> dict[str, Any]:
    return {
        "index": index,
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": ""},
    }


def call_args(index: int, text: str) -> dict[str, Any]:
    return {"index": index, "function": {"arguments": text}}


def custom_start(index: int, name: str, call_id: str) -> dict[str, Any]:
    """The first fragment of a chat ``custom`` tool call (free-text ``input``, no arguments)."""
    return {"index": index, "id": call_id, "type": "custom", "custom": {"name": name, "input": ""}}


def custom_input(index: int, text: str) -> dict[str, Any]:
    return {"index": index, "custom": {"input": text}}


def sse(*events: dict[str, Any] | str) -> bytes:
    out = []
    for event in events:
        data = event if isinstance(event, str) else json.dumps(event, separators=(",", ":"))
        out.append(f"data: {data}\n\n".encode())
    return b"".join(out)


USAGE = {"prompt_tokens": 80, "completion_tokens": 19, "total_tokens": 99}


def calls_stream(
    calls: list[tuple[str, str]], *, text: str = "", choice: int = 0, done: bool = True
) -> list[dict[str, Any] | str]:
    """One choice: optional text, then each call (start chunk, two argument chunks), finish."""
    events: list[dict[str, Any] | str] = [chunk(delta(choice, role="assistant", content=""))]
    for piece in [text[i : i + 4] for i in range(0, len(text), 4)]:
        events.append(chunk(delta(choice, content=piece)))
    for index, (name, arguments) in enumerate(calls):
        events.append(chunk(delta(choice, tool_calls=[call_start(index, name, f"call_{index}")])))
        half = len(arguments) // 2
        events.append(chunk(delta(choice, tool_calls=[call_args(index, arguments[:half])])))
        events.append(chunk(delta(choice, tool_calls=[call_args(index, arguments[half:])])))
    if done:
        events.append(chunk(delta(choice, finish="tool_calls" if calls else "stop")))
        events.append(chunk(usage=USAGE))
        events.append("[DONE]")
    return events


WEATHER = ("get_weather", '{"city":"Paris"}')
TIME = ("get_time", '{"timezone":"Asia/Tokyo"}')
DELETE = ("delete_payment", '{"payment_id":"pay_1002"}')

MIXED = sse(
    chunk(delta(role="assistant", content="")),
    chunk(delta(content="Checking ")),
    # text and the call's first fragment in one chunk (some servers do this)
    chunk(delta(content="now.", tool_calls=[call_start(0, "delete_payment", "call_0")])),
    chunk(delta(tool_calls=[call_args(0, DELETE[1])])),
    chunk(delta(finish="tool_calls")),
    "[DONE]",
)

TWO_CHOICES = b"".join(
    sse(*events)
    for events in (
        calls_stream([DELETE], choice=0, done=False),
        calls_stream([WEATHER], choice=1, done=False),
        [
            chunk(delta(0, finish="tool_calls")),
            chunk(delta(1, finish="tool_calls")),
            chunk(usage=USAGE),
            "[DONE]",
        ],
    )
)

# A custom tool call (chat ``type: custom``) for delete_payment, then a function call.
CUSTOM_THEN_WEATHER = sse(
    chunk(delta(role="assistant", content="")),
    chunk(delta(tool_calls=[custom_start(0, "delete_payment", "call_0")])),
    chunk(delta(tool_calls=[custom_input(0, "pay_")])),
    chunk(delta(tool_calls=[custom_input(0, "1002")])),
    chunk(delta(tool_calls=[call_start(1, WEATHER[0], "call_1")])),
    chunk(delta(tool_calls=[call_args(1, WEATHER[1])])),
    chunk(delta(finish="tool_calls")),
    chunk(usage=USAGE),
    "[DONE]",
)

# The name in two fragments, as the openai SDK concatenates them ("delete_" + "payment").
NAME_IN_PIECES = sse(
    chunk(delta(role="assistant", content="")),
    chunk(delta(tool_calls=[call_start(0, "delete_", "call_0")])),
    chunk(delta(tool_calls=[{"index": 0, "function": {"name": "payment"}}])),
    chunk(delta(tool_calls=[call_args(0, DELETE[1])])),
    chunk(delta(tool_calls=[call_start(1, WEATHER[0], "call_1")])),
    chunk(delta(tool_calls=[call_args(1, WEATHER[1])])),
    chunk(delta(finish="tool_calls")),
    "[DONE]",
)


def _nonfinite(body: bytes) -> bytes:
    """Every call's first chunk with a NaN and an Infinity in its envelope: Python's json (the
    openai SDK's) reads them, the exact reader does not."""
    starts = [b'"id":"call_' in line for line in body.split(b"\n\n")]
    return b"\n\n".join(
        line.replace(b'data: {"id"', b'data: {"t":{"a":NaN,"b":-Infinity},"id"') if start else line
        for line, start in zip(body.split(b"\n\n"), starts, strict=True)
    )


CHAT: dict[str, bytes] = {
    "openai_text": wire("openai_text.sse"),
    "openai_single": wire("openai_single_tool.sse"),
    "openai_parallel": wire("openai_parallel_tools.sse"),
    "openai_legacy_function_call": wire("openai_legacy_function_call.sse"),
    "llamacpp_single_mirrored_legacy": wire("llamacpp_real_forced_tool_stream.sse"),
    "llamacpp_parallel": wire("llamacpp_parallel_tools.sse"),
    "vllm_parallel": wire("vllm_parallel_tools.sse"),
    "vllm_n2_text": wire("vllm_n2_text.sse"),
    "ollama_parallel_one_chunk": wire("ollama_parallel_one_chunk.sse"),
    "text_then_delete": sse(*calls_stream([DELETE], text="I will delete the duplicate.")),
    "weather_then_delete": sse(*calls_stream([WEATHER, DELETE])),
    "delete_then_weather": sse(*calls_stream([DELETE, WEATHER])),
    "mixed_chunk": MIXED,
    "two_choices": TWO_CHOICES,
    "invalid_json_args": sse(*calls_stream([("delete_payment", '{"payment_id": "pay_10')])),
    "cut_before_finish": sse(*calls_stream([WEATHER, DELETE], done=False)),
    # [DONE] with no finish_reason before it: what is held is resolved before [DONE] goes out
    "done_without_finish": sse(*calls_stream([WEATHER, DELETE], done=False), "[DONE]"),
    "custom_delete_then_weather": CUSTOM_THEN_WEATHER,
    "name_in_pieces": NAME_IN_PIECES,
    "nonfinite_numbers_in_call_events": _nonfinite(sse(*calls_stream([WEATHER, DELETE]))),
}

DELETE_CALL = Call("delete_payment", DELETE[1], "call_d", "fc_d")
WEATHER_CALL = Call("get_weather", WEATHER[1], "call_w", "fc_w")
CUSTOM_DELETE = CustomCall("delete_payment", "pay_1002 and every refund", "call_cd", "ctc_d")


def completed_only(case: Case, index: int) -> bytes:
    """``case``'s stream with no events for output item ``index``: it is only in the terminal
    event's ``output`` (a client's accumulated response is that output)."""
    return responses_sse([e for e in events(case) if e.get("output_index") != index])


RESPONSES: dict[str, bytes] = {
    "text": wire("openai_responses_text.sse"),
    "single": wire("openai_responses_single_tool.sse"),
    "parallel": wire("openai_responses_parallel_tools.sse"),
    "text_then_delete": responses_stream(
        Case("r1", (Text("I will delete the duplicate.", "msg_1"), DELETE_CALL))
    ),
    "reasoning_delete_weather": responses_stream(
        Case("r2", (Reasoning("rs_1"), DELETE_CALL, WEATHER_CALL))
    ),
    "weather_delete_text": responses_stream(
        Case("r3", (WEATHER_CALL, DELETE_CALL, Text("Done.", "msg_2")))
    ),
    "custom_delete_weather": responses_stream(Case("r4", (CUSTOM_DELETE, WEATHER_CALL))),
    "text_then_delete_only_in_completed": completed_only(
        Case("r5", (Text("I will delete the duplicate.", "msg_5"), DELETE_CALL)), 1
    ),
    "weather_then_delete_only_in_completed": completed_only(
        Case("r6", (WEATHER_CALL, DELETE_CALL)), 1
    ),
    "custom_delete_only_in_completed": completed_only(Case("r7", (CUSTOM_DELETE,)), 0),
}


def cut_responses(body: bytes) -> bytes:
    """``body`` cut just after its last ``function_call_arguments.done`` event (upstream EOF)."""
    at = body.rfind(b"event: response.function_call_arguments.done")
    end = body.index(b"\n\n", at) + 2
    return body[:end]


RESPONSES["cut_before_item_done"] = cut_responses(RESPONSES["reasoning_delete_weather"])


def forbid(*names: str, action: str = "block") -> CallJudge:
    """A judge that refuses the named calls (check ``no_<name>``) and passes the rest."""

    def judge(name: str, arguments: str) -> Decision:
        del arguments
        if name in names:
            return Decision(action, check=f"no_{name}", reason=f"forbidden call '{name}'")  # type: ignore[arg-type]
        return PASS

    return judge


def run(
    api: str, mode: str, judge: CallJudge, body: bytes, cuts: list[int] | None = None
) -> tuple[bytes, tuple[Enforced, ...]]:
    """The bytes a client receives when ``body`` arrives cut at ``cuts``."""
    enforcer = StreamEnforcer(api, judge, mode)  # type: ignore[arg-type]
    points = [0, *sorted({c for c in (cuts or []) if 0 < c < len(body)}), len(body)]
    out = [enforcer.feed(body[a:b]) for a, b in itertools.pairwise(points)]
    out.append(enforcer.close())
    return b"".join(out), enforcer.outcomes


def events_of(body: bytes) -> list[tuple[str, str]]:
    decoder = SSEDecoder()
    return [(e.event, e.data) for e in decoder.feed(body)]


@dataclass
class ChatChoice:
    content: str = ""
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish: str | None = None
    legacy: str | None = None  # the legacy function_call's name


@dataclass
class ChatRead:
    choices: dict[int, ChatChoice]
    done: bool
    usage: bool


def read_chat(body: bytes) -> ChatRead:
    """Accumulate a chat stream as openai-python does, asserting what a client relies on."""
    choices: dict[int, ChatChoice] = {}
    done = usage = False
    for _, data in events_of(body):
        assert not done, "an event after [DONE]"
        if data == "[DONE]":
            done = True
            continue
        obj = json.loads(data)
        if obj.get("usage"):
            usage = True
        for entry in obj["choices"]:
            choice = choices.setdefault(entry["index"], ChatChoice())
            assert choice.finish is None, "an event after the choice's finish_reason"
            d = entry.get("delta") or {}
            if d.get("content"):
                choice.content += d["content"]
            if d.get("function_call"):
                choice.legacy = (choice.legacy or "") + (d["function_call"].get("name") or "")
            for tc in d.get("tool_calls") or []:
                call = choice.calls.setdefault(tc["index"], {"id": None, "name": "", "args": ""})
                call["id"] = tc.get("id") or call["id"]
                fn = tc.get("function") or tc.get("custom") or {}  # a custom call's input
                if fn.get("name") and not call["name"].endswith(fn["name"]):
                    call["name"] += fn["name"]
                call["args"] += fn.get("arguments") or fn.get("input") or ""
            choice.finish = entry.get("finish_reason") or choice.finish
    for choice in choices.values():
        assert sorted(choice.calls) == list(range(len(choice.calls))), "indices not contiguous"
    return ChatRead(choices, done, usage)


CALL_ITEMS = ("function_call", "custom_tool_call")


def read_responses(
    body: bytes, *, whole: bool = True
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The events and the terminal response, asserting sequence numbers and output indices
    (and, when ``whole``, that the terminal output holds exactly the items streamed)."""
    events = [json.loads(data) for _, data in events_of(body)]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    added = [e["output_index"] for e in events if e["type"] == "response.output_item.added"]
    assert added == list(range(len(added))), f"output indices {added}"
    items: dict[int, str] = {}
    for event in events:
        if event["type"] == "response.output_item.added":
            items[event["output_index"]] = event["item"]["id"]
        elif "output_index" in event:
            item_id = event.get("item_id") or event.get("item", {}).get("id")
            assert items.get(event["output_index"]) == item_id, event
    terminal = next((e["response"] for e in events if e["type"] == "response.completed"), None)
    if terminal is not None and whole:
        assert [item["id"] for item in terminal["output"]] == [items[i] for i in sorted(items)]
    return events, terminal


def call_names(read: ChatRead) -> set[str]:
    """Every call's name, the legacy ``function_call`` (not mirrored by tool_calls) too."""
    names = {c["name"] for ch in read.choices.values() for c in ch.calls.values()}
    legacy = {ch.legacy for ch in read.choices.values() if ch.legacy and not ch.calls}
    return names | legacy


def chat_calls(read: ChatRead, choice: int = 0) -> list[str]:
    return [read.choices[choice].calls[i]["name"] for i in sorted(read.choices[choice].calls)]


def responses_calls(events: list[dict[str, Any]]) -> list[str]:
    return [
        e["item"]["name"]
        for e in events
        if e["type"] == "response.output_item.done" and e["item"]["type"] in CALL_ITEMS
    ]


def responses_text(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")


# -- the tables both test modules run -------------------------------------------------------

NOTICE = "[gradeproxy] withheld tool call"
W, T, D = "get_weather", "get_time", "delete_payment"
TC = "tool_calls"
# (stream, forbidden call, mode, calls the client gets per choice, finish per choice, notice)
CHAT_TABLE = [
    ("openai_single", W, "strip", {0: []}, {0: "stop"}, None),
    ("openai_single", W, "block", {0: []}, {0: "stop"}, [W]),
    ("openai_single", "nothing", "block", {0: [W]}, {0: TC}, None),
    ("openai_parallel", T, "strip", {0: [W]}, {0: TC}, None),
    ("openai_parallel", W, "strip", {0: [T]}, {0: TC}, None),
    ("openai_parallel", T, "block", {0: []}, {0: "stop"}, [W, T]),
    ("openai_legacy_function_call", W, "strip", {0: []}, {0: "stop"}, None),
    ("llamacpp_single_mirrored_legacy", W, "strip", {0: []}, {0: "stop"}, None),
    ("llamacpp_single_mirrored_legacy", W, "block", {0: []}, {0: "stop"}, [W]),
    ("llamacpp_parallel", T, "strip", {0: [W]}, {0: TC}, None),
    ("vllm_parallel", W, "strip", {0: [T]}, {0: TC}, None),
    ("vllm_parallel", W, "block", {0: []}, {0: "stop"}, [W, T]),
    ("ollama_parallel_one_chunk", W, "strip", {0: []}, {0: "stop"}, None),
    ("text_then_delete", D, "strip", {0: []}, {0: "stop"}, None),
    ("text_then_delete", D, "block", {0: []}, {0: "stop"}, [D]),
    ("weather_then_delete", D, "strip", {0: [W]}, {0: TC}, None),
    ("delete_then_weather", D, "strip", {0: [W]}, {0: TC}, None),
    ("delete_then_weather", D, "block", {0: []}, {0: "stop"}, [D, W]),
    ("mixed_chunk", D, "strip", {0: []}, {0: "stop"}, None),
    ("mixed_chunk", D, "block", {0: []}, {0: "stop"}, [D]),
    ("two_choices", D, "strip", {0: [], 1: [W]}, {0: "stop", 1: TC}, None),
    ("two_choices", D, "block", {0: [], 1: [W]}, {0: "stop", 1: TC}, [D]),
    ("invalid_json_args", D, "strip", {0: []}, {0: "stop"}, None),
    ("invalid_json_args", "nothing", "strip", {0: [D]}, {0: TC}, None),
    ("done_without_finish", D, "strip", {0: [W]}, {0: None}, None),
    ("done_without_finish", D, "block", {0: []}, {0: None}, [W, D]),
    ("custom_delete_then_weather", D, "strip", {0: [W]}, {0: TC}, None),
    ("custom_delete_then_weather", D, "block", {0: []}, {0: "stop"}, [D, W]),
    ("name_in_pieces", D, "strip", {0: [W]}, {0: TC}, None),
    ("name_in_pieces", D, "block", {0: []}, {0: "stop"}, [D, W]),
    ("nonfinite_numbers_in_call_events", D, "strip", {0: [W]}, {0: TC}, None),
    ("nonfinite_numbers_in_call_events", W, "strip", {0: [D]}, {0: TC}, None),
    ("nonfinite_numbers_in_call_events", D, "block", {0: []}, {0: "stop"}, [W, D]),
]

# (stream, forbidden, mode, calls the client gets, withheld names in the notice)
RESPONSES_TABLE = [
    ("single", "get_weather", "strip", [], None),
    ("single", "get_weather", "block", [], ["get_weather"]),
    ("single", "nothing", "block", ["get_weather"], None),
    ("parallel", "get_time", "strip", ["get_weather"], None),
    ("parallel", "get_weather", "strip", ["get_time"], None),
    ("parallel", "get_time", "block", [], ["get_weather", "get_time"]),
    ("text_then_delete", "delete_payment", "strip", [], None),
    ("text_then_delete", "delete_payment", "block", [], ["delete_payment"]),
    ("reasoning_delete_weather", "delete_payment", "strip", ["get_weather"], None),
    ("reasoning_delete_weather", "delete_payment", "block", [], ["delete_payment", "get_weather"]),
    ("weather_delete_text", "delete_payment", "strip", ["get_weather"], None),
    ("weather_delete_text", "delete_payment", "block", [], ["get_weather", "delete_payment"]),
    ("custom_delete_weather", "delete_payment", "strip", ["get_weather"], None),
    ("custom_delete_weather", "get_weather", "strip", ["delete_payment"], None),
    ("custom_delete_weather", "delete_payment", "block", [], ["delete_payment", "get_weather"]),
    ("text_then_delete_only_in_completed", "delete_payment", "strip", [], None),
    ("text_then_delete_only_in_completed", "delete_payment", "block", [], ["delete_payment"]),
    ("weather_then_delete_only_in_completed", "delete_payment", "strip", ["get_weather"], None),
    ("weather_then_delete_only_in_completed", "delete_payment", "block", [], [W, D]),
    ("custom_delete_only_in_completed", "delete_payment", "strip", [], None),
    ("custom_delete_only_in_completed", "delete_payment", "block", [], ["delete_payment"]),
]  # fmt: skip
