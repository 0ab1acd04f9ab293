"""A deterministic stand-in for an OpenAI-compatible model server.

The demo and the end-to-end tests need an upstream whose answers look like a real model's (mostly
right, often stuck on the old schema, sometimes wrong or chatty) and yet are predictable, so that a
scoreboard can be checked against what was really sent. Every answer is therefore a pure function of
the task and a per-task request number, hashed with SHA-256 (never Python's per-process ``hash``):
two processes fed the same request sequence send the same bytes, apart from ``created`` timestamps.

The proxy strips its ``X-Grade-*`` headers before forwarding, so the backend cannot be told which
task a request is for; it recognises the task from the conversation itself, the way a model would.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson
from aiohttp import web

from grader.tasks import task_files
from proxy.demo.answers import (
    DEMO_MODELS,
    MAX_CHOICES,
    SAMPLE_TASKS_PATH,
    AnswerKind,
    DemoTask,
    TaskRef,
    _hex,
    _text_message,
    choose_answer,
    load_demo_tasks,
    planned_message,
    wrong_call,
)
from proxy.demo.requests import (
    ApiError,
    DemoRequest,
    last_user_turn,
    openai_errors,
    parse_request,
    simulated_error,
)
from proxy.demo.responses import answer as responses_answer
from proxy.demo.responses import parse_responses_request, stream_events
from proxy.demo.wire import (
    _finish_reason,
    _stream_frames,
    _tokens,
    _usage,
)

__all__ = [
    "DEMO_MODELS",
    "MAX_CHOICES",
    "SAMPLE_TASKS_PATH",
    "AnswerKind",
    "DemoTask",
    "TaskRef",
    "choose_answer",
    "load_demo_tasks",
    "make_demo_backend",
    "planned_message",
    "run_demo_backend",
    "wrong_call",
]

_MODEL_CREATED: Final = 1_735_689_600

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _State:
    tasks: tuple[DemoTask, ...]
    fingerprint: str
    chunk_delay: float
    by_prompt: dict[str, DemoTask] = field(init=False)
    longest_id_first: tuple[DemoTask, ...] = field(init=False)
    counters: dict[str, int] = field(default_factory=dict)
    other_requests: int = 0

    def __post_init__(self) -> None:
        self.by_prompt = {task.prompt: task for task in self.tasks}
        # Longest first, so an id that is a prefix of another never shadows it.
        self.longest_id_first = tuple(sorted(self.tasks, key=lambda t: (-len(t.id), t.id)))

    def recognise(self, text: str) -> DemoTask | None:
        exact = self.by_prompt.get(text)
        if exact is not None:
            return exact
        return next((task for task in self.longest_id_first if task.id in text), None)

    def take(self, task_id: str, n: int) -> int:
        # No await between read and write: concurrent requests still get disjoint counters.
        start = self.counters.get(task_id, 0)
        self.counters[task_id] = start + n
        return start

    def take_other(self) -> int:
        number = self.other_requests
        self.other_requests += 1
        return number


_STATE: Final = web.AppKey("gradeproxy_demo_state", _State)


def _plan(state: _State, request: DemoRequest, raw: bytes) -> tuple[str, list[dict[str, Any]]]:
    """The completion id and one assistant message per choice."""
    text, answered = last_user_turn(request.messages)
    return _plan_turn(state, text, answered, request.n, raw)


def _plan_turn(
    state: _State, text: str | None, answered: bool, n: int, raw: bytes
) -> tuple[str, list[dict[str, Any]]]:
    """The answers to a user turn (chat or Responses): the task's plan, one counter per task."""
    task = state.recognise(text) if text is not None else None
    if task is not None and not answered:
        start = state.take(task.id, n)
        messages = [planned_message(task, start + i) for i in range(n)]
        return "chatcmpl-" + _hex("completion", task.id, str(start))[:29], messages
    number = state.take_other()
    if task is not None:
        content = f"All set: {task.expected['name']} has finished and I've noted the result."
    else:
        content = (
            "This is the gradeproxy demo backend. It only knows the prompts in its task file; "
            f"try this one: {state.tasks[0].prompt}"
        )
    key = _hex("other", str(number), raw.decode("utf-8", "replace"))
    return "chatcmpl-" + key[:29], [_text_message(content) for _ in range(n)]


async def _chat_completions(request: web.Request) -> web.StreamResponse:
    state = request.app[_STATE]
    raw = await request.read()
    parsed = parse_request(raw)
    simulated = simulated_error(parsed.model)
    if simulated is not None:
        raise simulated
    completion_id, messages = _plan(state, parsed, raw)
    usage = _usage(_tokens(raw.decode("utf-8", "replace")), messages)
    envelope = {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": parsed.model,
        "service_tier": "default",
        "system_fingerprint": state.fingerprint,
    }
    headers = {"X-Request-Id": "req_" + completion_id.removeprefix("chatcmpl-")}
    if not parsed.stream:
        body = {
            **envelope,
            "choices": [
                {
                    "index": index,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": _finish_reason(message),
                }
                for index, message in enumerate(messages)
            ],
            "usage": usage,
        }
        return web.Response(
            body=orjson.dumps(body), content_type="application/json", headers=headers
        )
    response = web.StreamResponse(
        headers={
            **headers,
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-cache",
        }
    )
    await response.prepare(request)
    for frame in _stream_frames(envelope, messages, usage, parsed.include_usage):
        await response.write(frame)
        if state.chunk_delay:
            await asyncio.sleep(state.chunk_delay)
    await response.write_eof()
    return response


async def _responses(request: web.Request) -> web.StreamResponse:
    """``POST /v1/responses`` (proxy/demo/responses.py has the wire format)."""
    state = request.app[_STATE]
    raw = await request.read()
    parsed = parse_responses_request(raw)
    simulated = simulated_error(parsed.model)
    if simulated is not None:
        raise simulated
    completion_id, [message] = _plan_turn(state, parsed.text, parsed.answered, 1, raw)
    key = completion_id.removeprefix("chatcmpl-")
    response_id = "resp_" + _hex("response", key)[:50]
    tokens = _tokens(raw.decode("utf-8", "replace"))
    headers = {"X-Request-Id": "req_" + key}
    if not parsed.stream:
        body = responses_answer(response_id, key, parsed, message, tokens)
        return web.Response(
            body=orjson.dumps(body), content_type="application/json", headers=headers
        )
    response = web.StreamResponse(
        headers={
            **headers,
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-cache",
        }
    )
    await response.prepare(request)
    for frame in stream_events(response_id, key, parsed, message, tokens):
        await response.write(frame)
        if state.chunk_delay:
            await asyncio.sleep(state.chunk_delay)
    await response.write_eof()
    return response


def _model_object(model: str) -> dict[str, Any]:
    return {"id": model, "object": "model", "created": _MODEL_CREATED, "owned_by": "gradeproxy"}


async def _list_models(request: web.Request) -> web.Response:
    body = {"object": "list", "data": [_model_object(model) for model in DEMO_MODELS]}
    return web.Response(body=orjson.dumps(body), content_type="application/json")


async def _get_model(request: web.Request) -> web.Response:
    model = request.match_info["model"]
    if model not in DEMO_MODELS:
        raise ApiError(
            404,
            f"The model `{model}` does not exist or you do not have access to it.",
            param="model",
            code="model_not_found",
        )
    return web.Response(body=orjson.dumps(_model_object(model)), content_type="application/json")


def make_demo_backend(tasks_path: Path, *, chunk_delay: float = 0.0) -> web.Application:
    """Build the backend app; ``chunk_delay`` spaces SSE frames so streaming is observable.

    Request counters live in the app, so a fresh app replays the same answer sequence.
    """
    if chunk_delay < 0:
        raise ValueError("chunk_delay must be >= 0")
    tasks = load_demo_tasks(tasks_path)
    files = task_files(tasks_path)
    fingerprint = "fp_" + hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()[:10]
    app = web.Application(middlewares=[openai_errors])
    app[_STATE] = _State(tasks=tasks, fingerprint=fingerprint, chunk_delay=chunk_delay)
    app.router.add_post("/v1/chat/completions", _chat_completions)
    app.router.add_post("/v1/responses", _responses)
    app.router.add_get("/v1/models", _list_models)
    app.router.add_get("/v1/models/{model}", _get_model)
    return app


async def run_demo_backend(host: str, port: int, tasks_path: Path) -> None:
    """Serve until cancelled; the caller owns signal handling and the event loop."""
    runner = web.AppRunner(make_demo_backend(tasks_path))
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        log.info("demo backend listening on %s:%d with tasks from %s", host, port, tasks_path)
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
