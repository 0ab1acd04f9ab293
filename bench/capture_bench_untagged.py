"""Untagged traffic with capture off and on (``results.capture_untagged``), on loopback.

Three proxies in processes of their own against one fast fake backend (a process too): capture
off (the anchor: untagged requests are forwarded and counted, nothing more), capture of every
untagged request keeping the answer (``answer: keep``), and keeping only its hash
(``answer: hash``). Each runs ``--requests`` untagged chat completions (with tools) at 1 and at
8 concurrent connections, in interleaved rounds so drifting background load hits every cell
alike, and reports the client-observed p50/p95 and their ratio to the anchor, the proxy's CPU
time per request (the capture rows are built on the proxy's writer thread, so they are in it),
and the capture rows written, which must equal the requests sent. A fourth proxy grades the same
requests (a task header, capture off): the yardstick, since a graded request's copy is parsed
and its row written off the hot path the same way. Every response is checked
byte for byte against the backend's.

    .venv/bin/python bench/capture_bench_untagged.py [--requests 2000] [--rounds 5]

Latency is measured here only: the test suite asserts no timings.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from shadow_bench import RESPONSE, TASK, cpu_seconds, quantile, run_backends  # noqa: E402

from grader.json import dumps  # noqa: E402

REQUEST = dumps(
    {
        "model": "prod-model",
        "messages": [{"role": "user", "content": "weather in Zürich?"}],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                },
            }
        ],
    }
)
CONCURRENCY = (1, 8)
WARM_UP = 50
GRADED = {"X-Grade-Task": "weather.single"}
# (name, the results section, the request's headers): the anchor first; the graded requests
# are the yardstick capture must not exceed (the same copy, parsed off the hot path too).
SCENARIOS: tuple[tuple[str, dict[str, Any], dict[str, str]], ...] = (
    ("capture off", {"capture_untagged": 0.0}, {}),
    ("capture, answer: keep", {"capture_untagged": 1.0, "answer": "keep"}, {}),
    ("capture, answer: hash", {"capture_untagged": 1.0, "answer": "hash"}, {}),
    ("graded (task header)", {"capture_untagged": 0.0}, GRADED),
)


def run_proxy(conn: Connection, upstream: str, results: dict[str, Any], work: str) -> None:
    """Child process: the proxy with the scenario's ``results`` section; sends its port."""
    from proxy.app import make_app
    from proxy.config import load_config
    from proxy.logs import configure_logging
    from proxy.serve import bound_port, start_sites

    async def main() -> None:
        configure_logging("error", "json")
        config = load_config(
            None,
            {
                "upstream": {"url": upstream},
                "listen": {"host": "127.0.0.1", "port": 0},
                "tasks": {"path": f"{work}/tasks.jsonl"},
                "results": {"path": f"{work}/grades.jsonl", **results},
                "grading": {"isolation": "thread"},  # small answers are graded inline anyway
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


async def measure(url: str, requests: int, connections: int, given: dict[str, str]) -> list[float]:
    """Client-observed latency of each request (seconds), ``connections`` at a time."""
    latencies: list[float] = []
    headers = {"Content-Type": "application/json", **given}
    connector = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(connector=connector) as session:
        for _ in range(WARM_UP):
            async with session.post(url, data=REQUEST, headers=headers) as response:
                await response.read()
        counter = iter(range(requests))

        async def worker() -> None:
            for _ in counter:
                started = time.perf_counter()
                async with session.post(url, data=REQUEST, headers=headers) as response:
                    body = await response.read()
                latencies.append(time.perf_counter() - started)
                assert body == RESPONSE, "the response's bytes changed"

        await asyncio.gather(*(worker() for _ in range(connections)))
    return latencies


async def rows_written(base: str) -> float:
    async with aiohttp.ClientSession() as session, session.get(f"{base}/metrics") as response:
        text = await response.text()
    for line in text.splitlines():
        if line.startswith("gradeproxy_capture_rows_total "):
            return float(line.split()[1])
    return 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=2000, help="per scenario and concurrency")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (noise control)")
    args = parser.parse_args()
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = ctx.Pipe()
    backend = ctx.Process(target=run_backends, args=(theirs, 0.0, ("fast",)), daemon=True)
    backend.start()
    (port,) = ours.recv()
    upstream = f"http://127.0.0.1:{port}/v1"
    latencies: dict[tuple[str, int], list[float]] = {
        (name, c): [] for name, _, _ in SCENARIOS for c in CONCURRENCY
    }
    per_round = max(args.requests // args.rounds, 1)
    served = (per_round + WARM_UP) * args.rounds * len(CONCURRENCY)
    with tempfile.TemporaryDirectory() as work:
        bases: dict[str, str] = {}
        proxies = []
        for number, (name, results, _) in enumerate(SCENARIOS):
            folder = Path(work, str(number))
            folder.mkdir()
            (folder / "tasks.jsonl").write_bytes(TASK)
            ours, theirs = ctx.Pipe()
            proxy = ctx.Process(
                target=run_proxy, args=(theirs, upstream, results, str(folder)), daemon=True
            )
            proxy.start()
            proxies.append(proxy)
            bases[name] = f"http://127.0.0.1:{ours.recv()}"
        start_cpu = {
            name: cpu_seconds(p.pid) for (name, _, _), p in zip(SCENARIOS, proxies, strict=True)
        }
        for _ in range(args.rounds):
            for name, _, headers in SCENARIOS:
                for connections in CONCURRENCY:
                    url = f"{bases[name]}/v1/chat/completions"
                    latencies[(name, connections)] += asyncio.run(
                        measure(url, per_round, connections, headers)
                    )
        time.sleep(1.0)  # the writer thread finishes the last capture rows
        written = {name: asyncio.run(rows_written(bases[name])) for name, _, _ in SCENARIOS}
        cpu: dict[str, float | None] = {}
        for (name, _, _), proxy in zip(SCENARIOS, proxies, strict=True):
            end, start = cpu_seconds(proxy.pid), start_cpu[name]
            cpu[name] = None if end is None or start is None else end - start
        for proxy in proxies:
            proxy.terminate()
            proxy.join()
    backend.terminate()
    anchor = SCENARIOS[0][0]
    print(f"untagged requests, ms: {per_round * args.rounds} per cell in {args.rounds} rounds")
    print(f"{'scenario':<24} {'conns':>5} {'p50':>8} {'p95':>8} {'p50 ×':>7} {'p95 ×':>7}")
    for name, _, _ in SCENARIOS:
        for connections in CONCURRENCY:
            cell, base = latencies[(name, connections)], latencies[(anchor, connections)]
            p50, p95 = quantile(cell, 0.5), quantile(cell, 0.95)
            b50, b95 = quantile(base, 0.5), quantile(base, 0.95)
            print(
                f"{name:<24} {connections:>5} {p50 * 1000:>8.3f} {p95 * 1000:>8.3f}"
                f" {p50 / b50:>7.2f} {p95 / b95:>7.2f}"
            )
    failed = False
    for name, results, _ in SCENARIOS:
        used, anchor_cpu = cpu[name], cpu[anchor]
        per_request = f"{used / served * 1e6:.0f} µs" if used is not None else "n/a"
        ratio = f" ({used / anchor_cpu:.2f}× the anchor)" if used and anchor_cpu else ""
        wanted = served if results["capture_untagged"] else 0
        print(
            f"{name}: proxy CPU per request {per_request}{ratio}, capture rows {written[name]:.0f}"
        )
        if written[name] != wanted:
            print(f"  capture rows: {written[name]:.0f}, expected {wanted}", file=sys.stderr)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
