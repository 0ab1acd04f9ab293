"""The grading process: grade jobs graded in an interpreter of their own, so no GIL is shared.

The proxy's event loop relays every stream; the grading thread it used to run beside it held the
GIL in long C calls (``orjson`` over a 5 MB body, 10,000 rows built) and its garbage collections
stopped the loop with it. Here the CPU part of a grade job (:func:`proxy.pipeline.grade.grade_job`:
capture, every check but the judge's, the rows) runs in a child started with ``forkserver`` (or
``spawn``), never forked from a process with a running loop. ``proxy.pipeline.offload`` is the
parent's side of the one pipe between them.

The messages, each one pickle in ``multiprocessing.connection``'s framing (a 4-byte big-endian
length, then the bytes), and each a ``NamedTuple`` defined here (``ToChild``, ``FromChild``)::

    parent -> child  TasksMessage(digest, TaskSet)       once per reload (pickled once)
                     GradeBatch([(seq, pickled wire), ...], capture_answer, max_answer_chars,
                                RecordOptions), then each job's body as a frame of raw bytes
                     CallMessage(seq, pickled (function, args))   a heavy check (scoring API)
                     StopMessage()                       finish what is queued, then exit
    child -> parent  Ready(pid)
                     RowsPiece(seq, rows)                a long job's rows, in pieces
                     LinesPiece(seq, bytes)              a reduced job's JSONL, in pieces
                     JobGraded(seq, (Graded, Recording | None) | None, error | None)
                     CallDone(seq, ok, result | error)
                     Unpicklable(seq, error)             the answer cannot cross: the parent
                                                         grades that job or call in a thread

A job's wire form is its fields but the body, and its task as a reference into a task set the
child holds (``("set", digest, task_id)``) or, when the child has no such set, the task itself.
The child keeps the last :data:`KEEP_SETS` task sets, so a job captured just before a reload
still grades against the set it was captured with. It ignores SIGINT, SIGTERM and SIGHUP: the
parent decides when it ends (``stop``, or the pipe closing when the parent is gone), so a signal
sent to the whole process group cannot lose queued jobs.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import signal
import struct
from collections import OrderedDict
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any, NamedTuple

from grader.collector import GC_YOUNG_THRESHOLD
from grader.tasks import Task, TaskSet
from proxy.pipeline.grade import GradeJob
from proxy.pipeline.record.recording import Outcome, RecordOptions, grade_and_reduce

KEEP_SETS = 4  # task sets the child holds (the parent mirrors the same eviction)
ROWS_PER_MESSAGE = 64  # a long job's rows come back in pieces: no long unpickle in the parent
PICKLE = pickle.HIGHEST_PROTOCOL
# The child yields the CPU to the relay: on a core both share, the event loop runs first and
# grading takes what is left (a queue that then fills drops and counts, as it always did).
NICENESS = 10

HEADER = struct.Struct("!i")  # multiprocessing.connection's framing: a length, then the bytes
SLICE_BYTES = 256 * 1024  # the most the parent's loop copies into the pipe's buffer in one go

TaskRef = tuple[str, str, str] | tuple[str, Task]
Piece = bytes | memoryview


# The messages (drawn in the module docstring): one class a kind, so each side matches on the
# class and mypy checks every field. A NamedTuple pickles as its fields and a reference to its
# class, which both processes import from this module.


class TasksMessage(NamedTuple):
    """A reloaded task set, pickled once by the parent."""

    digest: str
    tasks: TaskSet


class GradeBatch(NamedTuple):
    """Jobs as ``(seq, pickled wire form)``; their bodies follow as raw frames, in order."""

    batch: list[tuple[int, bytes]]
    capture_answer: bool
    max_answer_chars: int
    options: RecordOptions


class CallMessage(NamedTuple):
    """A heavy check to run: the pickled ``(function, args)``."""

    seq: int
    call: bytes


class StopMessage(NamedTuple):
    """Finish what is queued, then exit."""


ToChild = TasksMessage | GradeBatch | CallMessage | StopMessage


class Ready(NamedTuple):
    """The child started and reads its pipe."""

    pid: int


class RowsPiece(NamedTuple):
    """Some of a long job's rows, ahead of its ``JobGraded``."""

    seq: int
    rows: list[dict[str, Any]]


class LinesPiece(NamedTuple):
    """Some of a reduced job's JSONL, ahead of its ``JobGraded``."""

    seq: int
    lines: bytes


class JobGraded(NamedTuple):
    """A job's outcome, or (``outcome`` None) why grading it raised."""

    seq: int
    outcome: Outcome | None
    error: str | None


class CallDone(NamedTuple):
    """A call's result (``ok``), or the repr of what it raised."""

    seq: int
    ok: bool
    result: Any


class Unpicklable(NamedTuple):
    """The answer to ``seq`` cannot cross the pipe: the parent runs it in a thread."""

    seq: int
    error: str


FromChild = Ready | RowsPiece | LinesPiece | JobGraded | CallDone | Unpicklable


def frames(bodies: Sequence[list[bytes]]) -> list[Piece]:
    """Frames (each a length, then its parts' bytes) as pieces of about SLICE_BYTES to write:
    small parts joined, across frames, a slice at a time (a batch of small jobs is one write);
    a large part cut into slices without a copy."""
    pieces: list[Piece] = []
    run: list[bytes] = []
    size = 0
    for parts in bodies:
        for part in (HEADER.pack(sum(len(part) for part in parts)), *parts):
            if not part:
                continue
            if len(part) >= SLICE_BYTES:
                if run:
                    pieces.append(b"".join(run))
                    run, size = [], 0
                view = memoryview(part)
                pieces.extend(
                    view[start : start + SLICE_BYTES] for start in range(0, len(part), SLICE_BYTES)
                )
                continue
            run.append(part)
            size += len(part)
            if size >= SLICE_BYTES:
                pieces.append(b"".join(run))
                run, size = [], 0
    if run:
        pieces.append(b"".join(run))
    return pieces


_FIELDS = tuple(f for f in GradeJob.__slots__ if f not in ("task", "response"))


def job_wire(job: GradeJob, task_ref: TaskRef) -> dict[str, Any]:
    """What is pickled for one job: small values, never the task set, never the body (which
    follows the batch as a raw frame, so a 5 MB answer is never copied into a pickle)."""
    wire = {name: getattr(job, name) for name in _FIELDS}
    wire["task"] = task_ref
    return wire


def job_from_wire(
    wire: dict[str, Any], sets: OrderedDict[str, TaskSet], response: bytes
) -> GradeJob:
    """The job again, its body one bytes object (capture is split-invariant)."""
    ref = wire.pop("task")
    if ref[0] == "set":
        task = sets[ref[1]].get(ref[2])
        if task is None:
            raise LookupError(f"task {ref[2]!r} is not in the set {ref[1]!r}")
    else:
        task = ref[1]
    return GradeJob(task=task, response=[response], **wire)


def keep(sets: OrderedDict[str, Any], digest: str, value: Any) -> None:
    """Hold a task set (or, in the parent, its digest): the newest last, at most KEEP_SETS."""
    sets[digest] = value
    sets.move_to_end(digest)
    while len(sets) > KEEP_SETS:
        sets.popitem(last=False)


def _send(conn: Connection, message: FromChild) -> None:
    conn.send_bytes(pickle.dumps(message, PICKLE))


def _answer(conn: Connection, seq: int, message: FromChild) -> None:
    """Send an answer; one that cannot be pickled becomes ``unpicklable`` (never a crash)."""
    try:
        data = pickle.dumps(message, PICKLE)
    except Exception as exc:
        data = pickle.dumps(Unpicklable(seq, repr(exc)[:500]), PICKLE)
    conn.send_bytes(data)


def _grade(conn: Connection, seq: int, outcome: Outcome) -> None:
    """Send a job's outcome in pieces no one message of which is long to unpickle: a reduced
    job's JSONL pieces but the last first; else its rows, all but the last piece first, so the
    last row (an episode's, which ``graded.episode`` shares) travels in the pickle that refers
    to it."""
    graded, done = outcome
    if done is not None:  # the last piece (for most jobs the only one) goes with the outcome
        for piece in done.lines[:-1]:
            _answer(conn, seq, LinesPiece(seq, piece))
        done.lines = done.lines[-1:]
    rows = graded.rows
    cut = max(len(rows) - ROWS_PER_MESSAGE, 0)
    for start in range(0, cut, ROWS_PER_MESSAGE):
        _answer(conn, seq, RowsPiece(seq, rows[start : min(start + ROWS_PER_MESSAGE, cut)]))
    graded.rows = rows[cut:]
    _answer(conn, seq, JobGraded(seq, outcome, None))


def _batch(
    conn: Connection,
    sets: OrderedDict[str, TaskSet],
    batch: list[tuple[int, bytes]],
    bodies: list[bytes],
    capture_answer: bool,
    max_answer_chars: int,
    options: RecordOptions,
) -> None:
    for (seq, blob), body in zip(batch, bodies, strict=True):
        try:
            job = job_from_wire(pickle.loads(blob), sets, body)
            outcome = grade_and_reduce(job, capture_answer, max_answer_chars, options)
        except Exception as exc:  # the parent counts it as a grader error, as in-thread
            _send(conn, JobGraded(seq, None, repr(exc)[:500]))
            continue
        _grade(conn, seq, outcome)


def _call(conn: Connection, seq: int, blob: bytes) -> None:
    try:
        function, args = pickle.loads(blob)
        result = function(*args)
    except Exception as exc:
        _send(conn, CallDone(seq, False, repr(exc)[:500]))
        return
    _answer(conn, seq, CallDone(seq, True, result))


def _settle_heap() -> None:
    """Freeze what lives long (the modules, the task sets held), as the proxy's process does
    (proxy/app.py): grading allocates thousands of objects a job, and every full collection
    would walk the whole heap again. Unfrozen first, so an evicted task set's cycles are freed."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def main(conn: Connection) -> None:
    """The child's loop: one message at a time, in the order the parent sent them."""
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        os.nice(NICENESS)
    sets: OrderedDict[str, TaskSet] = OrderedDict()
    _settle_heap()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    _send(conn, Ready(os.getpid()))
    while True:
        try:
            message: ToChild = pickle.loads(conn.recv_bytes())
        except EOFError:  # the parent is gone: nobody is left to read a row
            return
        if isinstance(message, TasksMessage):
            keep(sets, message.digest, message.tasks)
            _settle_heap()  # the new set is long-lived; an evicted one may hold cycles
        elif isinstance(message, GradeBatch):
            try:
                bodies = [conn.recv_bytes() for _ in message.batch]  # they follow the batch
            except EOFError:
                return
            _batch(
                conn,
                sets,
                message.batch,
                bodies,
                message.capture_answer,
                message.max_answer_chars,
                message.options,
            )
        elif isinstance(message, CallMessage):
            _call(conn, message.seq, message.call)
        elif isinstance(message, StopMessage):
            return
