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

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias, TypeGuard

import orjson

from proxy.sse import SSEDecoder

__all__ = ["Answer", "CaptureResult", "StreamCapture", "answers_from_body"]

Answer: TypeAlias = dict[str, Any] | str

# orjson silently turns integers beyond 64 bits into floats; a run this long may be one.
_MAYBE_BIG_INT: Final = re.compile(r"\d{19}")
# An upstream error message lands in logs and result rows; a backend may send pages of it.
_MAX_MESSAGE: Final = 500


@dataclass(frozen=True, slots=True)
class CaptureResult:
    """What one response said, per choice index.

    ``done`` is whether a stream ended with ``data: [DONE]`` (always ``True`` for a body that
    parsed). Some servers never send it, so its absence alone is not an error, but a stream
    that ends before every choice has a ``finish_reason`` and without ``[DONE]`` is one: it was
    cut off. When ``error`` is set, ``answers`` holds whatever was captured before it and must
    not be graded.
    """

    answers: dict[int, Answer]
    model: str | None = None
    finish_reasons: dict[int, str | None] = field(default_factory=dict)
    error: str | None = None
    usage: dict[str, Any] | None = None
    done: bool = False


class _CaptureError(Exception):
    """A response that cannot be read; its message becomes ``CaptureResult.error``."""


def _parse_json(text: str | bytes) -> Any:
    """Parse with orjson, or exactly with the stdlib where a long digit run could be lost."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    try:
        if _MAYBE_BIG_INT.search(text):
            return json.loads(text)
        return orjson.loads(text)
    except ValueError as exc:
        raise _CaptureError(f"invalid JSON: {exc}") from None
    except RecursionError:
        raise _CaptureError("invalid JSON: nested too deeply") from None


def _nonempty_str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _is_index(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _arguments_text(value: object) -> str:
    """Arguments as the JSON text the grader parses; some servers send the object itself."""
    if isinstance(value, str):
        return value
    try:
        return orjson.dumps(value).decode()
    except TypeError as exc:
        raise _CaptureError(f"tool arguments cannot be serialised: {exc}") from None


def _fragment_arguments(value: object) -> tuple[str, bool]:
    """A delta's arguments as text, and whether it is a whole value rather than a fragment.

    Serialising comes before any state changes, so an unreadable object leaves no trace.
    """
    if value is None:
        return "", False
    if isinstance(value, str):
        return value, False
    return _arguments_text(value), True


def _content_text(value: object) -> str | None:
    """Text of a ``content`` field: a string, or the text parts of a content-part list."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = [
            part["text"]
            for part in value
            if isinstance(part, Mapping)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
        ]
        return "".join(texts)
    return None


def _error_message(error: object) -> str:
    message = error.get("message") if isinstance(error, Mapping) else error
    if isinstance(message, str) and message:
        return f"upstream error: {message[:_MAX_MESSAGE]}"
    return "upstream error"


class _Call:
    """One tool call being assembled; ``seq`` keeps calls sharing a wire index in order."""

    __slots__ = ("args", "id", "index", "name_len", "name_parts", "seq")

    def __init__(self, index: int, seq: int) -> None:
        self.index = index
        self.seq = seq
        self.id: str | None = None
        self.name_parts: list[str] = []
        self.name_len = 0
        self.args: list[str] = []

    @property
    def name(self) -> str:
        if len(self.name_parts) > 1:
            self.name_parts[:] = ["".join(self.name_parts)]
        return self.name_parts[0] if self.name_parts else ""

    def add_name(self, fragment: str) -> None:
        """Merge a name fragment, treating a restatement of the name as no change.

        Servers that repeat the whole name in every chunk (llama.cpp) or send it growing
        ("get_wea", "get_weather") would otherwise be concatenated. A fragment shorter than
        the name so far cannot restate it, so only a fragment at least as long is compared,
        which keeps a long name streamed in pieces linear.
        """
        restates = self.name_len and len(fragment) >= self.name_len
        if restates and fragment.startswith(self.name):
            self.name_parts[:] = [fragment]
            self.name_len = len(fragment)
            return
        self.name_parts.append(fragment)
        self.name_len += len(fragment)

    def add_arguments(self, text: str, whole: bool) -> None:
        if whole:
            # An object is a whole value, not a fragment: a repeat of it replaces, not appends.
            self.args[:] = [text]
        elif text:
            self.args.append(text)

    @property
    def empty(self) -> bool:
        """A fragment of nothing but nulls and empty strings, as some servers send."""
        return self.id is None and not self.name_len and not self.args

    def answer(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": "".join(self.args)},
        }


class _Choice:
    """The accumulated state of one choice index of a stream."""

    __slots__ = ("calls", "content", "finish_reason", "legacy", "slots")

    def __init__(self) -> None:
        self.content: list[str] = []
        self.calls: list[_Call] = []
        # The call each wire index currently feeds; a new id at a used index opens a new call.
        self.slots: dict[int, _Call] = {}
        self.legacy: _Call | None = None
        self.finish_reason: str | None = None

    def add_delta(self, delta: Mapping[str, Any]) -> None:
        text = _content_text(delta.get("content"))
        if text:
            self.content.append(text)
        tool_calls = delta.get("tool_calls")
        if isinstance(tool_calls, list):
            for position, fragment in enumerate(tool_calls):
                if isinstance(fragment, Mapping):
                    self._add_tool_fragment(fragment, position)
        function_call = delta.get("function_call")
        if isinstance(function_call, Mapping):
            text, whole = _fragment_arguments(function_call.get("arguments"))
            if self.legacy is None:
                self.legacy = _Call(0, 0)
            name = _nonempty_str(function_call.get("name"))
            if name is not None:
                self.legacy.add_name(name)
            self.legacy.add_arguments(text, whole)

    def _add_tool_fragment(self, fragment: Mapping[str, Any], position: int) -> None:
        raw_index = fragment.get("index")
        # A server that omits the index is taken to list calls in index order.
        index = raw_index if _is_index(raw_index) else position
        call_id = _nonempty_str(fragment.get("id"))
        function = fragment.get("function")
        if not isinstance(function, Mapping):
            function = {}
        name = _nonempty_str(function.get("name"))
        text, whole = _fragment_arguments(function.get("arguments"))
        call = self.slots.get(index)
        if call is None or self._starts_new_call(call, call_id, name):
            call = _Call(index, len(self.calls))
            self.calls.append(call)
            self.slots[index] = call
        if call_id is not None and call.id is None:
            call.id = call_id
        if name is not None:
            call.add_name(name)
        call.add_arguments(text, whole)

    @staticmethod
    def _starts_new_call(call: _Call, call_id: str | None, name: str | None) -> bool:
        if call_id is not None and call.id is not None:
            # A repeated id continues the call (llama.cpp); another id that comes with a name
            # is a parallel call reusing the index (Ollama, SGLang).
            return call_id != call.id and name is not None
        if call_id is None and name is not None and call.name_len and call.args:
            # No ids to go by: a different name once arguments have begun can only be a
            # further call. A restated or growing name is the same call.
            return not name.startswith(call.name)
        return False

    def answer(self) -> Answer:
        calls = [call for call in self.calls if not call.empty]
        if calls:
            calls.sort(key=lambda call: (call.index, call.seq))
            return {"tool_calls": [call.answer() for call in calls]}
        if self.legacy is not None and (self.legacy.name_len or self.legacy.args):
            return {"tool_calls": [self.legacy.answer()]}
        return "".join(self.content)


def _finish_reason(value: object) -> str | None:
    # Some servers send "" rather than null on chunks that do not finish.
    return _nonempty_str(value)


def _message_answer(message: Mapping[str, Any]) -> Answer:
    tool_calls = message.get("tool_calls")
    if isinstance(tool_calls, list) and tool_calls:
        calls: list[dict[str, Any]] = []
        for entry in tool_calls:
            if not isinstance(entry, Mapping):
                raise _CaptureError("a tool call is not a JSON object")
            function = entry.get("function")
            if not isinstance(function, Mapping):
                function = {}
            name = function.get("name")
            arguments = function.get("arguments")
            calls.append(
                {
                    "id": _nonempty_str(entry.get("id")),
                    "type": "function",
                    "function": {
                        "name": name if isinstance(name, str) else "",
                        "arguments": "" if arguments is None else _arguments_text(arguments),
                    },
                }
            )
        return {"tool_calls": calls}
    function_call = message.get("function_call")
    if isinstance(function_call, Mapping):
        name = function_call.get("name")
        arguments = function_call.get("arguments")
        return {
            "tool_calls": [
                {
                    "id": None,
                    "type": "function",
                    "function": {
                        "name": name if isinstance(name, str) else "",
                        "arguments": "" if arguments is None else _arguments_text(arguments),
                    },
                }
            ]
        }
    text = _content_text(message.get("content"))
    return text if text is not None else ""


def _choice_index(choice: Mapping[str, Any], position: int) -> int:
    raw = choice.get("index", position)
    if not _is_index(raw):
        raise _CaptureError(f"choice index is not a non-negative integer: {raw!r}")
    return raw


def _choices(payload: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    choices = payload.get("choices")
    if choices is None:
        return []
    if not isinstance(choices, list):
        raise _CaptureError("choices is not a list")
    for choice in choices:
        if not isinstance(choice, Mapping):
            raise _CaptureError("a choice is not a JSON object")
    return choices


def answers_from_body(body: bytes) -> CaptureResult:
    """Answers of a non-streamed ``chat.completion`` body."""
    try:
        payload = _parse_json(body)
        if not isinstance(payload, Mapping):
            raise _CaptureError("body is not a JSON object")
        model = _nonempty_str(payload.get("model"))
        if payload.get("error"):
            return CaptureResult(answers={}, model=model, error=_error_message(payload["error"]))
        if not isinstance(payload.get("choices"), list):
            raise _CaptureError("body has no choices list")
        answers: dict[int, Answer] = {}
        finish_reasons: dict[int, str | None] = {}
        for position, choice in enumerate(_choices(payload)):
            index = _choice_index(choice, position)
            message = choice.get("message")
            answers[index] = _message_answer(message) if isinstance(message, Mapping) else ""
            finish_reasons[index] = _finish_reason(choice.get("finish_reason"))
        usage = payload.get("usage")
        return CaptureResult(
            answers=answers,
            model=model,
            finish_reasons=finish_reasons,
            usage=dict(usage) if isinstance(usage, Mapping) else None,
            done=True,
        )
    except _CaptureError as exc:
        return CaptureResult(answers={}, error=str(exc))
    except Exception as exc:  # see _internal_error
        return CaptureResult(answers={}, error=_internal_error(exc))


def _internal_error(exc: Exception) -> str:
    """Report a capture bug instead of raising it.

    Capture runs beside the relay of the client's response; an exception escaping it would
    cut that response short, which is worse than one ungraded answer. The message keeps the
    bug visible in the result row.
    """
    return f"internal capture error: {exc!r}"[:_MAX_MESSAGE]


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
        "_model",
        "_usage",
    )

    def __init__(self) -> None:
        self._decoder = SSEDecoder()
        self._choices: dict[int, _Choice] = {}
        self._model: str | None = None
        self._usage: dict[str, Any] | None = None
        self._error: str | None = None
        self._done = False
        self._finished = False
        self._events = 0

    def feed(self, chunk: bytes) -> None:
        """Take the next bytes of the stream, split anywhere."""
        if self._error is not None or self._done or self._finished or not chunk:
            return
        try:
            for event in self._decoder.feed(chunk):
                self._event(event.data)
        except _CaptureError as exc:
            self._error = str(exc)
        except Exception as exc:  # see _internal_error
            self._error = _internal_error(exc)

    def finish(self) -> CaptureResult:
        """End the stream and return what it said; safe to call more than once."""
        if self._finished:
            pass
        elif self._error is None and not self._done:
            try:
                # An unterminated final event is salvaged: if the stream was cut inside a
                # chunk its JSON is incomplete and reports as an error.
                for event in self._decoder.close(flush=True):
                    self._event(event.data)
            except _CaptureError as exc:
                self._error = str(exc)
            except Exception as exc:  # see _internal_error
                self._error = _internal_error(exc)
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

    def _event(self, data: str) -> None:
        if self._done:
            return
        self._events += 1
        if data.startswith("[DONE]"):
            # The openai SDK stops at any data starting so; so does the capture.
            self._done = True
            return
        if not data.strip():
            return
        try:
            payload = _parse_json(data)
        except _CaptureError as exc:
            raise _CaptureError(f"event {self._events}: {exc}") from None
        if not isinstance(payload, Mapping):
            raise _CaptureError(f"event {self._events}: not a JSON object")
        if payload.get("error"):
            raise _CaptureError(_error_message(payload["error"]))
        if self._model is None:
            self._model = _nonempty_str(payload.get("model"))
        usage = payload.get("usage")
        if isinstance(usage, Mapping):
            # Servers that report usage on every chunk count cumulatively: the last one wins.
            self._usage = dict(usage)
        for position, choice in enumerate(_choices(payload)):
            index = _choice_index(choice, position)
            state = self._choices.get(index)
            if state is None:
                state = self._choices[index] = _Choice()
            delta = choice.get("delta")
            if isinstance(delta, Mapping):
                state.add_delta(delta)
            reason = _finish_reason(choice.get("finish_reason"))
            if reason is not None:
                state.finish_reason = reason
