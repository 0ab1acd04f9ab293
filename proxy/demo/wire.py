"""The OpenAI wire format the demo backend speaks: usage, completion choices, stream frames.

Tool-call arguments are sent in small fragments, the role delta first and ``finish_reason`` in a
chunk of its own, as OpenAI's own streams do, so the proxy's accumulator meets realistic input.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import orjson

_ARGUMENT_FRAGMENT_CHARS: Final = 7
_TEXT_PIECE: Final = re.compile(r"\S*\s*")


def _tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4)


def _completion_tokens(message: Mapping[str, Any]) -> int:
    calls = message.get("tool_calls")
    if calls:
        return sum(
            _tokens(call["function"]["name"] + call["function"]["arguments"]) + 7 for call in calls
        )
    return _tokens(message.get("content") or "")


def _usage(prompt_tokens: int, messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    completion = sum(_completion_tokens(m) for m in messages)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": prompt_tokens + completion,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _finish_reason(message: Mapping[str, Any]) -> str:
    return "tool_calls" if message.get("tool_calls") else "stop"


def _choice_chunks(index: int, message: Mapping[str, Any]) -> list[dict[str, Any]]:
    def choice(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}

    calls = message.get("tool_calls") or []
    content = message.get("content")
    chunks = [choice({"role": "assistant", "content": None if calls else "", "refusal": None})]
    for position, call in enumerate(calls):
        function = call["function"]
        chunks.append(
            choice(
                {
                    "tool_calls": [
                        {
                            "index": position,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": function["name"], "arguments": ""},
                        }
                    ]
                }
            )
        )
        arguments = function["arguments"]
        for at in range(0, len(arguments), _ARGUMENT_FRAGMENT_CHARS):
            fragment = arguments[at : at + _ARGUMENT_FRAGMENT_CHARS]
            chunks.append(
                choice({"tool_calls": [{"index": position, "function": {"arguments": fragment}}]})
            )
    if isinstance(content, str):
        chunks.extend(choice({"content": piece}) for piece in _TEXT_PIECE.findall(content) if piece)
    chunks.append(choice({}, _finish_reason(message)))
    return chunks


def _stream_frames(
    envelope: Mapping[str, Any],
    messages: Sequence[Mapping[str, Any]],
    usage: Mapping[str, Any],
    include_usage: bool,
) -> list[bytes]:
    base = {**envelope, "object": "chat.completion.chunk"}
    extra: dict[str, Any] = {"usage": None} if include_usage else {}
    frames = [
        {**base, "choices": [choice], **extra}
        for index, message in enumerate(messages)
        for choice in _choice_chunks(index, message)
    ]
    if include_usage:
        frames.append({**base, "choices": [], "usage": usage})
    return [b"data: " + orjson.dumps(frame) + b"\n\n" for frame in frames] + [b"data: [DONE]\n\n"]
