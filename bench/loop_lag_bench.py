"""Event-loop lag while the grade queue grades: can grading slow concurrent requests?

A ticker on the proxy's event loop asks to wake every millisecond and records how late it wakes,
while the grade queue works through typical responses and 100 KB adversarial ones (an answer
whose extraction takes tens of milliseconds). Compared in one run: the default (responses over
``grading.inline_max_bytes`` graded in a thread) against grading everything inline on the loop.
Lateness is what every concurrent request would wait. Run: ``python bench/loop_lag_bench.py``.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

from grader import parse_task
from grader._json import dumps
from proxy.grading import GIL_SWITCH_INTERVAL_S, GradeJob, GradeQueue
from proxy.metrics import ProxyMetrics

TASK = parse_task({"id": "lag", "expected": {"name": "f", "arguments": {"a": 1}}})
CALL = '{"name":"f","arguments":{"a":1}}'


def body(content: str) -> bytes:
    return dumps(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
        }
    )


TYPICAL = body("Calling it now: " + CALL)
ADVERSARIAL = body(('{ it\'s "a {draft" ' * 6000)[:100_000] + CALL)


async def measure(inline_max_bytes: int, jobs: int) -> list[float]:
    queue = GradeQueue(
        ProxyMetrics(),
        None,
        size=10_000,
        workers=2,
        inline_max_bytes=inline_max_bytes,
        capture_answer=False,
    )
    queue.start()
    lateness: list[float] = []
    running = True

    async def ticker() -> None:
        while running:
            planned = time.perf_counter() + 0.001
            await asyncio.sleep(0.001)
            lateness.append(max(time.perf_counter() - planned, 0.0))

    tick = asyncio.create_task(ticker())
    for number in range(jobs):
        response = ADVERSARIAL if number % 10 == 0 else TYPICAL
        queue.submit(
            GradeJob(
                request_id=str(number),
                task=TASK,
                tasks_digest="d",
                upstream="u",
                stream=False,
                request_body=b"{}",
                response=[response],
                finished_at=time.perf_counter(),
            )
        )
        await asyncio.sleep(0.002)  # responses arriving over time, as in live traffic
    await queue.drain()
    running = False
    await tick
    await queue.stop()
    return lateness


def report(name: str, lateness: list[float]) -> float:
    ordered = sorted(lateness)
    p99 = ordered[int(0.99 * (len(ordered) - 1))]
    print(
        f"  {name:<34} ticks {len(ordered):>5}   p50 {1000 * statistics.median(ordered):6.2f} ms"
        f"   p99 {1000 * p99:6.2f} ms   max {1000 * ordered[-1]:6.2f} ms"
    )
    return p99


def main() -> None:
    jobs = 200
    print(f"loop lag while grading {jobs} responses (every 10th a 100 KB adversarial answer)")
    inline = report("baseline: everything inline", asyncio.run(measure(10**9, jobs)))
    before = sys.getswitchinterval()
    thread = report("thread, 5 ms GIL switch interval", asyncio.run(measure(16_384, jobs)))
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    default = report("default: thread, 1 ms switch interval", asyncio.run(measure(16_384, jobs)))
    sys.setswitchinterval(before)
    print(f"\n  p99 lag, thread at 5 ms switch / inline: {thread / inline:.3f}")
    print(f"  p99 lag, default / inline:                {default / inline:.3f}")


if __name__ == "__main__":
    main()
