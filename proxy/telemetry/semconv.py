"""Attribute names and values, by the GenAI semantic conventions this module pins.

Pinned: OpenTelemetry semantic conventions **v1.41.0** (GenAI, status *development*: the last
release before the GenAI conventions moved to ``semantic-conventions-genai``, whose
``gen_ai.evaluation.result`` has the same attributes). The names are written out, not imported from
``opentelemetry-semantic-conventions``, whose ``_incubating`` modules may rename them in a
minor release; a test checks each attribute name against that package (which has no
constant for the event name, ``gen_ai.evaluation.result``).

Everything here is plain data from plain data (the record, the request body, result rows): no
OpenTelemetry import, so it is tested without an exporter and runs in the exporter's thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from grader.usage import token_usage

__all__ = [
    "EVALUATION_EVENT",
    "SCHEMA_URL",
    "SEMCONV_VERSION",
    "content_attributes",
    "evaluations",
    "request_attributes",
    "response_attributes",
]

SEMCONV_VERSION = "1.41.0"
SCHEMA_URL = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
EVALUATION_EVENT = "gen_ai.evaluation.result"
# Bodies larger than this are not parsed for request attributes (the span keeps the rest).
MAX_PARSED_BODY = 1 << 20

# gen_ai.* request parameters read from the body, by the body's key.
_REQUEST_PARAMS: tuple[tuple[str, str, type], ...] = (
    ("temperature", "gen_ai.request.temperature", float),
    ("top_p", "gen_ai.request.top_p", float),
    ("max_tokens", "gen_ai.request.max_tokens", int),
    ("max_completion_tokens", "gen_ai.request.max_tokens", int),
    ("max_output_tokens", "gen_ai.request.max_tokens", int),  # the Responses API's name
    ("frequency_penalty", "gen_ai.request.frequency_penalty", float),
    ("presence_penalty", "gen_ai.request.presence_penalty", float),
    ("seed", "gen_ai.request.seed", int),
    ("n", "gen_ai.request.choice.count", int),
)


def request_json(body: bytes) -> dict[str, Any] | None:
    """The request body as an object, when it is one and small enough to read here."""
    if not body or len(body) > MAX_PARSED_BODY:
        return None
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return payload if isinstance(payload, dict) else None


def _number(value: Any, kind: type) -> int | float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if kind is int:
        return value if isinstance(value, int) else None
    return float(value)


def request_attributes(request: Mapping[str, Any] | None, provider: str) -> dict[str, Any]:
    """The GenAI request attributes of the upstream call (operation, model, parameters)."""
    attributes: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": provider}
    if request is None:
        return attributes
    model = request.get("model")
    if isinstance(model, str) and model:
        attributes["gen_ai.request.model"] = model[:256]
    for key, name, kind in _REQUEST_PARAMS:
        value = _number(request.get(key), kind)
        if value is not None:
            attributes[name] = value
    stop = request.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    if isinstance(stop, list) and stop and all(isinstance(s, str) for s in stop):
        attributes["gen_ai.request.stop_sequences"] = [s[:256] for s in stop[:16]]
    return attributes


def response_attributes(
    rows: Iterable[Mapping[str, Any]], call: Mapping[str, Any]
) -> dict[str, Any]:
    """The GenAI response attributes of a graded call: from its answer rows and the parsed
    copy's facts (``call``: ``id``, ``model``, ``usage``), never from the body again."""
    answers = [row for row in rows if row.get("kind", "answer") == "answer"]
    attributes: dict[str, Any] = {}
    model = call.get("model") or next((r.get("model") for r in answers if r.get("model")), None)
    if isinstance(model, str) and model:
        attributes["gen_ai.response.model"] = model[:256]
    if isinstance(call.get("id"), str) and call["id"]:
        attributes["gen_ai.response.id"] = call["id"][:256]
    reasons = [str(r.get("finish_reason")) for r in sorted(answers, key=_choice)]
    if answers and all(r.get("finish_reason") for r in answers):
        attributes["gen_ai.response.finish_reasons"] = reasons
    usage = token_usage(call.get("usage"))
    if usage is not None:
        for key, attribute in (
            ("input_tokens", "gen_ai.usage.input_tokens"),
            ("output_tokens", "gen_ai.usage.output_tokens"),
        ):
            if usage[key] is not None:
                attributes[attribute] = usage[key]
    return attributes


def _choice(row: Mapping[str, Any]) -> int:
    choice = row.get("choice")
    return choice if isinstance(choice, int) else 0


def _cut(text: str, cap: int) -> str:
    return text if len(text) <= cap else text[:cap]


def _message_text(content: Any, cap: int) -> list[dict[str, Any]]:
    """A chat message's content as the conventions' parts, each text cut at ``cap``."""
    if isinstance(content, str):
        return [{"type": "text", "content": _cut(content, cap)}]
    parts: list[dict[str, Any]] = []
    if isinstance(content, list):
        for part in content:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append({"type": "text", "content": _cut(part["text"], cap)})
    return parts


def content_attributes(
    request: Mapping[str, Any] | None, rows: Iterable[Mapping[str, Any]], cap: int
) -> dict[str, Any]:
    """``gen_ai.input.messages`` / ``gen_ai.output.messages`` (JSON strings, as the conventions
    record structured attributes on spans), every text cut at ``cap`` characters; output only
    from rows that kept their answer (``results.answer: keep``)."""
    attributes: dict[str, Any] = {}
    messages: list[dict[str, Any]] = []
    source = request.get("messages") if request is not None else None
    if request is not None and source is None:
        source = request.get("input")  # the Responses API
        if isinstance(source, str):
            source = [{"role": "user", "content": source}]
    if isinstance(source, list):
        for message in source[:256]:
            if isinstance(message, Mapping) and isinstance(message.get("role"), str):
                messages.append(
                    {"role": message["role"], "parts": _message_text(message.get("content"), cap)}
                )
    if messages:
        attributes["gen_ai.input.messages"] = orjson.dumps(messages).decode()
    outputs = [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": _cut(row["answer"], cap)}],
            "finish_reason": row.get("finish_reason") or "",
        }
        for row in sorted(rows, key=_choice)
        if isinstance(row.get("answer"), str)
    ]
    if outputs:
        attributes["gen_ai.output.messages"] = orjson.dumps(outputs).decode()
    return attributes


def _label(column: Mapping[str, Any]) -> str:
    passed = column.get("passed")
    if passed is None:
        return "error"
    if passed:
        return "pass"
    details = column.get("details") or {}
    if column.get("reason_code") == "stale_schema" or details.get("staleSchemaUsed"):
        return "stale"
    return "fail"


def _explanation(column: Mapping[str, Any]) -> str:
    reason = str(column.get("error") or column.get("reason") or "")
    path = (column.get("details") or {}).get("path")
    return f"{reason} (at {path})" if path else reason


def _evaluation(column: Mapping[str, Any], response_id: str | None, **extra: Any) -> dict[str, Any]:
    label = _label(column)
    attributes: dict[str, Any] = {
        "gen_ai.evaluation.name": str(column.get("name")),
        "gen_ai.evaluation.score.label": label,
    }
    if explanation := _explanation(column):  # recommended, not required: none for a bare pass
        attributes["gen_ai.evaluation.explanation"] = explanation[:1024]
    score = column.get("score")
    if isinstance(score, int | float) and not isinstance(score, bool):
        attributes["gen_ai.evaluation.score.value"] = float(score)
    elif label != "error":
        attributes["gen_ai.evaluation.score.value"] = 1.0 if label == "pass" else 0.0
    if label == "error":
        attributes["error.type"] = str(column.get("reason_code") or "error")
    if response_id:
        attributes["gen_ai.response.id"] = response_id
    if column.get("advisory"):
        attributes["gradeproxy.advisory"] = True
    attributes.update({k: v for k, v in extra.items() if v is not None})
    return attributes


def evaluations(rows: Iterable[Mapping[str, Any]], response_id: str | None) -> list[dict[str, Any]]:
    """One ``gen_ai.evaluation.result`` (its attributes) per check column of every row: an
    answer row's ``checks`` (with its choice), an episode row's ``columns``. ``response_id``
    for the log form only: a span event sits on the evaluated span itself."""
    out: list[dict[str, Any]] = []
    for row in rows:
        if row.get("kind") == "episode":
            episode = row.get("episode_id")
            for column in row.get("columns") or ():
                out.append(_evaluation(column, response_id, **{"gradeproxy.episode": episode}))
            continue
        for column in row.get("checks") or ():
            out.append(_evaluation(column, response_id, **{"gradeproxy.choice": row.get("choice")}))
    return out
