"""``gradeproxy demo``: the proxy, the demo backend and sample traffic, in one command.

It starts the deterministic demo backend and the proxy on loopback, drives every sample task
through the proxy with the official ``openai`` SDK (streamed and not, two models), waits for
the grade queue, prints what was graded and a scoreboard read back from ``/metrics`` (the same
numbers a Prometheus scrape sees), then keeps serving so you can point your own client at it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from grader.json import loads_exact
from grader.rounding import percent
from grader.tasks import task_files
from proxy.app import make_app
from proxy.config import Config, ConfigError, load_config
from proxy.demo.answers import SAMPLE_TASKS_PATH
from proxy.demo.backend import DEMO_MODELS, make_demo_backend
from proxy.demo.start import (
    DemoStartError,
    ResultsClaim,
    check_tasks,
    fail,
    hold_port,
    serve_backend,
    stop_on_signals,
)
from proxy.listeners import ListenError, held_port
from proxy.logs import configure_logging
from proxy.serve import StartupError, bound_port, hold_ports, shutdown, start_sites
from proxy.state import QUEUE

CONCURRENCY = 8
DEMO_FLAGS = {"listen.host": "--host", "listen.port": "--port", "results.path": "--results"}
OPENAI_HINT = "the demo drives traffic with the openai SDK: pip install 'gradeproxy[demo]'"


def run(name: str, args: argparse.Namespace) -> int:
    tasks_path: Path = args.tasks or SAMPLE_TASKS_PATH
    try:
        check_tasks(tasks_path)
    except DemoStartError as exc:
        return fail(name, exc)
    if name == "demo-backend":
        configure_logging("info", "json")
        app = make_demo_backend(tasks_path)
        try:
            asyncio.run(serve_backend(app, args.host, args.port, tasks_path))
        except DemoStartError as exc:
            return fail(name, exc)
        return 0
    # Only the traffic driver needs the SDK; the backend above runs without the [demo] extra.
    if importlib.util.find_spec("openai") is None:
        print(f"gradeproxy demo: {OPENAI_HINT}", file=sys.stderr)
        return 1
    configure_logging("warning", "json")
    try:
        asyncio.run(demo(args, tasks_path))
    except (DemoStartError, StartupError) as exc:
        return fail(name, exc)
    except ConfigError as exc:
        return fail(name, f"config error: {exc}")
    return 0


async def demo(args: argparse.Namespace, tasks_path: Path) -> None:
    stop = asyncio.Event()
    stop_on_signals(asyncio.get_running_loop(), stop)  # also while the traffic runs
    results: Path = args.results
    # The upstream is the backend's, known once its port is held.
    config = _config(args, tasks_path, "http://127.0.0.1:9/v1")
    # Both ports first, the results file last: a second demo started by mistake stops here.
    # The backend stays on loopback even when the proxy listens on 0.0.0.0 (the Docker image).
    backend_sockets = hold_port("127.0.0.1", args.backend_port, "--backend-port")
    try:
        held = hold_ports(config)
    except ListenError as exc:
        for sock in backend_sockets:
            sock.close()
        raise DemoStartError(f"--port: {exc}") from None
    try:
        claim = ResultsClaim(results)
    except DemoStartError:
        held.close()
        for sock in backend_sockets:
            sock.close()
        raise
    claim.start_fresh()
    backend = web.AppRunner(make_demo_backend(tasks_path), access_log=None)
    await backend.setup()
    for sock in backend_sockets:
        await web.SockSite(backend, sock).start()
    upstream = f"http://127.0.0.1:{held_port(backend_sockets)}/v1"
    config = _config(args, tasks_path, upstream)
    app = make_app(config)
    runners, sites = await start_sites(config, app, held)
    # Listening on every address (the Docker image): drive and print through loopback.
    host = "127.0.0.1" if args.host in ("0.0.0.0", "::", "") else args.host
    base = f"http://{host}:{bound_port(sites[0])}"
    print(f"gradeproxy demo: proxy {base}/v1 -> demo backend {upstream}\n", flush=True)
    # With inbound keys set (GRADEPROXY_AUTH_KEYS_ENV), the demo's own client sends the first.
    key = next(iter(config.inbound_secrets()), "demo-key")
    driving = asyncio.ensure_future(_drive(base, tasks_path, args.rounds, key))
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait([driving, stopping], return_when=asyncio.FIRST_COMPLETED)
    if not driving.done():
        driving.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await driving
    else:
        stopping.cancel()
        driving.result()
        await app[QUEUE].drain(30)
        _print_rows(results)
        print(await _scoreboard(base, key), flush=True)
    if not args.exit and not stop.is_set():
        print(
            f"\nServing. Point any OpenAI client at base_url={base}/v1 and send the header "
            f"'X-Grade-Task: <task id>' (ids in {tasks_path}).\n"
            f"Live page (scoreboard, failure inspector): {base}/ui\n"
            f"Metrics: {base}/metrics   Results: {results}   Stop: Ctrl-C",
            flush=True,
        )
        await stop.wait()
    await shutdown(config, app, runners)
    await backend.cleanup()
    claim.release()


def _config(args: argparse.Namespace, tasks_path: Path, upstream: str) -> Config:
    overrides: dict[str, dict[str, Any]] = {
        "upstream": {"url": upstream},
        "tasks": {"path": str(tasks_path)},
        "listen": {"host": args.host, "port": args.port},
        "results": {"path": str(args.results)},
        "shutdown": {"drain_delay_s": 0.0, "grace_period_s": 10.0},
        "logging": {"level": "warning"},
    }
    return load_config(None, overrides, flags=DEMO_FLAGS)


async def _drive(base: str, tasks_path: Path, rounds: int, key: str) -> None:
    import openai  # the [demo] extra; run() checked it is installed

    files = task_files(tasks_path)
    lines = [line for f in files for line in f.read_text().splitlines() if line.strip()]
    tasks = [t for t in map(loads_exact, lines) if "prompt" in t and "tools" in t]
    client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0)
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(number: int, task: dict[str, Any]) -> None:
        stream = number % 2 == 1
        model = DEMO_MODELS[number % len(DEMO_MODELS)]
        request: dict[str, Any] = {
            "model": model,
            "messages": [{"role": "user", "content": task["prompt"]}],
            "tools": task["tools"],
            "extra_headers": {"X-Grade-Task": task["id"], "X-Grade-Run": "demo"},
        }
        async with gate:
            if stream:
                chunks = await client.chat.completions.create(stream=True, **request)
                async for _ in chunks:
                    pass
            else:
                await client.chat.completions.create(**request)

    jobs = [one(n, task) for n, task in enumerate(tasks * rounds)]
    await asyncio.gather(*jobs)
    await client.close()


def _print_rows(results: Path) -> None:
    rows = [loads_exact(line) for line in results.read_text().splitlines() if line.strip()]
    print(f"graded {len(rows)} answers (first 12 shown; all rows in {results}):")
    for row in rows[:12]:
        mode = "stream" if row["stream"] else "json  "
        print(
            f"  {row['result']:<5} {mode} {row['model']:<21} {row['task_id']:<38}"
            f" {row['reason'][:60]}"
        )
    print()


async def _scoreboard(base: str, key: str) -> str:
    headers = {"Authorization": f"Bearer {key}"}
    async with (
        aiohttp.ClientSession(headers=headers) as session,
        session.get(f"{base}/metrics") as response,
    ):
        text = await response.text()
    kinds: dict[str, str] = {}
    grades: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "gradeproxy_task_info":
                kinds[sample.labels["task"]] = sample.labels["mutation_kind"]
            elif sample.name == "gradeproxy_grades_total":
                grades[sample.labels["task"]][sample.labels["result"]] += sample.value
    per_kind: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for task, results in grades.items():
        for result, count in results.items():
            per_kind[kinds.get(task, "none")][result] += count
            per_kind["TOTAL"][result] += count
    lines = [
        "scoreboard (read back from /metrics):",
        f"  {'mutation kind':<26} {'graded':>7} {'pass %':>7} {'stale %':>8}",
    ]
    for kind in [*sorted(k for k in per_kind if k != "TOTAL"), "TOTAL"]:
        counts = per_kind[kind]
        n = sum(counts.values())
        if n:
            lines.append(
                f"  {kind:<26} {int(n):>7} {percent(counts['pass'], n):>7}"
                f" {percent(counts['stale'], n):>8}"
            )
    return "\n".join(lines)
