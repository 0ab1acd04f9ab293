"""Small responses are graded on the loop and recorded in batches: the jobs a worker takes at
once reach the writer thread in one hand-over, a job that fails fails alone, a job waiting for
the judge holds none of the others back, and while jobs keep arriving a worker lets the next
ones join its batch (``grading.batch_window_s``) but never delays the first after a quiet spell."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from grader import parse_task
from grader.checks import Judge
from grader.json import loads_exact
from grader.tasks import Task
from proxy.pipeline import queue as queue_module
from proxy.pipeline.grade import GradeJob, grade_job
from proxy.pipeline.queue import GradeQueue
from proxy.pipeline.record import recording as recording_module
from proxy.pipeline.record.metrics import ProxyMetrics
from proxy.pipeline.record.results import ResultWriter
from tests.support.backend import wire
from tests.support.jobs import grade_job_of
from tests.support.metrics import metric_value
from tests.support.tasks import POLITE_JUDGE

CALL = parse_task(
    {"id": "call", "expected": {"name": "get_weather", "arguments": {"city": "Zürich"}}}
)
JUDGED = parse_task({"id": "judged", "prompt": "Reply kindly.", "checks": [POLITE_JUDGE]})


class HeldJudge:
    """A judge client that answers PASS once ``release`` is set."""

    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def complete(self, model: str, messages: list[dict[str, str]], temperature: float) -> str:
        await self.release.wait()
        return "PASS"


def job(request_id: str, task: Task = CALL, body: str = "openai_single_tool.json") -> GradeJob:
    return grade_job_of(request_id, task, wire(body))


class Harness:
    def __init__(self, folder: Path, judge: HeldJudge, window_s: float = 0.0) -> None:
        self.path = folder / "grades.jsonl"
        self.writer = ResultWriter(self.path, 1 << 30, 0)
        self.metrics = ProxyMetrics()
        self.queue = GradeQueue(
            self.metrics,
            self.writer,
            size=100,
            workers=1,
            inline_max_bytes=1 << 20,
            capture_answer=True,
            judge=Judge(judge),
            batch_window_s=window_s,
        )
        self.handed: list[int] = []  # the jobs in each hand-over to the writer thread
        real = self.queue.writes._write_all

        def counted(entries: list[Any]) -> list[Any]:
            self.handed.append(len(entries))
            return real(entries)

        self.queue.writes._write_all = counted  # type: ignore[method-assign]

    def request_ids(self) -> list[str]:
        return [
            loads_exact(line.decode())["request_id"] for line in self.path.read_bytes().splitlines()
        ]

    def metric(self, name: str, **labels: str) -> float:
        return metric_value(generate_latest(self.metrics.registry).decode(), name, **labels)


@pytest.fixture
async def judge() -> HeldJudge:
    return HeldJudge()


@pytest.fixture
async def harness(tmp_path: Path, judge: HeldJudge) -> AsyncIterator[Harness]:
    harness = Harness(tmp_path, judge)
    harness.queue.start()
    yield harness
    judge.release.set()
    await harness.queue.stop(timeout_s=10)
    harness.writer.close()


def grading_raises_for(request_id: str) -> Callable[..., Any]:
    real = grade_job

    def raising(job: GradeJob, *args: Any) -> Any:
        if job.request_id == request_id:
            raise RuntimeError("a grader bug")
        return real(job, *args)

    return raising


def reducing_raises_for(request_id: str) -> Callable[..., Any]:
    real = recording_module.keeps_rows

    def keeps_rows(job: GradeJob) -> bool:
        if job.request_id == request_id:
            raise RuntimeError("a recording bug")
        return real(job)

    return keeps_rows


async def test_jobs_taken_together_reach_the_writer_thread_in_one_hand_over(
    harness: Harness,
) -> None:
    for number in range(10):  # submitted in one turn: the worker finds them all waiting
        harness.queue.submit(job(f"r{number}"))
    assert await harness.queue.drain(10)
    assert harness.handed == [10]
    assert harness.request_ids() == [f"r{number}" for number in range(10)]  # in order
    assert harness.metric("gradeproxy_grades_total") == 10


@pytest.mark.parametrize(
    ("target", "attribute", "broken", "kind"),
    [
        pytest.param(queue_module, "grade_job", grading_raises_for, "grader", id="grading_raises"),
        pytest.param(
            recording_module, "keeps_rows", reducing_raises_for, "worker", id="recording_raises"
        ),
    ],
)
async def test_a_job_that_raises_in_a_batch_fails_alone(
    harness: Harness,
    monkeypatch: pytest.MonkeyPatch,
    target: Any,
    attribute: str,
    broken: Callable[[str], Any],
    kind: str,
) -> None:
    monkeypatch.setattr(target, attribute, broken("r2"))
    for number in range(5):
        harness.queue.submit(job(f"r{number}"))
    assert await harness.queue.drain(10)
    assert harness.request_ids() == ["r0", "r1", "r3", "r4"]
    assert harness.metric("gradeproxy_grading_errors_total", kind=kind) == 1
    assert harness.queue.health().healthy


async def test_a_job_waiting_for_the_judge_holds_back_none_of_its_batch(
    harness: Harness, judge: HeldJudge
) -> None:
    harness.queue.submit(job("judged", JUDGED, "openai_text.json"))
    for number in range(3):
        harness.queue.submit(job(f"r{number}"))
    for _ in range(500):  # the three are written while the judge has not answered
        if harness.path.stat().st_size and len(harness.request_ids()) == 3:
            break
        await asyncio.sleep(0.01)
    assert harness.request_ids() == ["r0", "r1", "r2"]
    assert not await harness.queue.drain(0.05)  # the judged job is still out
    judge.release.set()
    assert await harness.queue.drain(10)
    assert harness.request_ids() == ["r0", "r1", "r2", "judged"]
    assert harness.metric("gradeproxy_grades_total") == 4


async def test_a_job_after_a_quiet_spell_is_taken_at_once(tmp_path: Path, judge: HeldJudge) -> None:
    harness = Harness(tmp_path, judge, window_s=30.0)
    harness.queue.start()
    harness.queue.submit(job("first"))
    assert await harness.queue.drain(10)  # well inside the 30 s window
    await harness.queue.stop(timeout_s=10)
    assert harness.request_ids() == ["first"]


async def test_jobs_arriving_steadily_wait_the_window_and_join_one_batch(
    tmp_path: Path, judge: HeldJudge
) -> None:
    harness = Harness(tmp_path, judge, window_s=1.0)
    harness.queue.start()
    harness.queue.submit(job("r0"))
    assert await harness.queue.drain(10)  # the first at once: nothing arrived before it
    for number in range(1, 5):  # a steady stream: each one within the window of the last
        harness.queue.submit(job(f"r{number}"))
        await asyncio.sleep(0.01)
    assert not await harness.queue.drain(0.1)  # the worker waits the window out
    assert await harness.queue.drain(10)
    await harness.queue.stop(timeout_s=10)
    assert harness.handed == [1, 4]
    assert harness.request_ids() == [f"r{number}" for number in range(5)]


async def test_a_long_batch_leaves_the_loop_to_the_relay_between_slices(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    graded: list[str] = []

    def slow(job: GradeJob, *args: Any) -> Any:
        time.sleep(0.002)  # each job longer than a slice: the batch yields after each
        graded.append(job.request_id)
        return grade_job(job, *args)

    monkeypatch.setattr(queue_module, "grade_job", slow)
    seen: list[int] = []  # how many jobs were graded each time the loop ran something else

    async def relay() -> None:
        while len(graded) < 5:
            seen.append(len(graded))
            await asyncio.sleep(0)

    for number in range(5):
        harness.queue.submit(job(f"r{number}"))
    await asyncio.gather(relay(), harness.queue.drain(10))
    assert {1, 2, 3, 4} <= set(seen)  # it ran between the jobs of one batch
    assert harness.handed == [5]  # and the batch was still recorded as one
