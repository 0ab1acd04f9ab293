"""Turn a copy of a backend's Responses API (``POST /v1/responses``) reply into grader answers.

The grader takes one answer shape whatever the API: ``{"tool_calls": [...]}`` in chat
completions' wire shape when the model called functions, else the text. A Responses reply is
one ``output`` list of typed items; each ``function_call`` item becomes one tool call (its
``call_id`` is the call's ``id``, the id the client answers with), the ``output_text`` parts of
``message`` items are the text, and every other item (``reasoning``, built-in tool calls) is
not part of the answer. So checks, templates and rows are the same for both APIs.

A stream is semantic events, each a JSON object with a ``type``, and it ends with a terminal
event (``response.completed``, ``response.incomplete`` or ``response.failed``), not with
``[DONE]``. The final answer is the one the official SDK builds (``ResponseStreamState`` in
openai-python): the terminal event's ``response.output`` when it carries one, else the items
as ``response.output_item.done`` finalised them, else as ``output_item.added`` and the
argument and text deltas built them. A stream that ends without a terminal event was cut off;
``response.failed`` and ``error`` events are upstream errors. Nothing here raises on what a
backend sends (see ``proxy/pipeline/capture/chat.py``).

The single answer is choice 0, and its ``finish_reason`` is translated into chat's vocabulary
so rows of both APIs compare: ``tool_calls`` / ``stop`` for a completed response,
``length`` for ``incomplete_details.reason`` ``max_output_tokens``, else that reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from proxy.pipeline.capture.accumulate import (
    BLANK,
    Answer,
    CaptureError,
    UpstreamReportedError,
    arguments_text,
    error_message,
    event_json,
    is_index,
    nonempty_str,
    parse_json,
    wire_call,
)
from proxy.pipeline.capture.chat import CaptureResult, internal_error
from proxy.pipeline.capture.sse import SSEDecoder

__all__ = ["ResponsesStreamCapture", "responses_from_body", "responses_stream_answered"]

TERMINAL: Final = frozenset({"response.completed", "response.incomplete"})
_LENGTH_REASONS: Final = {"max_output_tokens": "length"}


class _Item:
    """One output item being assembled from stream events."""

    __slots__ = ("args", "call_id", "name", "texts", "type")

    def __init__(self, item: Mapping[str, Any] | None) -> None:
        item = item or {}
        # None for an item that no event introduced (a server that skipped output_item.added).
        self.type = nonempty_str(item.get("type"))
        self.call_id = nonempty_str(item.get("call_id"))
        self.name = nonempty_str(item.get("name"))
        arguments = item.get("arguments")
        self.args: list[str] = [] if arguments is None else [arguments_text(arguments)]
        self.texts: dict[int, list[str]] = {}
        for position, part in enumerate(_parts(item)):
            self.set_text(position, part)

    def set_text(self, content_index: int, part: object) -> None:
        if isinstance(part, dict) and part.get("type") == "output_text":
            text = part.get("text")
            self.texts[content_index] = [text] if isinstance(text, str) else []

    def as_item(self) -> dict[str, Any]:
        """The item in the ``output`` shape, so a stream and a body share one reader."""
        content = [
            {"type": "output_text", "text": "".join(self.texts[index])}
            for index in sorted(self.texts)
        ]
        kind = self.type or ("message" if self.texts and not self.args else "function_call")
        return {
            "type": kind,
            "call_id": self.call_id,
            "name": self.name or "",
            "arguments": "".join(self.args),
            "content": content,
        }


def _parts(item: Mapping[str, Any]) -> list[Any]:
    content = item.get("content")
    return content if isinstance(content, list) else []


def _output_answer(output: list[Any]) -> tuple[Answer, bool]:
    """The answer an ``output`` list gives, and whether it holds function calls."""
    calls: list[dict[str, Any]] = []
    texts: list[str] = []
    for item in output:
        if not isinstance(item, dict):
            raise CaptureError("an output item is not a JSON object")
        kind = item.get("type")
        if kind == "function_call":
            calls.append(wire_call(item.get("call_id"), item.get("name"), item.get("arguments")))
        elif kind == "message":
            for part in _parts(item):
                if isinstance(part, dict) and part.get("type") == "output_text":
                    text = part.get("text")
                    texts.append(text if isinstance(text, str) else "")
    if calls:
        return {"tool_calls": calls}, True
    return "".join(texts), False


def _finish_reason(response: Mapping[str, Any], has_calls: bool) -> str | None:
    status = response.get("status")
    if status == "incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        if isinstance(reason, str) and reason:
            return _LENGTH_REASONS.get(reason, reason)
        return "incomplete"
    if status == "completed" or status is None:
        return "tool_calls" if has_calls else "stop"
    return nonempty_str(status)


def _usage(response: Mapping[str, Any]) -> dict[str, Any] | None:
    usage = response.get("usage")
    return dict(usage) if isinstance(usage, dict) else None


def _failure(response: Mapping[str, Any]) -> str | None:
    """The upstream error a response object reports, if it reports one."""
    if response.get("error"):
        return error_message(response["error"])
    if response.get("status") == "failed":
        return "upstream error: response failed"
    return None


def _result(response: Mapping[str, Any], output: list[Any]) -> CaptureResult:
    answer, has_calls = _output_answer(output)
    return CaptureResult(
        answers={0: answer},
        model=nonempty_str(response.get("model")),
        finish_reasons={0: _finish_reason(response, has_calls)},
        usage=_usage(response),
        done=True,
        response_id=nonempty_str(response.get("id")),
    )


def responses_from_body(body: bytes) -> CaptureResult:
    """Answers of a non-streamed ``response`` object.

    A ``queued`` or ``in_progress`` body (``background: true``) holds no answer yet: it is
    reported as no answers, which the grader counts as an empty response, not an error.
    """
    try:
        payload = parse_json(body)
        if not isinstance(payload, dict):
            raise CaptureError("body is not a JSON object")
        failure = _failure(payload)
        if failure is not None:
            model = nonempty_str(payload.get("model"))
            return CaptureResult(answers={}, model=model, error=failure, upstream_error=True)
        if payload.get("status") in ("queued", "in_progress"):
            return CaptureResult(answers={}, model=nonempty_str(payload.get("model")), done=True)
        output = payload.get("output")
        if not isinstance(output, list):
            raise CaptureError("body has no output list")
        return _result(payload, output)
    except CaptureError as exc:
        return CaptureResult(answers={}, error=str(exc), upstream_error=exc.upstream)
    except Exception as exc:  # see proxy.pipeline.capture.chat.internal_error
        return CaptureResult(answers={}, error=internal_error(exc))


class ResponsesStreamCapture:
    """Accumulate a streamed Responses reply, event by event, into the answer.

    ``feed`` takes the raw bytes exactly as relayed; after an error or the terminal event the
    rest is ignored, as the SDK ignores it.
    """

    __slots__ = (
        "_decoder",
        "_error",
        "_events",
        "_finished",
        "_ids",
        "_items",
        "_model",
        "_result",
        "_upstream",
    )

    def __init__(self) -> None:
        self._decoder = SSEDecoder()
        self._items: dict[int, _Item] = {}
        self._ids: dict[str, int] = {}  # item id → output index, for events that name only it
        self._model: str | None = None
        self._error: str | None = None
        self._upstream = False
        self._result: CaptureResult | None = None
        self._finished = False
        self._events = 0

    def feed(self, chunk: bytes) -> None:
        """Take the next bytes of the stream, split anywhere."""
        if self._error is not None or self._result is not None or self._finished or not chunk:
            return
        try:
            for event in self._decoder.feed_raw(chunk):
                self._event(event[0], event[1])
        except CaptureError as exc:
            self._error, self._upstream = str(exc), exc.upstream
        except Exception as exc:  # see proxy.pipeline.capture.chat.internal_error
            self._error = internal_error(exc)

    def finish(self) -> CaptureResult:
        """End the stream and return what it said; safe to call more than once."""
        if not self._finished and self._error is None and self._result is None:
            try:
                for event in self._decoder.close_raw(flush=True):
                    self._event(event[0], event[1])
            except CaptureError as exc:
                self._error, self._upstream = str(exc), exc.upstream
            except Exception as exc:  # see proxy.pipeline.capture.chat.internal_error
                self._error = internal_error(exc)
        elif not self._finished:
            self._decoder.close()
        self._finished = True
        if self._result is not None and self._error is None:
            return self._result
        return CaptureResult(
            answers=self._partial(),
            model=self._model,
            finish_reasons={0: None} if self._items else {},
            error=self._error or "stream ended before response.completed",
            upstream_error=self._upstream,
        )

    def _partial(self) -> dict[int, Answer]:
        """What an unfinished stream had said, for the record (never graded)."""
        if not self._items:
            return {}
        try:
            return {0: _output_answer(self._output())[0]}
        except Exception:  # the error already explains the stream; a bug here must not raise
            return {}

    def _output(self) -> list[Any]:
        return [self._items[index].as_item() for index in sorted(self._items)]

    def _item(self, payload: Mapping[str, Any]) -> _Item:
        """The item an event is about: by ``output_index``, else by ``item_id``."""
        index = payload.get("output_index")
        if not is_index(index):
            item_id = payload.get("item_id")
            found = self._ids.get(item_id) if isinstance(item_id, str) else None
            if found is None:
                raise CaptureError(f"event {self._events}: no output_index or known item_id")
            index = found
        item = self._items.get(index)
        if item is None:  # a server that skipped output_item.added
            item = self._items[index] = _Item(None)
        return item

    def _event(self, name: str, data: bytes) -> None:
        """One event: its type, and its data as the bytes it came in (:func:`event_json`)."""
        if self._result is not None:
            return
        self._events += 1
        if data.startswith(b"[DONE]"):
            return  # not part of the protocol; the terminal event decides completeness
        payload = event_json(data, self._events)
        if payload is BLANK:
            return  # as [DONE]: not an event
        if not isinstance(payload, dict):
            raise CaptureError(f"event {self._events}: not a JSON object")
        typed = payload.get("type")
        kind = typed if isinstance(typed, str) else name
        if kind == "error":
            raise UpstreamReportedError(error_message(payload.get("error") or payload))
        if typed is None and payload.get("error"):
            # The chat-style in-band error (the proxy's own after an upstream failure).
            raise UpstreamReportedError(error_message(payload["error"]))
        response = payload.get("response")
        if isinstance(response, dict):
            self._lifecycle(kind, response)
        elif kind == "response.output_item.added" or kind == "response.output_item.done":
            self._item_event(payload)
        elif kind == "response.function_call_arguments.delta":
            delta = payload.get("delta")
            if isinstance(delta, str) and delta:
                self._item(payload).args.append(delta)
        elif kind == "response.function_call_arguments.done":
            item = self._item(payload)
            if payload.get("arguments") is not None:
                item.args[:] = [arguments_text(payload["arguments"])]
            item.name = nonempty_str(payload.get("name")) or item.name
        elif kind == "response.output_text.delta":
            delta, content_index = payload.get("delta"), payload.get("content_index", 0)
            if isinstance(delta, str) and is_index(content_index):
                self._item(payload).texts.setdefault(content_index, []).append(delta)
        elif kind == "response.output_text.done":
            text, content_index = payload.get("text"), payload.get("content_index", 0)
            if isinstance(text, str) and is_index(content_index):
                self._item(payload).texts[content_index] = [text]
        elif kind == "response.content_part.added" or kind == "response.content_part.done":
            content_index = payload.get("content_index", 0)
            if is_index(content_index):
                self._item(payload).set_text(content_index, payload.get("part"))
        # Any other event (reasoning, built-in tools, annotations) adds nothing to the answer.

    def _item_event(self, payload: Mapping[str, Any]) -> None:
        index = payload.get("output_index")
        item = payload.get("item")
        if not is_index(index) or not isinstance(item, dict):
            raise CaptureError(f"event {self._events}: an output item event without its item")
        self._items[index] = _Item(item)
        item_id = item.get("id")
        if isinstance(item_id, str):
            self._ids[item_id] = index

    def _lifecycle(self, kind: str, response: Mapping[str, Any]) -> None:
        self._model = nonempty_str(response.get("model")) or self._model
        failure = _failure(response)
        if failure is not None or kind == "response.failed":
            raise UpstreamReportedError(failure or "upstream error: response failed")
        if kind in TERMINAL:
            output = response.get("output")
            self._result = _result(response, output if isinstance(output, list) else self._output())


def responses_stream_answered(parts: Sequence[bytes]) -> bool:
    """Whether a relayed Responses stream already reached its terminal event
    (``response.completed`` or ``response.incomplete``): its client has the whole answer, so
    it is graded even when the client leaves before the upstream ends its body."""
    stream = ResponsesStreamCapture()
    for part in parts:
        stream.feed(part)
    return stream.finish().error is None
