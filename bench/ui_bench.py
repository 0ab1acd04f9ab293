"""What the live page costs: building /ui/scoreboard.json from the registry, adding a failing
answer to the inspector's ring (for every failing answer, where its row is recorded), and
reading the ring as /ui/failures.json (in a thread; each entry finished when first read).

Figures, never assertions. The scoreboard is timed for task sets of growing size (every task
with two models, three results, two variants and one check column); the ring for answers of
the inspector's shown size (proxy/pipeline/record/failures.py SHOWN_CHARS) from the typical (a
JSON tool call) to the worst (every character invisible): one answer added, and a snapshot of
a full ring of 100 entries never read before. Run: ``python bench/ui_bench.py``.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from functools import partial
from typing import Any

from _timing import timings

from grader import parse_task
from proxy.pipeline.record.failures import SHOWN_CHARS, FailureRing
from proxy.pipeline.record.metrics import ProxyMetrics
from proxy.surfaces.ui import scoreboard

TASK = parse_task({"id": "t", "expected": {"name": "f", "arguments": {"a": 1}}})


def best_ms(work: Callable[[], object], repeats: int = 7) -> tuple[float, float]:
    """(best, median) wall time of ``work`` in milliseconds."""
    times = timings(work, repeats)
    return 1000 * min(times), 1000 * statistics.median(times)


def registry_with(tasks: int) -> ProxyMetrics:
    metrics = ProxyMetrics()
    for n in range(tasks):
        task = f"task.{n:05d}"
        metrics.task_info.labels(task, f"kind{n % 9}").set(1)
        for variant in ("primary", "shadow"):
            for model in ("model-a", "model-b"):
                for result in ("pass", "stale", "fail"):
                    metrics.child(metrics.grades, task, model, result, variant).inc(n % 7 + 1)
            metrics.child(metrics.check_results, task, "tool_call", "pass", variant).inc()
    return metrics


def main() -> None:
    argparse.ArgumentParser(description=__doc__).parse_args()
    print("scoreboard.json from the registry (per request of the page):")
    for tasks in (72, 1000, 5000):
        metrics = registry_with(tasks)
        best, median = best_ms(partial(scoreboard, metrics))
        print(
            f"  {tasks:>5} tasks x 2 variants x 2 models: best {best:7.2f} ms, median {median:7.2f} ms"
        )
    call = '{"tool_calls":[{"function":{"name":"f","arguments":"{\\"a\\":2}"}}]}'
    answers = {
        "JSON tool call, padded to the shown size": (call + " " * SHOWN_CHARS)[:SHOWN_CHARS],
        "prose with a newline every 40 chars": ("x" * 39 + "\n") * (SHOWN_CHARS // 40),
        "every character invisible (zero-width)": "\u200b" * SHOWN_CHARS,
    }
    print(
        f"one failing answer ({SHOWN_CHARS} chars shown): ring.add, then a full ring's first read"
    )
    for label, answer in answers.items():
        ring = FailureRing(100, capture_answer=True)
        row = {"request_id": "r", "result": "fail", "answer": answer, "call": None}
        best, median = best_ms(partial(ring.add, TASK, row))
        print(f"  {label:<42} add: best {best:6.3f} ms, median {median:6.3f} ms")
        best, median = best_ms(partial(first_read, row))
        print(f"  {'':<42} snapshot of 100 unread: best {best:6.2f} ms, median {median:6.2f} ms")


def first_read(row: dict[str, Any]) -> None:
    ring = FailureRing(100, capture_answer=True)
    for _ in range(100):
        ring.add(TASK, row)
    ring.snapshot()


if __name__ == "__main__":
    main()
