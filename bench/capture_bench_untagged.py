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
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _loopback import interleaved, print_latencies, run_backends, served, start_proxies  # noqa: E402

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
GRADED = {"X-Grade-Task": "weather.single"}
THREAD = {"isolation": "thread"}  # small answers are graded inline anyway
# (name, the results section, the request's headers): the anchor first; the graded requests
# are the yardstick capture must not exceed (the same copy, parsed off the hot path too).
SCENARIOS: tuple[tuple[str, dict[str, Any], dict[str, str]], ...] = (
    ("capture off", {"capture_untagged": 0.0}, {}),
    ("capture, answer: keep", {"capture_untagged": 1.0, "answer": "keep"}, {}),
    ("capture, answer: hash", {"capture_untagged": 1.0, "answer": "hash"}, {}),
    ("graded (task header)", {"capture_untagged": 0.0}, GRADED),
)


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
    per_round = max(args.requests // args.rounds, 1)
    per_proxy = served(args.rounds, per_round)
    with tempfile.TemporaryDirectory() as work:
        proxies = start_proxies(
            ctx,
            work,
            [
                (name, {"upstream": {"url": upstream}, "results": results, "grading": THREAD})
                for name, results, _ in SCENARIOS
            ],
        )
        headers = {name: given for name, _, given in SCENARIOS}
        latencies = interleaved(proxies.bases, headers, REQUEST, args.rounds, per_round)
        time.sleep(1.0)  # the writer thread finishes the last capture rows
        written = {name: asyncio.run(rows_written(base)) for name, base in proxies.bases.items()}
        cpu = proxies.cpu_used()
        proxies.stop()
    backend.terminate()
    anchor = SCENARIOS[0][0]
    print(f"untagged requests, ms: {per_round * args.rounds} per cell in {args.rounds} rounds")
    print_latencies(latencies, list(proxies.bases))
    failed = False
    for name, results, _ in SCENARIOS:
        used, anchor_cpu = cpu[name], cpu[anchor]
        per_request = f"{used / per_proxy * 1e6:.0f} µs" if used is not None else "n/a"
        ratio = f" ({used / anchor_cpu:.2f}× the anchor)" if used and anchor_cpu else ""
        wanted = per_proxy if results["capture_untagged"] else 0
        print(
            f"{name}: proxy CPU per request {per_request}{ratio}, capture rows {written[name]:.0f}"
        )
        if written[name] != wanted:
            print(f"  capture rows: {written[name]:.0f}, expected {wanted}", file=sys.stderr)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
