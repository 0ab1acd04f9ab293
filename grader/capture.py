"""Capture rows: an untagged request's answer, kept so tasks can be drafted from real traffic.

A request with no task header is graded by nothing; with ``results.capture_untagged`` the proxy
writes a row of ``kind: "capture"`` for a sample of them (proxy/pipeline/record/captures.py),
and ``gradeproxy tasks draft`` (grader/drafts.py) groups those rows into task drafts. This
module builds the row and the two hashes drafts group by, and nothing else: it never reads a
socket or a file, and never raises on what a request or a backend sent (a value it cannot read
is kept as it came, or left out).

* :func:`prompt_hash` is the sha256 of the canonical JSON (:func:`~grader.toolcall.canon.
  canonical_json`: keys sorted, ``1.0`` written as ``1``) of the request's prompt (chat:
  ``messages``; Responses: ``input``), so two requests that say the same thing in a different
  key order or spacing share a hash, and a row can be joined without the text being stored.
* :func:`tools_hash` is the same over the request's tools, order of the tools ignored (a tool
  set, not a list).
* The answer is kept, hashed (``sha256:<hex>`` of the whole answer text) or dropped, as
  ``results.answer`` says; the prompt's ``messages`` only when the answer is kept.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Mapping
from typing import Any, Final, Literal

from grader.json import JSONError, loads_exact
from grader.rowids import live_row_id
from grader.rows import ROW_SCHEMA_VERSION
from grader.toolcall.canon import TooDeepError, canonical_json

__all__ = [
    "CAPTURE_FIELDS",
    "CAPTURE_KIND",
    "AnswerMode",
    "answer_digest",
    "calls_of",
    "capture_row",
    "is_capture",
    "prompt_hash",
    "prompt_of",
    "tools_hash",
]

CAPTURE_KIND: Final = "capture"
AnswerMode = Literal["keep", "hash", "drop"]
# Every field a capture row may have, in the order :func:`capture_row` writes them
# (docs/rows.md's "Capture rows" table lists them in this order; a test compares the two).
CAPTURE_FIELDS: tuple[str, ...] = (
    "kind",
    "row_schema_version",
    "row_id",
    "request_id",
    "upstream_request_id",
    "time",
    "model",
    "upstream",
    "route",
    "stream",
    "choice",
    "finish_reason",
    "run",
    "sample_id",
    "meta",
    "prompt_hash",
    "tools_hash",
    "tools",
    "messages",
    "calls",
    "answer",
    "truncated",
)


def is_capture(row: Any) -> bool:
    """Whether ``row`` is a capture row: the row commands that compare verdicts skip it."""
    return isinstance(row, Mapping) and row.get("kind") == CAPTURE_KIND


def _sha256(value: Any) -> str:
    try:
        text = canonical_json(value)
    except (TooDeepError, TypeError):  # not plain JSON, or nested past the grader's limit
        text = repr(value)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def prompt_hash(prompt: Any) -> str:
    """The sha256 hex of the prompt's canonical JSON: equal JSON, equal hash."""
    return _sha256(prompt)


def tools_hash(tools: Any) -> str:
    """The sha256 hex of the tool set: the tools' canonical JSON, sorted (order ignored);
    no tools (absent, null, not a list) hash as the empty set."""
    if not isinstance(tools, list):
        tools = []
    try:
        texts = sorted(canonical_json(tool) for tool in tools)
    except (TooDeepError, TypeError):
        texts = sorted(repr(tool) for tool in tools)
    return hashlib.sha256(
        ("[" + ",".join(texts) + "]").encode("utf-8", "surrogatepass")
    ).hexdigest()


def answer_digest(text: str) -> str:
    """``sha256:<hex>`` of an answer's text: joins rows without storing the answer."""
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def prompt_of(request: Mapping[str, Any], route: str) -> Any:
    """What the prompt hash covers: chat's ``messages``, the Responses API's ``input``."""
    return request.get("input" if route == "responses" else "messages")


def calls_of(answer: Any) -> list[dict[str, Any]]:
    """The tool calls of a captured answer (``{"tool_calls": [...]}``; a text answer has none),
    each ``{"name", "arguments"}``: the arguments parsed when they are JSON, else their text."""
    if not isinstance(answer, Mapping):
        return []
    listed = answer.get("tool_calls")
    if not isinstance(listed, list):
        return []
    calls: list[dict[str, Any]] = []
    for element in listed:
        if not isinstance(element, Mapping):
            continue
        function = element.get("function")
        call = function if isinstance(function, Mapping) else element
        name = call.get("name")
        if not isinstance(name, str):
            continue
        arguments = call.get("arguments")
        # Arguments that are not JSON stay the raw text: the row says what came, a draft refuses it.
        if isinstance(arguments, str):
            with contextlib.suppress(JSONError):
                arguments = loads_exact(arguments) if arguments.strip() else {}
        calls.append({"name": name, "arguments": arguments})
    return calls


def capture_row(
    *,
    request: Mapping[str, Any],
    route: str,
    answer: Any,
    text: str,
    mode: AnswerMode,
    max_answer_chars: int,
    live: Mapping[str, Any],
    choice: int,
) -> dict[str, Any]:
    """One capture row for choice ``choice``: ``live`` holds request_id, upstream_request_id,
    time, model, upstream, stream, finish_reason, run, sample_id and meta; ``text`` is the
    answer as the grader would read it (tool calls as their JSON envelope)."""
    prompt = prompt_of(request, route)
    tools = request.get("tools")
    time = str(live.get("time") or "")
    row: dict[str, Any] = {
        "kind": CAPTURE_KIND,
        "row_schema_version": ROW_SCHEMA_VERSION,
        "row_id": live_row_id(CAPTURE_KIND, str(live.get("request_id")), "primary", choice, time),
        "request_id": live.get("request_id"),
        "upstream_request_id": live.get("upstream_request_id"),
        "time": time,
        "model": live.get("model"),
        "upstream": live.get("upstream"),
        "route": route,
        "stream": live.get("stream"),
        "choice": choice,
        "finish_reason": live.get("finish_reason"),
        "run": live.get("run"),
        "sample_id": live.get("sample_id"),
        "meta": live.get("meta") or {},
        "prompt_hash": prompt_hash(prompt),
        "tools_hash": tools_hash(tools),
        "tools": tools if isinstance(tools, list) else None,
    }
    if mode == "keep":
        row["messages"] = prompt
    row["calls"] = calls_of(answer)
    if mode == "keep":
        cut = max_answer_chars >= 0 and len(text) > max_answer_chars
        row["answer"] = text[:max_answer_chars] if cut else text
        if cut:
            row["truncated"] = True
    elif mode == "hash":
        row["answer"] = answer_digest(text)
    return row
