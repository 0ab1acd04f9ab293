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
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _loopback import interleaved, print_latencies, run_backends, served, start_proxies  # noqa: E402

from grader.json import dumps  # noqa: E402

REQUEST = dumps(
    {"model": "prod-model", "messages": [{"role": "user", "content": "weather in Zürich?"}]}
)


def sections(primary: str, shadow: str | None) -> dict[str, Any]:
    """The proxy's config: graded answers dropped from the rows, with or without a shadow."""
    upstream: dict[str, Any] = {"url": primary}
    if shadow is not None:
        upstream["shadow"] = {"url": shadow, "max_concurrency": 64, "timeout_s": 10}
    return {"upstream": upstream, "results": {"answer": "drop"}}


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
    per_round = max(args.requests // args.rounds, 1)
    with tempfile.TemporaryDirectory() as work:
        proxies = start_proxies(
            ctx, work, [(name, sections(primary, shadow)) for name, shadow in scenarios]
        )
        # Interleaved rounds: background load drifting over minutes hits every cell alike.
        headers = {name: {"X-Grade-Task": "weather.single"} for name in proxies.bases}
        latencies = interleaved(proxies.bases, headers, REQUEST, args.rounds, per_round)
        notes = {name: asyncio.run(shadow_counts(base)) for name, base in proxies.bases.items()}
        cpu = proxies.cpu_used()
        proxies.stop()
    for process in backends:
        process.terminate()
    total = per_round * args.rounds
    print(f"primary latency, ms: {total} requests per cell in {args.rounds} interleaved rounds")
    print_latencies(latencies, list(proxies.bases))
    for name, counts in notes.items():
        used = cpu[name]
        per_request = (
            f"{used / served(args.rounds, per_round) * 1e6:.0f} µs" if used is not None else "n/a"
        )
        shadows = f", shadow requests {dict(sorted(counts.items()))}" if counts else ""
        print(f"{name}: proxy CPU per request {per_request}{shadows}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
