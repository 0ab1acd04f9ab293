"""Proxies in processes of their own on loopback, timed from the client: the rig that
bench/shadow_bench.py and bench/capture_bench_untagged.py share (bench/enforce_bench.py its
servers and quantiles), so their figures are measured the same way.

A fake backend answering one tool call (:func:`run_backends`, fast or slow), one proxy process
per scenario (:func:`start_proxies`: no event loop shared, each in its own folder with
:data:`TASK`), and the client: every scenario at each of :data:`CONCURRENCY` connections in
interleaved rounds, so drifting background load hits every cell alike (:func:`interleaved`),
each response checked byte for byte against the backend's. :func:`print_latencies` reports
p50/p95 and their ratio to the anchor; :meth:`Proxies.cpu_used` over :func:`served` is each
proxy's CPU per request.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnContext, SpawnProcess
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from grader.json import dumps

TASK = (
    b'{"id":"weather.single","expected":{"name":"get_weather","arguments":'
    b'{"city":"Z\xc3\xbcrich","unit":"celsius"}},"metadata":{"mutationKind":"field_renamed"}}\n'
)
RESPONSE = dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "prod-model",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {
                                "name": "get_weather",
                                "arguments": '{"city":"Zürich","unit":"celsius"}',
                            },
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
    }
)
CONCURRENCY = (1, 8)
WARM_UP = 50

Latencies = dict[tuple[str, int], list[float]]


async def listen(app: web.Application) -> int:
    """Serves ``app`` on a free loopback port, without access logs; returns the port."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server: Any = site._server
    port: int = server.sockets[0].getsockname()[1]
    return port


def run_backends(conn: Connection, slow_s: float, kinds: tuple[str, ...]) -> None:
    """Child process: one fake backend per kind (``fast`` or ``slow``); sends their ports."""

    async def fast(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=RESPONSE, content_type="application/json")

    async def slow(request: web.Request) -> web.Response:
        await request.read()
        await asyncio.sleep(slow_s)
        return web.Response(body=RESPONSE, content_type="application/json")

    async def main() -> None:
        ports = []
        for handler in (fast if kind == "fast" else slow for kind in kinds):
            app = web.Application()
            app.router.add_post("/v1/chat/completions", handler)
            ports.append(await listen(app))
        conn.send(ports)
        await asyncio.Event().wait()

    asyncio.run(main())


def run_proxy(conn: Connection, sections: dict[str, Any]) -> None:
    """Child process: the proxy with config ``sections``; sends its port."""
    from proxy.app import make_app
    from proxy.config import load_config
    from proxy.logs import configure_logging
    from proxy.serve import bound_port, start_sites

    async def main() -> None:
        configure_logging("error", "json")
        config = load_config(None, sections, environ={})
        app = make_app(config)
        _, sites = await start_sites(config, app)
        await asyncio.sleep(0.5)  # task and policy files load in the background
        conn.send(bound_port(sites[0]))
        await asyncio.Event().wait()

    asyncio.run(main())


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU time of a process (Linux /proc), or None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Proxies:
    """The scenarios' proxies by name, in the scenarios' order: base URL, process, and the CPU
    seconds each had used once all were up (where :meth:`cpu_used` counts from)."""

    bases: dict[str, str]
    processes: dict[str, SpawnProcess]
    cpu_at_start: dict[str, float | None]

    def cpu_used(self) -> dict[str, float | None]:
        """Each proxy's CPU seconds since all were up; None off Linux."""
        used: dict[str, float | None] = {}
        for name, process in self.processes.items():
            end, began = cpu_seconds(process.pid), self.cpu_at_start[name]
            used[name] = None if end is None or began is None else end - began
        return used

    def stop(self) -> None:
        """Terminate every proxy (each stops its grading process); safe to call twice."""
        for process in self.processes.values():
            if process.is_alive():
                process.terminate()
            process.join()


def start_proxies(
    ctx: SpawnContext, work: str, scenarios: Sequence[tuple[str, dict[str, Any]]]
) -> Proxies:
    """Each scenario's proxy in a process of its own: the scenario's config sections, plus a
    folder under ``work`` with :data:`TASK` as its task file and its results file (the
    scenario's own ``results`` settings kept), a free loopback port and error logs only."""
    bases: dict[str, str] = {}
    processes: dict[str, SpawnProcess] = {}
    for number, (name, scenario) in enumerate(scenarios):
        folder = Path(work, str(number))
        folder.mkdir()
        (folder / "tasks.jsonl").write_bytes(TASK)
        sections = {
            **scenario,
            "listen": {"host": "127.0.0.1", "port": 0},
            "tasks": {"path": f"{folder}/tasks.jsonl"},
            "results": {"path": f"{folder}/grades.jsonl", **scenario.get("results", {})},
            "logging": {"level": "error"},
        }
        ours, theirs = ctx.Pipe()
        # Not daemonic: a daemonic process may not start children, and the proxy starts its
        # grading process (else every proxy waits 30 s and then grades nothing: grader_down).
        process = ctx.Process(target=run_proxy, args=(theirs, sections))
        process.start()
        processes[name] = process
        bases[name] = f"http://127.0.0.1:{ours.recv()}"
    start = {name: cpu_seconds(process.pid) for name, process in processes.items()}
    proxies = Proxies(bases, processes, start)
    # Stopped at exit too when a bench fails midway: multiprocessing joins non-daemonic
    # children at exit (its own atexit hook, registered earlier, so run after this one).
    atexit.register(proxies.stop)
    return proxies


async def measure(
    url: str, body: bytes, requests: int, connections: int, given: dict[str, str]
) -> list[float]:
    """Client-observed latency of each request (seconds), ``connections`` at a time."""
    latencies: list[float] = []
    headers = {"Content-Type": "application/json", **given}
    connector = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(connector=connector) as session:
        for _ in range(WARM_UP):  # connections, caches
            async with session.post(url, data=body, headers=headers) as response:
                await response.read()
        counter = iter(range(requests))

        async def worker() -> None:
            for _ in counter:
                started = time.perf_counter()
                async with session.post(url, data=body, headers=headers) as response:
                    answer = await response.read()
                latencies.append(time.perf_counter() - started)
                assert answer == RESPONSE, "the response's bytes changed"

        await asyncio.gather(*(worker() for _ in range(connections)))
    return latencies


def interleaved(
    bases: dict[str, str],
    headers: dict[str, dict[str, str]],
    body: bytes,
    rounds: int,
    per_round: int,
) -> Latencies:
    """``per_round`` chat completions (``body``, each scenario's ``headers``) per scenario and
    concurrency, in ``rounds`` rounds: every cell sees the same drift of background load."""
    latencies: Latencies = {(name, c): [] for name in bases for c in CONCURRENCY}
    for _ in range(rounds):
        for name, base in bases.items():
            for connections in CONCURRENCY:
                url = f"{base}/v1/chat/completions"
                latencies[(name, connections)] += asyncio.run(
                    measure(url, body, per_round, connections, headers[name])
                )
    return latencies


def served(rounds: int, per_round: int) -> int:
    """Requests each proxy served, warm-ups included: the divisor of its CPU time."""
    return (per_round + WARM_UP) * rounds * len(CONCURRENCY)


def quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def print_latencies(latencies: Latencies, names: Sequence[str]) -> None:
    """p50/p95 in ms of every cell and their ratio to the first name's at the same concurrency."""
    print(f"{'scenario':<24} {'conns':>5} {'p50':>8} {'p95':>8} {'p50 ×':>7} {'p95 ×':>7}")
    for name in names:
        for connections in CONCURRENCY:
            cell, base = latencies[(name, connections)], latencies[(names[0], connections)]
            p50, p95 = quantile(cell, 0.5), quantile(cell, 0.95)
            b50, b95 = quantile(base, 0.5), quantile(base, 0.95)
            print(
                f"{name:<24} {connections:>5} {p50 * 1000:>8.3f} {p95 * 1000:>8.3f}"
                f" {p50 / b50:>7.2f} {p95 / b95:>7.2f}"
            )
