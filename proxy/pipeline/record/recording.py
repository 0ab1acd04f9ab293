"""A graded job's rows as the result file and the metrics take them, built where grading ran.

Rows are dictionaries nested three deep; a response with 10,000 choices is over a hundred
thousand of them. Held by the proxy's process, they cost twice: unpickled on the event loop as
they come back from the grading process, then walked by every full garbage collection while
they wait for the writer thread (bench/loop_lag_bench.py measured 50-120 ms pauses of the loop
from those collections alone). So the grading process (or the grading thread) reduces a job's
rows to a :class:`Recording` before handing it back: the rows already serialised as JSONL (one
``bytes``, which the collector never walks), the metric increments already summed, and the
few rows the proxy must still read (the failure inspector's entries, episode rows, the pair
tracker's verdicts, the rows a trace carries). The proxy's process then only appends the bytes
and adds the counts (:class:`Recorder`), in its writer thread.

Rows a judge finishes on the event loop, and episode turns, are reduced there, by the same
function (:func:`recording`): one row schema, one way to count it, wherever grading ran.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from grader.tasks import Task
from proxy.pipeline.grade import Graded, GradeJob, grade_job
from proxy.pipeline.record.failures import FailureRing, failure_entry
from proxy.pipeline.record.results import (
    PIECE_BYTES,
    ResultsWriteError,
    ResultWriter,
    jsonl_pieces,
)

if TYPE_CHECKING:  # the grading process never needs prometheus_client
    from proxy.pipeline.record.metrics import ProxyMetrics


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
    checks: list[tuple[str, str, int]]  # (column name, pass|fail|error, rows), advisory left out
    grades: list[tuple[str | None, str, int]]  # (model, result, rows) of rows that graded
    errors: int  # rows whose result is ``error`` (out of every pass-rate denominator)
    episodes: list[dict[str, Any]]  # episode rows: the episode metrics read their columns
    failures: list[dict[str, Any]]  # the inspector's entries, the last ``failures_kept``
    failures_seen: int  # failing or stale rows offered to the inspector, kept or not
    verdicts: dict[int, str]  # choice -> result of every answer row that graded (shadow pairs)
    kept: list[dict[str, Any]] | None  # the rows themselves, when a span carries them


def recording(
    task: Task,
    rows: list[dict[str, Any]],
    finished_at: float,
    options: RecordOptions,
    keep_rows: bool = False,
) -> Recording:
    """Reduce ``rows`` (stamping their grade latency); pure, and safe in any process.

    ``finished_at`` is the ``perf_counter`` of the response's last byte in the proxy: Linux's
    ``perf_counter`` is ``CLOCK_MONOTONIC``, one clock for every process on the machine.
    """
    latency = time.perf_counter() - finished_at
    checks: dict[tuple[str, str], int] = {}
    grades: dict[tuple[str | None, str], int] = {}
    errors = 0
    episodes: list[dict[str, Any]] = []
    failing: list[dict[str, Any]] = []
    verdicts: dict[int, str] = {}
    stamped: dict[int, dict[str, Any]] = {}  # a job's rows share one timings dict: copy it once
    for row in rows:
        timings = row["timings"]
        copy = stamped.get(id(timings))
        if copy is None:
            copy = stamped[id(timings)] = {**timings, "grade_latency_s": round(latency, 6)}
        row["timings"] = copy
        result = row["result"]
        if result == "fail" or result == "stale":
            failing.append(row)
        if row.get("kind") == "episode":  # its columns are episode metrics, not checks
            episodes.append(row)
            continue
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
        checks=[(name, result, count) for (name, result), count in checks.items()],
        grades=[(model, result, count) for (model, result), count in grades.items()],
        errors=errors,
        episodes=episodes,
        failures=failures,
        failures_seen=len(failing),
        verdicts=verdicts,
        kept=rows if keep_rows else None,
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
    done = recording(job.task, graded.rows, job.finished_at, options, keeps_rows(job))
    graded.rows = []
    return graded, done


class Recorder:
    """Adds a :class:`Recording` to the metrics, the inspector ring and the result file."""

    def __init__(
        self, metrics: ProxyMetrics, writer: ResultWriter | None, failures: FailureRing | None
    ) -> None:
        self.metrics = metrics
        self.writer = writer
        self.failures = failures
        self.rows_written = 0

    def record(self, task_id: str, variant: str, done: Recording) -> ResultsWriteError | None:
        """Count and append one job (:meth:`record_many` of one)."""
        (failed,) = self.record_many([(task_id, variant, done)])
        if isinstance(failed, Exception) and not isinstance(failed, ResultsWriteError):
            raise failed
        return failed

    def record_many(self, jobs: Sequence[Recorded]) -> list[ResultsWriteError | Exception | None]:
        """Count and append jobs' recordings as one (blocking I/O: the writer thread's).

        Each job's counts are summed first, and a job whose counting raises (a bug) fails alone,
        its exception in its place. Then each counter the batch touched is incremented once,
        by the batch's sum, and every row goes to the file in one append: a batch of 64 graded
        answers costs one write, not 64. A failed append is every job's (none of the batch's
        rows is in the file), counted once; each job gets it back, for the caller to log.
        """
        metrics = self.metrics
        counts: dict[tuple[Any, tuple[str, ...]], int] = {}
        outcomes: list[ResultsWriteError | Exception | None] = []
        lines: list[bytes] = []
        rows = 0
        for task_id, variant, done in jobs:
            try:
                mine = self._counts(task_id, variant, done)
            except Exception as exc:
                outcomes.append(exc)
                continue
            if not counts:  # the first job's are the batch's so far (a job alone: all of them)
                counts = mine
            else:
                for key, count in mine.items():
                    counts[key] = counts.get(key, 0) + count
            lines += done.lines
            rows += done.rows
            outcomes.append(None)
        for (metric, labels), count in counts.items():
            metrics.child(metric, *labels).inc(count)
        if self.writer is not None and rows:
            try:
                self.writer.append(regrouped(lines), rows)
            except ResultsWriteError as exc:  # none of the batch's rows is in the file
                metrics.grading_errors.labels("results_write").inc(exc.rows)
                return [
                    outcome if outcome is not None else _lost(done, exc)
                    for outcome, (_, _, done) in zip(outcomes, jobs, strict=True)
                ]
            except Exception as exc:  # a bug: every job of the append fails with it
                return [outcome if outcome is not None else exc for outcome in outcomes]
        self.rows_written += rows
        observe = metrics.grade_latency.observe
        for outcome, (_, _, done) in zip(outcomes, jobs, strict=True):
            if outcome is None:
                observe(done.latency_s)
        return outcomes

    def _counts(
        self, task_id: str, variant: str, done: Recording
    ) -> dict[tuple[Any, tuple[str, ...]], int]:
        """One job's counter increments, keyed by (metric, labels); the ring and the episode
        metrics, which are not sums, are fed here."""
        metrics = self.metrics
        if self.failures is not None:
            self.failures.extend(done.failures, done.failures_seen)
        for row in done.episodes:
            metrics.episode_done(task_id, row)
        counts: dict[tuple[Any, tuple[str, ...]], int] = {}
        key: tuple[Any, tuple[str, ...]]
        for name, result, count in done.checks:
            counts[(metrics.check_results, (task_id, name, result, variant))] = count
        if done.errors:
            counts[(metrics.grading_errors, ("check",))] = done.errors
            counts[(metrics.grade_errors, (task_id, variant))] = done.errors
        for model, result, count in done.grades:
            label = metrics.model_label(model)
            key = (metrics.grades, (task_id, label, result, variant))
            counts[key] = counts.get(key, 0) + count
            if result == "stale":
                key = (metrics.stale, (task_id, label, variant))
                counts[key] = counts.get(key, 0) + count
        return counts


def regrouped(pieces: list[bytes]) -> list[bytes]:
    """Jobs' pieces joined into pieces of about ``PIECE_BYTES``: one write for a batch of
    small jobs, and still no copy of megabytes at once."""
    if len(pieces) < 2:
        return pieces
    out: list[bytes] = []
    group: list[bytes] = []
    size = 0
    for piece in pieces:
        group.append(piece)
        size += len(piece)
        if size >= PIECE_BYTES:
            out.append(b"".join(group))
            group, size = [], 0
    if group:
        out.append(b"".join(group))
    return out


def _lost(done: Recording, failure: ResultsWriteError) -> ResultsWriteError:
    """A job's share of a failed batch append: its own row count, the same cause."""
    lost = ResultsWriteError(done.rows, OSError(failure.errno, failure.strerror))
    lost.__cause__ = failure.__cause__
    return lost


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
                done = given or recording(
                    job.task, rows, job.finished_at, self.options, keeps_rows(job)
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
            if isinstance(failure, ResultsWriteError) or failure is None:
                outcomes.append((reduction, failure))
            else:
                outcomes.append(failure)
        return outcomes

    def close(self) -> None:
        """Wait for what was handed over, then end the thread."""
        self._executor.shutdown(wait=True)
