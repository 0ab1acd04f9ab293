"""An episode's event log, read from what the agent's own requests carry.

Three shapes give the same :class:`EpisodeLog`:

* chat completions ``messages``: assistant ``tool_calls`` in order, each tool result matched by
  ``tool_call_id``; the final answer is the last assistant message when it has no tool calls;
* Responses API ``input`` items: ``function_call`` / ``function_call_output`` by ``call_id``,
  assistant ``message`` items for text;
* plain events ``[{"name", "arguments", "result"}]`` with the final answer given beside them.

Reading never raises: an element of the wrong shape is skipped, arguments that are not a JSON
object become ``arguments=None`` (which fails ``authority_ok`` with a reason downstream).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from grader.json import JSONError, loads_exact

_NO_RESULT: Any = None


@dataclass(frozen=True, slots=True)
class Event:
    """One tool call of the run and, when the log holds it, its result."""

    name: str | None
    arguments: dict[str, Any] | None
    result: Any = None
    call_id: str | None = None


@dataclass(frozen=True, slots=True)
class EpisodeLog:
    events: tuple[Event, ...]
    final_text: str | None  # the answer that ended the episode, when it is text
    turns: int  # model responses in the log
    incomplete: bool = False  # a tool result whose call is not in the log: a trimmed history

    @property
    def calls(self) -> int:
        return len(self.events)


def _arguments(raw: Any) -> dict[str, Any] | None:
    if isinstance(raw, dict):
        return raw
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            value = loads_exact(raw)
        except JSONError:
            return None
        return value if isinstance(value, dict) else None
    return None


def _result(raw: Any) -> Any:
    """A tool result: JSON text parsed (so ``result.id`` paths resolve), other text kept."""
    text = _text(raw) if isinstance(raw, list) else raw
    if isinstance(text, str):
        stripped = text.strip()
        if stripped[:1] in ("{", "["):
            try:
                return loads_exact(stripped)
            except JSONError:
                return text
    return text


def _text(content: Any) -> str | None:
    """Message content as text: a string, or the text of its parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            p.get("text") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        ]
        return "".join(parts) if parts else None  # type: ignore[arg-type]
    return None


def _orphans(calls: list[Event], results: dict[str, Any]) -> bool:
    """A result whose call is not in the log: the history was trimmed or summarised."""
    return bool(set(results) - {c.call_id for c in calls})


def _with_results(calls: list[Event], results: dict[str, Any]) -> tuple[Event, ...]:
    return tuple(
        Event(c.name, c.arguments, results.get(c.call_id, _NO_RESULT), c.call_id)
        if c.call_id is not None
        else c
        for c in calls
    )


def from_chat(messages: Sequence[Any]) -> EpisodeLog:
    """The log of a chat completions ``messages`` array (the last response appended to it)."""
    calls: list[Event] = []
    results: dict[str, Any] = {}
    final: str | None = None
    turns = 0
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role == "assistant":
            turns += 1
            tool_calls = message.get("tool_calls")
            if isinstance(tool_calls, list) and tool_calls:
                final = None
                for tool_call in tool_calls:
                    function = tool_call.get("function") if isinstance(tool_call, dict) else None
                    if not isinstance(function, dict):
                        continue
                    name = function.get("name")
                    call_id = tool_call.get("id")
                    calls.append(
                        Event(
                            name if isinstance(name, str) else None,
                            _arguments(function.get("arguments")),
                            None,
                            call_id if isinstance(call_id, str) else None,
                        )
                    )
            else:
                final = _text(message.get("content"))
        elif role == "tool" and isinstance(message.get("tool_call_id"), str):
            results[message["tool_call_id"]] = _result(message.get("content"))
    return EpisodeLog(_with_results(calls, results), final, turns, _orphans(calls, results))


def from_responses(items: Sequence[Any]) -> EpisodeLog:
    """The log of Responses API ``input`` items (the last response's ``output`` appended).

    A turn is a run of model items (``function_call``, assistant ``message``, ``reasoning``)
    between inputs: one response can emit several calls and a message at once.
    """
    calls: list[Event] = []
    results: dict[str, Any] = {}
    final: str | None = None
    turns = 0
    in_turn = False
    for item in items:
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        model_item = kind in ("function_call", "reasoning") or (
            kind == "message" and item.get("role") == "assistant"
        )
        if model_item and not in_turn:
            turns += 1
        in_turn = model_item
        if kind == "function_call":
            name, call_id = item.get("name"), item.get("call_id")
            final = None
            calls.append(
                Event(
                    name if isinstance(name, str) else None,
                    _arguments(item.get("arguments")),
                    None,
                    call_id if isinstance(call_id, str) else None,
                )
            )
        elif kind == "function_call_output" and isinstance(item.get("call_id"), str):
            results[item["call_id"]] = _result(item.get("output"))
        elif kind == "message" and item.get("role") == "assistant":
            final = _text(item.get("content"))
    return EpisodeLog(_with_results(calls, results), final, turns, _orphans(calls, results))


def from_events(events: Sequence[Any], final_text: str | None) -> EpisodeLog:
    """The log of plain ``{"name", "arguments", "result"}`` events; each event is a turn."""
    out: list[Event] = []
    for event in events:
        if not isinstance(event, dict):
            continue
        name = event.get("name")
        out.append(
            Event(
                name if isinstance(name, str) else None,
                _arguments(event.get("arguments")),
                _result(event.get("result")),
            )
        )
    return EpisodeLog(tuple(out), final_text, len(out) + (final_text is not None))
