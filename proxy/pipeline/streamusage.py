"""``grading.request_usage``: usage for streamed chat answers whose client did not ask for it.

A streamed chat completion reports its tokens only when the request says
``stream_options: {include_usage: true}``; without them a row has no ``usage``, the token
series no count and a ``tpm`` key no spend. With ``grading.request_usage: true`` the proxy adds
the option to the upstream request (:func:`ask_for_usage`) and takes out of the client's stream
what the option added (:class:`UsageChunkFilter`), so the client reads exactly the bytes it
would have read without it, while the grade job's copy keeps them:

- the extra final chunk, ``{..., "choices": [], "usage": {...}}``, is dropped whole;
- every other chunk's ``"usage":null`` member is removed (OpenAI adds it to each chunk once
  the option is on), only when the chunk parses to what it was minus that member.

An event of any other shape passes unchanged, as does the stream when the client asked for
usage itself (nothing was added). Works on whole SSE events: a partial event waits for its end
(a stream's chunking may change, never its bytes). Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Any, Final

import orjson

__all__ = ["UsageChunkFilter", "ask_for_usage", "streamed_request"]

_INCLUDE: Final = {"include_usage": True}
# The member the option adds to every chunk, with the comma that joins it to its neighbour.
_NULL_USAGE: Final = re.compile(rb',\s*"usage"\s*:\s*null(?=\s*[,}])|"usage"\s*:\s*null\s*,')
_SEPARATORS: Final = (b"\n\n", b"\r\n\r\n")


def streamed_request(body: bytes) -> dict[str, Any] | None:
    """The request body parsed, when it is a JSON object that asks for a stream
    (``"stream": true``); None otherwise, without parsing a body that never names it."""
    if b'"stream"' not in body:
        return None
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(payload, dict) or payload.get("stream") is not True:
        return None
    return payload


def ask_for_usage(body: bytes) -> bytes | None:
    """The request body with ``stream_options.include_usage: true`` added, or None when there
    is nothing to add: not a JSON object, not streamed, or the client asked for usage itself
    (then its stream is its own, untouched)."""
    payload = streamed_request(body)
    if payload is None:
        return None
    options = payload.get("stream_options")
    if options is not None and not isinstance(options, dict):
        return None  # the upstream's to refuse, as it would have
    if options is not None and options.get("include_usage") is True:
        return None
    payload["stream_options"] = {**(options or {}), **_INCLUDE}
    return orjson.dumps(payload)


def _data(event: bytes) -> tuple[int, int] | None:
    """Where the JSON of a one-line ``data:`` event is (start, end), or None."""
    lines = event.rstrip(b"\r\n").split(b"\n")
    if len(lines) != 1 or not event.startswith(b"data:"):
        return None
    start = 6 if event.startswith(b"data: ") else 5
    end = len(event.rstrip(b"\r\n"))
    return start, end


def _without_usage(payload: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in payload.items() if key != "usage"}


class UsageChunkFilter:
    """Takes the added usage out of a chat stream, event by event (see the module)."""

    __slots__ = ("_pending", "dropped", "edited")

    def __init__(self) -> None:
        self._pending = b""
        self.dropped = 0  # usage chunks taken out
        self.edited = 0  # chunks whose "usage":null was removed

    def feed(self, chunk: bytes) -> bytes:
        """What to send the client for ``chunk``: its whole events, filtered; a trailing
        partial event is held back until its end arrives (or :meth:`flush`)."""
        data = self._pending + chunk if self._pending else chunk
        out: list[bytes] = []
        start = 0
        while True:
            end = _event_end(data, start)
            if end < 0:
                break
            out.append(self._event(data[start:end]))
            start = end
        self._pending = data[start:]
        return b"".join(out)

    def flush(self) -> bytes:
        """The held-back bytes of an event the stream never finished, as they came."""
        pending, self._pending = self._pending, b""
        return pending

    def _event(self, event: bytes) -> bytes:
        if b'"usage"' not in event:
            return event
        where = _data(event)
        if where is None:
            return event
        start, end = where
        try:
            payload = orjson.loads(event[start:end])
        except orjson.JSONDecodeError:
            return event
        if not isinstance(payload, dict) or "usage" not in payload:
            return event
        usage = payload["usage"]
        if isinstance(usage, dict) and payload.get("choices") == []:
            self.dropped += 1
            return b""
        if usage is not None:
            return event
        edited = _NULL_USAGE.sub(b"", event[start:end], count=1)
        try:
            if orjson.loads(edited) != _without_usage(payload):
                return event
        except orjson.JSONDecodeError:
            return event
        self.edited += 1
        return event[:start] + edited + event[end:]


def _event_end(data: bytes, start: int) -> int:
    """The end (after its blank line) of the first whole event from ``start``, or -1."""
    ends = [found + len(sep) for sep in _SEPARATORS if (found := data.find(sep, start)) >= 0]
    return min(ends) if ends else -1
