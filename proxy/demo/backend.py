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
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler

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
# Small enough that every realistic argument string arrives in several pieces, which is what
# the proxy's tool-call accumulation has to cope with.
_ARGUMENT_FRAGMENT_CHARS: Final = 7
_ALLOWED_ROLES: Final = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_SIMULATED_ERROR_MODEL: Final = re.compile(r"error-([45]\d\d)")
_TEXT_PIECE: Final = re.compile(r"\S*\s*")

log = logging.getLogger(__name__)


class _ApiError(Exception):
    """Raised anywhere in a handler to answer with OpenAI's error body instead of a traceback."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        kind: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.kind = kind or ("server_error" if status >= 500 else "invalid_request_error")


def _error_response(error: _ApiError) -> web.Response:
    body = {
        "error": {
            "message": error.message,
            "type": error.kind,
            "param": error.param,
            "code": error.code,
        }
    }
    return web.Response(
        status=error.status, body=orjson.dumps(body), content_type="application/json"
    )


@web.middleware
async def _openai_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except _ApiError as exc:
        return _error_response(exc)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        if exc.status == 404:
            message = f"Invalid URL ({request.method} {request.path})"
        elif exc.status == 405:
            message = f"Method {request.method} is not allowed on {request.path}"
        else:
            message = exc.reason
        return _error_response(_ApiError(exc.status, message))
    except Exception:
        log.exception("demo backend failed on %s %s", request.method, request.path)
        return _error_response(
            _ApiError(500, "The server had an error while processing your request.")
        )


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


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
        )
    return ""


def _last_user_turn(messages: Sequence[Mapping[str, Any]]) -> tuple[str | None, bool]:
    """The last user message's text, and whether a tool result already answers it."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            followed = any(m.get("role") in ("tool", "function") for m in messages[i + 1 :])
            return _text_of(messages[i].get("content")), followed
    return None, False


@dataclass(frozen=True, slots=True)
class _Request:
    model: str
    messages: list[dict[str, Any]]
    n: int
    stream: bool
    include_usage: bool


def _parse_request(raw: bytes) -> _Request:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _ApiError(
            400,
            "We could not parse the JSON body of your request. The OpenAI API expects a "
            "JSON payload.",
        ) from exc
    if not isinstance(body, dict):
        raise _ApiError(400, "The request body must be a JSON object.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _ApiError(400, "you must provide a model parameter", param="model")
    messages = body.get("messages")
    if messages is None:
        raise _ApiError(
            400,
            "Missing required parameter: 'messages'.",
            param="messages",
            code="missing_required_parameter",
        )
    if not isinstance(messages, list):
        raise _ApiError(
            400,
            "Invalid type for 'messages': expected an array.",
            param="messages",
            code="invalid_type",
        )
    if not messages:
        raise _ApiError(
            400,
            "Invalid 'messages': empty array. Expected an array with minimum length 1.",
            param="messages",
            code="empty_array",
        )
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in _ALLOWED_ROLES:
            raise _ApiError(
                400,
                f"Invalid value for 'messages[{i}].role': expected one of "
                + ", ".join(sorted(_ALLOWED_ROLES))
                + ".",
                param=f"messages[{i}].role",
                code="invalid_value",
            )
    n = body.get("n")
    if n is None:
        n = 1
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_CHOICES:
        raise _ApiError(
            400,
            f"Invalid 'n': expected an integer between 1 and {MAX_CHOICES}.",
            param="n",
            code="invalid_value",
        )
    stream = body.get("stream")
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise _ApiError(
            400,
            "Invalid type for 'stream': expected a boolean.",
            param="stream",
            code="invalid_type",
        )
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise _ApiError(
            400,
            "Invalid type for 'stream_options': expected an object.",
            param="stream_options",
            code="invalid_type",
        )
    include_usage = bool(stream and options and options.get("include_usage") is True)
    return _Request(model, messages, n, stream, include_usage)


def _simulated_error(model: str) -> _ApiError | None:
    # A documented escape hatch so demos and tests can exercise upstream-error handling.
    matched = _SIMULATED_ERROR_MODEL.fullmatch(model)
    if matched is None:
        return None
    status = int(matched.group(1))
    if status == 429:
        return _ApiError(
            429,
            "Rate limit reached for demo requests.",
            code="rate_limit_exceeded",
            kind="requests",
        )
    if status == 401:
        return _ApiError(401, "Incorrect API key provided.", code="invalid_api_key")
    return _ApiError(status, f"Simulated upstream failure ({status}).")


def _plan(state: _State, request: _Request, raw: bytes) -> tuple[str, list[dict[str, Any]]]:
    """The completion id and one assistant message per choice."""
    text, answered = _last_user_turn(request.messages)
    task = state.recognise(text) if text is not None else None
    if task is not None and not answered:
        start = state.take(task.id, request.n)
        messages = [planned_message(task, start + i) for i in range(request.n)]
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
    return "chatcmpl-" + key[:29], [_text_message(content) for _ in range(request.n)]


async def _chat_completions(request: web.Request) -> web.StreamResponse:
    state = request.app[_STATE]
    raw = await request.read()
    parsed = _parse_request(raw)
    simulated = _simulated_error(parsed.model)
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


def _model_object(model: str) -> dict[str, Any]:
    return {"id": model, "object": "model", "created": _MODEL_CREATED, "owned_by": "gradeproxy"}


async def _list_models(request: web.Request) -> web.Response:
    body = {"object": "list", "data": [_model_object(model) for model in DEMO_MODELS]}
    return web.Response(body=orjson.dumps(body), content_type="application/json")


async def _get_model(request: web.Request) -> web.Response:
    model = request.match_info["model"]
    if model not in DEMO_MODELS:
        raise _ApiError(
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
    app = web.Application(middlewares=[_openai_errors])
    app[_STATE] = _State(tasks=tasks, fingerprint=fingerprint, chunk_delay=chunk_delay)
    app.router.add_post("/v1/chat/completions", _chat_completions)
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
