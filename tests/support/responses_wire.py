"""Responses API (``/v1/responses``) wire fixtures, built from the API reference.

No Responses backend runs offline here, so these bodies and streams are written from the
documentation, not recorded: the response object of the API reference
(https://platform.openai.com/docs/api-reference/responses/object), the streaming events
reference (https://platform.openai.com/docs/api-reference/responses-streaming) and the event
order of the function-calling guide's "Streaming" section
(https://platform.openai.com/docs/guides/function-calling#streaming), with the field set of the
types in openai-python 3.57.0 (``openai/types/responses/``).
``tests/conformance/test_responses_wire.py`` proves each one with that SDK's own parser, and
``python -m tests.support.responses_wire`` rewrites
the committed files in ``tests/fixtures/wire/`` (a test keeps them equal to this module).

The shapes follow OpenAI's own servers: a pretty-printed body; a stream of ``event:`` +
``data:`` blocks of compact UTF-8 JSON, each with its ``sequence_number``, that opens with
``response.created`` and ``response.in_progress``, gives each output item as
``output_item.added`` → deltas → ``.done`` events → ``output_item.done``, and ends with one
terminal event carrying the whole response (no ``[DONE]``). Tests build further answers (a
stale or a wrong call) with the same functions.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from tests.support.paths import WIRE

MODEL = "gpt-4.1-mini-2025-04-14"
CREATED_AT = 1764547200
_PIECE = re.compile(r"\s*(?:\w+|[^\w\s]+)")

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city", "unit"],
        "additionalProperties": False,
    },
    "strict": True,
}
TIME_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "get_time",
    "description": "Current time in a time zone.",
    "parameters": {
        "type": "object",
        "properties": {"timezone": {"type": "string"}},
        "required": ["timezone"],
        "additionalProperties": False,
    },
    "strict": True,
}


@dataclass(frozen=True)
class Call:
    """A ``function_call`` output item."""

    name: str
    arguments: str
    call_id: str
    id: str


@dataclass(frozen=True)
class CustomCall:
    """A ``custom_tool_call`` output item: a custom tool called with free-text ``input``."""

    name: str
    input: str
    call_id: str
    id: str


@dataclass(frozen=True)
class Text:
    """A ``message`` output item with one ``output_text`` part."""

    text: str
    id: str


@dataclass(frozen=True)
class Reasoning:
    """A ``reasoning`` item (reasoning models put one before their calls): not an answer."""

    id: str


Item = Call | CustomCall | Text | Reasoning


@dataclass(frozen=True)
class Case:
    """One response: its output items and how it ended."""

    id: str
    items: tuple[Item, ...]
    tools: tuple[dict[str, Any], ...] = (WEATHER_TOOL,)
    status: str = "completed"  # or "incomplete", "failed"
    incomplete_reason: str | None = None
    error: dict[str, Any] | None = None
    output_tokens: int = 19


def pieces(text: str) -> list[str]:
    """Split text into token-like deltas, as a model streams it."""
    parts = _PIECE.findall(text)
    assert "".join(parts) == text, text
    return parts


def item_json(item: Item, status: str = "completed") -> dict[str, Any]:
    """The item as ``output`` and ``output_item.done`` carry it."""
    if isinstance(item, Call):
        return {
            "id": item.id,
            "type": "function_call",
            "status": status,
            "arguments": item.arguments,
            "call_id": item.call_id,
            "name": item.name,
        }
    if isinstance(item, CustomCall):
        # openai-python's ResponseCustomToolCall has no status
        return {
            "id": item.id,
            "type": "custom_tool_call",
            "call_id": item.call_id,
            "name": item.name,
            "input": item.input,
        }
    if isinstance(item, Text):
        return {
            "id": item.id,
            "type": "message",
            "status": status,
            "content": [_text_part(item.text)],
            "role": "assistant",
        }
    return {"id": item.id, "type": "reasoning", "summary": []}


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}


def response_json(case: Case, *, final: bool = True) -> dict[str, Any]:
    """The response object: as the body and the terminal event give it, or as it starts."""
    status = case.status if final else "in_progress"
    item_status = "incomplete" if case.status == "incomplete" else "completed"
    usage = {
        "input_tokens": 81,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": case.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 81 + case.output_tokens,
    }
    ended = final and case.status != "failed"
    return {
        "id": "resp_" + hashlib.sha256(case.id.encode()).hexdigest()[:50],
        "object": "response",
        "created_at": CREATED_AT,
        "status": status,
        "background": False,
        "completed_at": CREATED_AT + 1 if final and case.status == "completed" else None,
        "error": case.error if final else None,
        "incomplete_details": (
            {"reason": case.incomplete_reason} if final and case.incomplete_reason else None
        ),
        "instructions": None,
        "max_output_tokens": 16 if case.incomplete_reason == "max_output_tokens" else None,
        "max_tool_calls": None,
        "model": MODEL,
        "output": [item_json(i, item_status) for i in case.items] if ended else [],
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "prompt_cache_key": None,
        "reasoning": {"effort": None, "summary": None},
        "safety_identifier": None,
        "service_tier": "default" if final else "auto",
        "store": True,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": "auto",
        "tools": list(case.tools),
        "top_logprobs": 0,
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage if ended else None,
        "user": None,
        "metadata": {},
    }


def body(case: Case) -> bytes:
    """The non-streamed body, pretty-printed as OpenAI's servers send it."""
    return json.dumps(response_json(case), indent=2, ensure_ascii=False).encode() + b"\n"


def events(case: Case) -> list[dict[str, Any]]:
    """The stream's events, in order, without their ``sequence_number``."""
    out: list[dict[str, Any]] = [
        {"type": "response.created", "response": response_json(case, final=False)},
        {"type": "response.in_progress", "response": response_json(case, final=False)},
    ]
    status = "incomplete" if case.status == "incomplete" else "completed"
    for index, item in enumerate(case.items if case.status != "failed" else ()):
        out.extend(_item_events(index, item, status))
    terminal = {"completed": "response.completed", "incomplete": "response.incomplete"}
    out.append(
        {"type": terminal.get(case.status, "response.failed"), "response": response_json(case)}
    )
    return out


def _item_events(index: int, item: Item, status: str) -> list[dict[str, Any]]:
    where = {"output_index": index}
    done = {"type": "response.output_item.done", **where, "item": item_json(item, status)}
    if isinstance(item, Reasoning):
        added = {"type": "response.output_item.added", **where, "item": item_json(item)}
        return [added, done]
    if isinstance(item, Call):
        start = {**item_json(item), "status": "in_progress", "arguments": ""}
        ref = {"item_id": item.id, **where}
        return [
            {"type": "response.output_item.added", **where, "item": start},
            *(
                {"type": "response.function_call_arguments.delta", **ref, "delta": piece}
                for piece in pieces(item.arguments)
            ),
            {"type": "response.function_call_arguments.done", **ref, "arguments": item.arguments},
            done,
        ]
    if isinstance(item, CustomCall):
        ref = {"item_id": item.id, **where}
        return [
            {
                "type": "response.output_item.added",
                **where,
                "item": {**item_json(item), "input": ""},
            },
            *(
                {"type": "response.custom_tool_call_input.delta", **ref, "delta": piece}
                for piece in pieces(item.input)
            ),
            {"type": "response.custom_tool_call_input.done", **ref, "input": item.input},
            done,
        ]
    ref = {"item_id": item.id, **where, "content_index": 0}
    start = {**item_json(item), "status": "in_progress", "content": []}
    return [
        {"type": "response.output_item.added", **where, "item": start},
        {"type": "response.content_part.added", **ref, "part": _text_part("")},
        *(
            {"type": "response.output_text.delta", **ref, "delta": piece, "logprobs": []}
            for piece in pieces(item.text)
        ),
        {"type": "response.output_text.done", **ref, "text": item.text, "logprobs": []},
        {"type": "response.content_part.done", **ref, "part": _text_part(item.text)},
        done,
    ]


def sse(payloads: list[dict[str, Any]]) -> bytes:
    """Number the events and frame them as OpenAI's servers do."""
    blocks = []
    for number, payload in enumerate(payloads):
        data = {"type": payload["type"], "sequence_number": number, **payload}
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        blocks.append(f"event: {payload['type']}\ndata: {text}\n\n")
    return "".join(blocks).encode()


def stream(case: Case) -> bytes:
    return sse(events(case))


ZURICH = '{"city":"Zürich","unit":"celsius"}'

CASES: dict[str, Case] = {
    case.id: case
    for case in (
        Case(
            "single_tool",
            (
                Call(
                    "get_weather",
                    ZURICH,
                    "call_k3RnV0aYbW2sX9dQ4mZfT1pL",
                    "fc_68a1b2c3d4e5f6a7b8c9d0e1",
                ),
            ),
        ),
        Case(
            "parallel_tools",
            (
                Reasoning("rs_68a1b2c3d4e5f6a7b8c9d0e2"),
                Call(
                    "get_weather",
                    '{"city":"Paris","unit":"celsius"}',
                    "call_Vt4dJ0kOx2m6ZrVb8hXn2Qp1",
                    "fc_68a1b2c3d4e5f6a7b8c9d0e3",
                ),
                Call(
                    "get_time",
                    '{"timezone":"Asia/Tokyo"}',
                    "call_2mLq9sWfY7cTjR0uK4eZ8aBn",
                    "fc_68a1b2c3d4e5f6a7b8c9d0e4",
                ),
            ),
            tools=(WEATHER_TOOL, TIME_TOOL),
            output_tokens=42,
        ),
        Case(
            "text",
            (Text("It’s 12°C and sunny in Zürich.", "msg_68a1b2c3d4e5f6a7b8c9d0e5"),),
            output_tokens=12,
        ),
        Case(
            "incomplete",
            (
                Call(
                    "get_weather",
                    '{"city":"Zü',
                    "call_Q8wE4rT6yU0iO2pA5sD7fG9h",
                    "fc_68a1b2c3d4e5f6a7b8c9d0e6",
                ),
            ),
            status="incomplete",
            incomplete_reason="max_output_tokens",
            output_tokens=16,
        ),
        Case(
            "failed",
            (),
            status="failed",
            error={"code": "server_error", "message": "The model failed to generate a response."},
            output_tokens=0,
        ),
    )
}

# The streaming reference's own ``error`` event example, after the stream had started.
ERROR_STREAM = sse(
    [
        events(CASES["single_tool"])[0],
        {
            "type": "error",
            "code": "ERR_SOMETHING",
            "message": "Something went wrong",
            "param": None,
        },
    ]
)


def files() -> dict[str, bytes]:
    """Every committed fixture, by file name."""
    out: dict[str, bytes] = {}
    for case in CASES.values():
        if case.status != "failed":
            out[f"openai_responses_{case.id}.json"] = body(case)
        out[f"openai_responses_{case.id}.sse"] = stream(case)
    out["openai_responses_error_event.sse"] = ERROR_STREAM
    return out


def main() -> None:
    for name, data in files().items():
        (WIRE / name).write_bytes(data)


if __name__ == "__main__":
    main()
