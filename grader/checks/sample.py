"""What a check reads: the answer as a :class:`Sample`, its calls, and the request's context.

Apart from ``_base`` (results, protocols, definitions) because this is the one place an answer
string becomes the fields OpenAI's grader templates name (``sample.output_text``,
``output_json``, ``output_tools``) and a request's tools become one shape: every check and the
template resolver read an answer through here, so no two of them can parse it differently.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from grader.json import JSONError, dumps, loads_with_plain
from grader.toolcall.extract import call_from_value, extract
from grader.values import value_type


@value_type
class Sample:
    """What a check reads from one answer, in the shape OpenAI's grader templates name.

    ``output_tools`` elements are ``{"type": "function", "function": {"name", "arguments"}}``
    (``arguments`` as sent: normally a JSON string). ``raw`` is the answer string itself,
    kept so the tool-call grader reads exactly what ``grader.score`` would.
    """

    output_text: str
    output_json: Any | None = None
    output_tools: list[dict[str, Any]] = field(default_factory=list)
    raw: str | None = None
    # No string in ``raw`` can hold a run of 19 digits (grader.json.plain_strings): a call's
    # ``arguments`` text then parses without searching it again. Not part of the value.
    plain: bool = field(default=False, compare=False, repr=False)

    @classmethod
    def from_answer(cls, answer_text: str) -> Sample:
        """Build the sample from the answer string the proxy hands the grader.

        ``'{"tool_calls": [...]}'`` gives ``output_tools`` (and the text ``content`` beside
        it, if any); any other text is ``output_text``, and ``output_json`` when that text is
        one JSON object or array.
        """
        stripped = answer_text.strip()
        value: Any = None
        plain = False
        if stripped[:1] in ("{", "["):
            try:
                value, plain = loads_with_plain(stripped)
            except JSONError:
                value = None
        if isinstance(value, dict):
            elements = value.get("tool_calls")
            if not isinstance(elements, list):
                return cls(answer_text, value, [], answer_text)
            tools: list[dict[str, Any]] = elements  # as parsed, when all are in wire shape
            for element in elements:
                if not (isinstance(element, dict) and isinstance(element.get("function"), dict)):
                    # each element in wire shape: a bare {"name", "arguments"} is wrapped
                    tools = [_as_tool(e) for e in elements if isinstance(e, dict)]
                    break
            content = value.get("content")
            text = content if isinstance(content, str) else ""
            return cls(text, None, tools, answer_text, plain)
        json_value = value if isinstance(value, list) else None
        return cls(answer_text, json_value, [], answer_text)

    @property
    def answer(self) -> str:
        """The answer string: as received, or rebuilt from the fields of a derived sample."""
        if self.raw is not None:
            return self.raw
        if self.output_tools:
            return dumps({"tool_calls": self.output_tools}).decode()
        return self.output_text


def _as_tool(element: dict[str, Any]) -> dict[str, Any]:
    """A ``tool_calls`` element in wire shape; a bare ``{"name", "arguments"}`` is wrapped."""
    if isinstance(element.get("function"), dict):
        return element
    return {"type": "function", "function": element}


@value_type
class SampleCall:
    """One call in the answer: ``arguments`` is None when they are not a JSON object."""

    name: str | None
    arguments: dict[str, Any] | None


def sample_calls(sample: Sample) -> list[SampleCall]:
    """Every call in the answer: each ``output_tools`` element, else the one extracted call.

    Text answers can carry a call in prose (grading.md), so a text answer yields the call the
    tool-call grader would grade, if any.
    """
    calls: list[SampleCall] = []
    for tool in sample.output_tools:
        function = tool.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        call = call_from_value({"function": function})
        if call is None:
            calls.append(SampleCall(name if isinstance(name, str) else None, None))
        else:
            calls.append(SampleCall(call.name, call.arguments))
    if not sample.output_tools:
        found = extract(sample.answer).call
        if found is not None:
            calls.append(SampleCall(found.name, found.arguments))
    return calls


def chat_tools(tools: list[Any]) -> list[Any]:
    """Request tools in chat completions' shape, whichever API declared them.

    The Responses API declares a function tool flat, ``{"type": "function", "name",
    "parameters"}``; chat completions nests it under ``function``. Checks and templates read
    one shape, so a flat function tool is nested here and every other entry (a chat tool, a
    built-in tool such as ``web_search``) is kept as it is.
    """
    nested: list[Any] = []
    for tool in tools:
        flat = (
            isinstance(tool, dict)
            and tool.get("type") == "function"
            and "function" not in tool
            and isinstance(tool.get("name"), str)
        )
        if flat:
            function = {key: value for key, value in tool.items() if key != "type"}
            nested.append({"type": "function", "function": function})
        else:
            nested.append(tool)
    return nested


@value_type
class CheckContext:
    """What the request adds: its own ``tools`` list and the model that answered.

    Live, both come from the proxied request. Offline (``grader.engine.offline_context``) the
    tools come from the answers row or the task, and ``missing_tools`` says what to add when
    there are none, so a ``from_request`` column names it in its ``error``. ``request_tools`` is
    normalised to chat completions' shape (:func:`chat_tools`) on construction, so no check has
    to know which API the request came through.
    """

    request_tools: list[dict[str, Any]] | None = None
    model: str | None = None
    missing_tools: str | None = None
    # The request's role header (X-Grade-Role): the policy check's authority reads it over
    # ``item.role``, so one task serves agents of different roles (docs/episodes.md).
    role: str | None = None

    def __post_init__(self) -> None:
        if self.request_tools is not None:
            object.__setattr__(self, "request_tools", chat_tools(self.request_tools))
