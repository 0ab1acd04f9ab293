"""Capture rows of untagged requests, built and written off the hot path.

With ``results.capture_untagged`` > 0, a request on a graded route without a task header is
sampled (by the grading sampling key, :func:`proxy.pipeline.admit.sampled`) and, when sampled,
relayed with the same capture copy a graded request gets: the client's bytes and timing are
those of any relayed request. Once the client has its last byte the handler hands the copy here
(:meth:`Captures.submit`, a non-blocking call); after that loop turn the copy is parsed by the
same readers grading uses (``proxy.pipeline.capture``; on the loop when small, as inline
grading, else on the writer thread), turned into ``kind: "capture"`` rows (grader/capture.py)
and appended on the grade queue's writer thread, the one thread that appends rows, so the JSONL
file and the rows-database sink take them like any other row.

Nothing here may raise into the handler or stall the event loop: a response that cannot be
read, a full backlog, a refused write and a bug are each counted in
``gradeproxy_capture_skipped_total{reason}`` and the request is unaffected. What is never
written: untagged requests not sampled (as before), and anything that is not a complete answer
(cut, failed upstream, over ``limits.max_capture_bytes``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import orjson

from grader.capture import AnswerMode, capture_row
from grader.json import dumps
from proxy.logs import get_logger
from proxy.pipeline.admit import Api
from proxy.pipeline.capture.chat import CaptureResult, StreamCapture, answers_from_body
from proxy.pipeline.capture.responses import ResponsesStreamCapture, responses_from_body
from proxy.pipeline.record.results import ResultsWriteError, jsonl_pieces
from proxy.utctime import utc_iso

if TYPE_CHECKING:
    from proxy.pipeline.record.metrics import ProxyMetrics
    from proxy.pipeline.record.recording import WriterThread
    from proxy.pipeline.record.sinks import RowWriter

log = get_logger("gradeproxy.capture")

CaptureSkip = Literal["unreadable", "backlog_full", "write_failed", "error"]


@dataclass(slots=True)
class CaptureJob:
    """One sampled untagged response, as the handler kept it: nothing parsed."""

    request_id: str
    api: Api
    upstream: str
    stream: bool
    request_body: bytes
    response: list[bytes]  # the body (one part) or the stream's chunks, as relayed
    received_at: float = field(default_factory=time.time)
    run: str | None = None
    meta: dict[str, str] = field(default_factory=dict)
    sample_id: str | None = None
    upstream_request_id: str | None = None


def _parsed(job: CaptureJob) -> CaptureResult:
    if not job.stream:
        body = b"".join(job.response)
        return responses_from_body(body) if job.api == "responses" else answers_from_body(body)
    stream = ResponsesStreamCapture() if job.api == "responses" else StreamCapture()
    for chunk in job.response:
        stream.feed(chunk)
    return stream.finish()


def _request(body: bytes) -> dict[str, Any]:
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    return payload if isinstance(payload, dict) else {}


def capture_rows(job: CaptureJob, mode: AnswerMode, max_answer_chars: int) -> list[dict[str, Any]]:
    """The job's capture rows, one per choice; empty when no complete answer could be read."""
    if not any(part.strip() for part in job.response):
        return []
    captured = _parsed(job)
    if captured.error is not None or not captured.answers:
        return []
    request = _request(job.request_body)
    model = captured.model
    if model is None and isinstance(request.get("model"), str):
        model = request["model"]
    received = utc_iso(job.received_at)
    rows = []
    for index in sorted(captured.answers):
        answer = captured.answers[index]
        text = answer if isinstance(answer, str) else dumps(answer).decode()
        live = {
            "request_id": job.request_id,
            "upstream_request_id": job.upstream_request_id,
            "time": received,
            "model": model,
            "upstream": job.upstream,
            "stream": job.stream,
            "finish_reason": captured.finish_reasons.get(index),
            "run": job.run,
            "sample_id": job.sample_id,
            "meta": job.meta,
        }
        rows.append(
            capture_row(
                request=request,
                route=job.api,
                answer=answer,
                text=text,
                mode=mode,
                max_answer_chars=max_answer_chars,
                live=live,
                choice=index,
            )
        )
    return rows


# Capture jobs a hand-over builds on the event loop at most (the rest go to the writer thread):
# a small job's row costs tens of microseconds, like an inline grade.
INLINE_JOBS = 16


def _size(job: CaptureJob) -> int:
    return sum(len(part) for part in job.response)


class Captures:
    """Builds capture rows and hands them to the writer thread, at most ``backlog`` waiting.

    As the grade queue does with grading, small responses (at most ``inline_max_bytes``, the
    grading setting) are parsed and built on the event loop, once the loop turn that answered
    them is over: tens of microseconds, and no other thread holding the GIL while the loop
    serves the next request. Larger ones are built on the writer thread. Either way the rows
    are appended there. Captures submitted within ``window_s`` (``grading.batch_window_s``) go
    over in one hand-over (one wake-up of the thread and one back), up to ``batch_max`` at a
    time, as the grade queue batches its jobs: a hand-over per capture cost the proxy more CPU
    than building the capture (docs/performance.md)."""

    def __init__(
        self,
        metrics: ProxyMetrics,
        writes: WriterThread,
        writer: RowWriter | None,
        *,
        mode: AnswerMode,
        max_answer_chars: int,
        backlog: int,
        inline_max_bytes: int = 16384,
        window_s: float = 0.0,
        batch_max: int = 64,
    ) -> None:
        self.metrics = metrics
        self.writes = writes
        self.writer = writer
        self.mode: AnswerMode = mode
        self.max_answer_chars = max_answer_chars
        self.backlog = max(backlog, 1)
        self.inline_max_bytes = inline_max_bytes
        self.window_s = window_s  # grading.batch_window_s: captures wait for each other
        self.batch_max = max(batch_max, 1)
        self._timer: asyncio.TimerHandle | asyncio.Handle | None = None
        self.pending = 0  # submitted, not yet written (waiting here or on the thread)
        self._waiting: list[CaptureJob] = []
        self._tasks: set[asyncio.Future[None]] = set()

    def submit(self, job: CaptureJob) -> None:
        """Queue ``job`` without waiting; never raises."""
        try:
            if self.pending >= self.backlog:
                self._skipped("backlog_full")
                return
            self._waiting.append(job)
            self.pending += 1
            loop = asyncio.get_running_loop()
            if len(self._waiting) >= self.batch_max:  # full: now, not at the window's end
                if self._timer is not None:
                    self._timer.cancel()
                self._timer = loop.call_soon(self._hand_over)
            elif len(self._waiting) == 1:
                self._timer = (
                    loop.call_later(self.window_s, self._hand_over)
                    if self.window_s > 0
                    else loop.call_soon(self._hand_over)
                )
        except Exception:  # no running loop: nothing can write it
            self._skipped("error")

    def _hand_over(self) -> None:
        self._timer = None
        jobs, self._waiting = self._waiting, []
        if not jobs:
            return
        built: list[list[dict[str, Any]]] = []
        rest: list[CaptureJob] = []
        inline = 0
        for job in jobs:
            if inline < INLINE_JOBS and _size(job) <= self.inline_max_bytes:
                inline += 1
                rows = self._build(job)
                if rows:
                    built.append(rows)
            else:
                rest.append(job)
        if not built and not rest:
            self.pending -= len(jobs)
            return
        try:
            done = self.writes.run(self._write_all, built, rest)
        except Exception:  # the writer thread is gone (shutting down): not written
            self.pending -= len(jobs)
            self._skipped("backlog_full", len(built) + len(rest))
            return
        self._tasks.add(done)
        done.add_done_callback(lambda finished: self._finished(finished, len(jobs)))

    def _finished(self, done: asyncio.Future[None], jobs: int) -> None:
        self.pending -= jobs
        self._tasks.discard(done)
        if not done.cancelled() and done.exception() is not None:
            self._skipped("error", jobs)

    async def idle(self) -> None:
        """Hand over what waits for the window now, and wait until every capture submitted
        is written (tests, and shutdown: the grade queue's ``stop`` calls it)."""
        if self._waiting:
            if self._timer is not None:
                self._timer.cancel()
            self._hand_over()
        while self._tasks:
            await asyncio.wait(set(self._tasks))

    def _skipped(self, reason: CaptureSkip, count: int = 1) -> None:
        with contextlib.suppress(Exception):
            self.metrics.capture_skipped.labels(reason).inc(count)

    def _build(self, job: CaptureJob) -> list[dict[str, Any]]:
        """The job's rows; none (counted) when it cannot be read or building it fails."""
        try:
            rows = capture_rows(job, self.mode, self.max_answer_chars)
        except Exception:  # a reader bug on odd input: counted, never raised
            with contextlib.suppress(Exception):
                log.exception("capture_failed", request_id=job.request_id)
            self._skipped("error")
            return []
        if not rows:
            self._skipped("unreadable")
        return rows

    def _write_all(self, built: list[list[dict[str, Any]]], jobs: list[CaptureJob]) -> None:
        """The writer thread's part: build the large jobs' rows, append every job's at once,
        count (prometheus is thread-safe)."""
        built = built + [rows for rows in map(self._build, jobs) if rows]
        if not built:
            return
        if self.writer is None:  # no results file and no sink: nowhere to write
            self._skipped("write_failed", len(built))
            return
        appended = self.writer.append_many([(jsonl_pieces(rows), len(rows)) for rows in built])
        written = 0
        for rows, failed in zip(built, appended, strict=True):
            if isinstance(failed, ResultsWriteError):
                self._skipped("write_failed")
            else:
                written += len(rows)
        if written:
            self.metrics.capture_rows.inc(written)
