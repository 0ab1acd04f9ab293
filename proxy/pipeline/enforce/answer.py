"""Enforcing a non-streamed answer: a chat completion or a Responses body, judged call by call.

``enforce_body`` reads the body once, asks the judge about every function call, and returns the
bytes the client gets. When nothing is withheld those are the upstream's bytes themselves (not
re-serialised: ``observe`` and a clean answer are byte-identical to ``off``); otherwise the
answer stays a 200 in its API's own shape (docs/enforce.md, "What the client gets"):

* ``block``: an answer with any offending call loses *all* its calls (calls in one answer are
  often meant together) and gains one assistant line per withheld call,
  ``[gradeproxy] withheld tool call <name>: <reason> (check <check>)``; a chat choice's
  ``finish_reason`` becomes ``"stop"``; a Responses body gets a ``message`` item with an
  ``output_text`` part where the first call was, its ``status`` unchanged;
* ``strip``: only the offending calls go; every other call and all text stay; chat's
  ``finish_reason`` becomes ``"stop"`` when no call remains.

A chat choice is one answer (``n > 1`` choices are judged apart); a Responses body is one.
A body that is not a JSON object, or holds no call, is returned as it came. Pure CPU: the
caller (proxy/pipeline/enforce/judge.py) runs it within the budget and never lets it raise
into the relay.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any, Literal

import orjson

from proxy.pipeline.enforce.decision import CallJudge, Decision, Enforced

__all__ = ["SIBLING_REASON", "WITHHELD_PREFIX", "enforce_body", "withheld_line"]

Api = Literal["chat", "responses"]
Mode = Literal["observe", "block", "strip"]
WITHHELD_PREFIX = "[gradeproxy] withheld tool call"
# Why a call whose checks passed is withheld too (the streamed hold-back says the same).
SIBLING_REASON = "withheld with the blocked call in the same answer"
_ACTING = ("block", "strip")
# Responses output items a client executes by name: function calls and custom tool calls
# (whose free-text ``input`` is judged as the arguments).
_RESPONSES_CALLS = ("function_call", "custom_tool_call")


def withheld_line(name: str, decision: Decision) -> str:
    """The one line an assistant text carries for a withheld call (docs/enforce.md)."""
    return f"{WITHHELD_PREFIX} {name}: {decision.reason} (check {decision.check})"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _judged(
    calls: Sequence[tuple[str, str]], judge: CallJudge, mode: Mode
) -> tuple[list[Decision], bool]:
    """Each call's decision as ``mode`` applies it; whether any call is withheld."""
    decisions = [judge(name, arguments) for name, arguments in calls]
    if mode == "observe" or not any(d.action in _ACTING for d in decisions):
        return decisions, False
    if mode == "strip":
        return decisions, True
    # block: the answer as a whole is refused; a call that did not fire goes with it
    cause = next(d for d in decisions if d.action in _ACTING)
    withheld = [
        d if d.action in _ACTING else Decision("block", cause.check, SIBLING_REASON)
        for d in decisions
    ]
    return [Decision("block", d.check, d.reason) for d in withheld], True


def _call_of(entry: Any) -> tuple[str, str]:
    """A chat ``tool_calls`` entry's name and arguments: a ``function`` call's, or a ``custom``
    tool call's name and free-text ``input`` (a custom tool is called by name all the same)."""
    if not isinstance(entry, dict):
        return "", ""
    function = entry.get("function")
    if isinstance(function, dict):
        return _text(function.get("name")), _text(function.get("arguments"))
    custom = entry.get("custom")
    if isinstance(custom, dict):
        return _text(custom.get("name")), _text(custom.get("input"))
    return "", ""


def _chat(payload: dict[str, Any], judge: CallJudge, mode: Mode) -> tuple[bool, list[Enforced]]:
    changed, outcomes = False, []
    choices = payload.get("choices")
    for choice in choices if isinstance(choices, list) else ():
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            continue
        assert isinstance(choice, dict)
        tool_calls = message.get("tool_calls")
        tool_calls = tool_calls if isinstance(tool_calls, list) else []
        # The legacy ``function_call`` is a call of its own: an SDK executes it as one.
        legacy = message.get("function_call")
        legacy = legacy if isinstance(legacy, dict) else None
        calls = [_call_of(call) for call in tool_calls]
        if legacy is not None:
            calls.append((_text(legacy.get("name")), _text(legacy.get("arguments"))))
        if not calls:
            continue
        decisions, act = _judged(calls, judge, mode)
        outcomes += [Enforced(name, d) for (name, _), d in zip(calls, decisions, strict=True)]
        if not act:
            continue
        changed = True
        gone = [d.action in _ACTING for d in decisions]
        kept = [call for call, out in zip(tool_calls, gone, strict=False) if not out]
        for index, call in enumerate(kept):
            if isinstance(call, dict) and "index" in call:
                call["index"] = index  # contiguous from 0, as in a stream's deltas
        if kept:
            message["tool_calls"] = kept
        else:
            message.pop("tool_calls", None)
        legacy_kept = legacy is not None and not gone[-1]
        if legacy is not None and not legacy_kept:
            del message["function_call"]
        if not kept and not legacy_kept:
            choice["finish_reason"] = "stop"
        if mode == "block":
            lines = "\n".join(
                withheld_line(name, d) for (name, _), d in zip(calls, decisions, strict=True)
            )
            before = _text(message.get("content"))
            message["content"] = f"{before}\n{lines}" if before else lines
    return changed, outcomes


def _responses(
    payload: dict[str, Any], judge: CallJudge, mode: Mode
) -> tuple[bool, list[Enforced]]:
    output = payload.get("output")
    if not isinstance(output, list):
        return False, []
    places = [
        i
        for i, item in enumerate(output)
        if isinstance(item, dict) and item.get("type") in _RESPONSES_CALLS
    ]
    if not places:
        return False, []
    calls = [
        (_text(output[i].get("name")), _text(output[i].get("arguments", output[i].get("input"))))
        for i in places
    ]
    decisions, act = _judged(calls, judge, mode)
    outcomes = [Enforced(name, d) for (name, _), d in zip(calls, decisions, strict=True)]
    if not act:
        return False, outcomes
    gone = {i for i, d in zip(places, decisions, strict=True) if d.action in _ACTING}
    kept: list[Any] = []
    for i, item in enumerate(output):
        if i == places[0] and mode == "block":
            lines = "\n".join(
                withheld_line(name, d) for (name, _), d in zip(calls, decisions, strict=True)
            )
            kept.append(_message_item(lines))
        if i not in gone:
            kept.append(item)
    payload["output"] = kept
    return True, outcomes


def _message_item(text: str) -> dict[str, Any]:
    """A Responses ``message`` output item holding one ``output_text`` part."""
    return {
        "type": "message",
        "id": "msg_gradeproxy_" + os.urandom(12).hex(),
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def enforce_body(
    api: Api, body: bytes, judge: CallJudge, mode: Mode
) -> tuple[bytes, tuple[Enforced, ...]]:
    """The bytes the client gets for ``body``, and one :class:`Enforced` per call judged."""
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        # What the client's own parser reads is what must be judged: Python's json (the openai
        # SDK's) takes NaN, Infinity, a byte-order mark and UTF-16/32, which orjson refuses.
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError):
            return body, ()
    if not isinstance(payload, dict):
        return body, ()
    rewrite = _responses if api == "responses" else _chat
    changed, outcomes = rewrite(payload, judge, mode)
    if not changed:
        return body, tuple(outcomes)
    return orjson.dumps(payload), tuple(outcomes)
