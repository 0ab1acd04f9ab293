"""One grade job: what the handler captured, and how it becomes result rows.

A :class:`GradeJob` is built on the hot path without parsing anything; :func:`grade_job` is the
pure-CPU step the grade queue runs on it (inline for small responses, else in the grading
process, ``proxy.pipeline.child``, or with ``grading.isolation: thread`` in a thread): capture
the copy (chat completions or the Responses API), grade every answer with
the one engine (``grader.engine``), build the rows (``grader.rows``), and hand an agent
episode's turn to ``proxy.pipeline.episodes``. Nothing here touches the event loop, the
metrics or the result file: the queue (``proxy.pipeline.queue``) records what this returns.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from grader.capture import answer_digest
from grader.checks import CheckContext
from grader.engine import LocalColumns, grade, local_columns, needs_judge, reads_request_tools
from grader.json import dumps
from grader.pricing import PriceTable
from grader.rowids import live_row_id
from grader.rows import Live, live_row
from grader.tasks import Task
from grader.toolcall.extract import UNPARSED
from grader.usage import token_usage
from proxy.pipeline.admit import Api, SkipReason
from proxy.pipeline.capture.chat import Answer, CaptureResult, StreamCapture, answers_from_body
from proxy.pipeline.capture.responses import ResponsesStreamCapture, responses_from_body
from proxy.pipeline.episodes import EpisodeOutcome, EpisodeTurn, episode_only, grade_turn
from proxy.telemetry.record import SpanRecord
from proxy.utctime import utc_iso

# Api is re-exported: the grade job names its wire format by it (defined by admission).
__all__ = ["Api", "GradeJob", "Graded", "grade_job", "runs_off_loop"]


@dataclass(slots=True)
class GradeJob:
    """Everything needed to grade one response, captured on the hot path without parsing."""

    request_id: str
    task: Task
    tasks_digest: str
    upstream: str
    stream: bool
    request_body: bytes
    response: list[bytes]  # the body (one part) or the stream's chunks, as relayed
    finished_at: float  # perf_counter at the response's last byte
    received_at: float = field(default_factory=time.time)  # wall clock, for the row
    run: str | None = None
    meta: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    variant: Literal["primary", "shadow"] = "primary"
    pair_id: str | None = None  # set on both legs of a shadowed request
    api: Api = "chat_completions"  # which wire format ``response`` is in
    episode: EpisodeTurn | None = None  # a turn of an agent episode (proxy/pipeline/episodes.py)
    role: str | None = None  # the role header: policy authority reads it over item.role
    sample_id: str | None = None  # the sample-id header
    upstream_request_id: str | None = None  # the upstream's x-request-id
    span: SpanRecord | None = None  # the request's span context while tracing is on
    prices: PriceTable | None = None  # the price table (pricing.path), stamped on submit
    answer_hash: bool = False  # ``results.answer: hash``: rows store sha256:<hex>, stamped too
    # What enforce mode did with the answer (proxy/pipeline/record/enforced.py), for the row.
    enforcement: dict[str, Any] | None = None
    key_id: str | None = None  # the named inbound key's id (proxy/pipeline/guard.py's KEY_ID)

    @property
    def size(self) -> int:
        return sum(len(part) for part in self.response)


Pending = tuple[int, str, CheckContext, Live, LocalColumns]


@dataclass(slots=True)
class Graded:
    """The outcome of one job: rows to record, or the reason nothing was graded."""

    rows: list[dict[str, Any]]
    skip_reason: SkipReason | None = None
    error_kind: str | None = None
    # Rows of a task with judge checks, finished on the event loop: (row index, answer, context,
    # live fields, the columns that need no judge, already graded here); the row at that index
    # is built once the judge has answered.
    pending: list[Pending] = field(default_factory=list)
    # An episode not graded although this response ended it (incomplete history, a limit hit).
    episode_skip: SkipReason | None = None
    episode_limit: str | None = None
    episode: EpisodeOutcome | None = None  # its row is in ``rows``; a judge may settle it
    # The parsed copy's facts for the trace (``id``, ``model``, ``usage``; docs/tracing.md).
    call: dict[str, Any] = field(default_factory=dict)


def _request_json(body: bytes) -> dict[str, Any] | None:
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return payload if isinstance(payload, dict) else None


def _request_model(body: bytes) -> str | None:
    model = (_request_json(body) or {}).get("model")
    return model if isinstance(model, str) else None


def _tools(request: dict[str, Any]) -> list[dict[str, Any]] | None:
    tools = request.get("tools")
    return [t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else None


def capture(job: GradeJob) -> CaptureResult:
    if not job.stream:
        body = b"".join(job.response)
        return responses_from_body(body) if job.api == "responses" else answers_from_body(body)
    stream = ResponsesStreamCapture() if job.api == "responses" else StreamCapture()
    for chunk in job.response:
        stream.feed(chunk)
    return stream.finish()


def answer_text(answer: Answer) -> str:
    """What the grader reads: tool calls as their JSON envelope, else the text content."""
    return answer if isinstance(answer, str) else dumps(answer).decode()


# Check kinds whose cost grows with the answer (schema validation, similarity, formulas,
# policy constraints): a job that runs one is graded in the grading thread whatever its size.
OFF_LOOP_CHECKS = frozenset({"json_schema", "text_similarity", "multi", "policy"})


def runs_off_loop(task: Task) -> bool:
    """Tasks whose grading cost grows with the input; an episode's grows with its history."""
    if task.episode is not None:
        return True
    return task.has_checks and any(check.type in OFF_LOOP_CHECKS for check in task.checks)


def grade_job(job: GradeJob, capture_answer: bool, max_answer_chars: int = 65536) -> Graded:
    """Capture and grade one response (pure CPU; safe to run in a thread).

    The stored answer is cut at ``max_answer_chars`` with ``truncated: true``: a 50 MB answer
    must not become a 50 MB row. Grading always reads the whole answer.
    """
    if not any(part.strip() for part in job.response):
        return Graded([], skip_reason="empty_response")  # e.g. llama.cpp's auto + stream
    captured = capture(job)
    if captured.error is not None:
        # A partial capture is never graded: an in-band upstream error is the upstream's
        # failure; anything else is a response we could not read (an infrastructure error).
        if captured.upstream_error:
            return Graded([], skip_reason="upstream_error")
        return Graded([], error_kind="capture")
    if not captured.answers:
        return Graded([], skip_reason="empty_response")
    model = captured.model or _request_model(job.request_body)
    episode = _episode(job, captured, model)
    if episode_only(job.task):  # its turns make no rows; the episode's last one makes one
        if episode is not None and episode.row is not None:
            return Graded([episode.row], episode=episode, call=_call(captured))
        reason = episode.skip if episode is not None else "episode_turn"
        return Graded(
            [],
            skip_reason=reason,
            episode_limit=episode.limit if episode is not None else None,
            call=_call(captured),  # its usage goes to the episode's sum (episodeusage.py)
        )
    request = _request_json(job.request_body) if job.task.has_checks else None
    context = CheckContext(
        request_tools=_tools(request) if request is not None else None, model=model, role=job.role
    )
    judged = needs_judge(job.task)
    keep_tools = capture_answer and reads_request_tools(job.task)
    rows: list[dict[str, Any]] = []
    pending: list[Pending] = []
    received = utc_iso(job.received_at)
    usage = token_usage(captured.usage)
    cost = None if job.prices is None else job.prices.cost(model, usage)
    for index in sorted(captured.answers):
        answer = captured.answers[index]
        text = answer_text(answer)
        live = Live(
            request_id=job.request_id,
            time=received,
            model=model,
            upstream=job.upstream,
            stream=job.stream,
            variant=job.variant,
            pair_id=job.pair_id,
            choice=index,
            finish_reason=captured.finish_reasons.get(index),
            run=job.run,
            meta=job.meta,
            timings=job.timings,
            answer=_stored(job, text, capture_answer),
            answer_cap=max_answer_chars if capture_answer else None,
            upstream_request_id=job.upstream_request_id,
            sample_id=job.sample_id,
            tools=context.request_tools if keep_tools else None,
            usage=usage,
            cost=cost,
            enforcement=job.enforcement,
            key_id=job.key_id,
        )
        if judged:  # judge columns on the event loop, where the judge's client lives
            local = local_columns(job.task, text, context)
            pending.append((len(rows), text, context, live, local))
            rows.append({})
        else:
            # The tool calls' envelope was just written to text: the grader reads the value.
            parsed = UNPARSED if isinstance(answer, str) else answer
            outcome = grade(job.task, text, context, parsed=parsed)
            rows.append(live_row(job.task, outcome, job.tasks_digest, live))
    if episode is not None and episode.row is not None:
        rows.append(episode.row)
    skip = episode.skip if episode is not None and episode.skip != "episode_turn" else None
    return Graded(
        rows,
        pending=pending,
        episode_skip=skip,
        episode_limit=episode.limit if episode is not None else None,
        episode=episode,
        call=_call(captured),
    )


def _stored(job: GradeJob, text: str, capture_answer: bool) -> str | None:
    """What a row stores of the answer: its text, its digest (``results.answer: hash``, never
    cut), or nothing."""
    if capture_answer:
        return text
    return answer_digest(text) if job.answer_hash else None


def _call(captured: CaptureResult) -> dict[str, Any]:
    return {"id": captured.response_id, "model": captured.model, "usage": captured.usage}


def _episode(job: GradeJob, captured: CaptureResult, model: str | None) -> EpisodeOutcome | None:
    """The episode outcome of a turn (choice 0 is the agent's answer), live fields added."""
    if job.episode is None:
        return None
    received = utc_iso(job.received_at)
    live = {
        "row_id": live_row_id("episode", job.request_id, job.variant, 0, received),
        "request_id": job.request_id,
        "time": received,
        "model": model,
        "upstream": job.upstream,
        "stream": job.stream,
        "variant": job.variant,
        "run": job.run,
        "meta": job.meta,
        "timings": job.timings,
        # This turn's; the settler makes it the sum of the episode's turns (episodeusage.py).
        "usage": token_usage(captured.usage),
        "key_id": job.key_id,
    }
    answer = captured.answers[min(captured.answers)]
    return grade_turn(
        job.task, job.episode, job.request_body, answer, job.api, job.tasks_digest, live
    )
