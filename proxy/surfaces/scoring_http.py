"""The scoring API: the grader over HTTP on the proxy's own server, under ``/grading/v1/``.

Off unless the config turns it on (``scoring.enabled``); :func:`add_scoring_routes` adds::

    POST /grading/v1/score             {"task_id" | "task", "answer"}   -> {"verdict": row}
                                       {"items": [...]}                  -> {"results", "report"}
    POST /grading/v1/graders/run       {"grader", "model_sample", "item"?} -> OpenAI's run shape
    POST /grading/v1/graders/validate  {"grader"}                        -> {"grader": ...}

The two graders routes are also served at ``/grading/v1/fine_tuning/alpha/graders/{run,validate}``
so OpenAI's SDKs work unchanged with ``base_url=".../grading/v1"``.

Why not ``/v1/score``: every ``/v1/*`` path is forwarded to the upstream backend unchanged, so a
route there would shadow (or be shadowed by) a backend route of the same name, and a client
pointed at the proxy could not tell whose answer it got. ``/grading/v1/`` is the proxy's own.

Rows and reports come from :mod:`grader.api` over :mod:`grader.engine`, the engine behind the
CLI, MCP and the live proxy too, so one answer gets one verdict everywhere; the graders routes
run one check through the same engine (``grader.engine.run_check``). Judge checks use the
proxy's judge (``judge.endpoint``) when one is configured, else their column is ``error``.
Request errors are proxy/errors.py's ``BadRequestError`` (400 ``invalid_request_error``, its
``code`` one of missing_required_parameter, invalid_type, invalid_value, invalid_json,
unknown_task, invalid_task, no_task_set, batch_too_large, invalid_grader; ``param`` naming the
field) and ``TasksNotReadyError`` (503 ``tasks_not_loaded``), in OpenAI's error shape. The
routes render them with that module's ``render`` themselves, so they work on a bare
``web.Application`` as well as behind the proxy's error middleware.

An oversized batch is a 400 ``batch_too_large``, not a 413: 413 here already means "the body
is over ``limits.max_body_bytes``" (clients shrink bytes on a 413, but must split on this).

Scoring never touches the Prometheus grade counters or the result rows: those describe live
traffic, and a scoring call is not traffic. Grading runs off the event loop,
so a large batch never delays the proxied requests sharing this loop: in the proxy's grading
process (``grading.isolation: process``, the live grade jobs' own), else a worker thread.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from grader import checks as grader_checks
from grader.api import (
    ScoreRequestError,
    grade_all_async,
    grade_all_dict,
    request_digest,
    resolve_item,
    resolve_items,
)
from grader.checks.judge import Judge
from grader.engine import arun_check, needs_judge, run_check
from grader.json import JSONError, dumps, loads_exact
from grader.tasks import TaskSet
from proxy.errors import BadRequestError, ProxyError, TasksNotReadyError, render
from proxy.state import CONFIG, QUEUE, QUEUE_SLOT, TASKS

PREFIX = "/grading/v1"
# The short paths, and OpenAI's own under our prefix: the official SDKs, given
# base_url=".../grading/v1", call {base_url}/fine_tuning/alpha/graders/run unchanged.
GRADERS_PATHS = (f"{PREFIX}/graders", f"{PREFIX}/fine_tuning/alpha/graders")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def add_scoring_routes(app: web.Application, *, max_batch: int) -> None:
    """Add the ``/grading/v1/`` routes; task ids resolve against ``app[TASKS]`` when present."""
    if max_batch < 1:
        raise ValueError(f"max_batch must be at least 1, got {max_batch}")
    routes = _ScoringRoutes(max_batch)
    app.router.add_post(f"{PREFIX}/score", _rendering_errors(routes.score))
    for graders in GRADERS_PATHS:
        app.router.add_post(f"{graders}/run", _rendering_errors(run_grader))
        app.router.add_post(f"{graders}/validate", _rendering_errors(validate_grader))


def _rendering_errors(handler: Handler) -> Handler:
    """Answer errors with proxy/errors.py's ``render``, with or without the proxy's error
    middleware (the routes also serve on a bare ``web.Application``)."""

    async def wrapped(request: web.Request) -> web.StreamResponse:
        request_id = request.headers.get("x-request-id") or uuid.uuid4().hex
        try:
            response = await handler(request)
        except (ProxyError, web.HTTPException) as error:
            config = request.app.get(CONFIG)
            rendered = render(error, request_id, config.limits.max_body_bytes if config else None)
            if rendered is None:
                raise
            return rendered
        response.headers["x-request-id"] = request_id
        return response

    return wrapped


def _judge(request: web.Request) -> Judge | None:
    """The proxy's judge, when the app has a grade queue with one (``judge.endpoint``)."""
    queue = request.app.get(QUEUE)
    return queue.judge if queue is not None else None


async def _off_loop(request: web.Request, function: Callable[..., Any], *args: Any) -> Any:
    """Run a heavy check where the proxy grades off the loop: its grading process (or thread,
    with ``grading.isolation: thread``); a bare app without a grade queue uses a thread."""
    slot = request.app.get(QUEUE_SLOT)
    queue = slot.queue if slot is not None else request.app.get(QUEUE)
    if queue is None:
        return await asyncio.to_thread(function, *args)
    return await queue.run_heavy(function, *args)


def _json(payload: Any) -> web.Response:
    return web.Response(body=dumps(payload), content_type="application/json")


async def _json_object(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    try:
        body = loads_exact(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise BadRequestError("request body is not UTF-8 text", code="invalid_json") from None
    except JSONError as exc:
        raise BadRequestError(
            f"request body is not valid JSON: {exc}", code="invalid_json"
        ) from None
    if not isinstance(body, dict):
        raise BadRequestError("request body must be a JSON object", code="invalid_type")
    return body


def _required(body: dict[str, Any], name: str, kind: type, what: str) -> Any:
    if name not in body:
        raise BadRequestError(
            f"missing required parameter: '{name}'", param=name, code="missing_required_parameter"
        )
    value = body[name]
    if not isinstance(value, kind):
        raise BadRequestError(f"'{name}' must be {what}", param=name, code="invalid_type")
    return value


class _ScoringRoutes:
    def __init__(self, max_batch: int) -> None:
        self.max_batch = max_batch

    def _tasks(self, request: web.Request) -> tuple[TaskSet | None, bool]:
        """The current task set, taken once per request, and whether one is still loading."""
        store = request.app.get(TASKS)
        if store is None:
            return None, False
        return store.current, store.current is None and store.path is not None

    async def score(self, request: web.Request) -> web.Response:
        body = await _json_object(request)
        tasks, loading = self._tasks(request)
        batch = "items" in body
        try:
            if batch:
                extra = sorted(body.keys() & {"task_id", "task", "answer"})
                if extra:
                    raise BadRequestError(
                        f"send either one item or 'items', not both (found '{extra[0]}')",
                        param=extra[0],
                        code="invalid_value",
                    )
                pairs = resolve_items(body["items"], tasks, max_batch=self.max_batch)
            else:
                pairs = [resolve_item(body, tasks)]
        except ScoreRequestError as error:
            if error.code == "no_task_set" and loading:
                raise TasksNotReadyError(
                    "the task set is still loading; retry shortly, or send the task inline"
                ) from None
            raise BadRequestError(error.message, param=error.param, code=error.code) from None
        digest = request_digest(pairs, tasks)
        judge = _judge(request)
        if judge is not None and any(needs_judge(task) for task, _, _ in pairs):
            graded = (await grade_all_async(pairs, digest, judge)).to_dict()
        else:
            graded = await _off_loop(request, grade_all_dict, pairs, digest)
        if batch:
            return _json(graded)
        return _json({"verdict": graded["results"][0]})


# --- OpenAI's fine-tuning grader endpoints -------------------------------------------------
#
# Shapes follow OpenAI's API reference for POST /fine_tuning/alpha/graders/run and /validate
# (developers.openai.com/api/reference/resources/fine_tuning/subresources/alpha) and the
# openai-python types generated from it (openai/types/fine_tuning/alpha/grader_run_response.py,
# grader_validate_response.py); the request bodies match the examples in seed 003
# ({"grader", "model_sample", "item"} and {"grader"}).
# tests/proxy/surfaces/test_graders_endpoints.py parses our responses with those openai-python
# models.

# GraderRunResponse.metadata.errors: every flag, false unless that failure happened.
ERROR_FLAGS: tuple[str, ...] = (
    "formula_parse_error",
    "invalid_variable_error",
    "model_grader_parse_error",
    "model_grader_refusal_error",
    "model_grader_server_error",
    "other_error",
    "python_grader_runtime_error",
    "python_grader_server_error",
    "sample_parse_error",
    "truncated_observation_error",
    "unresponsive_reward_error",
)
ERROR_DETAILS: tuple[str, ...] = (
    "model_grader_server_error_details",
    "python_grader_runtime_error_details",
    "python_grader_server_error_type",
)


def _grader_definition(body: dict[str, Any]) -> dict[str, Any]:
    definition: dict[str, Any] = _required(body, "grader", dict, "a grader object")
    return definition


def _build_check(definition: dict[str, Any]) -> grader_checks.Check:
    try:
        return grader_checks.build_check(definition, where="grader")
    except grader_checks.CheckDefinitionError as exc:
        raise BadRequestError(str(exc), param="grader", code="invalid_grader") from None


async def _run_check(
    request: web.Request,
    check: grader_checks.Check,
    model_sample: str,
    item: dict[str, Any],
    judge: Judge | None,
) -> grader_checks.CheckResult:
    """One check through the engine's runner (a check that raises is a ``check_error``)."""
    sample = grader_checks.Sample.from_answer(model_sample)
    context = grader_checks.CheckContext(request_tools=None)
    if check.needs_judge and judge is not None:
        return await arun_check(check, sample, item, context, judge)
    result: grader_checks.CheckResult = await _off_loop(
        request, run_check, check, sample, item, context
    )
    return result


# A check's infrastructure-error reason code -> the metadata.errors flag OpenAI sets for it.
ERROR_FLAG_OF: dict[str, str] = {
    "template_unresolved": "invalid_variable_error",
    "missing_item_field": "invalid_variable_error",
    "formula_error": "formula_parse_error",
    "judge_parse_error": "model_grader_parse_error",
    "judge_timeout": "unresponsive_reward_error",
    "judge_error": "model_grader_server_error",
    "judge_unavailable": "model_grader_server_error",
}


def run_response(
    check: grader_checks.Check, result: grader_checks.CheckResult, execution_time: float
) -> dict[str, Any]:
    """A ``CheckResult`` in GraderRunResponse's shape (plus our own ``gradeproxy`` block).

    ``reward`` is the check's score when it has one, else 1.0 for a pass and 0.0 otherwise
    (docs/checks-contract.md). An infrastructure error (``passed is None``) has no reward in
    our rows; OpenAI's field is a number, so it reads 0.0 there and the matching
    ``metadata.errors`` flag says the grader never reached a verdict. A check yielding several
    columns (``parts``) reports each as a sub-reward.
    """
    reward = _reward(result)
    errors: dict[str, bool | str | None] = dict.fromkeys(ERROR_FLAGS, False)
    errors.update(dict.fromkeys(ERROR_DETAILS, None))
    if result.passed is None:
        flag = ERROR_FLAG_OF.get(str(result.reason_code), "other_error")
        errors[flag] = True
        if flag == "model_grader_server_error":
            errors["model_grader_server_error_details"] = result.error or result.reason
    return {
        "reward": reward,
        "metadata": {
            "name": check.name,
            "type": check.type,
            "errors": errors,
            "execution_time": execution_time,
            "scores": {check.name: reward},
            "token_usage": None,
            "sampled_model_name": None,
        },
        "sub_rewards": {part.name: _reward(part) for part in result.parts},
        "model_grader_token_usage_per_model": {},
        # Not in OpenAI's shape (its SDK ignores unknown keys): why the reward is what it is.
        "gradeproxy": {
            "passed": result.passed,
            "reason": result.reason,
            "reason_code": result.reason_code,
            "error": result.error,
            "digest": result.digest,
        },
    }


def _reward(result: grader_checks.CheckResult) -> float:
    if result.score is not None:
        return float(result.score)
    return 1.0 if result.passed else 0.0


async def run_grader(request: web.Request) -> web.Response:
    """``POST /grading/v1/graders/run``: one grader, one sample, one reward."""
    body = await _json_object(request)
    definition = _grader_definition(body)
    model_sample: str = _required(body, "model_sample", str, "a string (the model's output)")
    item = body.get("item")
    if item is None:
        item = {}
    if not isinstance(item, dict):
        raise BadRequestError(
            "'item' must be an object (the dataset row templates read as {{ item.* }})",
            param="item",
            code="invalid_type",
        )
    check = _build_check(definition)
    started = time.perf_counter()
    result = await _run_check(request, check, model_sample, item, _judge(request))
    return _json(run_response(check, result, time.perf_counter() - started))


async def validate_grader(request: web.Request) -> web.Response:
    """``POST /grading/v1/graders/validate``: 200 with the grader echoed, or 400 naming why."""
    body = await _json_object(request)
    definition = _grader_definition(body)
    _build_check(definition)
    return _json({"grader": definition})
