"""The tokens a relayed response reported, for a key's tokens-per-minute budget.

Read on the event loop from the decoded copy the relay kept (``Relay.parts``), only for requests
whose key has a ``tpm`` limit (proxy/pipeline/limits.py): the ``usage`` of a JSON body, or of the
last event of a stream that carries one (chat's final chunk with ``stream_options.include_usage``,
the Responses API's ``response.completed``). Any route counts (an embeddings response reports
``prompt_tokens`` too). Counted as input plus output (grader/usage.py reads both wire formats);
a response without usage, or one it cannot parse, spent 0: never an exception, never a guess.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from grader.usage import token_usage

__all__ = ["reported_tokens"]


def _usage_of(payload: Any) -> Any:
    if not isinstance(payload, dict):
        return None
    usage = payload.get("usage")
    if usage is None and isinstance(payload.get("response"), dict):
        usage = payload["response"].get("usage")  # response.completed / response.incomplete
    return usage


def _stream_usage(body: bytes) -> Any:
    """The usage of the last SSE event that has one (searched from the end)."""
    events = body.replace(b"\r\n", b"\n").split(b"\n\n")
    for event in reversed(events):
        if b'"usage"' not in event:
            continue
        data = b"\n".join(
            line[5:].removeprefix(b" ") for line in event.split(b"\n") if line.startswith(b"data:")
        )
        try:
            usage = _usage_of(orjson.loads(data))
        except orjson.JSONDecodeError:
            continue
        if isinstance(usage, dict):
            return usage
    return None


def reported_tokens(parts: Sequence[bytes], stream: bool) -> int:
    """Input plus output tokens the response reported; 0 when it reported none."""
    body = b"".join(parts)
    if not body:
        return 0
    if stream:
        usage = _stream_usage(body)
    else:
        try:
            usage = _usage_of(orjson.loads(body))
        except orjson.JSONDecodeError:
            return 0
    counts = token_usage(usage)
    if counts is None:
        return 0
    return (counts["input_tokens"] or 0) + (counts["output_tokens"] or 0)
