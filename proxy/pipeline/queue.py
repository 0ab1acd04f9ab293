"""The grade queue: captured responses are graded after the client has its last byte.

Handlers only ``submit`` (a non-blocking put); a full queue drops the job and counts it. Workers
take the jobs waiting (up to ``batch_max`` at a time), have them graded, and record metrics and
result rows. Small responses whose checks cost little are graded inline (tens of
microseconds); the rest, with ``grading.isolation: process`` (the default), in the grading
process (``proxy.pipeline.offload``, ``proxy.pipeline.child``): the jobs a worker takes travel
as one batch, and only the judge's columns are graded back here, where its client lives. With
``isolation: thread`` they are graded in a thread of this process, which shares its GIL with
the event loop. Either way a pathological answer never stalls the loop relaying other streams.

The pipeline must not die: whatever one job raises is caught, counted in
``grading_errors_total{kind="worker"}``, logged once with the request id, and the worker takes
the next job. A worker task that ends anyway (cancelled from outside, a bug in the loop itself)
is restarted and counted in ``grade_worker_restarts_total``. :meth:`GradeQueue.health` says
whether grading keeps up: every worker running, and the queue not *stuck* (jobs waiting while
nothing was taken off it for ``stuck_after_s``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

from grader.checks import Judge
from grader.pricing import PriceTable
from grader.tasks import TaskSet
from proxy.logs import get_logger
from proxy.pipeline.grade import Graded, GradeJob, grade_job, runs_off_loop
from proxy.pipeline.ledger import Ledger
from proxy.pipeline.offload import (
    GradingDeadlineError,
    GradingProcess,
    GradingProcessDiedError,
    NotPicklableError,
)
from proxy.pipeline.record.captures import Captures
from proxy.pipeline.record.failures import FailureRing
from proxy.pipeline.record.metrics import ProxyMetrics
from proxy.pipeline.record.pairs import PairTracker
from proxy.pipeline.record.recording import (
    Entry,
    Outcome,
    Recorder,
    RecordOptions,
    WriterThread,
    grade_and_reduce,
)
from proxy.pipeline.record.sinks import RowWriter
from proxy.pipeline.settle import Settler, log_quietly
from proxy.telemetry.record import SpanSink

log = get_logger("gradeproxy.grading")

# While a large response is graded in the thread, the event loop needs the GIL back quickly:
# Python's default 5 ms switch interval lets the grading thread hold it that long at a time.
GIL_SWITCH_INTERVAL_S = 0.001
# An inline batch grades for at most INLINE_SLICE_S at a time, then leaves the loop to the
# relayed requests for INLINE_GAP_S (a timer, so they get several turns, not one). Longer slices
# back to back lengthened the relay's p99 at one connection several times over; the measurement
# is in docs/performance.md, "Figures behind the code".
INLINE_SLICE_S = 0.001
INLINE_GAP_S = 0.0005


HealthProblem = Literal["workers_gone", "queue_stuck", "grader_down"]
Isolation = Literal["process", "thread"]


@dataclass(frozen=True, slots=True)
class GradingHealth:
    """What ``/readyz`` and ``/healthz/grading`` report about the grade queue."""

    healthy: bool
    reason: HealthProblem | None
    workers_alive: int
    workers_wanted: int
    depth: int
    idle_s: float  # since a job was last taken off the queue or finished


class GradeQueue:
    """A bounded queue of :class:`GradeJob` and the workers that drain it."""

    def __init__(
        self,
        metrics: ProxyMetrics,
        writer: RowWriter | None,
        *,
        size: int,
        workers: int,
        inline_max_bytes: int,
        capture_answer: bool,
        pairs: PairTracker | None = None,
        judge: Judge | None = None,
        stuck_after_s: float = 30.0,
        job_deadline_s: float | None = None,
        max_answer_chars: int = 65536,
        failures: FailureRing | None = None,
        isolation: Isolation = "thread",
        batch_max: int = 64,
        batch_window_s: float = 0.0,
    ) -> None:
        self.metrics = metrics
        self.failures = failures  # the /ui inspector's ring of failing and stale answers
        self.judge = judge
        self.writer = writer
        self.inline_max_bytes = inline_max_bytes
        self.capture_answer = capture_answer
        self._queue: asyncio.Queue[GradeJob] = asyncio.Queue(maxsize=size)
        self._workers_wanted = workers
        self._workers: list[asyncio.Task[None]] = []
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gradeproxy-grade")
        self.max_answer_chars = max_answer_chars
        self.batch_max = max(batch_max, 1)
        self.batch_window_s = batch_window_s  # see _steady
        self._last_batch = 0.0  # monotonic, when a worker last took a batch
        self._taking = asyncio.Lock()
        self.options = RecordOptions(capture_answer, failures.size if failures is not None else 0)
        self.recorder = Recorder(metrics, writer, failures)
        # Rows are reduced, counted and appended in a thread of their own, in submission
        # order: a response with thousands of choices must not stall the loop, nor a slow disk.
        self.writes = WriterThread(self.recorder, self.options)
        self.settle = Settler(metrics, self.writes, pairs, judge)
        self.use_ledger(Ledger())
        self.process: GradingProcess | None = None
        if isolation == "process":
            self.process = GradingProcess(
                capture_answer=capture_answer,
                max_answer_chars=max_answer_chars,
                options=self.options,
                batch_max=self.batch_max,
                on_restart=metrics.process_restarts.inc,
                deadline_s=job_deadline_s,
            )
        self.prices: PriceTable | None = None  # the store's, stamped on each job submitted
        self.answer_hash = False  # results.answer: hash, stamped on each job submitted too
        # results.capture_untagged: untagged answers written as capture rows on the writer thread
        self.captures: Captures | None = None
        self.heavy_in_thread = 0  # heavy calls run in a thread (no process, or unpicklable)
        self.stuck_after_s = stuck_after_s
        self._stopping = False
        self._last_taken = time.monotonic()
        metrics.grading_healthy.set_function(lambda: 1.0 if self.health().healthy else 0.0)
        metrics.queue_depth.set_function(self._queue.qsize)  # read at scrape, not per job

    @property
    def telemetry(self) -> SpanSink | None:
        """Tracing on: the exporter each job's span ends in (``Settler.report``)."""
        return self.settle.telemetry

    @telemetry.setter
    def telemetry(self, sink: SpanSink | None) -> None:
        self.settle.telemetry = sink

    def use_ledger(self, ledger: Ledger) -> None:
        """Count submitted and settled jobs in ``ledger`` (a worker's shared slot)."""
        self.ledger = self.settle.ledger = ledger

    def submit(self, job: GradeJob) -> bool:
        """Enqueue without waiting; a full queue drops the job and counts it."""
        self.ledger.submitted()
        job.prices = self.prices
        job.answer_hash = self.answer_hash
        try:
            self._queue.put_nowait(job)
        except asyncio.QueueFull:
            self.metrics.skipped.labels("queue_full").inc()
            self.settle.report(job, None)
            return False
        return True

    def start(self) -> None:
        self._stopping = False
        self._last_taken = time.monotonic()
        if self.process is not None:
            self.process.start()
        for number in range(self._workers_wanted):
            self._spawn(number)

    async def started(self, timeout_s: float) -> bool:
        """Wait (bounded) until the grading process is up; False if it is not (still unhealthy)."""
        if self.process is None:
            return True
        try:
            await asyncio.wait_for(self.process.ready(), timeout_s)
        except TimeoutError:
            return False
        return True

    def _spawn(self, number: int) -> None:
        worker = asyncio.create_task(self._work(), name=f"grade-worker-{number}")
        worker.add_done_callback(lambda done: self._supervise(number, done))
        if number < len(self._workers):
            self._workers[number] = worker
        else:
            self._workers.append(worker)

    def _supervise(self, number: int, worker: asyncio.Task[None]) -> None:
        """Restart a worker that ended while the queue is live (its loop never returns)."""
        if self._stopping:
            return
        self.metrics.worker_restarts.inc()
        cause = None if worker.cancelled() else worker.exception()
        log_quietly("grade_worker_restarted", worker=number, cause=repr(cause))
        self._spawn(number)

    def health(self) -> GradingHealth:
        """Whether grading keeps up: every worker alive and the queue not stuck."""
        alive = sum(1 for worker in self._workers if not worker.done())
        depth = self._queue.qsize()
        idle_s = time.monotonic() - self._last_taken
        if alive < self._workers_wanted:
            reason: HealthProblem | None = "workers_gone"
        elif self.process is not None and not self.process.up:
            reason = "grader_down"  # starting, or restarting after it died
        elif depth > 0 and idle_s > self.stuck_after_s:
            reason = "queue_stuck"
        else:
            reason = None
        return GradingHealth(reason is None, reason, alive, self._workers_wanted, depth, idle_s)

    async def drain(self, timeout_s: float | None = None) -> bool:
        """Wait until every submitted job is recorded; False if the timeout passed first."""
        try:
            await asyncio.wait_for(self._queue.join(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def stop(self, timeout_s: float | None = None) -> None:
        """Drain (the jobs in the grading process included), then stop the workers, the
        grading process and the threads, all within ``timeout_s``."""
        started = time.monotonic()
        drained = await self.drain(timeout_s)
        if not drained:
            log.error("grade_queue_not_drained", left=self._queue.qsize())
        self._stopping = True
        for worker in self._workers:
            worker.cancel()
        for worker in self._workers:
            with contextlib.suppress(asyncio.CancelledError):
                await worker
        self._workers.clear()
        if self.process is not None:
            # Drained: the child holds nothing and ends at once. Not drained: the grace is spent.
            left: float | None = 0.0
            if drained and timeout_s is not None:
                left = max(timeout_s - (time.monotonic() - started), 1.0)
            elif drained:
                left = None
            await self.process.stop(left)
        self._executor.shutdown(wait=True)
        if self.captures is not None:  # what waits for its batch window, written now
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.captures.idle(), max(timeout_s or 5.0, 1.0))
        self.writes.close()

    async def _work(self) -> None:
        while True:
            jobs = await self._take()
            inline: list[GradeJob] = []
            rest: list[GradeJob] = []
            for job in jobs:
                (inline if self._inline(job) else rest).append(job)
            if not rest:
                await self._run_inline(inline)
            elif not inline and len(rest) == 1:
                await self._run(rest[0])
            else:  # handled together: the grading process gets the rest as one batch
                await asyncio.gather(self._run_inline(inline), *(self._run(job) for job in rest))

    async def _take(self) -> list[GradeJob]:
        """The next batch: one worker takes at a time, so batches keep the jobs' order."""
        async with self._taking:
            jobs = [await self._queue.get()]
            if self._steady():  # let the jobs of the next few milliseconds join this one
                await asyncio.sleep(self.batch_window_s)
            while len(jobs) < self.batch_max and not self._queue.empty():
                jobs.append(self._queue.get_nowait())
            self._last_taken = self._last_batch = time.monotonic()
        return jobs

    def _steady(self) -> bool:
        """Whether jobs keep arriving (the last batch was taken within the window) and the
        batch is not full yet: then waiting the window costs a job a few milliseconds of grade
        latency and makes the batch larger. Graded back to back, jobs find the grader's code and
        data warm in the core's caches, and the batch costs one hand-over to the writer thread:
        CPU per graded request at 16 connections fell (`python -m bench ab`; docs/performance.md).
        After a quiet spell, the first job is taken at once."""
        window = self.batch_window_s
        return (
            window > 0
            and not self._stopping
            and self._queue.qsize() < self.batch_max - 1
            and time.monotonic() - self._last_batch < window
        )

    def _inline(self, job: GradeJob) -> bool:
        """Small and cheap to grade: graded on the loop, tens of microseconds."""
        return job.size <= self.inline_max_bytes and not runs_off_loop(job.task)

    async def _run(self, job: GradeJob) -> None:
        try:
            await self._handle(job)
        except Exception:  # the pipeline outlives any one job
            self.settle.failed(job)
        finally:
            self._taken(1)

    def _taken(self, jobs: int) -> None:
        for _ in range(jobs):
            self._queue.task_done()
        self._last_taken = time.monotonic()

    async def _run_inline(self, jobs: list[GradeJob]) -> None:
        """Grade small jobs here, one after another, and record those that need nothing more
        as one batch: one hand-over to the writer thread and one wake-up back, however many
        jobs arrived while the last batch was being written. (Each job as a task of its own,
        with a future and a thread hand-over each, cost more than grading it.) Jobs waiting
        for the judge finish concurrently, each recorded on its own."""
        try:
            entries: list[Entry] = []  # graded, to record with one hand-over
            judged = []
            yield_at = time.perf_counter() + INLINE_SLICE_S
            for job in jobs:
                if time.perf_counter() >= yield_at:  # never holds the loop for long
                    await asyncio.sleep(INLINE_GAP_S)
                    yield_at = time.perf_counter() + INLINE_SLICE_S
                graded = self._graded_inline(job)
                if graded is None:
                    continue
                if graded.pending:
                    judged.append(self._judged(job, graded))
                else:
                    entries.append((job, None, graded.rows))
            if judged:
                await asyncio.gather(self.settle.record(entries), *judged)
            elif entries:
                await self.settle.record(entries)
        finally:
            self._taken(len(jobs))

    async def _judged(self, job: GradeJob, graded: Graded) -> None:
        try:
            await self.settle.finish(job, graded, None)
        except Exception:  # the pipeline outlives any one job
            self.settle.failed(job)

    def _graded_inline(self, job: GradeJob) -> Graded | None:
        """The job graded here, or None when it was settled already (a grader bug, a skip)."""
        try:
            try:
                graded = grade_job(job, self.capture_answer, self.max_answer_chars)
            except Exception:  # a grader bug
                self.settle.grader_failed(job)
                return None
            return graded if self.settle.accepted(job, graded) else None
        except Exception:  # counting or reporting failed: the pipeline outlives any one job
            self.settle.failed(job)
            return None

    def on_tasks(self, tasks: TaskSet) -> None:
        """A task set was (re)loaded: the grading process gets it now, not with each job."""
        if self.process is not None:
            self.process.set_tasks(tasks)

    async def run_heavy(self, function: Any, *args: Any) -> Any:
        """Run a heavy check off the event loop where grading runs (the scoring API's path)."""
        if self.process is not None:
            with contextlib.suppress(NotPicklableError):  # e.g. a check holding a validator
                return await self.process.call(function, *args)
        self.heavy_in_thread += 1
        return await asyncio.to_thread(function, *args)

    @property
    def graded_rows(self) -> int:
        return self.recorder.rows_written

    async def _grade(self, job: GradeJob) -> Outcome:
        """Graded inline (small and cheap: its rows are reduced in the writer thread), else
        graded and reduced in the grading process, or in the grading thread."""
        if self._inline(job):
            return grade_job(job, self.capture_answer, self.max_answer_chars), None
        if self.process is not None:
            with contextlib.suppress(NotPicklableError):  # graded in the thread instead
                return await self.process.grade(job)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor,
            grade_and_reduce,
            job,
            self.capture_answer,
            self.max_answer_chars,
            self.options,
        )

    async def _handle(self, job: GradeJob) -> None:
        try:
            graded, done = await self._grade(job)
        except GradingDeadlineError as exc:  # hung: killed and restarted, the rest go on
            self.metrics.grading_errors.labels("grader_deadline").inc()
            log_quietly(
                "grading_deadline_missed",
                request_id=job.request_id,
                task=job.task.id,
                reason=str(exc),
            )
            self.settle.report(job, None)
            return
        except GradingProcessDiedError:  # died with this job: infrastructure, not the model
            self.metrics.grading_errors.labels("grader_process").inc()
            log_quietly("grading_process_died", request_id=job.request_id, task=job.task.id)
            self.settle.report(job, None)
            return
        except Exception:  # a grader bug (a GraderError from the child)
            self.settle.grader_failed(job)
            return
        if self.settle.accepted(job, graded):
            await self.settle.finish(job, graded, done)
