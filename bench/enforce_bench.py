"""What enforce mode costs a client: enforced answers, text streams and throughput against off.

One fake backend process and three proxy processes, all on loopback and each with an event loop
of its own: ``off`` (no policy file), ``block`` (a route policy forbidding ``delete_*`` and
validating arguments against the request's tools, mode ``block``) and ``observe`` (the same
policy observed). Measured in one run, rounds interleaved so drifting load hits all alike:

* time to the last byte of a non-streamed tool-call answer, p50 and p99: ``off``, ``block``
  judging a call that passes (the answer is sent as it came), and ``block`` withholding one
  (the answer rewritten); the ratios are against ``off``;
* time to the first byte of a text-only stream (the backend sends its first event at once, the
  rest 2 ms apart) under the active ``block`` policy against ``off``: the hold-back never holds
  text, so the goal is equal within noise;
* throughput (requests per second) at ``--concurrency`` connections (16) with the route policy
  in ``observe`` against ``off``.

    .venv/bin/python bench/enforce_bench.py [--requests 400] [--rounds 3] [--concurrency 16]

Figures and where they were measured: docs/enforce.md. The test suite asserts no timings.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
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

from _loopback import listen, quantile, run_proxy  # noqa: E402

from grader.json import dumps  # noqa: E402

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
REQUEST = dumps(
    {"model": "prod-model", "messages": [{"role": "user", "content": "hi"}], "tools": TOOLS}
)
STREAM_REQUEST = dumps({"model": "prod-model", "stream": True, "messages": []})


def _answer(name: str) -> bytes:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": name, "arguments": '{"city":"Zürich","unit":"celsius"}'},
    }
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
    return dumps({"id": "c1", "object": "chat.completion", "model": "m", "choices": [choice]})


PASSING = _answer("get_weather")
BLOCKED = _answer("delete_payment")
TEXT_EVENTS = [
    b"data: "
    + dumps({"id": "c1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": d}]})
    + b"\n\n"
    for d in [{"role": "assistant", "content": "It"}, *({"content": " is"} for _ in range(8))]
] + [b"data: [DONE]\n\n"]
POLICY = """policies:
  - name: tools
    checks:
      - {type: policy, name: no_delete, forbidden_calls: ["delete_*"]}
      - {type: json_schema, name: request_schema, schema: from_request}
    enforce: {mode: MODE, budget_ms: 20}
"""


def run_backend(conn: Connection) -> None:
    """Child process: answers by path; sends its port."""

    async def answer(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if b'"stream":true' in body:
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            for event in TEXT_EVENTS:
                await response.write(event)
                await asyncio.sleep(0.002)
            await response.write_eof()
            return response
        blocked = request.query.get("call") == "delete"
        return web.Response(body=BLOCKED if blocked else PASSING, content_type="application/json")

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", answer)
        conn.send(await listen(app))
        await asyncio.Event().wait()

    asyncio.run(main())


def sections(upstream: str, mode: str | None, work: str) -> dict[str, Any]:
    """The proxy's config, with the route policy in ``mode`` (None: no policy file)."""
    config: dict[str, Any] = {
        "upstream": {"url": upstream},
        "listen": {"host": "127.0.0.1", "port": 0},
        "results": {"path": f"{work}/grades-{mode}.jsonl", "answer": "drop"},
        "logging": {"level": "error"},
    }
    if mode is not None:
        policy = Path(work) / f"policy-{mode}.yaml"
        policy.write_text(POLICY.replace("MODE", mode))
        config["enforce"] = {"path": str(policy)}
    return config


async def last_byte(session: aiohttp.ClientSession, url: str, requests: int) -> list[float]:
    """Time to the last byte of each non-streamed request, one at a time."""
    times = []
    for _ in range(requests):
        started = time.perf_counter()
        async with session.post(url, data=REQUEST) as response:
            await response.read()
        times.append(time.perf_counter() - started)
    return times


async def first_byte(session: aiohttp.ClientSession, url: str, requests: int) -> list[float]:
    """Time to the first body byte of a text-only stream."""
    times = []
    for _ in range(requests):
        started = time.perf_counter()
        async with session.post(url, data=STREAM_REQUEST) as response:
            await response.content.readany()
            times.append(time.perf_counter() - started)
            await response.read()
    return times


async def throughput(url: str, requests: int, connections: int) -> float:
    """Requests per second with ``connections`` clients at once."""
    connector = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(connector=connector) as session:
        counter = iter(range(requests))

        async def worker() -> None:
            for _ in counter:
                async with session.post(url, data=REQUEST) as response:
                    await response.read()

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(connections)))
        return requests / (time.perf_counter() - started)


async def measure(ports: dict[str, int], args: argparse.Namespace) -> dict[str, list[float]]:
    base = {name: f"http://127.0.0.1:{port}/v1/chat/completions" for name, port in ports.items()}
    samples: dict[str, list[float]] = {}
    async with aiohttp.ClientSession() as session:
        for url in base.values():  # warm-up: connections, caches, the first judge
            await last_byte(session, url, 30)
            await first_byte(session, url, 10)
        for _ in range(args.rounds):
            plan = [
                ("ttlb off", last_byte, base["off"]),
                ("ttlb block, judged and passed", last_byte, base["block"]),
                ("ttlb block, call withheld", last_byte, base["block"] + "?call=delete"),
                ("ttfb text stream off", first_byte, base["off"]),
                ("ttfb text stream block", first_byte, base["block"]),
            ]
            for name, how, url in plan:
                samples.setdefault(name, []).extend(await how(session, url, args.requests))
    for _ in range(args.rounds):
        for name in ("off", "observe"):
            rate = await throughput(base[name], args.requests * 2, args.concurrency)
            samples.setdefault(f"rps c={args.concurrency} {name}", []).append(rate)
    return samples


def report(samples: dict[str, list[float]], concurrency: int) -> None:
    print(f"{'scenario':<34} {'p50 ms':>9} {'p99 ms':>9} {'p50 ratio':>10} {'p99 ratio':>10}")
    anchors = {"ttlb": "ttlb off", "ttfb": "ttfb text stream off"}
    for name, values in samples.items():
        if name.startswith("rps"):
            continue
        anchor = samples[anchors[name[:4]]]
        p50, p99 = quantile(values, 0.5), quantile(values, 0.99)
        r50, r99 = p50 / quantile(anchor, 0.5), p99 / quantile(anchor, 0.99)
        print(f"{name:<34} {p50 * 1000:>9.3f} {p99 * 1000:>9.3f} {r50:>10.3f} {r99:>10.3f}")
    off = statistics.median(samples[f"rps c={concurrency} off"])
    observe = statistics.median(samples[f"rps c={concurrency} observe"])
    print(f"throughput c={concurrency}: off {off:.0f} rps, observe {observe:.0f} rps, "
          f"ratio {observe / off:.3f} (median of rounds)")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=400, help="per scenario and round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (noise control)")
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    ctx = multiprocessing.get_context("spawn")
    processes = []
    ours, theirs = ctx.Pipe()
    backend = ctx.Process(target=run_backend, args=(theirs,), daemon=True)
    backend.start()
    processes.append(backend)
    upstream = f"http://127.0.0.1:{ours.recv()}/v1"
    ports: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as work:
        for name, mode in (("off", None), ("block", "block"), ("observe", "observe")):
            ours, theirs = ctx.Pipe()
            config = sections(upstream, mode, work)
            # Not daemonic: the proxy starts its grading process (docs in bench/_loopback.py).
            proxy = ctx.Process(target=run_proxy, args=(theirs, config))
            proxy.start()
            processes.append(proxy)
            ports[name] = ours.recv()
        try:
            samples = asyncio.run(measure(ports, args))
        finally:
            for process in processes:
                process.terminate()
                process.join()
    report(samples, args.concurrency)
    return 0


if __name__ == "__main__":
    sys.exit(main())
