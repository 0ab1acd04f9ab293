"""Soak: a bounded run of mixed traffic through ``gradeproxy serve`` on loopback.

Not a test: it prints what an operator checks before production. RSS of the proxy process at
start and end (flat is the goal), rows written against requests graded (equal is the goal: no
graded row lost), and every error (statuses other than 200, grading errors, client timeouts).
The traffic mixes plain and streamed graded completions, ungraded requests, clients that leave
before their answer, oversized declared bodies and dot-segment targets, all bounded in count
(``--requests``) and time (``--seconds``), against the fast fake backend of bench/_servers.py.

With ``--warmup S``, traffic runs S seconds before the RSS baseline is read, so the figure is
growth after warm-up (allocator pools, caches and the first rotation filled): "flat" is under
5% over the ``--seconds`` that follow (bench/perf.py runs it so).

Run: ``python bench/soak.py [--requests 4000] [--seconds 60] [--concurrency 16] [--warmup 0]``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
from _perf_load import GRADED, TASK
from prometheus_client.parser import text_string_to_metric_families
from yarl import URL

ROOT = Path(__file__).resolve().parents[1]
PLAIN = b'{"model":"bench-model","messages":[{"role":"user","content":"Weather?"}]}'
STREAM = b'{"model":"bench-model","stream":true,"messages":[{"role":"user","content":"W?"}]}'


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


@contextlib.contextmanager
def process(
    argv: list[str], port: int, env: dict[str, str], log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            time.sleep(0.05)
        else:
            raise RuntimeError(f"{argv[2:]} did not start")
        yield child
    finally:
        child.terminate()
        child.wait(60)


async def one(session: aiohttp.ClientSession, base: str, kind: str) -> str:
    """Send one request of ``kind``; return an outcome label for the tally."""
    url = f"{base}/v1/chat/completions"
    if kind == "leave_early":
        with contextlib.suppress(TimeoutError, aiohttp.ClientError):
            async with asyncio.timeout(0.005):
                async with session.post(url, data=STREAM, headers=GRADED) as response:
                    await response.content.readany()
        return "left_early"
    if kind == "oversized":
        headers = {**GRADED, "Content-Length": str(10**9)}
        async with session.post(url, data=b"x" * 10, headers=headers) as response:
            return str(response.status)
    if kind == "dot_segment":
        # encoded=True: yarl would otherwise resolve the dots itself before sending.
        async with session.get(URL(f"{base}/v1/%2e%2e/metrics", encoded=True)) as response:
            return str(response.status)
    headers = GRADED if kind != "ungraded" else {}
    body = STREAM if kind == "stream" else PLAIN
    async with session.post(url, data=body, headers=headers) as response:
        await response.read()
        return str(response.status)


KINDS = ["plain"] * 5 + ["stream"] * 4 + ["ungraded", "leave_early", "oversized", "dot_segment"]
EXPECTED = {"plain": "200", "stream": "200", "ungraded": "200", "oversized": "413"}


async def drive(base: str, total: int, seconds: float, concurrency: int) -> dict[str, int]:
    tally: collections.Counter[str] = collections.Counter()
    rng = random.Random(7)
    deadline = time.monotonic() + seconds
    left = total  # kinds drawn as workers need them: a long soak holds no plan in memory
    connector = aiohttp.TCPConnector(limit=concurrency)

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal left
        while time.monotonic() < deadline and left > 0:
            left -= 1
            kind = rng.choice(KINDS)
            try:
                outcome = await one(session, base, kind)
            except (aiohttp.ClientError, TimeoutError) as exc:
                outcome = f"client_error:{type(exc).__name__}"
            expected = EXPECTED.get(kind, "400" if kind == "dot_segment" else "left_early")
            tally[f"{kind}:{'ok' if outcome == expected else outcome}"] += 1

    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return dict(tally)


async def metrics(base: str) -> dict[str, float]:
    async with aiohttp.ClientSession() as session, session.get(f"{base}/metrics") as response:
        text = await response.text()
    sums: dict[str, float] = collections.defaultdict(float)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("gradeproxy_") and sample.name.endswith("_total"):
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                sums[f"{sample.name}{{{labels}}}"] += sample.value
                sums[sample.name] += sample.value
    return sums


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--warmup", type=float, default=0.0, help="seconds before the RSS baseline")
    args = parser.parse_args()
    backend_port, proxy_port = free_port(), free_port()
    with tempfile.TemporaryDirectory() as tmp:
        tasks, results = Path(tmp) / "tasks.jsonl", Path(tmp) / "grades.jsonl"
        tasks.write_text(TASK)
        config = Path(tmp) / "proxy.yaml"
        config.write_text(
            f"upstream:\n  url: http://127.0.0.1:{backend_port}/v1\n"
            f"listen:\n  port: {proxy_port}\n"
            f"tasks:\n  path: {tasks}\n"
            f"results:\n  path: {results}\n"
            "limits:\n  max_body_bytes: 1048576\n"
            "shutdown:\n  drain_delay_s: 0\n  grace_period_s: 10\n"
            "logging:\n  level: warning\n"
        )
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        backend = [sys.executable, str(ROOT / "bench" / "_servers.py"), "backend"]
        serve = [sys.executable, "-m", "gradeproxy.cli", "serve", "--config", str(config)]
        base = f"http://127.0.0.1:{proxy_port}"
        proxy_log = Path(tmp) / "proxy.log"
        with (
            process([*backend, str(backend_port)], backend_port, env, Path(tmp) / "backend.log"),
            process(serve, proxy_port, env, proxy_log) as proxy,
        ):
            if args.warmup > 0:
                asyncio.run(drive(base, 10**9, args.warmup, args.concurrency))
            rss_start = rss_mib(proxy.pid)
            started = time.monotonic()
            tally = asyncio.run(drive(base, args.requests, args.seconds, args.concurrency))
            took = time.monotonic() - started
            time.sleep(1.0)  # let the grade queue finish
            rss_end = rss_mib(proxy.pid)
            counted = asyncio.run(metrics(base))
            proxy.terminate()
            proxy.wait(60)
        logged = proxy_log.read_text(errors="replace").splitlines()
        # The file and its rotated backups (grades.jsonl.1 ...): at 100 MiB it rotates (about
        # 80,000 rows with the answers kept), and every row written counts.
        rows = sum(
            len(part.read_bytes().splitlines())
            for part in results.parent.glob(f"{results.name}*")
            if part.name == results.name or part.name[len(results.name) + 1 :].isdigit()
        )
    sent = sum(tally.values())
    graded = counted.get("gradeproxy_grades_total", 0.0)
    print(
        f"soak: {sent} requests in {took:.1f} s ({sent / took:.0f}/s), concurrency {args.concurrency}"
    )
    growth = 100 * (rss_end - rss_start) / rss_start
    print(
        f"proxy RSS: start {rss_start:.1f} MiB, end {rss_end:.1f} MiB ({rss_end - rss_start:+.1f}, "
        f"{growth:+.2f}% after {args.warmup:g} s of warm-up)"
    )
    print(
        f"rows written {rows}, requests graded {graded:.0f} ({'equal' if rows == graded else 'DIFFERENT'})"
    )
    for outcome, count in sorted(tally.items()):
        print(f"  {outcome:32} {count}")
    for name in (
        "gradeproxy_grading_errors_total",
        "gradeproxy_client_timeouts_total",
        "gradeproxy_upstream_errors_total",
    ):
        print(f"{name}: {counted.get(name, 0.0):.0f}")
    for key in sorted(k for k in counted if k.startswith("gradeproxy_grading_skipped_total{")):
        if counted[key]:
            print(f"  {key} {counted[key]:.0f}")
    errors = [line for line in logged if "Traceback" in line or '"level":"error"' in line]
    print(f"proxy log error lines: {len(errors)} (exit code {proxy.returncode})")
    for line in errors[:5]:
        print(f"  {line[:200]}")


if __name__ == "__main__":
    main()
