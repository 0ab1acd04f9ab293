"""The grading process: grade jobs graded in an interpreter of their own, so no GIL is shared.

The proxy's event loop relays every stream; the grading thread it used to run beside it held the
GIL in long C calls (``orjson`` over a 5 MB body, 10,000 rows built) and its garbage collections
stopped the loop with it. Here the CPU part of a grade job (:func:`proxy.pipeline.grade.grade_job`:
capture, every check but the judge's, the rows) runs in a child started with ``forkserver`` (or
``spawn``), never forked from a process with a running loop. ``proxy.pipeline.offload`` is the
parent's side of the one pipe between them.

The messages, each one pickle in ``multiprocessing.connection``'s framing (a 4-byte big-endian
length, then the bytes)::

    parent -> child  ("tasks", digest, TaskSet)          once per reload (pickled once)
                     ("grade", [(seq, pickled wire), ...], capture_answer, max_answer_chars,
                      RecordOptions), then each job's body as a frame of raw bytes
                     ("call", seq, pickled (function, args))   a heavy check (the scoring API)
                     ("stop",)                            finish what is queued, then exit
    child -> parent  ("ready", pid)
                     ("rows", seq, rows)                  a long job's rows, in pieces
                     ("lines", seq, bytes)                a reduced job's JSONL, in pieces
                     ("graded", seq, (Graded, Recording | None) | None, error | None)
                     ("called", seq, ok, result | error)
                     ("unpicklable", seq, error)         the answer cannot cross: the parent
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
import os
import pickle
import signal
import struct
from collections import OrderedDict
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

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


def _send(conn: Connection, message: tuple[Any, ...]) -> None:
    conn.send_bytes(pickle.dumps(message, PICKLE))


def _answer(conn: Connection, seq: int, message: tuple[Any, ...]) -> None:
    """Send an answer; one that cannot be pickled becomes ``unpicklable`` (never a crash)."""
    try:
        data = pickle.dumps(message, PICKLE)
    except Exception as exc:
        data = pickle.dumps(("unpicklable", seq, repr(exc)[:500]), PICKLE)
    conn.send_bytes(data)


def _grade(conn: Connection, seq: int, outcome: Outcome) -> None:
    """Send a job's outcome in pieces no one message of which is long to unpickle: a reduced
    job's JSONL pieces but the last first; else its rows, all but the last piece first, so the
    last row (an episode's, which ``graded.episode`` shares) travels in the pickle that refers
    to it."""
    graded, done = outcome
    if done is not None:  # the last piece (for most jobs the only one) goes with the outcome
        for piece in done.lines[:-1]:
            _answer(conn, seq, ("lines", seq, piece))
        done.lines = done.lines[-1:]
    rows = graded.rows
    cut = max(len(rows) - ROWS_PER_MESSAGE, 0)
    for start in range(0, cut, ROWS_PER_MESSAGE):
        _answer(conn, seq, ("rows", seq, rows[start : min(start + ROWS_PER_MESSAGE, cut)]))
    graded.rows = rows[cut:]
    _answer(conn, seq, ("graded", seq, outcome, None))


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
            _send(conn, ("graded", seq, None, repr(exc)[:500]))
            continue
        _grade(conn, seq, outcome)


def _call(conn: Connection, seq: int, blob: bytes) -> None:
    try:
        function, args = pickle.loads(blob)
        result = function(*args)
    except Exception as exc:
        _send(conn, ("called", seq, False, repr(exc)[:500]))
        return
    _answer(conn, seq, ("called", seq, True, result))


def main(conn: Connection) -> None:
    """The child's loop: one message at a time, in the order the parent sent them."""
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        os.nice(NICENESS)
    sets: OrderedDict[str, TaskSet] = OrderedDict()
    _send(conn, ("ready", os.getpid()))
    while True:
        try:
            message = pickle.loads(conn.recv_bytes())
        except EOFError:  # the parent is gone: nobody is left to read a row
            return
        kind = message[0]
        if kind == "tasks":
            keep(sets, message[1], message[2])
        elif kind == "grade":
            try:
                bodies = [conn.recv_bytes() for _ in message[1]]  # they follow the batch
            except EOFError:
                return
            _batch(conn, sets, message[1], bodies, message[2], message[3], message[4])
        elif kind == "call":
            _call(conn, message[1], message[2])
        elif kind == "stop":
            return
