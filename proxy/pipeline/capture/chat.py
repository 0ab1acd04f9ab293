"""Turn a copy of a backend's chat-completions response into grader answers.

The grader sees one answer per choice: ``{"tool_calls": [...]}`` when the assistant called
tools, else the text content. Building that from a stream means merging deltas, and the
reference semantics are openai-python's ``accumulate_delta`` (merge by ``index``, strings
concatenate). Real OpenAI-compatible servers bend those rules, and each bend below is one that
a naive accumulator turns into a wrong grade:

* parallel calls all sent at ``index`` 0 and told apart only by ``id`` (Ollama, SGLang);
* ``id`` and ``function.name`` restated in every chunk of a call (llama.cpp before its delta
  fix, llama-cpp-python), which concatenation turns into ``get_weatherget_weather``;
* empty-string or ``null`` ``id``/``name``/``type`` in continuation chunks (vLLM, Workers AI);
* ``arguments`` before ``name``, ``arguments`` as a JSON object, the first call at index 1;
* a legacy ``function_call`` next to, or instead of, ``tool_calls``;
* ``finish_reason`` of ``"stop"`` (or ``""``) on a tool-call turn.

Nothing here may raise on what a backend sends: a body or chunk that cannot be read is
reported in ``CaptureResult.error`` and the grader skips the response.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import field
from typing import Any, Final

from grader.values import value_type
from proxy.pipeline.capture.accumulate import (
    BLANK,
    MAX_MESSAGE,
    Answer,
    CaptureError,
    Choice,
    UpstreamReportedError,
    choice_index,
    choices_of,
    error_message,
    event_json,
    finish_reason,
    message_answer,
    nonempty_str,
    parse_json,
)
from proxy.pipeline.capture.sse import SSEDecoder

__all__ = ["Answer", "CaptureResult", "StreamCapture", "answers_from_body", "stream_answered"]

# `data: [DONE]` at the start of a line: the terminator the openai SDK stops reading at.
_DONE_LINE: Final = re.compile(rb"(?:^|[\r\n])data: ?\[DONE\]")
_TAIL_BYTES: Final = 4096


@value_type
class CaptureResult:
    """What one response said, per choice index.

    ``done`` is whether a stream ended with ``data: [DONE]`` (always ``True`` for a body that
    parsed). Some servers never send it, so its absence alone is not an error, but a stream
    that ends before every choice has a ``finish_reason`` and without ``[DONE]`` is one: it was
    cut off. When ``error`` is set, ``answers`` holds whatever was captured before it and must
    not be graded; ``upstream_error`` says whether the error is the upstream's own report (an
    ``error`` object in the body or the stream) rather than a response the proxy could not read.
    """

    answers: dict[int, Answer]
    model: str | None = None
    finish_reasons: dict[int, str | None] = field(default_factory=dict)
    error: str | None = None
    usage: dict[str, Any] | None = None
    done: bool = False
    response_id: str | None = None  # the response's `id` (the trace's gen_ai.response.id)
    upstream_error: bool = False


def answers_from_body(body: bytes) -> CaptureResult:
    """Answers of a non-streamed ``chat.completion`` body."""
    try:
        payload = parse_json(body)
        if not isinstance(payload, dict):
            raise CaptureError("body is not a JSON object")
        model = nonempty_str(payload.get("model"))
        if payload.get("error"):
            error = error_message(payload["error"])
            return CaptureResult(answers={}, model=model, error=error, upstream_error=True)
        if not isinstance(payload.get("choices"), list):
            raise CaptureError("body has no choices list")
        answers: dict[int, Answer] = {}
        finish_reasons: dict[int, str | None] = {}
        for position, choice in enumerate(choices_of(payload)):
            index = choice_index(choice, position)
            message = choice.get("message")
            answers[index] = message_answer(message) if isinstance(message, dict) else ""
            finish_reasons[index] = finish_reason(choice.get("finish_reason"))
        usage = payload.get("usage")
        return CaptureResult(
            answers=answers,
            model=model,
            finish_reasons=finish_reasons,
            usage=dict(usage) if isinstance(usage, dict) else None,
            done=True,
            response_id=nonempty_str(payload.get("id")),
        )
    except CaptureError as exc:
        return CaptureResult(answers={}, error=str(exc), upstream_error=exc.upstream)
    except Exception as exc:  # see internal_error
        return CaptureResult(answers={}, error=internal_error(exc))


def internal_error(exc: Exception) -> str:
    """Report a capture bug instead of raising it.

    Capture runs beside the relay of the client's response; an exception escaping it would
    cut that response short, which is worse than one ungraded answer. The message keeps the
    bug visible in the result row.
    """
    return f"internal capture error: {exc!r}"[:MAX_MESSAGE]


class StreamCapture:
    """Accumulate a streamed response, chunk by chunk, into answers.

    ``feed`` takes the raw bytes exactly as relayed to the client. After an error or after
    ``[DONE]`` the rest of the stream is ignored, as the client ignores it.
    """

    __slots__ = (
        "_choices",
        "_decoder",
        "_done",
        "_error",
        "_events",
        "_finished",
        "_id",
        "_model",
        "_upstream",
        "_usage",
    )

    def __init__(self) -> None:
        self._decoder = SSEDecoder()
        self._choices: dict[int, Choice] = {}
        self._model: str | None = None
        self._id: str | None = None
        self._usage: dict[str, Any] | None = None
        self._error: str | None = None
        self._upstream = False
        self._done = False
        self._finished = False
        self._events = 0

    def feed(self, chunk: bytes) -> None:
        """Take the next bytes of the stream, split anywhere."""
        if self._error is not None or self._done or self._finished or not chunk:
            return
        try:
            for event in self._decoder.feed_raw(chunk):
                self._event(event[1])
        except CaptureError as exc:
            self._error, self._upstream = str(exc), exc.upstream
        except Exception as exc:  # see internal_error
            self._error = internal_error(exc)

    def finish(self) -> CaptureResult:
        """End the stream and return what it said; safe to call more than once."""
        if self._finished:
            pass
        elif self._error is None and not self._done:
            try:
                # An unterminated final event is salvaged: if the stream was cut inside a
                # chunk its JSON is incomplete and reports as an error.
                for event in self._decoder.close_raw(flush=True):
                    self._event(event[1])
            except CaptureError as exc:
                self._error, self._upstream = str(exc), exc.upstream
            except Exception as exc:  # see internal_error
                self._error = internal_error(exc)
            if self._error is None and not self._done:
                self._error = self._unfinished()
        else:
            self._decoder.close()
        self._finished = True
        answers = {index: self._choices[index].answer() for index in sorted(self._choices)}
        finish_reasons = {
            index: self._choices[index].finish_reason for index in sorted(self._choices)
        }
        return CaptureResult(
            answers=answers,
            model=self._model,
            finish_reasons=finish_reasons,
            error=self._error,
            usage=self._usage,
            done=self._done,
            response_id=self._id,
            upstream_error=self._upstream,
        )

    def _unfinished(self) -> str | None:
        """Why a stream that ended without ``[DONE]`` cannot be graded, if it cannot.

        Some servers never send ``[DONE]``, so a stream whose every choice reported a
        ``finish_reason`` is complete without it. One that stops earlier was cut off, and one
        with no chunk at all is how llama-cpp-python reports a failure after its 200.
        """
        if not self._choices:
            return "stream ended without an answer chunk or [DONE]"
        unfinished = [i for i, choice in self._choices.items() if choice.finish_reason is None]
        if unfinished:
            return f"stream ended before choice {min(unfinished)} finished, without [DONE]"
        return None

    def _event(self, data: bytes) -> None:
        """One event's data, as the bytes it came in (:func:`event_json`)."""
        if self._done:
            return
        self._events += 1
        if data.startswith(b"[DONE]"):
            # The openai SDK stops at any data starting so; so does the capture.
            self._done = True
            return
        payload = event_json(data, self._events)
        if payload is BLANK:
            return
        if not isinstance(payload, dict):
            raise CaptureError(f"event {self._events}: not a JSON object")
        get = payload.get
        if get("error"):
            raise UpstreamReportedError(error_message(payload["error"]))
        if self._model is None:
            self._model = nonempty_str(get("model"))
        if self._id is None:
            self._id = nonempty_str(get("id"))
        usage = get("usage")
        if isinstance(usage, dict):
            # Servers that report usage on every chunk count cumulatively: the last one wins.
            self._usage = dict(usage)
        choices = self._choices
        for position, choice in enumerate(choices_of(payload)):
            index = choice_index(choice, position)
            state = choices.get(index)
            if state is None:
                state = choices[index] = Choice()
            delta = choice.get("delta")
            if isinstance(delta, dict):
                state.add_delta(delta)
            reason = finish_reason(choice.get("finish_reason"))
            if reason is not None:
                state.finish_reason = reason


def stream_answered(parts: Sequence[bytes], choices: int = 1) -> bool:
    """Whether the relayed part of a stream already carried the whole answer.

    A client may close as soon as it has ``[DONE]`` (the openai SDK does) while the upstream
    has yet to end its body; such a response reached the client whole and is graded. So is a
    stream whose ``choices`` choices all relayed a ``finish_reason`` (servers that never send
    ``[DONE]``; a trailing ``include_usage`` chunk is not part of the answer). Called only when
    the client left early, so the full parse it may fall back to is off the common path.
    """
    if not parts:
        return False
    tail = b"".join(part[-_TAIL_BYTES:] for part in parts[-3:])
    if _DONE_LINE.search(tail):
        return True
    stream = StreamCapture()
    for part in parts:
        stream.feed(part)
    result = stream.finish()
    if result.error is not None:
        return False
    if result.done:
        return True
    finished = sum(1 for reason in result.finish_reasons.values() if reason is not None)
    return finished >= max(choices, 1)
