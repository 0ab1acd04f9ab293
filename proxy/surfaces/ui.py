"""The live page: ``/ui`` (a static page), ``/ui/scoreboard.json`` and ``/ui/failures.json``.

No build step and no CDN: ``ui.html`` is one file of HTML, CSS and a small script that fetches
the two JSON documents every few seconds. The scoreboard is read from the same Prometheus
registry ``/metrics`` exports, so the page and a scrape can never disagree; with
``listen.workers`` > 1 it adds every worker's counts (``/ui/worker.json``, proxy/surfaces/peers.py),
so any worker's page shows the whole proxy. The failure inspector reads this process's
:class:`~proxy.pipeline.record.failures.FailureRing` (with workers: the worker whose admin port
serves the page).

Raw answers are customer content (seed 003), so ``/ui/failures.json`` is served on the admin
port, or on the traffic port only to a loopback client or to a request carrying a valid inbound
key (``auth.keys_env``, checked by the guard's own
:meth:`~proxy.pipeline.guard.Guard.has_valid_key`) or the page's login session
(proxy/surfaces/login.py); anyone else gets 403 and the page says where to look. The
scoreboard's counts carry no content and stay open. Also here: ``/`` (links to the page,
``/metrics`` and ``/readyz``) and
``/health`` (the answer of ``/readyz``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from importlib.resources import files
from typing import Any

from aiohttp import web

from proxy.pipeline.guard import Guard
from proxy.pipeline.record.failures import FailureRing
from proxy.pipeline.record.metrics import ProxyMetrics
from proxy.state import CONFIG, METRICS, QUEUE_SLOT, WORKER
from proxy.surfaces.health import readyz
from proxy.surfaces.login import add_login_routes
from proxy.surfaces.peers import read_peers
from proxy.surfaces.review import add_review_routes

FAILURES = web.AppKey("failures", FailureRing)
PAGE = files("proxy.surfaces").joinpath("ui.html").read_bytes()
RESULTS = ("pass", "stale", "fail")
# Pages refresh every 3 s; several open pages share one reading of the registry.
BOARD_MAX_AGE_S = 1.0
CHECK_RESULTS = ("pass", "fail", "error")

INDEX = b"""<!doctype html><html lang="en"><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>gradeproxy</title>
<body style="font-family:system-ui,sans-serif;margin:2rem"><h1>gradeproxy</h1><ul>
<li><a href="/ui">/ui</a>: live scoreboard and failure inspector</li>
<li><a href="/ui/review">/ui/review</a>: the review queue (label drafts and judged rows)</li>
<li><a href="/metrics">/metrics</a>: Prometheus metrics</li>
<li><a href="/readyz">/readyz</a>: readiness (also <a href="/health">/health</a>),
<a href="/livez">/livez</a>: liveness, <a href="/healthz/grading">/healthz/grading</a></li>
</ul><p>The OpenAI-compatible API is under <code>/v1</code> on the traffic port.</p></body></html>
"""


def _counts() -> dict[str, float]:
    return dict.fromkeys(RESULTS, 0.0)


Sample = tuple[str, dict[str, str], float]


def board_samples(metrics: ProxyMetrics) -> list[Sample]:
    """The samples the page is made of, read from the very collectors ``/metrics`` exports,
    and only those the page shows: the latency histograms are most of the registry and the
    page needs none of them. With several workers, each one's are added up (:func:`fold`)."""
    collectors = (
        metrics.task_info,
        metrics.grades,
        metrics.grade_errors,
        metrics.check_results,
        metrics.grading_errors,
        metrics.skipped,
        metrics.queue_depth,
        metrics.episodes,
        metrics.episode_columns,
    )
    return [
        (s.name, s.labels, s.value)
        for c in collectors
        for family in c.collect()
        for s in family.samples
    ]


def scoreboard(metrics: ProxyMetrics) -> dict[str, Any]:
    """This process's board (:func:`fold` of its own samples)."""
    return fold(board_samples(metrics))


def fold(samples: Iterable[Sample]) -> dict[str, Any]:
    """Counts per task, per mutation kind and overall, per variant, with per-check columns,
    and per episode task its episodes and their columns (empty while no episode was graded);
    samples of the same series (from several workers) add up."""
    kinds: dict[str, str] = {}
    grades: dict[tuple[str, str], dict[str, float]] = defaultdict(_counts)
    checks: dict[tuple[str, str], dict[str, dict[str, float]]] = defaultdict(dict)
    row_errors: dict[tuple[str, str], float] = defaultdict(float)
    episodes: dict[str, dict[str, float]] = defaultdict(_episode_counts)
    columns: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
    errors = skipped = depth = 0.0
    for name, labels, value in samples:
        if name == "gradeproxy_task_info":
            kinds[labels["task"]] = labels["mutation_kind"]
        elif name == "gradeproxy_grades_total":
            key = (labels["task"], labels["variant"])
            grades[key][labels["result"]] += value
        elif name == "gradeproxy_grade_errors_total":
            row_errors[(labels["task"], labels["variant"])] += value
        elif name == "gradeproxy_check_results_total":
            column = checks[(labels["task"], labels["variant"])].setdefault(
                labels["check"], dict.fromkeys(CHECK_RESULTS, 0.0)
            )
            column[labels["result"]] += value
        elif name == "gradeproxy_grading_errors_total":
            errors += value
        elif name == "gradeproxy_grading_skipped_total":
            skipped += value
        elif name == "gradeproxy_grade_queue_depth":
            depth += value  # one queue per worker
        elif name == "gradeproxy_episodes_total":
            episodes[labels["task"]][labels["result"]] += value
        elif name == "gradeproxy_episode_columns_total":
            column = columns[labels["task"]].setdefault(
                labels["column"], dict.fromkeys(CHECK_RESULTS, 0.0)
            )
            column[labels["result"]] += value
    per_kind: dict[tuple[str, str], dict[str, float]] = defaultdict(_counts)
    totals: dict[str, dict[str, float]] = defaultdict(_counts)
    tasks = []
    for task, variant in sorted(set(grades) | set(row_errors)):
        counts = grades[(task, variant)]  # a task whose every row errored has no grades yet
        kind = kinds.get(task, "none")
        for result, count in counts.items():
            per_kind[(kind, variant)][result] += count
            totals[variant][result] += count
        tasks.append(
            {
                "task": task,
                "kind": kind,
                "variant": variant,
                **_rated(counts),
                **_error_rate(counts, row_errors.get((task, variant), 0.0)),
                "checks": checks.get((task, variant), {}),
            }
        )
    return {
        "variants": sorted(totals, key=lambda v: (v != "primary", v)),
        "totals": [{"variant": v, **_rated(c)} for v, c in sorted(totals.items())],
        "kinds": [{"kind": k, "variant": v, **_rated(c)} for (k, v), c in sorted(per_kind.items())],
        "tasks": tasks,
        "checks": sorted({name for columns in checks.values() for name in columns}),
        "episodes": [
            {
                "task": task,
                **_rated(counts, CHECK_RESULTS),
                "columns": {
                    name: {r: int(n) for r, n in column.items()}
                    for name, column in columns.get(task, {}).items()
                },
            }
            for task, counts in sorted(episodes.items())
        ],
        "grading_errors": int(errors),
        "skipped": int(skipped),
        "queue_depth": int(depth),
    }


def _error_rate(counts: dict[str, float], errors: float) -> dict[str, Any]:
    """Error rows over all rows: the one rate whose denominator includes the errors."""
    rows = sum(counts.values()) + errors
    return {
        "error": int(errors),
        "rows": int(rows),
        "error_rate": round(errors / rows, 4) if rows else None,
    }


def _episode_counts() -> dict[str, float]:
    return dict.fromkeys(CHECK_RESULTS, 0.0)


def _rated(counts: dict[str, float], results: tuple[str, ...] = RESULTS) -> dict[str, Any]:
    graded = int(sum(counts.values()))
    out: dict[str, Any] = {"graded": graded}
    for result in results:
        out[result] = int(counts[result])
        out[f"{result}_rate"] = round(counts[result] / graded, 4) if graded else None
    return out


def inspector_allowed(request: web.Request, admin: bool, guard: Guard | None = None) -> bool:
    """Raw answers go to the admin port, to a client on this machine, or to a request with a
    valid inbound key or the page's login session (when ``auth.keys_env`` is configured)."""
    if admin:
        return True
    if guard is not None and (guard.has_valid_key(request) or guard.has_session(request)):
        return True
    try:
        return request.remote is not None and ipaddress.ip_address(request.remote).is_loopback
    except ValueError:  # a unix socket's peer has no address
        return False


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def add_ui_routes(
    target: web.Application, proxy_app: web.Application, admin: bool, guard: Guard | None = None
) -> None:
    """The page and its JSON on ``target`` (the admin app, or the proxy app without one);
    ``guard`` is the request guard, whose key check may open the inspector."""
    metrics = proxy_app[METRICS]

    async def index(request: web.Request) -> web.Response:
        return web.Response(body=INDEX, content_type="text/html", charset="utf-8")

    latest: list[tuple[float, dict[str, Any]]] = []  # (when, board): shared by open pages

    def restarts_and_losses() -> dict[str, int]:
        """This worker slot's earlier generations: their counts died with them (the page
        says so), and the jobs they never settled (proxy/pipeline/ledger.py)."""
        queue = proxy_app[QUEUE_SLOT].queue
        if queue is None:
            return {"restarts": 0, "rows_lost": 0}
        return {"restarts": queue.ledger.restarts, "rows_lost": queue.ledger.lost}

    def rows_written() -> int:
        queue = proxy_app[QUEUE_SLOT].queue
        return queue.graded_rows if queue is not None else 0

    async def board(request: web.Request) -> web.Response:
        if not latest or time.monotonic() - latest[0][0] >= BOARD_MAX_AGE_S:
            rows = rows_written()
            # Reading thousands of series is tens of milliseconds (bench/ui_bench.py): off the
            # loop, which gets the GIL back every GIL_SWITCH_INTERVAL_S meanwhile.
            samples = await asyncio.to_thread(board_samples, metrics)
            worker = proxy_app.get(WORKER)
            missing: list[int] = []
            gone = restarts_and_losses()
            if worker is not None and worker.count > 1:  # the whole proxy: every worker's
                readings, missing = await read_peers(proxy_app[CONFIG], worker)
                for reading in readings:
                    samples += [(n, labels, v) for n, labels, v in reading["samples"]]
                    rows += reading["rows_written"]
                    for key in gone:
                        gone[key] += reading.get(key, 0)
            data = await asyncio.to_thread(fold, samples)
            data["rows_written"] = rows
            if worker is not None:
                data["workers"] = {"count": worker.count, "missing": missing, **gone}
            latest[:] = [(time.monotonic(), data)]
        data = {
            **latest[0][1],
            "inspector": inspector_allowed(request, admin, guard),
            "keyed": guard is not None and guard.keyed,  # the page offers "Log out"
        }
        return web.json_response(data, headers={"Cache-Control": "no-store"})

    async def reading(request: web.Request) -> web.Response:
        """This worker's part of the board, for the other workers' pages (surfaces/peers.py)."""
        samples = await asyncio.to_thread(board_samples, metrics)
        worker = proxy_app.get(WORKER)
        return web.json_response(
            {
                "worker": worker.index if worker is not None else 0,
                "samples": samples,
                "rows_written": rows_written(),
                **restarts_and_losses(),
            },
            headers={"Cache-Control": "no-store"},
        )

    async def failures(request: web.Request) -> web.Response:
        if not inspector_allowed(request, admin, guard):
            reason = "the failure inspector shows raw answers: open /ui on the admin port or from"
            reason += " this machine (loopback), or send an inbound key (auth.keys_env)"
            return web.json_response({"error": reason}, status=403)
        # Entries are finished when first read (failures.rendered): a ring of answers made of
        # invisible characters is tens of milliseconds, off the loop (bench/ui_bench.py).
        snapshot = await asyncio.to_thread(proxy_app[FAILURES].snapshot)
        return web.json_response(snapshot, headers={"Cache-Control": "no-store"})

    target.router.add_get("/", index)
    target.router.add_get("/health", readyz)
    add_login_routes(target, guard, PAGE)  # /ui itself, its login form, the icon
    target.router.add_get("/ui/scoreboard.json", board)
    target.router.add_get("/ui/failures.json", failures)
    target.router.add_get("/ui/worker.json", reading)
    add_review_routes(target, proxy_app, guard, lambda r: inspector_allowed(r, admin, guard))
