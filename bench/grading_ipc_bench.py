"""What a grade job costs the proxy's process: graded in a thread there, or sent to the child.

The figure that matters is the CPU the *proxy's* process spends per job (``time.process_time``
counts every thread of it): in-thread that is the whole grading; with the grading process it is
the IPC (the job's fields and joined body pickled and written, the rows read and unpickled),
while the grading itself burns the child's CPU (reported beside it, from the child's own
counters). Wall time per job is reported too, for the batch sizes the queue's workers send.

Jobs: the recorded OpenAI tool-call response (1 KB) and a 64 KB answer, against a task the
child holds by reference (as after a reload), so what is measured is the per-job cost only.
Run: ``python bench/grading_ipc_bench.py [--jobs 2000]``. The machine is noted in the report.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path

from grader import parse_task
from grader.json import dumps
from grader.tasks import build_task_set
from proxy.pipeline.grade import GradeJob, grade_job
from proxy.pipeline.offload import GradingProcess

WIRE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "wire"
TASK = parse_task(
    {
        "id": "weather.single",
        "expected": {
            "name": "get_weather",
            "arguments": {"city": "Zürich", "unit": "celsius"},
        },
    }
)
TASKS = build_task_set([TASK])


def _big_body() -> bytes:
    call = dumps({"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}})
    content = "x " * 32_000 + call.decode()
    message = {"role": "assistant", "content": content}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return dumps({"id": "c", "object": "chat.completion", "model": "m", "choices": [choice]})


BODIES = {
    "1 KB tool call": (WIRE / "openai_single_tool.json").read_bytes(),
    "64 KB answer": _big_body(),
}


def job(body: bytes, number: int) -> GradeJob:
    return GradeJob(
        request_id=str(number),
        task=TASK,
        tasks_digest=TASKS.digest,
        upstream="u",
        stream=False,
        request_body=b"{}",
        response=[body],
        finished_at=time.perf_counter(),
    )


def in_thread(body: bytes, jobs: int) -> tuple[float, float]:
    """CPU and wall µs per job, grading in this process (what a grading thread costs it)."""
    cpu, wall = time.process_time(), time.perf_counter()
    for number in range(jobs):
        grade_job(job(body, number), True, 65536)
    return (
        1e6 * (time.process_time() - cpu) / jobs,
        1e6 * (time.perf_counter() - wall) / jobs,
    )


def cpu_of(pid: int | None) -> float:
    """A process's CPU seconds from /proc (the child is the fork server's, not ours)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def through_child(body: bytes, jobs: int, batch: int) -> tuple[float, float, float]:
    """Parent CPU, child CPU and wall µs per job, ``batch`` jobs handed over per tick."""
    process = GradingProcess(capture_answer=True, max_answer_chars=65536, batch_max=batch)
    process.start()
    await process.ready()
    process.set_tasks(TASKS)
    for _ in range(1000):  # jobs refer to the set the child holds
        if process.holds(TASKS.digest):
            break
        await asyncio.sleep(0.01)
    await process.grade(job(body, -1))
    child_before = cpu_of(process.pid)
    cpu, wall = time.process_time(), time.perf_counter()
    for start in range(0, jobs, batch):
        futures = [process.grade(job(body, n)) for n in range(start, min(start + batch, jobs))]
        for _graded, done in await asyncio.gather(*futures):
            assert done is not None
            assert done.grades[0][1] == "pass"
    parent = 1e6 * (time.process_time() - cpu) / jobs
    elapsed = 1e6 * (time.perf_counter() - wall) / jobs
    child = 1e6 * (cpu_of(process.pid) - child_before) / jobs
    await process.stop(10)
    return parent, child, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    args = parser.parse_args()
    print(f"grade job cost, {args.jobs} jobs each, {os.cpu_count()} CPUs (µs per job)")
    for name, body in BODIES.items():
        thread_cpu, _ = in_thread(body, args.jobs)
        print(f"\n  {name}: in this process (thread mode)   cpu {thread_cpu:8.1f}")
        for batch in (1, 16, 64):
            parent, child_cpu, wall = asyncio.run(through_child(body, args.jobs, batch))
            print(
                f"  {name}: grading process, batch {batch:>2}  parent cpu {parent:8.1f}"
                f"  ({parent / thread_cpu:5.2f}x in-thread)  child cpu {child_cpu:8.1f}"
                f"  wall {wall:8.1f}"
            )


if __name__ == "__main__":
    main()
