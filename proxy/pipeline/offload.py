"""The parent's side of the grading process (``proxy.pipeline.child``): one pipe, batched.

Jobs handed to :meth:`GradingProcess.grade` in the same event-loop tick travel as one message;
the child answers each as it finishes. Everything on this side runs on the event loop and never
blocks it: the pipe is an asyncio stream (the kernel copies bytes while the loop relays), and
the only CPU spent here is pickling a job's small fields and unpickling what comes back, which
the child sends in pieces (its JSONL, or rows ``ROWS_PER_MESSAGE`` at a time). A body follows
its batch as a raw frame, written a slice of ``SLICE_BYTES`` at a time by one writer task that
waits for the pipe to drain between slices: a 5 MB answer is never pickled, joined or copied
whole on the loop, and every frame keeps its order.

A child that dies (killed, out of memory, a crash in a C extension) is restarted, with a
backoff, and counted through ``on_restart``; while it is down :attr:`GradingProcess.up` is
False, so grading reports unhealthy. The first job it had not answered is the one it died on:
that job fails with :class:`GradingProcessDiedError` (an infrastructure error, never a model
failure); the jobs sent after it go to the new child.

A child that hangs (a check stuck in a C call, a loop no bound caught) is ended the same way:
with ``deadline_s`` set, a job (or call) the child has held longer than that, counted from when
the child could start it (its answer to the one before, or its own writing), fails with
:class:`GradingDeadlineError`; the child is killed and restarted, and the rest of the queue goes
to the new child. The task set travels once per reload
(:meth:`set_tasks`, pickled once, sent again only to a restarted child); a job whose set the
child does not hold carries its task itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import pickle
import socket
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.context import BaseContext
from typing import Any

from grader.tasks import TaskSet
from proxy.errors import ProxyError
from proxy.logs import get_logger
from proxy.pipeline import child
from proxy.pipeline.child import (
    HEADER,
    PICKLE,
    SLICE_BYTES,
    CallDone,
    CallMessage,
    FromChild,
    GradeBatch,
    JobGraded,
    LinesPiece,
    Piece,
    Ready,
    RowsPiece,
    StopMessage,
    TaskRef,
    TasksMessage,
    ToChild,
    Unpicklable,
    frames,
    job_wire,
    keep,
)
from proxy.pipeline.grade import GradeJob
from proxy.pipeline.record.recording import Outcome, RecordOptions

log = get_logger("gradeproxy.grading")

RESTART_BACKOFF_S = (0.05, 0.2, 1.0, 5.0)
YIELD_S = 0.0005  # the longest the pipe's reader keeps the loop while messages wait


class GradingProcessDiedError(ProxyError, RuntimeError):
    """The grading process ended while it had this job: nothing was graded."""


class GradingDeadlineError(GradingProcessDiedError):
    """The grading process held this job past ``grading.job_deadline_s``: it was killed."""


class NotPicklableError(ProxyError, TypeError):
    """A job or call that cannot cross the pipe (a check holding a compiled validator): the
    caller grades it in a thread instead."""


class GraderError(ProxyError, RuntimeError):
    """``grade_job`` raised in the child (the same grader bug would have raised in a thread)."""


def context() -> BaseContext:
    """``forkserver`` where there is one (a fresh server process forks each child, cheap after
    the first), else ``spawn``; never ``fork``: the parent runs an event loop and threads."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload([child.__name__])
        return ctx
    return multiprocessing.get_context("spawn")


# An outbox item: (seq, "grade" | "call", the pickled wire form or (function, args), the
# job's body as captured: its parts, never joined here).
Item = tuple[int, str, bytes, list[bytes]]


@dataclass(slots=True)
class _Sent:
    future: asyncio.Future[Any]
    item: Item  # kept to send again to the next child after a crash
    rows: list[dict[str, Any]] = field(default_factory=list)
    lines: list[bytes] = field(default_factory=list)


class GradingProcess:
    """One grading child, restarted when it dies; grade jobs and heavy calls go through it."""

    def __init__(
        self,
        *,
        capture_answer: bool,
        max_answer_chars: int,
        options: RecordOptions | None = None,
        batch_max: int = 64,
        on_restart: Callable[[], None] = lambda: None,
        deadline_s: float | None = None,
    ) -> None:
        self.capture_answer = capture_answer
        self.max_answer_chars = max_answer_chars
        self.options = options or RecordOptions(capture_answer)
        self.batch_max = batch_max
        self.on_restart = on_restart
        self.pid: int | None = None  # the running child's, once it said it is ready
        self.restarts = 0
        self.jobs_sent = 0
        self.calls_sent = 0
        self.tasks_inlined = 0  # jobs that carried their task (the child had not its set)
        self._seq = 0
        # Every unanswered item, in the order sent; the child answers in that order. The
        # outbox (not written yet) is always its tail.
        self._sent: dict[int, _Sent] = {}
        self._outbox: list[Item] = []
        self._flushing = False
        self._out: deque[Piece] = deque()  # written by the pump, in order, behind a slow pipe
        self._pump: asyncio.Task[None] | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._process: Any = None  # multiprocessing's BaseProcess
        self._reader: asyncio.Task[None] | None = None
        self._tasks_blob: tuple[str, bytes] | None = None  # (digest, pickled "tasks" message)
        self._child_sets: OrderedDict[str, None] = OrderedDict()  # what the child holds
        self._stopping = False
        self._starting: asyncio.Task[None] | None = None
        self._up = asyncio.Event()
        self.deadline_s = deadline_s
        self.deadlines_missed = 0
        self._head_since = time.monotonic()  # when the child could start the oldest written item
        self._overdue: int | None = None  # the seq the child was killed over
        self._watch: asyncio.Task[None] | None = None

    @property
    def up(self) -> bool:
        return self.pid is not None and self._writer is not None

    def start(self) -> None:
        self._stopping = False
        self._starting = asyncio.create_task(self._spawn(0), name="grading-process-start")
        if self.deadline_s is not None:
            self._watch = asyncio.create_task(self._keep_deadline(), name="grading-deadline")

    def _written(self) -> int:
        """Items written to the child and not answered (the oldest is the one it grades)."""
        return len(self._sent) - len(self._outbox)

    async def _keep_deadline(self) -> None:
        """Kill a child that holds one item past ``deadline_s``: the reader then sees it end,
        fails that item (:class:`GradingDeadlineError`) and starts the next child."""
        assert self.deadline_s is not None
        tick = min(max(self.deadline_s / 4, 0.01), 1.0)
        while not self._stopping:
            await asyncio.sleep(tick)
            overdue = time.monotonic() - self._head_since > self.deadline_s
            if not overdue or not self.up or self._written() <= 0 or self._overdue is not None:
                continue
            self._overdue = next(iter(self._sent))
            self.deadlines_missed += 1
            with contextlib.suppress(Exception):
                log.error("grading_deadline_missed", pid=self.pid, deadline_s=self.deadline_s)
                self._process.kill()

    async def ready(self) -> None:
        """Wait until a child has started and said so."""
        await self._up.wait()

    async def _spawn(self, attempt: int) -> None:
        if attempt:
            await asyncio.sleep(RESTART_BACKOFF_S[min(attempt, len(RESTART_BACKOFF_S)) - 1])
        ctx = context()
        mine, theirs = ctx.Pipe(duplex=True)
        process = ctx.Process(  # type: ignore[attr-defined]
            target=child.main, args=(theirs,), name="gradeproxy-grade", daemon=True
        )
        await asyncio.to_thread(process.start)  # fork+exec, or a request to the fork server
        theirs.close()
        sock = socket.socket(fileno=os.dup(mine.fileno()))
        mine.close()
        reader, writer = await asyncio.open_unix_connection(sock=sock, limit=1 << 20)
        self._process = process
        self._reader = asyncio.create_task(self._read(reader, writer, attempt))

    async def _read(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, attempt: int
    ) -> None:
        turn = time.perf_counter()
        try:
            while True:
                size = HEADER.unpack(await reader.readexactly(HEADER.size))[0]
                message: FromChild = pickle.loads(await reader.readexactly(size))
                if isinstance(message, Ready):
                    self._ready(message.pid, writer)
                    attempt = 0
                else:
                    self._answer(message)
                # readexactly does not yield while the buffer holds the next message: yield
                # every YIELD_S, so a 10,000-row answer is read between other requests.
                if time.perf_counter() - turn > YIELD_S:
                    await asyncio.sleep(0)
                    turn = time.perf_counter()
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass  # the child is gone
        finally:
            writer.close()
            self._died(attempt)

    def _ready(self, pid: int, writer: asyncio.StreamWriter) -> None:
        """A new child: the current task set first, then what waits (a dead child's jobs)."""
        self.pid, self._writer = pid, writer
        self._head_since = time.monotonic()
        self._up.set()
        self._child_sets.clear()
        if self._tasks_blob is not None:
            digest, blob = self._tasks_blob
            self._emit(frames([[blob]]))
            keep(self._child_sets, digest, None)
        self._flush()

    def _answer(self, message: RowsPiece | LinesPiece | JobGraded | CallDone | Unpicklable) -> None:
        seq = message.seq
        sent = self._sent.get(seq)
        if sent is None:
            return
        if isinstance(message, RowsPiece):
            sent.rows.extend(message.rows)
            return
        if isinstance(message, LinesPiece):
            sent.lines.append(message.lines)
            return
        del self._sent[seq]
        self._head_since = time.monotonic()  # the child starts the next item now
        if sent.future.done():  # its caller was cancelled
            return
        if isinstance(message, Unpicklable):  # the caller grades it in a thread instead
            sent.future.set_exception(NotPicklableError(message.error))
        elif isinstance(message, JobGraded):
            outcome = message.outcome
            if outcome is None:
                sent.future.set_exception(GraderError(str(message.error)))
            else:
                graded, done = outcome
                graded.rows[:0] = sent.rows
                if done is not None:
                    done.lines[:0] = sent.lines
                sent.future.set_result(outcome)
        elif message.ok:
            sent.future.set_result(message.result)
        else:
            sent.future.set_exception(GraderError(message.result))

    def _fail(self, seq: int) -> None:
        sent = self._sent.pop(seq)
        if sent.future.done():
            return
        if seq == self._overdue:
            reason = f"the grading process held the job over {self.deadline_s} s and was killed"
            sent.future.set_exception(GradingDeadlineError(reason))
        else:
            sent.future.set_exception(GradingProcessDiedError("the grading process ended"))

    def _died(self, attempt: int) -> None:
        """Fail the item the child died on, keep the rest for the next child, restart it."""
        self.pid, self._writer = None, None
        self._up.clear()
        self._out.clear()  # half a frame means nothing to the next child
        if self._pump is not None:
            self._pump.cancel()
        if self._written() > 0:  # the first item written and not answered is the one it died on
            self._fail(next(iter(self._sent)))
        self._overdue = None
        if self._stopping:  # nothing restarts now: nobody will answer the rest
            for seq in list(self._sent):
                self._fail(seq)
            self._outbox.clear()
            return
        for sent in self._sent.values():
            sent.rows.clear()
            sent.lines.clear()
        self._outbox = [sent.item for sent in self._sent.values()]
        self.restarts += 1
        with contextlib.suppress(Exception):
            self.on_restart()
            code = getattr(self._process, "exitcode", None)
            log.error("grading_process_restarted", exit_code=code, requeued=len(self._outbox))
        self._starting = asyncio.create_task(self._spawn(attempt + 1), name="grading-process")

    def set_tasks(self, tasks: TaskSet) -> None:
        """Send a reloaded task set: pickled once, in a thread, then written to the child."""
        asyncio.get_running_loop().create_task(self._send_tasks(tasks), name="grading-tasks")

    async def _send_tasks(self, tasks: TaskSet) -> None:
        try:
            message = TasksMessage(tasks.digest, tasks)
            blob = await asyncio.to_thread(pickle.dumps, message, PICKLE)
        except Exception as exc:  # its jobs carry their tasks, or are graded in a thread
            log.error("task_set_not_picklable", digest=tasks.digest, error=repr(exc)[:300])
            return
        self._tasks_blob = (tasks.digest, blob)
        if self._writer is not None:  # else the next child's "ready" sends it
            self._emit(frames([[blob]]))
            keep(self._child_sets, tasks.digest, None)

    def holds(self, digest: str) -> bool:
        """Whether the running child holds the task set ``digest`` (jobs then refer to it)."""
        return self.up and digest in self._child_sets

    def _ref(self, job: GradeJob) -> TaskRef:
        if job.tasks_digest in self._child_sets:
            return ("set", job.tasks_digest, job.task.id)
        self.tasks_inlined += 1
        return ("task", job.task)

    def _enqueue(self, kind: str, payload: Any, body: list[bytes]) -> asyncio.Future[Any]:
        try:  # each item alone: one that cannot be pickled fails here, not a whole batch
            blob = pickle.dumps(payload, PICKLE)
        except Exception as exc:
            raise NotPicklableError(repr(exc)[:300]) from exc
        loop = asyncio.get_running_loop()
        self._seq += 1
        item: Item = (self._seq, kind, blob, body)
        future: asyncio.Future[Any] = loop.create_future()
        self._sent[self._seq] = _Sent(future, item)
        self._outbox.append(item)
        if not self._flushing:  # one write for every item of this tick
            self._flushing = True
            loop.call_soon(self._flush)
        return future

    def grade(self, job: GradeJob) -> asyncio.Future[Outcome]:
        """Grade ``job`` in the child; jobs submitted in one tick go as one batch.

        Raises :class:`NotPicklableError` at once for a job that cannot cross the pipe.
        """
        future = self._enqueue("grade", job_wire(job, self._ref(job)), job.response)
        self.jobs_sent += 1
        return future

    def call(self, function: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """Run a module-level ``function(*args)`` in the child (heavy checks); raises
        :class:`NotPicklableError` at once when the arguments cannot cross the pipe."""
        future = self._enqueue("call", (function, args), [])
        self.calls_sent += 1
        return future

    def _batch(self, batch: list[tuple[int, bytes]]) -> GradeBatch:
        return GradeBatch(batch, self.capture_answer, self.max_answer_chars, self.options)

    def _write(self, message: ToChild, bodies: Sequence[list[bytes]] = ()) -> None:
        """One message, then the bodies that follow it, each a frame."""
        self._emit(frames([[pickle.dumps(message, PICKLE)], *bodies]))

    def _emit(self, pieces: list[Piece]) -> None:
        """Write now when nothing waits and it is small; else behind what waits, by the pump."""
        assert self._writer is not None
        if not self._out and len(pieces) == 1 and len(pieces[0]) < SLICE_BYTES:
            self._writer.write(pieces[0])
            return
        self._out.extend(pieces)
        if self._pump is None or self._pump.done():
            self._pump = asyncio.get_running_loop().create_task(
                self._drain_out(self._writer), name="grading-pipe"
            )

    async def _drain_out(self, writer: asyncio.StreamWriter) -> None:
        """One slice a turn of the loop, waiting whenever the pipe's buffer is full."""
        with contextlib.suppress(ConnectionError, RuntimeError):
            while self._out and writer is self._writer:
                writer.write(self._out.popleft())
                await writer.drain()
                await asyncio.sleep(0)

    def _flush(self) -> None:
        self._flushing = False
        if self._writer is None:  # not up yet: the items wait for the child's "ready"
            return
        if self._written() <= 0:  # the child was idle: the first of these starts now
            self._head_since = time.monotonic()
        outbox, self._outbox = self._outbox, []
        batch: list[tuple[int, bytes]] = []
        bodies: list[list[bytes]] = []
        for seq, kind, payload, body in outbox:
            if kind == "grade":
                batch.append((seq, payload))
                bodies.append(body)
                if len(batch) < self.batch_max:
                    continue
            if batch:
                self._write(self._batch(batch), bodies)
                batch, bodies = [], []
            if kind == "call":
                self._write(CallMessage(seq, payload))
        if batch:
            self._write(self._batch(batch), bodies)

    async def stop(self, timeout_s: float | None) -> None:
        """Let the child finish what it holds (``stop`` is queued behind it), then end it."""
        self._stopping = True
        if self._watch is not None:
            self._watch.cancel()
        if self._starting is not None and not self._starting.done():
            self._starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._starting
        if self._writer is not None:
            with contextlib.suppress(ConnectionError, RuntimeError):
                self._write(StopMessage())
            if self._reader is not None:
                try:
                    await asyncio.wait_for(asyncio.shield(self._reader), timeout_s)
                except TimeoutError:
                    log.error("grading_process_not_stopped", left=len(self._sent))
        process = self._process
        if process is not None:
            if process.is_alive():
                process.kill()
            await asyncio.to_thread(process.join, 5)
        if self._reader is not None and not self._reader.done():
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
