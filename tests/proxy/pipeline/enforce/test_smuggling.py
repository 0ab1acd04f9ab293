"""Red-team table: upstream answers shaped to carry a forbidden call past the judge.

Each row is an answer a hostile (or merely unusual) backend can send, non-streamed or streamed,
chat or Responses, that a client SDK reads as a call to ``delete_payment``. In ``strip`` mode the
name must not reach the client at all; in ``block`` mode only inside the withheld-call notice.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from grader.json import dumps
from proxy.pipeline.enforce.answer import WITHHELD_PREFIX, enforce_body
from proxy.pipeline.enforce.decision import PASS, Decision
from proxy.pipeline.enforce.stream import StreamEnforcer

BAD = "delete_payment"


def judge(name: str, arguments: str) -> Decision:
    if name.startswith("delete_"):
        return Decision("strip", "no_delete", f"forbidden call {name!r}")
    return PASS


def judge_block(name: str, arguments: str) -> Decision:
    decision = judge(name, arguments)
    return Decision("block", decision.check, decision.reason) if decision.action != "pass" else PASS


# The one place the name may appear in a blocked answer: its withheld-call line.
_NOTICE = f"{WITHHELD_PREFIX} {BAD}: forbidden call '{BAD}'".encode()


def _only_in_notices(blocked: bytes) -> bool:
    return _NOTICE in blocked and BAD.encode() not in blocked.replace(_NOTICE, b"")


def _chat_body(message: dict[str, Any], finish: str = "tool_calls") -> bytes:
    return dumps(
        {
            "id": "c",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        }
    )


_LEGACY = {"role": "assistant", "content": None, "function_call": {"name": BAD, "arguments": "{}"}}
_CUSTOM = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "c1", "type": "custom", "custom": {"name": BAD, "input": "all"}}],
}
_CUSTOM_CALL = {"id": "c1", "type": "custom", "custom": {"name": BAD, "input": "all"}}
_GOOD = {"id": "c0", "type": "function", "function": {"name": "get_payment", "arguments": "{}"}}

BODIES: list[tuple[str, str, bytes]] = [
    ("chat-legacy-function_call", "chat", _chat_body(_LEGACY, "function_call")),
    ("chat-custom-tool-call", "chat", _chat_body(_CUSTOM)),
    (
        "chat-custom-beside-a-function-call",
        "chat",
        _chat_body({**_CUSTOM, "tool_calls": [_GOOD, _CUSTOM_CALL]}),
    ),
    (
        "responses-custom_tool_call-item",
        "responses",
        dumps(
            {
                "id": "r",
                "object": "response",
                "status": "completed",
                "output": [
                    {
                        "type": "custom_tool_call",
                        "id": "ctc_1",
                        "call_id": "c1",
                        "name": BAD,
                        "input": "all",
                        "status": "completed",
                    }
                ],
            }
        ),
    ),
    # Python's json (what the openai SDK parses with) reads NaN; orjson does not.
    (
        "chat-NaN-elsewhere-in-the-body",
        "chat",
        _chat_body(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": BAD, "arguments": "{}"}}
                ],
            }
        ).replace(b'"object"', b'"x":NaN,"object"'),
    ),
    (
        "chat-utf8-bom",
        "chat",
        b"\xef\xbb\xbf"
        + _chat_body(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": BAD, "arguments": "{}"}}
                ],
            }
        ),
    ),
]


@pytest.mark.parametrize(
    ("api", "body"), [(a, b) for _, a, b in BODIES], ids=[r[0] for r in BODIES]
)
def test_a_non_streamed_forbidden_call_never_reaches_the_client(api: Any, body: bytes) -> None:
    stripped, outcomes = enforce_body(api, body, judge, "strip")
    assert BAD.encode() not in stripped
    assert any(o.decision.action == "strip" for o in outcomes)
    blocked, _ = enforce_body(api, body, judge_block, "block")
    assert json.loads(blocked)  # still an answer the client parses
    assert _only_in_notices(blocked)


def _sse(*objs: Any, event: bool = False) -> bytes:
    out = b""
    for obj in objs:
        if isinstance(obj, bytes):
            out += obj
            continue
        head = b"event: " + obj["type"].encode() + b"\n" if event else b""
        out += head + b"data: " + dumps(obj) + b"\n\n"
    return out


def _chunk(delta: dict[str, Any], finish: str | None = None, index: int = 0) -> dict[str, Any]:
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "choices": [{"index": index, "delta": delta, "finish_reason": finish}],
    }


_ROLE = _chunk({"role": "assistant", "content": None})
_CUSTOM_STREAM = _sse(
    _ROLE,
    _chunk(
        {
            "tool_calls": [
                {"index": 0, "id": "c1", "type": "custom", "custom": {"name": BAD, "input": ""}}
            ]
        }
    ),
    _chunk({"tool_calls": [{"index": 0, "custom": {"input": "all"}}]}),
    _chunk({}, "tool_calls"),
    b"data: [DONE]\n\n",
)
_FC = {
    "type": "function_call",
    "id": "fc_1",
    "call_id": "c1",
    "name": BAD,
    "arguments": "{}",
    "status": "completed",
}
_COMPLETED_ONLY = _sse(
    {
        "type": "response.created",
        "sequence_number": 0,
        "response": {"id": "r", "object": "response", "status": "in_progress", "output": []},
    },
    {
        "type": "response.completed",
        "sequence_number": 1,
        "response": {"id": "r", "object": "response", "status": "completed", "output": [_FC]},
    },
    event=True,
)
_CUSTOM_ITEM = {
    "type": "custom_tool_call",
    "id": "ctc_1",
    "call_id": "c1",
    "name": BAD,
    "input": "all",
    "status": "completed",
}
_RESPONSES_CUSTOM = _sse(
    {
        "type": "response.created",
        "sequence_number": 0,
        "response": {"id": "r", "object": "response", "status": "in_progress", "output": []},
    },
    {
        "type": "response.output_item.added",
        "sequence_number": 1,
        "output_index": 0,
        "item": {**_CUSTOM_ITEM, "input": "", "status": "in_progress"},
    },
    {
        "type": "response.custom_tool_call_input.delta",
        "sequence_number": 2,
        "output_index": 0,
        "item_id": "ctc_1",
        "delta": "all",
    },
    {
        "type": "response.custom_tool_call_input.done",
        "sequence_number": 3,
        "output_index": 0,
        "item_id": "ctc_1",
        "input": "all",
    },
    {
        "type": "response.output_item.done",
        "sequence_number": 4,
        "output_index": 0,
        "item": _CUSTOM_ITEM,
    },
    {
        "type": "response.completed",
        "sequence_number": 5,
        "response": {
            "id": "r",
            "object": "response",
            "status": "completed",
            "output": [_CUSTOM_ITEM],
        },
    },
    event=True,
)
_NAN_STREAM = _sse(
    _ROLE,
    b'data: {"id":"c","x":NaN,"object":"chat.completion.chunk","choices":[{"index":0,"delta":'
    b'{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"'
    + BAD.encode()
    + b'","arguments":"{}"}}]},"finish_reason":null}]}\n\n',
    _chunk({}, "tool_calls"),
    b"data: [DONE]\n\n",
)

STREAMS: list[tuple[str, str, bytes]] = [
    ("chat-custom-tool-call-deltas", "chat", _CUSTOM_STREAM),
    ("chat-NaN-in-a-call-event", "chat", _NAN_STREAM),
    ("responses-function_call-only-in-completed", "responses", _COMPLETED_ONLY),
    ("responses-custom_tool_call-item", "responses", _RESPONSES_CUSTOM),
]


def _through(api: Any, stream: bytes, mode: Any) -> bytes:
    enforcer = StreamEnforcer(api, judge if mode == "strip" else judge_block, mode)
    return enforcer.feed(stream) + enforcer.close()


# Known holes, not fixed yet (red-team report): the hold-back judges only function-type calls
# announced by their own events, and reads an event as orjson does.
# Open stream holes, listed in docs/enforce.md (Known limits): strict, so a fix shows.
_OPEN = pytest.mark.xfail(strict=True, reason="open stream hole (docs/enforce.md)")


@pytest.mark.parametrize(
    ("api", "stream"),
    [pytest.param(a, s, marks=_OPEN) for _, a, s in STREAMS],
    ids=[r[0] for r in STREAMS],
)
def test_a_streamed_forbidden_call_never_reaches_the_client(api: Any, stream: bytes) -> None:
    assert BAD.encode() not in _through(api, stream, "strip")
    blocked = _through(api, stream, "block")
    assert _only_in_notices(blocked)
