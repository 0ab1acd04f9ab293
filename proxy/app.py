"""The aiohttp application: routes, the error middleware, and resources with their lifetimes.

Resources live in ``cleanup_ctx`` generators, so start-up and shutdown run in one order and
unwind in reverse: results writer and grade queue → client session → shadow runner → task
store. On shutdown the shadow legs still in flight get ``shutdown.grace_period_s`` to finish
(then are cancelled) while the queue still runs, and the queue drains before the writer closes,
so no graded row is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import aiohttp
from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler

from grader.checks import Judge, JudgeConfig
from grader.collector import GC_YOUNG_THRESHOLD
from proxy.config import Config, ConfigError
from proxy.errors import ProxyError, render
from proxy.handler import proxy_handler
from proxy.judge_client import AiohttpJudgeClient
from proxy.logs import get_logger
from proxy.pipeline.guard import Guard
from proxy.pipeline.ledger import Ledger
from proxy.pipeline.malformed import expect_handler
from proxy.pipeline.queue import GradeQueue
from proxy.pipeline.record.captures import Captures
from proxy.pipeline.record.failures import FailureRing
from proxy.pipeline.record.metrics import KeyLabels, ModelLabels, ProxyMetrics
from proxy.pipeline.record.pairs import PairTracker
from proxy.pipeline.record.results import ResultWriter
from proxy.pipeline.record.sinks import RowWriter
from proxy.pipeline.record.sinks.writer import SinkSettings
from proxy.pipeline.route import Router
from proxy.pipeline.transport import TRANSPORTS, Transports, primary_specs, shadow_specs
from proxy.pipeline.upstream import POOL
from proxy.pipeline.watchdog import Watchdog, watch_forever
from proxy.shadow.runner import ShadowRunner
from proxy.state import (
    CONFIG,
    LIFECYCLE,
    METRICS,
    PAIRS,
    QUEUE,
    QUEUE_SLOT,
    REQUEST_ID,
    ROUTER,
    SHADOWS,
    TASKS,
    TELEMETRY,
    WATCHDOG,
    WORKER,
    Lifecycle,
    QueueSlot,
)
from proxy.surfaces.health import grading_health, livez, readyz
from proxy.surfaces.scoring_http import add_scoring_routes
from proxy.surfaces.ui import FAILURES, add_ui_routes
from proxy.taskstore import TaskStore

log = get_logger("gradeproxy.app")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
GUARD = web.AppKey("guard", Guard)
PROCESS_START_TIMEOUT_S = 30.0  # the grading process's first start (its imports) on a slow box
# The young generation's collection threshold while serving (CPython's default is 700): see
# :func:`_collector`.


@web.middleware
async def openai_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Answer every error the proxy itself makes in OpenAI's error shape (proxy/errors.py)."""
    try:
        return await handler(request)
    except (ProxyError, web.HTTPException) as error:
        response = render(error, request.get(REQUEST_ID), request.app[CONFIG].limits.max_body_bytes)
        if response is None:
            raise
        return response


def make_app(config: Config, metrics: ProxyMetrics | None = None) -> web.Application:
    """Build the proxy app (and, with ``admin.port``, serve /metrics only on the admin app)."""
    metrics = metrics or ProxyMetrics(
        ModelLabels(config.metrics.models, config.metrics.max_models),
        KeyLabels(cap=config.metrics.max_keys),
    )
    watchdog = Watchdog(config.client, lambda phase: metrics.client_timeouts.labels(phase).inc())
    guard = _guard(config, watchdog, metrics)
    app = web.Application(
        middlewares=[openai_errors, guard], client_max_size=config.limits.max_body_bytes
    )
    app[GUARD] = guard
    app[WATCHDOG] = watchdog
    app[LIFECYCLE] = Lifecycle()
    # Read at scrape time: the relays in progress are the requests being served (no update on
    # the hot path).
    metrics.in_flight.set_function(app[LIFECYCLE].relays.__len__)
    watchdog.abandon = app[LIFECYCLE].abandon
    app[CONFIG] = config
    app[METRICS] = metrics
    app[TASKS] = TaskStore(
        config.tasks.path,
        app[METRICS],
        config.tasks.allow_start_without,
        config.pricing.path,
        config.enforce.path,
    )
    app[ROUTER] = Router(config)
    app[PAIRS] = PairTracker(
        app[METRICS], config.grading.pair_max_pending, config.grading.pair_ttl_s
    )
    app[QUEUE_SLOT] = QueueSlot()
    app[FAILURES] = FailureRing(config.ui.failure_ring_size, config.results.keeps_answer)
    app.cleanup_ctx.extend(
        [
            _watching,
            _telemetry,
            _results_and_queue,
            _upstream_pool,
            _shadows,
            _task_loading,
            _collector,
        ]
    )
    expecting = expect_handler(metrics)  # a bad Expect: a 400 or 417 of ours, not aiohttp's 500
    app.router.add_route("*", "/v1/{tail:.*}", proxy_handler, expect_handler=expecting)
    if config.scoring.enabled and not config.scoring.on_admin_port:
        add_scoring_routes(app, max_batch=config.scoring.max_batch)
    if config.admin.port is None:
        add_admin_routes(app, app)
    return app


def add_admin_routes(target: web.Application, proxy_app: web.Application) -> None:
    """/metrics, /livez, /readyz and the live page (proxy/surfaces/ui.py), on the proxy app or on a
    separate admin app."""
    if target is not proxy_app:  # the admin app reads the proxy's state objects
        target[CONFIG] = proxy_app[CONFIG]
        target[LIFECYCLE] = proxy_app[LIFECYCLE]
        target[TASKS] = proxy_app[TASKS]
        target[QUEUE_SLOT] = proxy_app[QUEUE_SLOT]
        target[METRICS] = proxy_app[METRICS]
    add_ui_routes(target, proxy_app, admin=target is not proxy_app, guard=proxy_app[GUARD])
    target.router.add_get("/metrics", make_aiohttp_handler(proxy_app[METRICS].registry))
    target.router.add_get("/livez", livez)
    target.router.add_get("/readyz", readyz)
    target.router.add_get("/healthz/grading", grading_health)


def make_admin_app(proxy_app: web.Application) -> web.Application:
    """The admin app for ``admin.port``: health and metrics off the traffic port."""
    config = proxy_app[CONFIG]
    admin = web.Application(
        middlewares=[openai_errors, proxy_app[GUARD]], client_max_size=config.limits.max_body_bytes
    )
    add_admin_routes(admin, proxy_app)
    if config.scoring.enabled and config.scoring.on_admin_port:
        add_scoring_routes(admin, max_batch=config.scoring.max_batch)
    return admin


def _guard(config: Config, watchdog: Watchdog, metrics: ProxyMetrics) -> Guard:
    return Guard(
        config.inbound_keys(),
        protect_metrics=config.auth.protect_metrics,
        max_body_bytes=config.limits.max_body_bytes,
        watchdog=watchdog,
        refused=metrics.rate_limit,
    )


def reload_keys(app: web.Application) -> bool:
    """Read the inbound keys' secrets again (SIGHUP: a rotated ``secret_file``); a key that
    cannot be read keeps the keys in use, and says why in the log."""
    try:
        keys = app[CONFIG].inbound_keys()
    except ConfigError as exc:
        log.error("inbound_keys_reload_failed", error=str(exc))
        return False
    app[GUARD].use_keys(keys)
    log.info("inbound_keys_reloaded", keys=len(keys))
    return True


async def _watching(app: web.Application) -> AsyncIterator[None]:
    """One scan task for every connection of the proxy and admin sites.

    The watchdog itself is proxy/pipeline/watchdog.py.
    """
    task = asyncio.create_task(watch_forever(app[WATCHDOG]), name="client-watchdog")
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _collector(app: web.Application) -> AsyncIterator[None]:
    with serving_collector():
        yield


@contextlib.contextmanager
def serving_collector() -> Iterator[None]:
    """The cyclic garbage collector, tuned for serving; restored on shutdown.

    Almost nothing a request allocates is cyclic garbage (reference counting frees it), but
    CPython counts a young collection every 700 net allocations, and the objects of the
    requests in flight (each one's coroutines, headers, buffers) swing by more than that at 16
    connections: a young collection every ~20 requests, each traversing every young object, and
    now and then a full one over the whole heap (the grader, the config, every imported module:
    tens of milliseconds, a loop stall). The bare relay holds too few objects per
    request to trip it. Here the heap built at start is frozen (``gc.freeze``: never traversed
    again, the full collections stay small) and the young threshold is
    :data:`GC_YOUNG_THRESHOLD`, above what the requests in flight swing by; the rare cyclic
    garbage is still collected (docs/performance.md has both measured).
    """
    threshold = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


async def _results_and_queue(app: web.Application) -> AsyncIterator[None]:
    config = app[CONFIG]
    writer: RowWriter | None = None
    results = config.results
    if results.sink is not None:  # the shared rows database (docs/rows-database.md)
        from proxy.pipeline.record.sinks.postgres import postgres_sink  # the postgres extra

        settings = SinkSettings(
            batch_rows=results.sink_batch_rows,
            buffer_bytes=results.sink_buffer_bytes,
            retry_s=results.sink_retry_s,
            close_timeout_s=max(config.shutdown.grace_period_s, 1.0),
        )
        writer = postgres_sink(
            results.sink, results.sink_password_env, results.sink_password_file,
            results.spill_path, app[METRICS], settings, results.sink_timeout_s,
        )  # fmt: skip
    elif results.path is not None:
        writer = ResultWriter(results.path, results.max_bytes, results.backups)
    judge_session, judge = _judge(config)
    queue = GradeQueue(
        app[METRICS],
        writer,
        size=config.grading.queue_size,
        workers=config.grading.workers,
        inline_max_bytes=config.grading.inline_max_bytes,
        capture_answer=config.results.keeps_answer,
        pairs=app[PAIRS],
        judge=judge,
        stuck_after_s=config.grading.stuck_after_s,
        job_deadline_s=config.grading.job_deadline_s,
        max_answer_chars=config.results.max_answer_chars,
        failures=app[FAILURES],
        isolation=config.grading.isolation,
        batch_max=config.grading.batch_max,
        batch_window_s=config.grading.batch_window_s,
    )
    worker = app.get(WORKER)
    if worker is not None and worker.ledger is not None:  # --workers: the slot's shared ledger
        ledger = Ledger(worker.ledger)
        queue.use_ledger(ledger)
        app[METRICS].worker_rows_lost.inc(ledger.lost)
    app[QUEUE] = app[QUEUE_SLOT].queue = queue
    queue.telemetry = app.get(TELEMETRY)
    queue.answer_hash = config.results.answer == "hash"
    if config.results.capture_untagged > 0 and writer is not None:
        queue.captures = Captures(
            app[METRICS],
            queue.writes,
            writer,
            mode=config.results.answer,
            max_answer_chars=config.results.max_answer_chars,
            backlog=config.grading.queue_size,
            inline_max_bytes=config.grading.inline_max_bytes,
            window_s=config.grading.batch_window_s,
            batch_max=config.grading.batch_max,
        )
    app[TASKS].listeners.append(queue.on_tasks)  # a reload reaches the grading process
    store = app[TASKS]
    queue.prices = store.prices  # and its price table reaches every job submitted after it
    store.listeners.append(lambda _: setattr(queue, "prices", store.prices))
    queue.start()
    if not await queue.started(PROCESS_START_TIMEOUT_S):  # grading reports `grader_down`
        log.error("grading_process_not_started", timeout_s=PROCESS_START_TIMEOUT_S)
    yield
    await queue.stop(timeout_s=config.shutdown.grace_period_s)
    if judge_session is not None:
        await judge_session.close()
    if writer is not None:
        writer.close()
        log.info("results_flushed", path=str(writer.path), rows=writer.rows_written)


async def _telemetry(app: web.Application) -> AsyncIterator[None]:
    """The OTLP exporter while tracing is on; stopped after the grade queue has drained (the
    cleanups run in reverse), so the last evaluation results are still exported."""
    tracing, metrics = app[CONFIG].tracing, app[METRICS]
    if not tracing.enabled:
        yield
        return
    from proxy.telemetry.export import Telemetry  # the `otel` extra: imported only when on

    app[TELEMETRY] = telemetry = Telemetry(
        tracing,
        lambda signal, reason, n: metrics.trace_dropped.labels(signal, reason).inc(n),
        lambda signal, n: metrics.trace_exported.labels(signal).inc(n),
    )
    telemetry.start()
    yield
    await asyncio.to_thread(telemetry.shutdown)


def _judge(config: Config) -> tuple[aiohttp.ClientSession | None, Judge | None]:
    """The judge for label_model/score_model checks, when one is configured. Without one those
    checks are infrastructure errors (``judge_unavailable``), never model failures."""
    settings = config.judge
    if settings.endpoint is None:
        return None, None
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
    client = AiohttpJudgeClient(settings.endpoint, settings.api_key_env, session=session)
    judge_config = JudgeConfig(
        model=settings.model,
        timeout_s=settings.timeout_s,
        max_concurrency=settings.max_concurrency,
        retries=settings.retries,
    )
    return session, Judge(client, judge_config)


def _transports(app: web.Application, shadows: bool) -> Transports:
    """The primary upstreams' transports, or the shadows' (a pool of their own, so a shadow's
    failures and connections stay apart from the primary's)."""
    config = app[CONFIG]
    up = config.upstream
    # Idle timeouts by one scan per pool over the reads in progress, not a timer per read.
    idle = [up.idle_timeout_s, *(route.idle_timeout_s for route in config.routes)]
    transports = Transports(
        shadow_specs(config) if shadows else primary_specs(config),
        min(idle),
        trust_env=up.trust_env,
        max_per_origin=up.max_connections_per_origin,
        waited=app[METRICS].upstream_connection_waits.inc,
    )
    log.info("upstream_clients", shadows=shadows, clients=transports.chosen)
    return transports


async def _upstream_pool(app: web.Application) -> AsyncIterator[None]:
    transports = app[TRANSPORTS] = _transports(app, shadows=False)
    app[POOL] = transports.default_pool
    transports.start()
    yield
    await transports.aclose()


async def _shadows(app: web.Application) -> AsyncIterator[None]:
    transports = _transports(app, shadows=True) if app[ROUTER].has_shadows else None
    if transports is not None:
        transports.start()
    runner = ShadowRunner(app[METRICS], app[QUEUE], app[PAIRS], transports)
    app[SHADOWS] = runner
    yield
    await runner.close(timeout_s=app[CONFIG].shutdown.grace_period_s)


async def _task_loading(app: web.Application) -> AsyncIterator[None]:
    store = app[TASKS]
    loading = asyncio.create_task(store.reload(), name="tasks-initial-load")
    watcher: asyncio.Task[None] | None = None
    config = app[CONFIG].tasks
    if config.watch and (config.path is not None or app[CONFIG].enforce.path is not None):
        watcher = asyncio.create_task(store.watch(config.watch_interval_s), name="tasks-watch")
    yield
    for task in (loading, watcher):
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
