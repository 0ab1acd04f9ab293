"""The forwarding path's per-request pieces, before and after their trims, timed in one process.

Each pair runs the same inputs through the old way and the new one, interleaved, best of
``--repeat`` (the least disturbed run on a shared machine): the request log line through
structlog's processor chain and through orjson directly; the header filters of a base revision
(loaded from git) and of this tree; the per-request metric updates then (in-flight gauge up and
down, a skip counter through ``labels()``) and now; the request metrics through
prometheus_client's Counter and Histograms and through proxy/pipeline/record/request_series.py. The upstream client against aiohttp's is
bench/upstream_bench.py's; end-to-end CPU per request is bench/ab.py's.

Run: ``python bench/hotpath_bench.py [--base REV] [--repeat 7]``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import subprocess
import sys
import timeit
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from multidict import CIMultiDict, CIMultiDictProxy
from prometheus_client import CollectorRegistry, Counter, Histogram

from proxy.logs import configure_logging, get_logger, request_log
from proxy.pipeline import forward
from proxy.pipeline.record.metrics import (
    DURATION_BUCKETS,
    OVERHEAD_BUCKETS,
    TTFB_BUCKETS,
    ProxyMetrics,
)

ROOT = Path(__file__).resolve().parents[1]
FIELDS: dict[str, Any] = {
    "request_id": "8f14e45fceea167a5a36dedd4bea2543",
    "upstream_request_id": None,
    "method": "POST",
    "path": "/v1/chat/completions",
    "route": "chat_completions",
    "status": 200,
    "stream": False,
    "bytes": 403,
    "duration_ms": 1.234,
    "ttfb_ms": 0.987,
    "overhead_ms": 0.247,
    "task": None,
    "graded": False,
    "skip": "no_task_header",
    "upstream_failed": None,
    "client_disconnected": False,
    "cut": None,
    "capture_truncated": None,
    "pair_id": None,
    "trace_id": None,
}
SDK_HEADERS = [
    ("Host", "127.0.0.1:8080"),
    ("Accept-Encoding", "gzip, deflate"),
    ("Connection", "keep-alive"),
    ("Accept", "application/json"),
    ("Content-Type", "application/json"),
    ("User-Agent", "OpenAI/Python 1.99.0"),
    ("X-Stainless-Lang", "python"),
    ("X-Stainless-Package-Version", "1.99.0"),
    ("X-Stainless-Runtime", "CPython"),
    ("Authorization", "Bearer sk-client"),
    ("X-Grade-Task", "weather.single"),
    ("Content-Length", "82"),
]
UPSTREAM_HEADERS = [
    ("Content-Type", "application/json"),
    ("Content-Length", "403"),
    ("Date", "Tue, 01 Dec 2026 10:00:00 GMT"),
    ("Server", "Python/3.11 aiohttp/3.14.5"),
]
PRIVATE = (("x-grade-", "x-gradeproxy-", "X-Grade-Meta-"), ("X-Grade-Task", "X-Grade-Run"))


def old_forward(revision: str) -> types.ModuleType:
    """``proxy/pipeline/forward.py`` as it was at ``revision``, loaded as a module of its own."""
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{revision}:proxy/pipeline/forward.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    module = sys.modules["forward_at_base"] = types.ModuleType("forward_at_base")
    exec(compile(source, f"{revision}:forward.py", "exec"), module.__dict__)
    return module


def best_us(work: Callable[[], object], number: int, repeat: int) -> float:
    return 1e6 * min(timeit.repeat(work, number=number, repeat=repeat)) / number


def pair(name: str, old: Callable[[], object], new: Callable[[], object], repeat: int) -> str:
    number = 2000
    before, after = best_us(old, number, repeat), best_us(new, number, repeat)
    line = f"  {name:<46} {before:7.2f} us -> {after:7.2f} us   old/new {before / after:5.2f}x"
    print(line, file=sys.__stdout__)
    return line


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="5d53273", help="the revision before the trims")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    repeat = args.repeat
    print(f"per-request pieces, old (structlog chain, {args.base}'s filters, ...) vs this tree:")
    sink = io.BytesIO()
    with contextlib.redirect_stdout(io.TextIOWrapper(sink)):
        configure_logging("info", "json")
        chain = get_logger("gradeproxy.request")
        pair(
            "request log line",
            lambda: chain.info("request", **FIELDS),
            lambda: request_log.info("request", **FIELDS),
            repeat,
        )
    old = old_forward(args.base)
    incoming = CIMultiDictProxy(CIMultiDict(SDK_HEADERS))
    upstream = CIMultiDictProxy(CIMultiDict(UPSTREAM_HEADERS))
    for label, module in (("old", old), ("new", forward)):
        assert module.request_headers(incoming, *PRIVATE, None, "r") == forward.request_headers(
            incoming, *PRIVATE, None, "r"
        ), label  # the same headers either way
    pair(
        "request headers (12 from the OpenAI SDK)",
        lambda: old.request_headers(incoming, *PRIVATE, None, "r"),
        lambda: forward.request_headers(incoming, *PRIVATE, None, "r"),
        repeat,
    )
    pair(
        "response headers (4 from the upstream)",
        lambda: old.response_headers(upstream, "r"),
        lambda: forward.response_headers(upstream, "r"),
        repeat,
    )
    metrics = ProxyMetrics()

    def metrics_then() -> None:
        metrics.in_flight.inc()
        metrics.in_flight.dec()
        metrics.skipped.labels("no_task_header").inc()

    pair(
        "in-flight gauge + one skip count",
        metrics_then,
        lambda: metrics.skip("no_task_header"),
        repeat,
    )
    registry = CollectorRegistry()
    requests = Counter("r_total", "r", ["route", "code"], registry=registry)
    duration, ttfb, overhead = (
        Histogram(name, name, ["route"], buckets=buckets, registry=registry).labels("chat")
        for name, buckets in (("d", DURATION_BUCKETS), ("t", TTFB_BUCKETS), ("o", OVERHEAD_BUCKETS))
    )
    by_code = requests.labels("chat", "200")

    def request_metrics_then() -> None:  # prometheus_client's types, children cached
        by_code.inc()
        duration.observe(0.0123)
        ttfb.observe(0.0101)
        overhead.observe(0.0004)

    pair(
        "request metrics (counter + 3 histograms)",
        request_metrics_then,
        lambda: metrics.request_done("chat_completions", 200, 0.0123, 0.0101, 0.0004),
        repeat,
    )

    print(f"(one process, best of {repeat}; CPUs: {os.cpu_count()}, shared with other work)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
