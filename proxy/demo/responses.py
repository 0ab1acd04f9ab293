"""The demo backend's ``POST /v1/responses``: OpenAI's Responses API, streamed and not.

The README's quick start sends the same task through ``chat.completions.create`` and
``responses.create``; both must reach a backend that answers them, so Responses grading can be
tried locally. The answer is the same plan the chat route follows (proxy/demo/answers.py, one
counter per task for both routes); only the wire format differs, and it is OpenAI's as recorded
in tests/fixtures/wire/openai_responses_*.{json,sse}: a ``response`` object whose ``output``
holds ``function_call`` items (the tool calls) or one ``message`` item with ``output_text``,
and, streamed, ``response.created`` … ``response.completed`` events with ``event:`` lines,
arguments and text in small deltas, every event numbered by ``sequence_number``.

Builds bytes only: the handler and its state live in proxy/demo/backend.py.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

from proxy.demo.requests import ApiError, json_body
from proxy.demo.wire import _completion_tokens

_ARGUMENT_FRAGMENT_CHARS: Final = 7
_TEXT_PIECE: Final = re.compile(r"\S*\s*")


@dataclass(frozen=True, slots=True)
class ResponsesRequest:
    model: str
    text: str | None  # the last user turn's text
    answered: bool  # a function_call_output already follows it
    stream: bool
    body: Mapping[str, Any]


def _input_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, dict)
            and part.get("type") in ("input_text", "text")
            and isinstance(part.get("text"), str)
        )
    return ""


def _last_user_turn(items: Sequence[Any]) -> tuple[str | None, bool]:
    for i in range(len(items) - 1, -1, -1):
        item = items[i]
        if isinstance(item, dict) and item.get("role") == "user":
            followed = any(
                isinstance(later, dict) and later.get("type") == "function_call_output"
                for later in items[i + 1 :]
            )
            return _input_text(item.get("content")), followed
    return None, False


def parse_responses_request(raw: bytes) -> ResponsesRequest:
    """The request's model, last user text and stream flag; :class:`ApiError` (OpenAI's 400
    body) for what OpenAI refuses."""
    body, model = json_body(raw)
    given = body.get("input")
    text: str | None
    if isinstance(given, str):
        text, answered = given, False
    elif isinstance(given, list):
        text, answered = _last_user_turn(given)
    else:
        raise ApiError(
            400,
            "Invalid type for 'input': expected a string or an array of input items.",
            param="input",
            code="invalid_type",
        )
    stream = body.get("stream")
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        message = "Invalid type for 'stream': expected a boolean."
        raise ApiError(400, message, param="stream", code="invalid_type")
    return ResponsesRequest(model, text, answered, stream, body)


def _items(key: str, message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A chat assistant message as Responses output items (completed)."""
    calls = message.get("tool_calls") or []
    items: list[dict[str, Any]] = [
        {
            "id": f"fc_{key[:24]}{index:02d}",
            "type": "function_call",
            "status": "completed",
            "arguments": call["function"]["arguments"],
            "call_id": call["id"],
            "name": call["function"]["name"],
        }
        for index, call in enumerate(calls)
    ]
    content = message.get("content")
    if isinstance(content, str):
        items.append(
            {
                "id": f"msg_{key[:24]}",
                "type": "message",
                "status": "completed",
                "content": [_text_part(content)],
                "role": "assistant",
            }
        )
    return items


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}


def _usage(input_tokens: int, message: Mapping[str, Any]) -> dict[str, Any]:
    output = _completion_tokens(message)
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output,
    }


def response_object(
    response_id: str,
    request: ResponsesRequest,
    output: list[dict[str, Any]],
    usage: Mapping[str, Any] | None,
    *,
    created_at: int,
    completed: bool,
) -> dict[str, Any]:
    """The ``response`` object: in progress (no output, no usage) or completed."""
    body = request.body
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": "completed" if completed else "in_progress",
        "background": False,
        "completed_at": int(time.time()) if completed else None,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": body.get("max_tool_calls"),
        "model": request.model,
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "prompt_cache_key": None,
        "reasoning": {"effort": None, "summary": None},
        "safety_identifier": None,
        "service_tier": "default",
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_logprobs": 0,
        "top_p": body.get("top_p", 1.0),
        "truncation": "disabled",
        "usage": usage,
        "user": None,
        "metadata": body.get("metadata") or {},
    }


def answer(
    response_id: str, key: str, request: ResponsesRequest, message: Mapping[str, Any], tokens: int
) -> dict[str, Any]:
    """The whole response for a non-streamed request."""
    return response_object(
        response_id,
        request,
        _items(key, message),
        _usage(tokens, message),
        created_at=int(time.time()),
        completed=True,
    )


def stream_events(
    response_id: str, key: str, request: ResponsesRequest, message: Mapping[str, Any], tokens: int
) -> list[bytes]:
    """The SSE events of a streamed response, in OpenAI's order, each with its ``event:``."""
    created_at = int(time.time())
    events: list[dict[str, Any]] = []

    def add(kind: str, **fields: Any) -> None:
        events.append({"type": kind, "sequence_number": len(events), **fields})

    started = response_object(
        response_id, request, [], None, created_at=created_at, completed=False
    )
    add("response.created", response=started)
    add("response.in_progress", response=started)
    items = _items(key, message)
    for index, item in enumerate(items):
        if item["type"] == "function_call":
            opened = {**item, "status": "in_progress", "arguments": ""}
            add("response.output_item.added", output_index=index, item=opened)
            arguments = item["arguments"]
            for at in range(0, len(arguments), _ARGUMENT_FRAGMENT_CHARS):
                add(
                    "response.function_call_arguments.delta",
                    item_id=item["id"],
                    output_index=index,
                    delta=arguments[at : at + _ARGUMENT_FRAGMENT_CHARS],
                )
            add(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=index,
                arguments=arguments,
            )
        else:
            text = item["content"][0]["text"]
            opened = {**item, "status": "in_progress", "content": []}
            add("response.output_item.added", output_index=index, item=opened)
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            add("response.content_part.added", **where, part=_text_part(""))
            for piece in _TEXT_PIECE.findall(text):
                if piece:
                    add("response.output_text.delta", **where, delta=piece, logprobs=[])
            add("response.output_text.done", **where, text=text, logprobs=[])
            add("response.content_part.done", **where, part=_text_part(text))
        add("response.output_item.done", output_index=index, item=item)
    done = response_object(
        response_id, request, items, _usage(tokens, message), created_at=created_at, completed=True
    )
    add("response.completed", response=done)
    return [
        b"event: " + event["type"].encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"
        for event in events
    ]
