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
import json
import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, TypeAlias

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler

from grader.tasks import task_files

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

AnswerKind: TypeAlias = Literal["expected", "stale", "wrong", "prose", "fenced"]

SAMPLE_TASKS_PATH: Final = Path(__file__).resolve().parents[2] / "config" / "tasks" / "sample.jsonl"
DEMO_MODELS: Final = ("gradeproxy-demo", "gradeproxy-demo-mini")
MAX_CHOICES: Final = 128

# Cumulative percentage thresholds. "prose" and "fenced" share the 10% that answers in text, so
# the grader sees both a plain failure and a call it has to dig out of a Markdown fence.
_MIX: Final[tuple[tuple[int, AnswerKind], ...]] = (
    (55, "expected"),
    (80, "stale"),
    (90, "wrong"),
    (95, "prose"),
    (100, "fenced"),
)
# A fixed date keeps /v1/models byte-identical across runs.
_MODEL_CREATED: Final = 1_735_689_600
# Small enough that every realistic argument string arrives in several pieces, which is what
# the proxy's tool-call accumulation has to cope with.
_ARGUMENT_FRAGMENT_CHARS: Final = 7
_ALLOWED_ROLES: Final = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_SIMULATED_ERROR_MODEL: Final = re.compile(r"error-([45]\d\d)")
_TEXT_PIECE: Final = re.compile(r"\S*\s*")

_PROSE: Final = (
    "I'm sorry, but I can't help with that request.",
    "I can't make changes in that system from here. Could you do it from the dashboard instead?",
    "Before I call {tool}, can you confirm that you want me to go ahead?",
    "Done! I've taken care of that for you.",
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DemoTask:
    """The slice of a task the backend needs; the grader's own task type stays independent."""

    id: str
    prompt: str
    expected: Mapping[str, Any]
    stale: Mapping[str, Any]

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], where: str = "task") -> DemoTask:
        task_id = raw.get("id")
        prompt = raw.get("prompt")
        metadata = raw.get("metadata")
        if not isinstance(task_id, str) or not task_id:
            raise ValueError(f"{where}: 'id' must be a non-empty string")
        if not isinstance(prompt, str) or not prompt:
            raise ValueError(f"{where} ({task_id}): 'prompt' must be a non-empty string")
        if not isinstance(metadata, Mapping):
            raise ValueError(f"{where} ({task_id}): 'metadata' must be an object")
        expected = _checked_call(raw.get("expected"), f"{where} ({task_id}) expected")
        stale = _checked_call(metadata.get("stale"), f"{where} ({task_id}) metadata.stale")
        return cls(id=task_id, prompt=prompt, expected=expected, stale=stale)


TaskRef: TypeAlias = DemoTask | Mapping[str, Any]


def _checked_call(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: must be an object")
    name = value.get("name")
    arguments = value.get("arguments")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}: 'name' must be a non-empty string")
    if not isinstance(arguments, Mapping):
        raise ValueError(f"{where}: 'arguments' must be an object")
    call = {"name": name, "arguments": dict(arguments)}
    try:
        # Checked up front so an unservable task fails at start-up, not mid-demo.
        orjson.dumps(call)
    except orjson.JSONEncodeError as exc:
        raise ValueError(f"{where}: cannot be served as JSON ({exc})") from exc
    return call


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def load_demo_tasks(path: Path) -> tuple[DemoTask, ...]:
    """Load a JSONL task file (or a folder of them, as the proxy does), refusing ambiguity: a
    prompt or id that names two tasks would make recognition, and therefore every prediction,
    depend on file order."""
    tasks: list[DemoTask] = []
    ids: set[str] = set()
    prompts: set[str] = set()
    files = task_files(path)
    lines = [(f, n, line) for f in files for n, line in enumerate(f.read_bytes().splitlines(), 1)]
    for file, lineno, line in lines:
        if not line.strip():
            continue
        where = f"{file}:{lineno}"
        try:
            # The stdlib parser, because orjson turns integers beyond 64 bits into floats and
            # would silently change an expected value.
            raw = json.loads(line, parse_constant=_reject_constant)
        except ValueError as exc:
            raise ValueError(f"{where}: not valid JSON ({exc})") from exc
        if not isinstance(raw, dict):
            raise ValueError(f"{where}: a task must be a JSON object")
        task = DemoTask.from_mapping(raw, where)
        if task.id in ids:
            raise ValueError(f"{where}: duplicate task id {task.id!r}")
        if task.prompt in prompts:
            raise ValueError(f"{where}: prompt of {task.id!r} repeats an earlier task's prompt")
        ids.add(task.id)
        prompts.add(task.prompt)
        tasks.append(task)
    if not tasks:
        raise ValueError(f"{path}: no tasks")
    return tuple(tasks)


def _as_task(task: TaskRef) -> DemoTask:
    return task if isinstance(task, DemoTask) else DemoTask.from_mapping(task)


def _task_id(task: TaskRef | str) -> str:
    if isinstance(task, str):
        return task
    if isinstance(task, DemoTask):
        return task.id
    task_id = task.get("id")
    if not isinstance(task_id, str):
        raise ValueError("task has no string 'id'")
    return task_id


def _roll(*parts: str) -> int:
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big")


def _hex(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


def choose_answer(task: TaskRef | str, counter: int) -> AnswerKind:
    """What the backend sends for the ``counter``-th answer to ``task`` (0-based, per process).

    Public so the demo driver and the tests can predict a scoreboard instead of trusting it.
    """
    if counter < 0:
        raise ValueError("counter must be >= 0")
    roll = _roll("mix", _task_id(task), str(counter)) % 100
    return next(kind for limit, kind in _MIX if roll < limit)


def _leaf_paths(value: Any, prefix: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    if isinstance(value, dict) and value:
        return [p for key in sorted(value) for p in _leaf_paths(value[key], (*prefix, key))]
    if isinstance(value, list) and value:
        return [p for i, item in enumerate(value) for p in _leaf_paths(item, (*prefix, i))]
    return [prefix]


def _perturb_string(text: str) -> str:
    # Bumping the last digit mimics an off-by-one id, date or duration; flipping case mimics a
    # sloppy copy. Either way the result differs after the grader's comma and duration rules.
    for i in range(len(text) - 1, -1, -1):
        if "0" <= text[i] <= "9":
            return f"{text[:i]}{(int(text[i]) + 1) % 10}{text[i + 1 :]}"
    for i, char in enumerate(text):
        if char.swapcase() != char:
            return text[:i] + char.swapcase() + text[i + 1 :]
    return text + "x"


def _perturb(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return _perturb_string(value)
    if value is None:
        return 0
    if isinstance(value, list):
        return [None]
    return {"unexpected": True}


def wrong_call(task: TaskRef) -> dict[str, Any]:
    """The expected call with one argument value changed: right tool, right shape, wrong value.

    The changed leaf is fixed per task, like a model that keeps making the same mistake.
    """
    demo = _as_task(task)
    arguments = orjson.loads(orjson.dumps(demo.expected["arguments"]))
    leaves = _leaf_paths(arguments)
    path = leaves[_roll("wrong", demo.id) % len(leaves)]
    if not path:
        return {"name": demo.expected["name"], "arguments": {"unexpected": True}}
    parent: Any = arguments
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = _perturb(parent[path[-1]])
    return {"name": demo.expected["name"], "arguments": arguments}


def _call_id(task_id: str, counter: int) -> str:
    return "call_" + _hex("call", task_id, str(counter))[:24]


def planned_message(task: TaskRef, counter: int) -> dict[str, Any]:
    """The exact assistant message sent as the ``counter``-th answer to ``task``."""
    demo = _as_task(task)
    kind = choose_answer(demo, counter)
    if kind in ("expected", "stale", "wrong"):
        if kind == "expected":
            call: Mapping[str, Any] = demo.expected
        elif kind == "stale":
            call = demo.stale
        else:
            call = wrong_call(demo)
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": _call_id(demo.id, counter),
                    "type": "function",
                    "function": {
                        "name": call["name"],
                        "arguments": orjson.dumps(call["arguments"]).decode(),
                    },
                }
            ],
            "refusal": None,
            "annotations": [],
        }
    if kind == "fenced":
        fenced = orjson.dumps(
            {"name": demo.expected["name"], "arguments": demo.expected["arguments"]},
            option=orjson.OPT_INDENT_2,
        ).decode()
        content = (
            "I can't run tools in this conversation, but this is the call to make:\n\n"
            f"```json\n{fenced}\n```\n\nLet me know if anything should change."
        )
    else:
        template = _PROSE[_roll("prose", demo.id, str(counter)) % len(_PROSE)]
        content = template.format(tool=demo.expected["name"])
    return _text_message(content)


def _text_message(content: str) -> dict[str, Any]:
    return {"role": "assistant", "content": content, "refusal": None, "annotations": []}


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


def _tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4)


def _completion_tokens(message: Mapping[str, Any]) -> int:
    calls = message.get("tool_calls")
    if calls:
        return sum(
            _tokens(call["function"]["name"] + call["function"]["arguments"]) + 7 for call in calls
        )
    return _tokens(message.get("content") or "")


def _usage(prompt_tokens: int, messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    completion = sum(_completion_tokens(m) for m in messages)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": prompt_tokens + completion,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _finish_reason(message: Mapping[str, Any]) -> str:
    return "tool_calls" if message.get("tool_calls") else "stop"


def _choice_chunks(index: int, message: Mapping[str, Any]) -> list[dict[str, Any]]:
    def choice(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}

    calls = message.get("tool_calls") or []
    content = message.get("content")
    chunks = [choice({"role": "assistant", "content": None if calls else "", "refusal": None})]
    for position, call in enumerate(calls):
        function = call["function"]
        chunks.append(
            choice(
                {
                    "tool_calls": [
                        {
                            "index": position,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": function["name"], "arguments": ""},
                        }
                    ]
                }
            )
        )
        arguments = function["arguments"]
        for at in range(0, len(arguments), _ARGUMENT_FRAGMENT_CHARS):
            fragment = arguments[at : at + _ARGUMENT_FRAGMENT_CHARS]
            chunks.append(
                choice({"tool_calls": [{"index": position, "function": {"arguments": fragment}}]})
            )
    if isinstance(content, str):
        chunks.extend(choice({"content": piece}) for piece in _TEXT_PIECE.findall(content) if piece)
    chunks.append(choice({}, _finish_reason(message)))
    return chunks


def _stream_frames(
    envelope: Mapping[str, Any],
    messages: Sequence[Mapping[str, Any]],
    usage: Mapping[str, Any],
    include_usage: bool,
) -> list[bytes]:
    base = {**envelope, "object": "chat.completion.chunk"}
    extra: dict[str, Any] = {"usage": None} if include_usage else {}
    frames = [
        {**base, "choices": [choice], **extra}
        for index, message in enumerate(messages)
        for choice in _choice_chunks(index, message)
    ]
    if include_usage:
        frames.append({**base, "choices": [], "usage": usage})
    return [b"data: " + orjson.dumps(frame) + b"\n\n" for frame in frames] + [b"data: [DONE]\n\n"]


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
