"""The readers both capture paths share, and chat's delta accumulation (one choice, delta by
delta).

Kept apart from ``proxy.pipeline.capture.chat`` and ``.responses`` so each file reads as one
concern: this one knows how real servers bend openai-python's ``accumulate_delta`` rules (see
``proxy/pipeline/capture/chat.py``), how a wire tool call is normalised, and how JSON is read
(the grader's one exact-number reader, ``grader.json``: big integers exact, no ``NaN``). Its
public names are the API those two modules use.

Objects are tested with ``isinstance(value, dict)``, never against ``Mapping``: every object the
reader returns is a ``dict``, and an ABC check costs ten times as much (a graded response makes
a dozen).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Final, TypeAlias, TypeGuard

from grader.json import JSONError, dumps, loads_exact_bytes
from proxy.errors import ProxyError

__all__ = [
    "BLANK",
    "MAX_MESSAGE",
    "Answer",
    "CaptureError",
    "Choice",
    "UpstreamReportedError",
    "arguments_text",
    "choice_index",
    "choices_of",
    "error_message",
    "event_json",
    "finish_reason",
    "is_index",
    "message_answer",
    "nonempty_str",
    "parse_json",
    "wire_call",
]

Answer: TypeAlias = dict[str, Any] | str

# An upstream error message lands in logs and result rows; a backend may send pages of it.
MAX_MESSAGE: Final = 500


class CaptureError(ProxyError):
    """A response that cannot be read; its message becomes ``CaptureResult.error``."""

    # Whether the response is the upstream's own error report (not graded, not a capture
    # failure either): ``CaptureResult.upstream_error``, which the grade stage reads.
    upstream: ClassVar[bool] = False


class UpstreamReportedError(CaptureError):
    """The response reports an upstream error (an ``error`` object, ``response.failed``)."""

    upstream = True


def parse_json(body: bytes) -> Any:
    """A body parsed with the grader's one exact-number reader (big integers exact, no NaN),
    read as UTF-8 with invalid sequences replaced."""
    try:
        return loads_exact_bytes(body)
    except JSONError as exc:
        raise CaptureError(f"invalid JSON: {exc}") from None


# What :func:`event_json` returns for data of whitespace alone: no event, and not an error.
BLANK: Final = object()


def event_json(data: bytes, number: int) -> Any:
    """Event ``number``'s data, as the bytes it came in, parsed as JSON (the text is their UTF-8
    decoded with replacement: what the client's SSE decoder reads); :data:`BLANK` for data of
    whitespace alone, Unicode whitespace too. Blankness is decided only when the parse fails,
    so a normal event pays nothing for it."""
    try:
        return loads_exact_bytes(data)
    except JSONError as exc:
        if not data.decode("utf-8", "replace").strip():
            return BLANK
        raise CaptureError(f"event {number}: invalid JSON: {exc}") from None


def wire_call(call_id: object, name: object, arguments: object) -> dict[str, Any]:
    """One tool call in chat completions' wire shape, the shape every answer is graded in
    (a chat ``tool_calls`` entry and a Responses ``function_call`` item both become one)."""
    return {
        "id": nonempty_str(call_id),
        "type": "function",
        "function": {
            "name": name if isinstance(name, str) else "",
            "arguments": "" if arguments is None else arguments_text(arguments),
        },
    }


def nonempty_str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def is_index(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def arguments_text(value: object) -> str:
    """Arguments as the JSON text the grader parses; some servers send the object itself."""
    if isinstance(value, str):
        return value
    try:
        return dumps(value).decode()  # wide integers and lone surrogates as the stdlib writes them
    except (TypeError, ValueError) as exc:
        raise CaptureError(f"tool arguments cannot be serialised: {exc}") from None


def _fragment_arguments(value: object) -> tuple[str, bool]:
    """A delta's arguments as text, and whether it is a whole value rather than a fragment.

    Serialising comes before any state changes, so an unreadable object leaves no trace.
    """
    if value is None:
        return "", False
    if isinstance(value, str):
        return value, False
    return arguments_text(value), True


def _content_text(value: object) -> str | None:
    """Text of a ``content`` field: a string, or the text parts of a content-part list."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = [
            part["text"]
            for part in value
            if isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
        ]
        return "".join(texts)
    return None


def error_message(error: object) -> str:
    message = error.get("message") if isinstance(error, dict) else error
    if isinstance(message, str) and message:
        return f"upstream error: {message[:MAX_MESSAGE]}"
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


class Choice:
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
        content = delta.get("content")
        if content:  # None, "" and [] add nothing; skipping them skips a call per event
            text = _content_text(content)
            if text:
                self.content.append(text)
        tool_calls = delta.get("tool_calls")
        if isinstance(tool_calls, list):
            for position, fragment in enumerate(tool_calls):
                if isinstance(fragment, dict):
                    self._add_tool_fragment(fragment, position)
        function_call = delta.get("function_call")
        if isinstance(function_call, dict):
            text, whole = _fragment_arguments(function_call.get("arguments"))
            if self.legacy is None:
                self.legacy = _Call(0, 0)
            name = nonempty_str(function_call.get("name"))
            if name is not None:
                self.legacy.add_name(name)
            self.legacy.add_arguments(text, whole)

    def _add_tool_fragment(self, fragment: Mapping[str, Any], position: int) -> None:
        raw_index = fragment.get("index")
        # A server that omits the index is taken to list calls in index order.
        index = raw_index if is_index(raw_index) else position
        call_id = nonempty_str(fragment.get("id"))
        function = fragment.get("function")
        if isinstance(function, dict):
            name = nonempty_str(function.get("name"))
            arguments = function.get("arguments")
        else:
            name = arguments = None
        call = self.slots.get(index)
        if call_id is None and name is None and call is not None:
            # A continuation (every fragment after a call's first): nothing but arguments.
            if isinstance(arguments, str):
                if arguments:
                    call.args.append(arguments)
                return
            if arguments is None:
                return
        text, whole = _fragment_arguments(arguments)
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


def finish_reason(value: object) -> str | None:
    # Some servers send "" rather than null on chunks that do not finish.
    return nonempty_str(value)


def message_answer(message: Mapping[str, Any]) -> Answer:
    tool_calls = message.get("tool_calls")
    if isinstance(tool_calls, list) and tool_calls:
        calls: list[dict[str, Any]] = []
        for entry in tool_calls:
            if not isinstance(entry, dict):
                raise CaptureError("a tool call is not a JSON object")
            function = entry.get("function")
            if not isinstance(function, dict):
                function = {}
            calls.append(
                wire_call(entry.get("id"), function.get("name"), function.get("arguments"))
            )
        return {"tool_calls": calls}
    function_call = message.get("function_call")
    if isinstance(function_call, dict):
        name = function_call.get("name")
        arguments = function_call.get("arguments")
        return {
            "tool_calls": [
                {
                    "id": None,
                    "type": "function",
                    "function": {
                        "name": name if isinstance(name, str) else "",
                        "arguments": "" if arguments is None else arguments_text(arguments),
                    },
                }
            ]
        }
    text = _content_text(message.get("content"))
    return text if text is not None else ""


def choice_index(choice: Mapping[str, Any], position: int) -> int:
    raw = choice.get("index", position)
    if not is_index(raw):
        raise CaptureError(f"choice index is not a non-negative integer: {raw!r}")
    return raw


def choices_of(payload: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    choices = payload.get("choices")
    if choices is None:
        return []
    if not isinstance(choices, list):
        raise CaptureError("choices is not a list")
    for choice in choices:
        if not isinstance(choice, dict):
            raise CaptureError("a choice is not a JSON object")
    return choices
