"""The live side of episode grading: which turn ends an episode, and its row (docs/episodes.md).

The proxy keeps no episode state between requests, so replicas stay stateless: the event log
is what the agent's own request carries (chat ``messages`` or Responses ``input`` items) plus
the response being graded. An episode is graded when that response ends it — an answer with
no tool calls, or a request that sends ``X-Grade-Episode-End: true`` — against the task that
final request names, with the replay ``gradeproxy replay`` uses (grader/episodes), so the same
episode gives the same row both ways.

The ``X-Grade-Episode`` value is the row's ``episode_id``: a retried final turn writes a second
row with the same id and reports keep the last. Without the header the id is a digest of the
task and the log. ``X-Grade-Role`` is the episode's role, read only with
``grading.trust_role_header``; then it wins over the record's and the item's. A history the
proxy cannot see whole — ``previous_response_id`` or ``conversation`` (server-side state), or
a tool result whose call is not in it (trimmed) — is never graded as
if whole: it is counted as ``episode_incomplete``. Turns, calls and bytes are bounded.

Never raises for any request or response: a body that does not parse is ``episode_incomplete``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from grader.checks import Judge
from grader.episodes.grade import episode_row, judge_cause, needs_judge
from grader.episodes.log import EpisodeLog, from_chat, from_responses
from grader.tasks import Task

EpisodeSkip = Literal["episode_turn", "episode_incomplete", "episode_limit"]
Limit = Literal["turns", "calls", "bytes"]
LIMITS: tuple[Limit, ...] = ("turns", "calls", "bytes")
MAX_HEADER = 256  # an episode id or role longer than this is cut: it becomes a row field
_TRUE = frozenset({"1", "true", "yes"})


@dataclass(frozen=True, slots=True)
class EpisodeTurn:
    """What the handler read from one request of an episode (headers only, no parsing)."""

    episode_id: str | None
    role: str | None
    ends: bool  # the request marked its turn the last
    max_turns: int
    max_calls: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class EpisodeOutcome:
    row: dict[str, Any] | None
    skip: EpisodeSkip | None = None
    limit: Limit | None = None
    log: EpisodeLog | None = None  # kept for a judge-form cause_correct


async def judge_episode(outcome: EpisodeOutcome, task: Task, judge: Judge | None) -> None:
    """Settle a judge-form ``cause_correct`` on the event loop (the row is updated in place)."""
    if outcome.row is None or outcome.log is None or task.episode is None:
        return
    if needs_judge(task.episode, outcome.log):
        await judge_cause(outcome.row, task.episode, outcome.log, judge, task.item)


def header_role(headers: Mapping[str, str], grading: Any) -> str | None:
    """The request's role header, cut at ``MAX_HEADER``, when ``grading.trust_role_header``
    allows it; otherwise None, and the role is the record's or the item's: a client must not
    name its own authority (``authority_ok``) unless the deployment trusts it to."""
    if not grading.trust_role_header:
        return None
    role = headers.get(grading.role_header)
    return role[:MAX_HEADER] if role else None


def turn_of(headers: Mapping[str, str], task: Task | None, grading: Any) -> EpisodeTurn | None:
    """The episode turn of a request for a task with a grader record, else None."""
    if task is None or task.episode is None:
        return None
    episode_id = headers.get(grading.episode_header)
    end = headers.get(grading.episode_end_header, "")
    return EpisodeTurn(
        episode_id[:MAX_HEADER] if episode_id else None,
        header_role(headers, grading),
        end.strip().lower() in _TRUE,
        grading.episode_max_turns,
        grading.episode_max_calls,
        grading.episode_max_bytes,
    )


def ends_episode(answer: Any, turn: EpisodeTurn) -> bool:
    """An answer with no tool calls ends an episode; so does a turn marked the last."""
    return turn.ends or not (isinstance(answer, dict) and answer.get("tool_calls"))


def _answer_message(answer: Any) -> dict[str, Any]:
    if isinstance(answer, dict):
        message = {"role": "assistant", "tool_calls": answer.get("tool_calls") or []}
        if isinstance(answer.get("content"), str):
            message["content"] = answer["content"]
        return message
    return {"role": "assistant", "content": answer if isinstance(answer, str) else None}


def _answer_items(answer: Any) -> list[dict[str, Any]]:
    """The answer in Responses ``output`` item shape (capture gives it in the chat shape)."""
    message = _answer_message(answer)
    items: list[dict[str, Any]] = [
        {
            "type": "function_call",
            "call_id": call.get("id"),
            "name": (call.get("function") or {}).get("name"),
            "arguments": (call.get("function") or {}).get("arguments"),
        }
        for call in message.get("tool_calls", [])
        if isinstance(call, dict)
    ]
    if isinstance(message.get("content"), str):
        items.append(
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": message["content"]}],
            }
        )
    return items


def episode_log(request: Mapping[str, Any], answer: Any, api: str) -> EpisodeLog | None:
    """The whole log, or None when the request does not carry the whole history."""
    if api == "responses":
        if request.get("previous_response_id") or request.get("conversation"):
            return None
        items = request.get("input")
        history = [{"role": "user", "content": items}] if isinstance(items, str) else items
        if not isinstance(history, list):
            return None
        log = from_responses([*history, *_answer_items(answer)])
    else:
        messages = request.get("messages")
        if not isinstance(messages, list):
            return None
        log = from_chat([*messages, _answer_message(answer)])
    return None if log.incomplete else log


def grade_turn(
    task: Task,
    turn: EpisodeTurn,
    request_body: bytes,
    answer: Any,
    api: str,
    tasks_digest: str,
    live: Mapping[str, Any] | None = None,
) -> EpisodeOutcome:
    """The episode row when this response ends the episode, else why there is none."""
    if task.episode is None or not ends_episode(answer, turn):
        return EpisodeOutcome(None, "episode_turn")
    if len(request_body) > turn.max_bytes:
        return EpisodeOutcome(None, "episode_limit", "bytes")
    try:
        request = orjson.loads(request_body)
    except orjson.JSONDecodeError:
        return EpisodeOutcome(None, "episode_incomplete")
    log = episode_log(request, answer, api) if isinstance(request, dict) else None
    if log is None:
        return EpisodeOutcome(None, "episode_incomplete")
    if log.turns > turn.max_turns:
        return EpisodeOutcome(None, "episode_limit", "turns")
    if log.calls > turn.max_calls:
        return EpisodeOutcome(None, "episode_limit", "calls")
    item = task.raw.get("item")
    row = episode_row(
        task.id,
        task.episode,
        log,
        tasks_digest=tasks_digest,
        item=item if isinstance(item, dict) else None,
        role=turn.role,
        episode_id=turn.episode_id,
    )
    row.update(live or {})  # the live-traffic fields: request id, time, model, run, meta …
    return EpisodeOutcome(row, log=log)


def episode_only(task: Task) -> bool:
    """A task with a grader record and no per-turn checks: its turns make no rows."""
    return task.episode is not None and not task.checks
