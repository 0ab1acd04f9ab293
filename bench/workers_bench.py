"""Throughput of ``gradeproxy serve --workers 1`` against ``--workers 2``, in one run.

Every request is graded (a task header on each), with metrics and result rows on, as in
bench/proxy_bench.py. The subjects are measured in alternation (1, 2, 1, 2 …) so drift on a
shared machine hits both alike, and each round prints the ratio 2 workers ÷ 1 worker against the
1-worker figure of the same round. Nothing is pinned: two workers need two cores, and on a
two-core machine they share them with the fake backend and wrk, so the ratio here says that the
workers run and spread the load, not how they scale. Scaling needs a machine with cores to spare
(1/2/4/8 workers against the floor at the same counts): not measured where none is lent.

Run: ``python bench/workers_bench.py [--seconds 5] [--rounds 2]`` (needs wrk).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from proxy_bench import BODY, TASK, free_port, wrk

ROOT = Path(__file__).resolve().parents[1]
CONNECTIONS = (16, 64)


def consecutive_ports(count: int) -> int:
    while True:
        base = free_port()
        if base + count <= 65535 and all(_free(base + i) for i in range(1, count)):
            return base


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def wait_ready(url: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} never became ready")


def measure(
    work: Path, upstream: str, workers: int, seconds: int, script: Path
) -> dict[int, float]:
    port, admin = free_port(), consecutive_ports(workers)
    results = work / f"run-{workers}-{time.monotonic_ns()}" / "grades.jsonl"
    config = work / "config.yaml"
    config.write_text(
        f"upstream:\n  url: {upstream}\nlisten:\n  port: {port}\n  workers: {workers}\n"
        f"admin:\n  port: {admin}\ntasks:\n  path: {work / 'tasks.jsonl'}\n"
        f"results:\n  path: {results}\nlogging:\n  level: warning\n"
        "shutdown:\n  drain_delay_s: 0\n  grace_period_s: 5\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "grader.cli", "serve", "--config", str(config)],
        env=env,
        stdout=subprocess.DEVNULL,
    )
    try:
        for index in range(workers):
            wait_ready(f"http://127.0.0.1:{admin + index}/readyz")
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        figures = {}
        for connections in CONNECTIONS:
            result = wrk(url, connections, seconds, script, 0)
            if result["errors"]:
                raise RuntimeError(f"{result['errors']:.0f} non-2xx answers at {connections}")
            figures[connections] = result["rps"]
        return figures
    finally:
        process.terminate()
        if process.wait(60) != 0:
            raise RuntimeError("gradeproxy did not drain cleanly")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk not found: apt-get install wrk")
    work = Path(tempfile.mkdtemp(prefix="gradeproxy-workers-bench-"))
    escaped = BODY.replace('"', '\\"')
    script = work / "post.lua"
    script.write_text(
        f'wrk.method = "POST"\nwrk.body = "{escaped}"\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
        'wrk.headers["X-Grade-Task"] = "bench.weather"\n'
    )
    (work / "tasks.jsonl").write_text(TASK)
    backend_port = free_port()
    servers = Path(__file__).with_name("_servers.py")
    backend = subprocess.Popen(
        [sys.executable, str(servers), "backend", str(backend_port)], stdout=subprocess.DEVNULL
    )
    cpus = os.cpu_count() or 1
    print(f"gradeproxy --workers bench: {cpus} CPUs, nothing pinned, wrk {args.seconds}s a point")
    print("(backend, wrk and every worker share the machine: a ratio, not a scaling figure)\n")
    try:
        time.sleep(1.0)
        upstream = f"http://127.0.0.1:{backend_port}/v1"
        print(
            f"{'round':>5} {'conn':>4} {'1 worker req/s':>15} {'2 workers req/s':>16} {'ratio':>6}"
        )
        for number in range(1, args.rounds + 1):
            one = measure(work, upstream, 1, args.seconds, script)
            two = measure(work, upstream, 2, args.seconds, script)
            for connections in CONNECTIONS:
                a, b = one[connections], two[connections]
                print(f"{number:>5} {connections:>4} {a:>15,.0f} {b:>16,.0f} {b / a:>6.2f}")
    finally:
        backend.terminate()
        backend.wait(10)
    print("\nmany-core scaling (1/2/4/8 workers vs the floor): not measured here")


if __name__ == "__main__":
    main()
