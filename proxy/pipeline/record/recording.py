"""A graded job's rows as the result file and the metrics take them, built where grading ran.

Rows are dictionaries nested three deep; a response with 10,000 choices is over a hundred
thousand of them. Held by the proxy's process, they cost twice: unpickled on the event loop as
they come back from the grading process, then walked by every full garbage collection while they
wait for the writer thread (`python -m bench loop-lag` measured pauses of the loop from those
collections alone: docs/performance.md). So the grading process (or the grading thread) reduces
a job's rows to a :class:`Recording` before handing it back: the rows already serialised as
JSONL (one ``bytes``, which the collector never walks), the metric increments already summed,
and the few rows the proxy must still read (the failure inspector's entries, episode rows, the
pair tracker's verdicts, the rows a trace carries). The proxy's process then only appends the
bytes and adds the counts (:class:`Recorder`), in its writer thread.

Rows a judge finishes on the event loop, and episode turns, are reduced there, by the same
function (:func:`recording`): one row schema, one way to count it, wherever grading ran.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from grader.tasks import Task
from proxy.pipeline.grade import Graded, GradeJob, grade_job
from proxy.pipeline.record.failures import FailureRing, enforced, failure_entry
from proxy.pipeline.record.results import ResultsWriteError, jsonl_pieces
from proxy.pipeline.record.sinks import RowWriter

if TYPE_CHECKING:  # the grading process never needs prometheus_client
    from proxy.pipeline.record.metrics import CheckTallies, GradeTallies, ProxyMetrics, Usage


@dataclass(frozen=True, slots=True)
class RecordOptions:
    """How rows are reduced; the same in the proxy and in the grading process."""

    capture_answer: bool = True
    failures_kept: int = 0  # the inspector ring's size: no job needs to send more entries


@dataclass(slots=True)
class Recording:
    """One job's rows, reduced: plain values only, cheap to pickle and never walked by the GC."""

    lines: list[bytes]  # the rows as JSONL in pieces, ``timings.grade_latency_s`` stamped
    rows: int
    latency_s: float  # from the response's last byte to the rows being built
    # Tuples, so that a job's counts are one hashable key (ProxyMetrics.increments):
    checks: CheckTallies  # (column name, pass|fail|error, rows), advisory left out
    grades: GradeTallies  # (model, result, rows) of rows that graded
    errors: int  # rows whose result is ``error`` (out of every pass-rate denominator)
    episodes: list[dict[str, Any]]  # episode rows: the episode metrics read their columns
    failures: list[dict[str, Any]]  # the inspector's entries, the last ``failures_kept``
    failures_seen: int  # failing or stale rows offered to the inspector, kept or not
    verdicts: dict[int, str]  # choice -> result of every answer row that graded (shadow pairs)
    kept: list[dict[str, Any]] | None  # the rows themselves, when a span carries them
    usage: Usage | None = None  # the response's reported tokens, once (not once per choice)
    cost: float | None = None  # what they cost (pricing.path), once per response
    unpriced: bool = False  # priced by a table that has no price for the model
    key_id: str | None = None  # the named inbound key the response's request came with


def recording(
    task: Task,
    rows: list[dict[str, Any]],
    finished_at: float,
    options: RecordOptions,
    keep_rows: bool = False,
    priced: bool = False,
) -> Recording:
    """Reduce ``rows`` (stamping their grade latency); pure, and safe in any process.

    ``finished_at`` is the ``perf_counter`` of the response's last byte in the proxy: Linux's
    ``perf_counter`` is ``CLOCK_MONOTONIC``, one clock for every process on the machine.
    """
    latency = time.perf_counter() - finished_at
    latency_s = round(latency, 6)
    checks: dict[tuple[str, str], int] = {}
    grades: dict[tuple[str | None, str], int] = {}
    errors = 0
    episodes: list[dict[str, Any]] = []
    failing: list[dict[str, Any]] = []
    verdicts: dict[int, str] = {}
    usage: Usage | None = None
    cost: float | None = None
    key_id: str | None = None
    stamped: dict[int, dict[str, Any]] = {}  # a job's rows share one timings dict: copy it once
    for row in rows:
        timings = row["timings"]
        copy = stamped.get(id(timings))
        if copy is None:
            copy = stamped[id(timings)] = {**timings, "grade_latency_s": latency_s}
        row["timings"] = copy
        result = row["result"]
        if result == "fail" or result == "stale" or enforced(row):
            failing.append(row)
        if row.get("kind") == "episode":  # its columns are episode metrics, not checks
            episodes.append(row)
            continue
        if usage is None:
            usage, cost, key_id = _usage(row), row.get("cost"), row.get("key_id")
        for column in row["checks"]:
            if column.get("advisory"):  # out of every pass rate, the metrics' too
                continue
            passed = column["passed"]
            key = (column["name"], "error" if passed is None else "pass" if passed else "fail")
            checks[key] = checks.get(key, 0) + 1
        if result == "error":
            errors += 1
            continue
        grade = (row["model"], result)
        grades[grade] = grades.get(grade, 0) + 1
        verdicts[row["choice"]] = result
    # Only the newest `failures_kept` can stay in the ring: the others' entries are not built.
    kept = failing[-options.failures_kept :] if options.failures_kept else []
    failures = [e for row in kept if (e := failure_entry(task, row, options.capture_answer))]
    return Recording(
        lines=jsonl_pieces(rows),
        rows=len(rows),
        latency_s=latency,
        checks=tuple([(name, result, count) for (name, result), count in checks.items()]),
        grades=tuple([(model, result, count) for (model, result), count in grades.items()]),
        errors=errors,
        episodes=episodes,
        failures=failures,
        failures_seen=len(failing),
        verdicts=verdicts,
        kept=rows if keep_rows else None,
        usage=usage,
        cost=cost,
        unpriced=priced and usage is not None and cost is None,
        key_id=key_id,
    )


def _usage(row: dict[str, Any]) -> Usage | None:
    """The row's ``usage`` as the metrics count it; every answer row of a response carries
    the same (per response, not per choice), so a job counts its first one."""
    usage = row.get("usage")
    if not usage:
        return None
    return (
        row["model"],
        usage["input_tokens"] or 0,
        usage["output_tokens"] or 0,
        usage["cached_input_tokens"] or 0,
        usage["reasoning_tokens"] or 0,
    )


Outcome = tuple[Graded, Recording | None]


def keeps_rows(job: GradeJob) -> bool:
    """Whether the job's rows must travel with its recording: a span (only sampled requests
    have one) carries them as its evaluation results."""
    return job.span is not None


def grade_and_reduce(
    job: GradeJob, capture_answer: bool, max_answer_chars: int, options: RecordOptions
) -> Outcome:
    """Grade ``job`` and reduce its rows where it was graded (the grading process or thread).

    Rows a judge still has to finish, and an episode's (its outcome refers to its row), come
    back whole and are reduced in the proxy once complete.
    """
    graded = grade_job(job, capture_answer, max_answer_chars)
    if not graded.rows or graded.pending or graded.episode is not None:
        return graded, None
    done = recording(
        job.task, graded.rows, job.finished_at, options, keeps_rows(job), job.prices is not None
    )
    graded.rows = []
    return graded, done


class Recorder:
    """Adds a :class:`Recording` to the metrics, the inspector ring and the result file."""

    def __init__(
        self, metrics: ProxyMetrics, writer: RowWriter | None, failures: FailureRing | None
    ) -> None:
        self.metrics = metrics
        self.writer = writer
        self.failures = failures
        self.rows_written = 0

    def record(self, task_id: str, variant: str, done: Recording) -> ResultsWriteError | None:
        """Count and append one job (:meth:`record_many` of one)."""
        (failed,) = self.record_many([(task_id, variant, done)])
        if failed is not None and not isinstance(failed, ResultsWriteError):
            raise failed
        return failed

    def record_many(self, jobs: Sequence[Recorded]) -> list[Exception | None]:
        """Count and append jobs' recordings (blocking I/O: the writer thread's); for each job,
        None, the :class:`ResultsWriteError` that kept its rows out of the file (counted here,
        once, for the caller to log), or what its counting raised (a bug; it fails alone).

        The batch costs what one job did: each counter it touched is incremented once, by the
        batch's sum, and its rows go to the file in as few writes as rotation allows
        (:meth:`ResultWriter.append_many`: one for a batch of 64 small jobs, where each job was
        a write of its own).
        """
        metrics = self.metrics
        counts: dict[Any, int] = {}  # labelled child -> the batch's increment
        outcomes: list[Exception | None] = []
        for task_id, variant, done in jobs:
            try:
                mine = self._counts(task_id, variant, done)
            except Exception as exc:
                outcomes.append(exc)
                continue
            if not counts:  # the first job's are the batch's so far (a job alone: all of them)
                counts = dict(mine)
            else:
                for child, count in mine.items():
                    counts[child] = counts.get(child, 0) + count
            outcomes.append(None)
        for child, count in counts.items():
            child.inc(count)
        if self.writer is not None:
            kept = [
                done for failed, (_, _, done) in zip(outcomes, jobs, strict=True) if failed is None
            ]
            appended = self._append(kept)
            lost = sum(f.rows for f in appended if isinstance(f, ResultsWriteError))
            if lost:
                metrics.grading_errors.labels("results_write").inc(lost)
            written = iter(appended)
            outcomes = [next(written) if failed is None else failed for failed in outcomes]
        observe = metrics.grade_latency.observe
        for failed, (_, _, done) in zip(outcomes, jobs, strict=True):
            if failed is None:
                self.rows_written += done.rows
                observe(done.latency_s)
        return outcomes

    def _append(self, kept: list[Recording]) -> list[Exception | None]:
        assert self.writer is not None
        try:
            return list(self.writer.append_many([(done.lines, done.rows) for done in kept]))
        except Exception as exc:  # a bug in the writer: each job fails with an error of its own
            return [_append_raised(exc) for _ in kept]

    def _counts(self, task_id: str, variant: str, done: Recording) -> Mapping[Any, int]:
        """One job's counter increments, keyed by the labelled child they go to (resolved
        here, so a label that cannot be had fails this job alone); the ring and the episode
        metrics, which are not sums, are fed here. The mapping is shared: never changed."""
        metrics = self.metrics
        if self.failures is not None:
            self.failures.extend(done.failures, done.failures_seen)
        for row in done.episodes:
            metrics.episode_done(task_id, row)
        counts = metrics.increments((task_id, variant, done.checks, done.grades, done.errors))
        if done.usage is None:
            return counts
        tokens = metrics.token_counts(
            task_id, variant, done.usage, done.cost, done.unpriced, done.key_id
        )
        return {**counts, **tokens} if tokens else counts


def _append_raised(exc: Exception) -> RuntimeError:
    failed = RuntimeError(f"appending the rows raised {type(exc).__name__}: {exc}")
    failed.__cause__ = exc
    return failed


Recorded = tuple[str, str, Recording]  # task id, variant, the job's rows reduced


# What the writer thread made of one job, or what it raised.
Written = tuple[Recording, ResultsWriteError | None] | Exception


Entry = tuple["GradeJob", Recording | None, list[dict[str, Any]]]  # rows, or reduced already


class WriterThread:
    """The one thread that reduces, counts and appends rows, in submission order.

    Batches handed over in the same turn of the event loop go to it at once: on a busy proxy
    many graded responses cost one wake-up of the thread, and one back, not one each.
    """

    def __init__(self, recorder: Recorder, options: RecordOptions) -> None:
        self.recorder = recorder
        self.options = options
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gradeproxy-write")
        self._waiting: list[tuple[list[Entry], asyncio.Future[list[Written]]]] = []

    async def record_many(self, entries: list[Entry]) -> list[Written]:
        """Reduce each entry's rows (unless it is reduced already), count and append them: for
        each, its recording and any failed append, or what reducing or counting raised (a bug,
        for the caller to count). Raises only when the thread itself is gone."""
        loop = asyncio.get_running_loop()
        written: asyncio.Future[list[Written]] = loop.create_future()
        self._waiting.append((entries, written))
        if len(self._waiting) == 1:
            loop.call_soon(self._hand_over)
        return await written

    def _hand_over(self) -> None:
        waiting, self._waiting = self._waiting, []
        loop = asyncio.get_running_loop()
        entries = [entry for batch, _ in waiting for entry in batch]
        handed = loop.run_in_executor(self._executor, self._write_all, entries)

        def settle(handed: asyncio.Future[list[Written]]) -> None:
            if handed.cancelled() or handed.exception() is not None:  # the executor is gone
                for _, written in waiting:
                    if not written.done():
                        written.set_exception(RuntimeError("the writer thread is gone"))
                return
            outcomes = iter(handed.result())
            for batch, written in waiting:
                mine = [next(outcomes) for _ in batch]
                if not written.done():  # not cancelled meanwhile
                    written.set_result(mine)

        handed.add_done_callback(settle)

    def _write_all(self, entries: list[Entry]) -> list[Written]:
        """The thread's part: each job reduced (one that raises fails alone), then all of them
        counted and appended as one (:meth:`Recorder.record_many`)."""
        reduced: list[Recording | Exception] = []
        for job, given, rows in entries:
            try:
                done = (
                    given
                    if given is not None
                    else recording(
                        job.task,
                        rows,
                        job.finished_at,
                        self.options,
                        keeps_rows(job),
                        job.prices is not None,
                    )
                )
            except Exception as exc:
                reduced.append(exc)
            else:
                reduced.append(done)
        recorded = [
            (job.task.id, job.variant, reduction)
            for (job, _, _), reduction in zip(entries, reduced, strict=True)
            if not isinstance(reduction, Exception)
        ]
        failed = iter(self.recorder.record_many(recorded))
        outcomes: list[Written] = []
        for reduction in reduced:
            if isinstance(reduction, Exception):
                outcomes.append(reduction)
                continue
            failure = next(failed)
            if failure is None or isinstance(failure, ResultsWriteError):
                outcomes.append((reduction, failure))
            else:
                outcomes.append(failure)
        return outcomes

    def run(self, function: Callable[..., None], *args: Any) -> asyncio.Future[None]:
        """Run ``function(*args)`` on this thread (capture rows: proxy/pipeline/record/
        captures.py), so every append to the results file or sink stays on one thread."""
        return asyncio.get_running_loop().run_in_executor(self._executor, function, *args)

    def close(self) -> None:
        """Wait for what was handed over, then end the thread."""
        self._executor.shutdown(wait=True)
