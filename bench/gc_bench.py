"""The cyclic garbage collector's cost per forwarded request: CPython's defaults vs the app's.

One process runs the fake backend, the proxy app (``make_app``, served through the watched
runner as ``serve`` does) and a raw keep-alive HTTP client on loopback, and counts, through
``gc.callbacks``, the collections of each generation, their CPU time and the longest one, over
the same requests at ``--conns`` connections, first with CPython's defaults (threshold 700, the
heap not frozen) and then with the app's tuning (proxy/app.py's ``_collector``), alternated for
``--rounds``. The client and the backend allocate in the same process, so the absolute figures
are not the proxy's alone; the difference is the collector's. End-to-end CPU per request is
bench/ab.py's.

Run: ``python bench/gc_bench.py [--conns 16] [--requests 4000] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _servers
from aiohttp import web

from proxy.app import GC_YOUNG_THRESHOLD, make_app
from proxy.config import load_config
from proxy.logs import configure_logging
from proxy.pipeline.watchdog import WatchedRunner
from proxy.state import WATCHDOG

BODY = b'{"model":"bench-model","messages":[{"role":"user","content":"Weather in Zurich?"}]}'
REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
)


async def client(port: int, requests: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for _ in range(requests):
        writer.write(REQUEST)
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        await reader.readexactly(length)
    writer.close()


class Collections:
    """Per generation: how many collections, their CPU nanoseconds; and the longest one."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.ns = [0, 0, 0]
        self.longest_ns = 0
        self._started = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.thread_time_ns()
            return
        spent = time.thread_time_ns() - self._started
        self.count[info["generation"]] += 1
        self.ns[info["generation"]] += spent
        self.longest_ns = max(self.longest_ns, spent)


async def run(port: int, conns: int, requests: int) -> tuple[Collections, float]:
    """(the collections, CPU microseconds per request) of ``requests`` over ``conns``."""
    seen = Collections()
    gc.callbacks.append(seen)
    started = time.process_time()
    try:
        await asyncio.gather(*(client(port, requests // conns) for _ in range(conns)))
    finally:
        gc.callbacks.remove(seen)
    return seen, 1e6 * (time.process_time() - started) / requests


def defaults() -> None:
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)


def tuned() -> None:
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, 10, 10)


async def main(args: argparse.Namespace) -> int:
    configure_logging("info", "json")
    report = os.fdopen(os.dup(1), "w")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # the request lines, unread
    backend = web.Application()
    backend.router.add_route("*", "/v1/{tail:.*}", _servers.backend)
    backend_runner = web.AppRunner(backend, access_log=None)
    await backend_runner.setup()
    backend_site = web.TCPSite(backend_runner, "127.0.0.1", 0)
    await backend_site.start()
    backend_port = backend_site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    overrides = {
        "upstream": {"url": f"http://127.0.0.1:{backend_port}/v1"},
        "grading": {"isolation": "thread"},
    }
    app = make_app(load_config(None, overrides, environ={}))
    runner = WatchedRunner(app, app[WATCHDOG], access_log=None)
    await runner.setup()  # proxy/app.py's _collector has tuned the collector by now
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    await run(port, args.conns, args.conns * 50)  # warm: connections, caches
    got: dict[str, list[tuple[Collections, float]]] = {"defaults": [], "tuned": []}
    for _ in range(args.rounds):
        for name, setting in (("defaults", defaults), ("tuned", tuned)):
            setting()
            got[name].append(await run(port, args.conns, args.requests))
    await runner.cleanup()
    await backend_runner.cleanup()
    print(
        f"gc per forwarded request, c={args.conns}, {args.requests} requests x {args.rounds}:",
        file=report,
    )
    for name, runs in got.items():
        per_request = statistics.median(sum(seen.ns) / 1e3 / args.requests for seen, _ in runs)
        counts = [statistics.median(seen.count[g] for seen, _ in runs) for g in range(3)]
        longest = max(seen.longest_ns for seen, _ in runs) / 1e6
        cpu = statistics.median(cpu for _, cpu in runs)
        print(
            f"  {name:<8} collections gen0/1/2 {counts[0]:g}/{counts[1]:g}/{counts[2]:g},"
            f" gc {per_request:5.1f} us/request, longest {longest:6.2f} ms,"
            f" process CPU {cpu:5.0f} us/request (client and backend included)",
            file=report,
        )
    print(f"(one process; CPUs: {os.cpu_count()}, shared with other work)", file=report)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conns", type=int, default=16)
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    sys.exit(asyncio.run(main(parser.parse_args())))
