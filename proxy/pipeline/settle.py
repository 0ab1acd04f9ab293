"""What follows from a graded job's outcome, wherever it was graded: the counts its outcome
implies, the judge's columns, its rows recorded, and its leg reported.

The grade queue (``proxy.pipeline.queue``) decides when and where a job is graded; a
:class:`Settler` takes what grading returned. The pair tracker and the exporter's hand-over
run here, on the event loop, which owns them.
"""

from __future__ import annotations

import contextlib
from typing import Any

from grader.checks import Judge
from grader.engine import grade_async
from grader.rows import live_row
from grader.usage import token_usage
from proxy.logs import get_logger
from proxy.pipeline.episodes import judge_episode
from proxy.pipeline.episodeusage import EpisodeUsage
from proxy.pipeline.grade import Graded, GradeJob
from proxy.pipeline.ledger import Ledger
from proxy.pipeline.record.metrics import ProxyMetrics
from proxy.pipeline.record.pairs import PairTracker
from proxy.pipeline.record.recording import Entry, Recording, WriterThread, Written
from proxy.telemetry.record import SpanSink

log = get_logger("gradeproxy.grading")


def log_quietly(event: str, **fields: Any) -> None:
    """Log without ever raising: a log line that cannot render must not end a worker."""
    with contextlib.suppress(Exception):
        if fields.pop("exc_info", False):
            log.exception(event, **fields)
        else:
            log.error(event, **fields)


class Settler:
    """Counts, finishes, records and reports graded jobs for the grade queue."""

    def __init__(
        self,
        metrics: ProxyMetrics,
        writes: WriterThread,
        pairs: PairTracker | None,
        judge: Judge | None,
    ) -> None:
        self.metrics = metrics
        self.writes = writes
        self.pairs = pairs
        self.judge = judge
        self.telemetry: SpanSink | None = None  # tracing on: each job's span ends in report
        self.ledger = Ledger()  # every job ends in report once: settled there
        self.episode_usage = EpisodeUsage()  # episode rows' usage: their turns' sum

    def failed(self, job: GradeJob) -> None:
        self.metrics.grading_errors.labels("worker").inc()
        log_quietly("grade_job_failed", exc_info=True, request_id=job.request_id)
        with contextlib.suppress(Exception):
            self.report(job, None)

    def grader_failed(self, job: GradeJob) -> None:
        """A grader or check bug (raised while grading): an infrastructure error, never a model
        failure; logged with its traceback (call it from the ``except``)."""
        self.metrics.grading_errors.labels("grader").inc()
        log.exception("grading_failed", request_id=job.request_id, task=job.task.id)
        self.report(job, None)

    def accepted(self, job: GradeJob, graded: Graded) -> bool:
        """Count what the outcome says; False when it leaves nothing to record (reported)."""
        if job.span is not None:  # the trace's response facts, from the parsed copy
            job.span.call = graded.call
        self._episode_usage(job, graded)
        if graded.error_kind is not None:
            self.metrics.grading_errors.labels(graded.error_kind).inc()
            self.report(job, None)
            return False
        if graded.episode_limit is not None:
            self.metrics.episode_limits.labels(graded.episode_limit).inc()
        if graded.skip_reason is not None:
            self.metrics.skipped.labels(graded.skip_reason).inc()
            self.report(job, None)
            return False
        if graded.episode_skip is not None:  # the turn's rows stand; the episode is skipped
            self.metrics.skipped.labels(graded.episode_skip).inc()
        return True

    def _episode_usage(self, job: GradeJob, graded: Graded) -> None:
        """Add a turn's usage to its episode's sum; an episode row takes the sum."""
        turn = job.episode
        if turn is None or turn.episode_id is None or job.variant != "primary":
            return
        self.episode_usage.add(turn.episode_id, token_usage(graded.call.get("usage")))
        row = graded.episode.row if graded.episode is not None else None
        if row is not None:
            row["usage"] = self.episode_usage.take(turn.episode_id)

    async def finish(self, job: GradeJob, graded: Graded, done: Recording | None) -> None:
        """The judge's columns (on the loop, where its client lives), then the rows recorded."""
        for index, text, context, live, local in graded.pending:
            try:
                outcome = await grade_async(job.task, text, context, judge=self.judge, local=local)
            except Exception:  # a check bug
                self.grader_failed(job)
                return
            graded.rows[index] = live_row(job.task, outcome, job.tasks_digest, live)
        if graded.episode is not None:
            await judge_episode(graded.episode, job.task, self.judge)
        await self.record([(job, done, graded.rows)])

    def report(self, job: GradeJob, done: Recording | None) -> None:
        """Tell the pair tracker how a leg of a shadowed request ended (once per leg), and
        the exporter how its request did (the span's evaluation results are its rows)."""
        self.ledger.settled()
        if self.telemetry is not None and job.span is not None:
            self.telemetry.finish(job.span, None if done is None else done.kept)
        if job.pair_id is None or self.pairs is None:
            return
        # An `error` row is ungraded: its pair stays incomplete.
        results = None if done is None else done.verdicts
        self.pairs.leg(job.pair_id, job.variant, job.task.id, results)

    async def record(self, entries: list[Entry]) -> None:
        """Count and write jobs' rows with one hand-over to the writer thread, then settle each
        job's pair and span. Rows come reduced from where they were graded, or are reduced in
        the writer thread first. A job whose recording raised (a bug) fails alone."""
        if not entries:
            return
        try:
            written = await self.writes.record_many(entries)
        except Exception:  # the writer thread is gone: every job of the batch failed
            for job, *_ in entries:
                self.failed(job)
            return
        for (job, *_), outcome in zip(entries, written, strict=True):
            try:
                self._recorded(job, outcome)
            except Exception:
                self.failed(job)

    def _recorded(self, job: GradeJob, written: Written) -> None:
        """What the writer thread made of a job: raised (a bug) or logged, then reported."""
        if isinstance(written, Exception):
            raise written
        done, failed = written
        if failed is not None:
            log_quietly("results_write_failed", request_id=job.request_id, error=str(failed))
        self.report(job, done)
