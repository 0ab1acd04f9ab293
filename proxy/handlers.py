"""The request handler: request → route → forward (+ shadow copy) → submit to the grade queue.

Everything that decides *whether* a response is graded (or shadowed) happens here, cheaply, so
the skip counters are complete: no task header, unknown task, sampled out, upstream error
status, client disconnected, a full queue, or a task named on a route that is not graded
(``GRADED_ROUTES``: chat completions and the Responses API). A shadow copy is admitted and
started here (proxy/shadow/runner.py) but never awaited: the client's response depends on
the primary alone.
"""

from __future__ import annotations

import asyncio
import os
import time

import orjson
from aiohttp import web
from multidict import CIMultiDict

from grader.tasks import Task, TaskSet
from proxy.errors import DrainingError, ProxyError
from proxy.logs import get_logger
from proxy.pipeline.capture.chat import stream_answered
from proxy.pipeline.capture.responses import responses_stream_answered
from proxy.pipeline.episodes import turn_of
from proxy.pipeline.forward import Relay, relay, request_headers, upstream_url
from proxy.pipeline.grade import Api, GradeJob, sampled
from proxy.pipeline.guard import STRIP, TRACE
from proxy.pipeline.route import ShadowTarget
from proxy.shadow.runner import ShadowLeg, shadow_headers
from proxy.state import (
    CONFIG,
    LIFECYCLE,
    METRICS,
    PAIRS,
    QUEUE,
    QUEUE_SLOT,
    REQUEST_ID,
    ROUTER,
    SESSION,
    SHADOWS,
    TASKS,
)

log = get_logger("gradeproxy.request")

CHAT_PATH = "/v1/chat/completions"
RESPONSES_PATH = "/v1/responses"
# The routes whose responses the proxy can capture and grade (POST only), by route label.
GRADED_ROUTES: dict[str, Api] = {CHAT_PATH: "chat_completions", RESPONSES_PATH: "responses"}
CLIENT_CLOSED = 499  # nginx's "client closed request": no response was completed
MAX_META_HEADERS = 16
MAX_META_VALUE = 256


def _meta(request: web.Request, prefix: str) -> dict[str, str]:
    meta: dict[str, str] = {}
    lower = prefix.lower()
    for name, value in request.headers.items():
        if name.lower().startswith(lower) and len(meta) < MAX_META_HEADERS:
            meta[name[len(prefix) :].lower()] = value[:MAX_META_VALUE]
    return meta


async def proxy_handler(request: web.Request) -> web.StreamResponse:
    """Forward any ``/v1/*`` request; grade those on a graded route that name a loaded task.

    A request that names a task on any other route is forwarded and counted as skipped
    (``unsupported_route``): the proxy cannot read an answer from it, and saying so beats a
    silent ``graded: false``.
    """
    app = request.app
    config, metrics = app[CONFIG], app[METRICS]
    started = time.perf_counter()
    request_id = request.headers.get("x-request-id") or os.urandom(16).hex()
    request[REQUEST_ID] = request_id
    if app[LIFECYCLE].refusing:
        raise DrainingError("the proxy is shutting down; retry on another replica")
    api = GRADED_ROUTES.get(request.path) if request.method == "POST" else None
    route: str = api or "other"
    graded_route = api is not None
    grading = config.grading
    task_id = request.headers.get(grading.task_header) if graded_route else None
    tasks = app[TASKS].current
    task = tasks.get(task_id) if tasks is not None and task_id else None
    # One sampling key for grading and shadows: a shadowed request is always a graded one.
    key = request.headers.get(grading.sampling_header or "") or request_id
    skip: str | None = None
    if not graded_route:
        if grading.task_header in request.headers:
            skip = "unsupported_route"
            task_id = request.headers.get(grading.task_header)
    else:
        if not task_id:
            skip = "no_task_header"
        elif task is None:
            skip = "unknown_task"
        elif not sampled(key, grading.sample_rate):
            skip = "sampled_out"
    body = await request.read()
    target = app[ROUTER].pick(body)  # parses the body's model only when routes exist
    headers = request_headers(
        request.headers,
        private_prefixes=("x-grade-", "x-gradeproxy-", grading.meta_header_prefix),
        # The header that carried the inbound key (proxy/pipeline/guard.py) never goes upstream.
        private_names=(
            grading.task_header,
            grading.run_header,
            grading.sample_id_header,
            *request.get(STRIP, ()),
        ),
        api_key=target.api_key,
        request_id=request_id,
    )
    pair_id: str | None = None
    if target.shadow is not None and task is not None and tasks is not None:
        # Started before the primary is awaited, so both legs run together.
        pair_id = _start_shadow(
            request, target.shadow, key, skip is None, headers, body, task, tasks.digest, api
        )
    submitted = False

    def submit(task: Task, tasks: TaskSet) -> None:
        nonlocal submitted
        if pair_id is not None:
            leg_s = outcome.finished_at - outcome.started_at
            metrics.variant_duration.labels("primary").observe(leg_s)
            metrics.variant_ttfb.labels("primary").observe(outcome.ttfb_s)
        total = time.perf_counter() - started
        job = GradeJob(
            request_id=request_id,
            task=task,
            tasks_digest=tasks.digest,
            upstream=target.url,
            stream=outcome.stream,
            request_body=body,
            response=outcome.parts,
            finished_at=outcome.finished_at or time.perf_counter(),
            run=request.headers.get(grading.run_header),
            meta=_meta(request, grading.meta_header_prefix),
            timings={
                "duration_s": round(total, 6),
                "ttfb_s": round(outcome.ttfb_s, 6),
                "overhead_s": round(max(total - outcome.upstream_wait_s, 0.0), 6),
            },
            pair_id=pair_id,
            api=api or "chat_completions",
            episode=turn_of(request.headers, task, grading),
            role=(request.headers.get(grading.role_header) or "")[:256] or None,
            sample_id=request.headers.get(grading.sample_id_header),
            upstream_request_id=outcome.upstream_request_id,
        )
        submitted = True  # from here on the queue reports the leg, even when full
        app[QUEUE].submit(job)

    capturing = task is not None and skip is None
    relays = app[LIFECYCLE].relays
    handler_task = asyncio.current_task()
    try:
        metrics.in_flight.inc()
        outcome = Relay()
        status = 0
        if handler_task is not None:
            relays[handler_task] = outcome
        try:
            response = await relay(
                request,
                app[SESSION],
                upstream_url(target.url, request.raw_path),
                headers,
                body,
                capture=capturing,
                request_id=request_id,
                out=outcome,
                client_timeout=target.timeout,
                capture_limit=config.limits.max_capture_bytes,
            )
            status = outcome.status
            if outcome.client_disconnected and not outcome.headers_sent:
                status = CLIENT_CLOSED  # it left before the response began: nothing delivered
            elif outcome.upstream_failed is not None:  # failed after the response began
                metrics.upstream_errors.labels(_UPSTREAM_KINDS[outcome.upstream_failed]).inc()
            if api is not None and skip is None:
                skip = _post_skip(outcome, body, api)
        except asyncio.CancelledError:
            if outcome.cut is not None and not outcome.headers_sent:
                # shutdown's grace period ended before the upstream answered
                status = DrainingError.status
                if graded_route:
                    skip = skip or "shutdown"
                    metrics.skipped.labels(skip).inc()
                if handler_task is not None:
                    handler_task.uncancel()
                raise DrainingError("the proxy shut down before the upstream answered") from None
            # A client that has the whole answer may leave before the upstream ends its body.
            answered = (
                outcome.cut is None
                and capturing
                and api is not None
                and _answered(outcome, body, api)
            )
            if answered and task is not None and tasks is not None:
                outcome.client_disconnected = True
                status = outcome.status
                submit(task, tasks)
                raise
            if outcome.cut is not None:  # cut mid-response, outside the relay's own handling
                status = outcome.status
                reason = "shutdown"
            else:  # the client went away (proxy/state.py's abandon) and we were cancelled
                outcome.client_disconnected = True
                status = CLIENT_CLOSED
                reason = "client_disconnected"
            if graded_route or skip is not None:
                skip = skip or reason
                metrics.skipped.labels(skip).inc()
            raise
        except ProxyError as error:
            status = error.status
            metrics.upstream_errors.labels(_upstream_error_kind(error)).inc()
            if graded_route or skip is not None:
                skip = skip or "upstream_error"
                metrics.skipped.labels(skip).inc()
            raise
        finally:
            relays.pop(handler_task, None)  # type: ignore[arg-type]
            metrics.in_flight.dec()
            total = time.perf_counter() - started
            _observe(request, route, status, total, outcome, skip, task_id, pair_id)
        if skip is None and task is not None and tasks is not None:
            submit(task, tasks)
        elif skip is not None:
            metrics.skipped.labels(skip).inc()
        return response
    finally:
        if pair_id is not None and not submitted and task is not None:
            app[PAIRS].leg(pair_id, "primary", task.id, None)


def _start_shadow(
    request: web.Request,
    shadow: ShadowTarget,
    key: str,
    graded: bool,
    headers: CIMultiDict[str],
    body: bytes,
    task: Task,
    tasks_digest: str,
    api: Api | None,
) -> str | None:
    """Start the shadow copy of a graded request if it is sampled and a slot is free; its
    pair id, or None (the reason counted)."""
    runner = request.app[SHADOWS]
    if api is None or not (graded and sampled(key, shadow.sample_rate)):
        runner.sampled_out()
        return None
    grading = request.app[CONFIG].grading
    leg = ShadowLeg(
        pair_id=os.urandom(16).hex(),
        target=shadow,
        url=upstream_url(shadow.url, request.raw_path),
        headers=shadow_headers(headers, shadow.api_key),
        body=body,
        request_id=request[REQUEST_ID],
        task=task,
        tasks_digest=tasks_digest,
        run=request.headers.get(grading.run_header),
        meta=_meta(request, grading.meta_header_prefix),
        api=api,
        sample_id=request.headers.get(grading.sample_id_header),
    )
    return leg.pair_id if runner.start(leg) else None


def _answered(outcome: Relay, body: bytes, api: Api) -> bool:
    """Whether a response whose client left had already reached it whole (graded then)."""
    if not outcome.stream:
        return False
    if api == "responses":
        return responses_stream_answered(outcome.parts)
    return stream_answered(outcome.parts, _choices_requested(body))


def _choices_requested(body: bytes) -> int:
    """The request's ``n`` (1 when absent or unreadable): how many choices must finish."""
    try:
        n = orjson.loads(body).get("n")
    except (orjson.JSONDecodeError, AttributeError):
        return 1
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1


def _post_skip(outcome: Relay, body: bytes, api: Api) -> str | None:
    if outcome.cut is not None:
        return "shutdown"
    if outcome.client_disconnected and not _answered(outcome, body, api):
        return "client_disconnected"
    if outcome.status >= 400 or outcome.upstream_failed is not None:
        return "upstream_error"
    return None


_UPSTREAM_KINDS = {
    "upstream_unreachable": "connect",
    "upstream_timeout": "timeout",
    "upstream_protocol_error": "protocol",
}


def _upstream_error_kind(error: ProxyError) -> str:
    return _UPSTREAM_KINDS.get(error.code, "protocol")


def _observe(
    request: web.Request,
    route: str,
    status: int,
    total: float,
    outcome: Relay,
    skip: str | None,
    task_id: str | None,
    pair_id: str | None,
) -> None:
    overhead = max(total - outcome.upstream_wait_s, 0.0)
    request.app[METRICS].request_done(
        route, status or 500, total, outcome.ttfb_s if outcome.status else None, overhead
    )
    log.info(
        "request",
        request_id=request[REQUEST_ID],
        upstream_request_id=outcome.upstream_request_id,
        method=request.method,
        path=request.path,
        route=route,
        status=status or 500,
        stream=outcome.stream,
        bytes=outcome.body_bytes,
        duration_ms=round(total * 1000, 3),
        ttfb_ms=round(outcome.ttfb_s * 1000, 3),
        overhead_ms=round(overhead * 1000, 3),
        task=task_id,
        graded=route != "other" and skip is None and not outcome.upstream_failed,
        skip=skip,
        upstream_failed=outcome.upstream_failed,
        client_disconnected=outcome.client_disconnected,
        cut=outcome.cut,
        capture_truncated=outcome.capture_truncated or None,
        pair_id=pair_id,  # set when a shadow copy was started
        trace_id=trace.trace_id if (trace := request.get(TRACE)) else None,
    )


async def livez(request: web.Request) -> web.Response:
    """Liveness: the process answers. No dependency checks (a sick backend is not our death)."""
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """Readiness: tasks loaded and not draining; grading's health is a detail, not a gate.

    A stuck grade queue does not stop forwarding, so it must not take the replica out of
    service: ``grading`` reports it here and ``/healthz/grading`` answers 503 for it, which
    an alert or a probe that cares can watch.
    """
    app = request.app
    if app[LIFECYCLE].draining:
        return web.json_response({"status": "draining"}, status=503)
    store = app[TASKS]
    if not store.ready:
        # The reason is the task loader's own one line (file:line: why), when it failed.
        return web.json_response({"status": "loading_tasks", "reason": store.error}, status=503)
    tasks = store.current
    body: dict[str, object] = {
        "status": "ready",
        "tasks": len(tasks) if tasks else 0,
        "digest": tasks.digest if tasks else None,
        "grading": _grading_health(request),
    }
    if store.error is not None:  # started without tasks (tasks.allow_start_without)
        body["tasks_error"] = store.error
    return web.json_response(body)


async def grading_health(request: web.Request) -> web.Response:
    """The grade queue's health: 200 while workers run and the queue moves, else 503."""
    detail = _grading_health(request)
    return web.json_response(detail, status=200 if detail["status"] == "ok" else 503)


def _grading_health(request: web.Request) -> dict[str, object]:
    queue = request.app[QUEUE_SLOT].queue
    if queue is None:
        return {"status": "starting", "detail": "/healthz/grading"}
    health = queue.health()
    return {
        "status": "ok" if health.healthy else health.reason,
        "workers": f"{health.workers_alive}/{health.workers_wanted}",
        "queue_depth": health.depth,
        "idle_s": round(health.idle_s, 3),
        "detail": "/healthz/grading",
    }
