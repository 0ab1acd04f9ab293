"""Proxy hop cost: direct vs a minimal aiohttp pass-through vs gradeproxy, in one run.

Every response through gradeproxy is graded (a task header on every request) with metrics and
result rows on. Load comes from ``wrk`` in its own process; the process under test gets a CPU
of its own (taskset) while the backend and wrk share the other, so the subject is the
bottleneck. Streamed time to first byte is measured with a Python client against a backend that
pauses after its first chunk: a proxy that held a chunk back would add that pause.

Run: ``python bench/proxy_bench.py [--seconds 5]`` (needs wrk: ``apt-get install wrk``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import aiohttp
from _perf_load import litellm_argv

ROOT = Path(__file__).resolve().parents[1]
BODY = '{"model":"bench-model","messages":[{"role":"user","content":"Weather in Zurich?"}]}'
TASK = (
    '{"id":"bench.weather","expected":{"name":"get_weather","arguments":{"city":"Zurich",'
    '"unit":"celsius"}},"metadata":{"mutationKind":"field_renamed"}}\n'
)
CPUS = os.cpu_count() or 1


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def pinned(cpu: int, argv: list[str]) -> list[str]:
    if CPUS >= 2 and shutil.which("taskset"):
        return ["taskset", "-c", str(cpu % CPUS), *argv]
    return argv


@contextmanager
def server(argv: list[str], port: int, cpu: int) -> Iterator[None]:
    process = subprocess.Popen(
        pinned(cpu, argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            raise RuntimeError(f"{argv} did not start")
        time.sleep(0.3)
        yield
    finally:
        process.terminate()
        process.wait(10)


def wrk(url: str, connections: int, seconds: int, script: Path, cpu: int) -> dict[str, float]:
    out = subprocess.run(
        pinned(
            cpu,
            [
                "wrk",
                "-t1",
                f"-c{connections}",
                f"-d{seconds}s",
                "--latency",
                "-s",
                str(script),
                url,
            ],
        ),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    result = {"rps": rps}
    for pct in ("50", "99"):
        match = re.search(rf"^\s+{pct}%\s+([\d.]+)(us|ms|s)\s*$", out, re.MULTILINE)
        assert match is not None, out
        scale = {"us": 1e-3, "ms": 1.0, "s": 1e3}[match.group(2)]
        result[f"p{pct}_ms"] = float(match.group(1)) * scale
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    result["errors"] = float(errors.group(1)) if errors else 0.0
    return result


async def ttfb(url: str, samples: int) -> list[float]:
    times = []
    stream_body = BODY[:-1] + ',"stream":true}'
    async with aiohttp.ClientSession() as session:
        for _ in range(samples):
            start = time.perf_counter()
            async with session.post(
                url, data=stream_body, headers={"X-Grade-Task": "bench.weather"}
            ) as response:
                await response.content.readany()
                times.append(time.perf_counter() - start)
                await response.read()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--ttfb-samples", type=int, default=200)
    parser.add_argument(
        "--litellm",
        metavar="PATH",
        help="also measure LiteLLM's proxy (the path to its `litellm` executable, installed apart: "
        "python -m venv v && v/bin/pip install 'litellm[proxy]')",
    )
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk not found: apt-get install wrk")
    work = Path(tempfile.mkdtemp(prefix="gradeproxy-bench-"))
    script = work / "post.lua"
    escaped = BODY.replace('"', '\\"')
    script.write_text(
        f'wrk.method = "POST"\nwrk.body = "{escaped}"\n'
        'wrk.headers["Content-Type"] = "application/json"\nwrk.headers["X-Grade-Task"] = "bench.weather"\n'
    )
    plain = work / "plain.lua"  # the same request without the task header: forwarded, not graded
    plain.write_text(
        f'wrk.method = "POST"\nwrk.body = "{escaped}"\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
    )
    (work / "tasks.jsonl").write_text(TASK)
    backend_port, pass_port, proxy_port = free_port(), free_port(), free_port()
    upstream = f"http://127.0.0.1:{backend_port}/v1"
    servers = Path(__file__).with_name("_servers.py")
    config = work / "config.yaml"
    config.write_text(
        f"upstream:\n  url: {upstream}\nlisten:\n  port: {proxy_port}\n"
        f"tasks:\n  path: {work / 'tasks.jsonl'}\nresults:\n  path: {work / 'results.jsonl'}\n"
        "logging:\n  level: info\nshutdown:\n  drain_delay_s: 0\n"
    )
    print(
        f"gradeproxy proxy benchmark: {CPUS} CPUs, wrk {args.seconds}s per point, "
        f"subject pinned to CPU 1, backend and wrk on CPU 0\n"
    )
    subjects = {
        "direct": None,
        "pass-through": [sys.executable, str(servers), "passthrough", str(pass_port), upstream],
        "gradeproxy": [sys.executable, "-m", "grader.cli", "serve", "--config", str(config)],
    }
    ports = {"direct": backend_port, "pass-through": pass_port, "gradeproxy": proxy_port}
    if args.litellm:
        litellm_port = free_port()
        subjects["litellm"] = litellm_argv(args.litellm, work, upstream, litellm_port)
        ports["litellm"] = litellm_port
    results: dict[str, dict[int, dict[str, float]]] = {}
    stream_ttfb: dict[str, list[float]] = {}
    for name, argv in subjects.items():
        backend_cpu = 1 if name == "direct" else 0
        with server(
            [sys.executable, str(servers), "backend", str(backend_port)], backend_port, backend_cpu
        ):
            context = server(argv, ports[name], 1) if argv else _nothing()
            with context:
                url = f"http://127.0.0.1:{ports[name]}/v1/chat/completions"
                results[name] = {c: wrk(url, c, args.seconds, script, 0) for c in (1, 16)}
                stream_ttfb[name] = asyncio.run(ttfb(url, args.ttfb_samples))
                if name == "gradeproxy":
                    results["gradeproxy, ungraded"] = {
                        c: wrk(url, c, args.seconds, plain, 0) for c in (1, 16)
                    }
    rows = (
        sum(1 for _ in (work / "results.jsonl").open()) if (work / "results.jsonl").exists() else 0
    )
    print(
        f"{'non-streamed':<14} {'conn':>4} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'non-2xx':>8}"
    )
    for name, by_conn in results.items():
        for conn, r in by_conn.items():
            print(
                f"{name:<14} {conn:>4} {r['rps']:>9,.0f} {r['p50_ms']:>8.3f} {r['p99_ms']:>8.3f} {r['errors']:>8.0f}"
            )
    print()
    base, ours = results["pass-through"], results["gradeproxy"]
    for conn in (1, 16):
        print(
            f"throughput gradeproxy / pass-through at {conn:>2} conn: {ours[conn]['rps'] / base[conn]['rps']:.3f}"
            f"   (goal >= 0.95; every response graded, one JSON log line each)"
        )
        forwarded_only = results["gradeproxy, ungraded"][conn]["rps"] / base[conn]["rps"]
        print(f"  same, requests without a task header (forwarded only): {forwarded_only:.3f}")
    added_base = base[1]["p50_ms"] - results["direct"][1]["p50_ms"]
    added_ours = ours[1]["p50_ms"] - results["direct"][1]["p50_ms"]
    print(
        f"added p50 latency at 1 conn: pass-through {added_base:.3f} ms, gradeproxy {added_ours:.3f} ms, "
        f"ratio {added_ours / added_base if added_base > 0 else float('nan'):.2f}   (goal <= 1.1)"
    )
    if "litellm" in results:
        for conn in (1, 16):
            graded = ours[conn]["rps"] / results["litellm"][conn]["rps"]
            forwarded = (
                results["gradeproxy, ungraded"][conn]["rps"] / results["litellm"][conn]["rps"]
            )
            print(
                f"throughput gradeproxy / litellm at {conn:>2} conn: {graded:.1f}x graded, {forwarded:.1f}x forwarded only"
            )
    print(
        f"\nstreamed time to first byte, {args.ttfb_samples} sequential requests "
        f"(backend pauses {1000 * 0.02:.0f} ms after its first chunk):"
    )
    direct_p50 = statistics.median(stream_ttfb["direct"])
    for name, times in stream_ttfb.items():
        p50 = statistics.median(times)
        print(
            f"  {name:<14} p50 {1000 * p50:7.3f} ms   p95 {1000 * statistics.quantiles(times, n=20)[-1]:7.3f} ms"
            f"   vs direct {1000 * (p50 - direct_p50):+7.3f} ms"
        )
    print(f"\ngradeproxy graded {rows} responses into {work / 'results.jsonl'} during the run")


@contextmanager
def _nothing() -> Iterator[None]:
    yield


if __name__ == "__main__":
    main()
