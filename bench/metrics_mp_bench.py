"""Per-update cost of prometheus_client's multiprocess values against its normal ones.

``gradeproxy serve --workers N`` needs metrics that are right across N processes. The two ways
are prometheus_client's multiprocess mode (every value lives in an mmap'd file per process;
each ``inc``/``observe`` writes to it) and one ordinary registry per worker, each exposed on its
own admin port (docs/operations.md, "Workers"). This measures what the first would add to the
hot path: each mode runs in a fresh interpreter (the mode is chosen when prometheus_client is
imported, from ``PROMETHEUS_MULTIPROC_DIR``), timing a counter ``inc``, a histogram ``observe``
and the proxy's own per-request update (``ProxyMetrics.request_done``: plain numbers since
proxy/pipeline/record/request_series.py, so alike in both modes), best of five, in nanoseconds per call, the two modes in alternation
(three rounds, the best of each kept). Ratios are against the normal value
measured in the same run.

Run: ``python bench/metrics_mp_bench.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROUNDS = 3

CHILD = r"""
import json, timeit
from prometheus_client import CollectorRegistry, Counter, Histogram
from proxy.pipeline.record.metrics import ProxyMetrics

def per_call_ns(fn, number=50000):
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e9

registry = CollectorRegistry()
counter = Counter("bench_total", "x", ["route"], registry=registry).labels("chat_completions")
histogram = Histogram("bench_seconds", "x", ["route"], registry=registry).labels("chat_completions")
metrics = ProxyMetrics()
metrics.request_done("chat_completions", 200, 0.01, 0.002, 0.0002)  # the child is cached
print(json.dumps({
    "counter inc": per_call_ns(lambda: counter.inc()),
    "histogram observe": per_call_ns(lambda: histogram.observe(0.0123)),
    "request_done (request_series.py)": per_call_ns(
        lambda: metrics.request_done("chat_completions", 200, 0.01, 0.002, 0.0002)
    ),
}))
"""


def measure(multiprocess_dir: str | None) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if k.upper() != "PROMETHEUS_MULTIPROC_DIR"}
    env["PYTHONPATH"] = str(ROOT)
    if multiprocess_dir is not None:
        env["PROMETHEUS_MULTIPROC_DIR"] = multiprocess_dir
    out = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, check=True, capture_output=True, text=True
    ).stdout
    figures: dict[str, float] = json.loads(out)
    return figures


def best(runs: list[dict[str, float]]) -> dict[str, float]:
    return {name: min(run[name] for run in runs) for name in runs[0]}


def main() -> None:
    # In alternation, best of each: drift on a shared machine hits both modes alike.
    normal_runs, shared_runs = [], []
    with tempfile.TemporaryDirectory() as directory:
        for number in range(ROUNDS):
            normal_runs.append(measure(None))
            round_dir = Path(directory) / str(number)
            round_dir.mkdir()
            shared_runs.append(measure(str(round_dir)))
        files = sorted(p.name for p in (Path(directory) / "0").iterdir())
    normal, shared = best(normal_runs), best(shared_runs)
    print(f"{'update':40} {'normal ns':>10} {'multiproc ns':>13} {'ratio':>6} {'added ns':>9}")
    for name, base in normal.items():
        mp = shared[name]
        print(f"{name:40} {base:10.0f} {mp:13.0f} {mp / base:6.2f} {mp - base:9.0f}")
    print(f"multiprocess files written by one process: {', '.join(files)}")


if __name__ == "__main__":
    main()
