"""Primary latency with and without a shadow upstream, on loopback.

Three scenarios against the same fast fake primary backend: no shadow, a fast shadow, and a
slow shadow (``--slow-ms``, 200 ms by default; ``max_concurrency`` 64). Each runs
``--requests`` graded chat completions at 1 and at 8 concurrent connections and reports the
client-observed p50/p95 of the *primary* response and the ratio to the no-shadow run, plus the
proxy's CPU time per request. The primary backend, the
shadow backends and each proxy run in processes of their own, so no event loop is shared; the
scenarios are measured in interleaved rounds, so drifting background load hits them alike.

    .venv/bin/python bench/shadow_bench.py [--requests 2000] [--rounds 5] [--slow-ms 200]

Latency is measured here only: the test suite asserts no timings.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from grader.json import dumps  # noqa: E402

TASK = (
    b'{"id":"weather.single","expected":{"name":"get_weather","arguments":'
    b'{"city":"Z\xc3\xbcrich","unit":"celsius"}},"metadata":{"mutationKind":"field_renamed"}}\n'
)
REQUEST = dumps(
    {"model": "prod-model", "messages": [{"role": "user", "content": "weather in Zürich?"}]}
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
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            server: Any = site._server
            ports.append(server.sockets[0].getsockname()[1])
        conn.send(ports)
        await asyncio.Event().wait()

    asyncio.run(main())


def run_proxy(conn: Connection, upstream: str, shadow: str | None, work: str) -> None:
    """Child process: the proxy, with or without a shadow; sends its port."""
    from proxy.app import make_app
    from proxy.config import load_config
    from proxy.logs import configure_logging
    from proxy.serve import bound_port, start_sites

    async def main() -> None:
        configure_logging("error", "json")
        upstream_section: dict[str, Any] = {"url": upstream}
        if shadow is not None:
            upstream_section["shadow"] = {"url": shadow, "max_concurrency": 64, "timeout_s": 10}
        config = load_config(
            None,
            {
                "upstream": upstream_section,
                "listen": {"host": "127.0.0.1", "port": 0},
                "tasks": {"path": f"{work}/tasks.jsonl"},
                "results": {"path": f"{work}/grades.jsonl", "answer": "drop"},
                "logging": {"level": "error"},
            },
            environ={},
        )
        app = make_app(config)
        _, sites = await start_sites(config, app)
        await asyncio.sleep(0.5)  # the task set loads in the background
        conn.send(bound_port(sites[0]))
        await asyncio.Event().wait()

    asyncio.run(main())


async def measure(url: str, requests: int, connections: int) -> list[float]:
    """Client-observed latency of each request (seconds), ``connections`` at a time."""
    latencies: list[float] = []
    headers = {"X-Grade-Task": "weather.single", "Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(connector=connector) as session:
        for _ in range(WARM_UP):  # connections, caches
            async with session.post(url, data=REQUEST, headers=headers) as response:
                await response.read()
        counter = iter(range(requests))

        async def worker() -> None:
            for _ in counter:
                started = time.perf_counter()
                async with session.post(url, data=REQUEST, headers=headers) as response:
                    body = await response.read()
                latencies.append(time.perf_counter() - started)
                assert body == RESPONSE, "the primary's bytes changed"

        await asyncio.gather(*(worker() for _ in range(connections)))
    return latencies


async def shadow_counts(base: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    async with aiohttp.ClientSession() as session, session.get(f"{base}/metrics") as response:
        text = await response.text()
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "gradeproxy_shadow_requests_total" and sample.value:
                counts[sample.labels["result"]] = sample.value
    return counts


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU time of a process (Linux /proc), or None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=2000, help="per scenario and concurrency")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (noise control)")
    parser.add_argument("--slow-ms", type=float, default=200.0)
    args = parser.parse_args()
    ctx = multiprocessing.get_context("spawn")
    # The primary's backend has a process of its own, as a real candidate is another server.
    urls: list[str] = []
    backends = []
    for kinds in (("fast",), ("fast", "slow")):
        ours, theirs = ctx.Pipe()
        process = ctx.Process(
            target=run_backends, args=(theirs, args.slow_ms / 1000, kinds), daemon=True
        )
        process.start()
        backends.append(process)
        urls += [f"http://127.0.0.1:{port}/v1" for port in ours.recv()]
    primary, fast_shadow, slow_shadow = urls
    scenarios = [("no shadow", None), ("fast shadow", fast_shadow),
                 (f"slow shadow ({args.slow_ms:g} ms)", slow_shadow)]  # fmt: skip
    latencies: dict[tuple[str, int], list[float]] = {
        (name, c): [] for name, _ in scenarios for c in CONCURRENCY
    }
    with tempfile.TemporaryDirectory() as work:
        bases: dict[str, str] = {}
        proxies = []
        for number, (name, shadow) in enumerate(scenarios):
            folder = Path(work, str(number))
            folder.mkdir()
            (folder / "tasks.jsonl").write_bytes(TASK)
            ours, theirs = ctx.Pipe()
            proxy = ctx.Process(
                target=run_proxy, args=(theirs, primary, shadow, str(folder)), daemon=True
            )
            proxy.start()
            proxies.append(proxy)
            bases[name] = f"http://127.0.0.1:{ours.recv()}"
        start_cpu = {
            name: cpu_seconds(p.pid) for (name, _), p in zip(scenarios, proxies, strict=True)
        }
        # Interleaved rounds: background load drifting over minutes hits every cell alike.
        per_round = max(args.requests // args.rounds, 1)
        for _ in range(args.rounds):
            for name, _ in scenarios:
                for connections in CONCURRENCY:
                    url = f"{bases[name]}/v1/chat/completions"
                    latencies[(name, connections)] += asyncio.run(
                        measure(url, per_round, connections)
                    )
        notes = {name: asyncio.run(shadow_counts(bases[name])) for name, _ in scenarios}
        cpu: dict[str, float | None] = {}
        for (name, _), proxy in zip(scenarios, proxies, strict=True):
            end, start = cpu_seconds(proxy.pid), start_cpu[name]
            cpu[name] = None if end is None or start is None else end - start
        for proxy in proxies:
            proxy.terminate()
            proxy.join()
    for process in backends:
        process.terminate()
    total = per_round * args.rounds
    print(f"primary latency, ms: {total} requests per cell in {args.rounds} interleaved rounds")
    print(f"{'scenario':<24} {'conns':>5} {'p50':>8} {'p95':>8} {'p50 ×':>7} {'p95 ×':>7}")
    for name, _ in scenarios:
        for connections in CONCURRENCY:
            cell, base = latencies[(name, connections)], latencies[(scenarios[0][0], connections)]
            p50, p95 = quantile(cell, 0.5), quantile(cell, 0.95)
            b50, b95 = quantile(base, 0.5), quantile(base, 0.95)
            print(
                f"{name:<24} {connections:>5} {p50 * 1000:>8.3f} {p95 * 1000:>8.3f}"
                f" {p50 / b50:>7.2f} {p95 / b95:>7.2f}"
            )
    served = (per_round + WARM_UP) * args.rounds * len(CONCURRENCY)
    for name, counts in notes.items():
        used = cpu[name]
        per_request = f"{used / served * 1e6:.0f} µs" if used is not None else "n/a"
        shadows = f", shadow requests {dict(sorted(counts.items()))}" if counts else ""
        print(f"{name}: proxy CPU per request {per_request}{shadows}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
