"""Health: liveness, readiness and the grade queue's health, on the proxy or the admin port.

Readiness is about serving traffic (tasks loaded, not draining); grading's health is reported,
never a gate, so a stuck grader cannot take a forwarding replica out of service.
"""

from __future__ import annotations

from aiohttp import web

from proxy.state import LIFECYCLE, QUEUE_SLOT, TASKS


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
    queue = app[QUEUE_SLOT].queue
    sink_health = getattr(queue.writer, "health", None) if queue is not None else None
    if sink_health is not None:  # results.sink: reported, never a gate (spilling still serves)
        body["rows_sink"] = sink_health()
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
