"""One batch command's rows graded in several processes (``gradeproxy grade --jobs N``).

The task set and the input rows are read once, in this process; then ``N - 1`` children are
forked, each with a contiguous slice of the rows, while this process grades the first slice
itself. A child writes its slice's output lines to a scratch file of its own and sends back,
through a pipe, what it counted (the report's tallies, the failure reasons, the problems it
met). This process yields its own lines, then each child's file in slice order, and adds each
child's counts as it goes: the output is the same lines in the same order, and the counts the
same sums, as one process would write (row ids are random either way).

Fork, not a process pool: a forked child starts with the tasks loaded and compiled (the
collector's frozen generation, :func:`gc.freeze`, keeps their pages shared), so no task file is
read twice and nothing is pickled but the counts. Where :func:`os.fork` does not exist, or one
slice would be all there is, one process grades everything. Children end with
:func:`os._exit`: they never run the parent's exit handlers or flush its stdio buffers.
"""

from __future__ import annotations

import os
import pickle
import sys
import traceback
from collections.abc import Callable, Generator, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["can_fork", "sliced", "split"]

T = TypeVar("T")

_BLOCK = 1 << 20  # bytes of a child's file handed on a chunk at a time


def can_fork() -> bool:
    """Whether this platform can grade in forked children (POSIX: Linux, macOS, the BSDs)."""
    return hasattr(os, "fork")


def split(items: Sequence[T], jobs: int) -> list[Sequence[T]]:
    """``items`` in at most ``jobs`` contiguous slices of nearly equal length, none empty."""
    jobs = max(1, min(jobs, len(items)))
    bounds = [len(items) * i // jobs for i in range(jobs + 1)]
    return [items[bounds[i] : bounds[i + 1]] for i in range(jobs)]


class _Child:
    """A forked child: its pid, the read end of its pipe and its scratch file (None: none)."""

    def __init__(self, pid: int, pipe: int, scratch: Path | None) -> None:
        self.pid = pid
        self.pipe = pipe
        self.scratch = scratch

    def result(self) -> Any:
        """What the child sent, once it has ended; raises what the child raised."""
        with os.fdopen(self.pipe, "rb") as reader:
            data = reader.read()
        self.pipe = -1
        _, status = os.waitpid(self.pid, 0)
        self.pid = 0
        if not data:
            raise RuntimeError(f"a grading process ended without its counts ({_status(status)})")
        kind, payload = pickle.loads(data)
        if kind == "raised":
            raise payload
        if kind == "crashed":
            raise RuntimeError(f"a grading process failed:\n{payload}")
        return payload

    def close(self) -> None:
        """Reap the child and remove its scratch file, whatever state it was left in."""
        if self.pipe >= 0:
            os.close(self.pipe)
            self.pipe = -1
        if self.pid:
            os.waitpid(self.pid, 0)
            self.pid = 0
        if self.scratch is not None:
            self.scratch.unlink(missing_ok=True)


def _status(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.WEXITSTATUS(status)}"


def _scratch_beside(output: Path, index: int) -> Path:
    return output.parent / f".{output.name}.{os.getpid()}.{index}.{os.urandom(4).hex()}.part"


def _run_child(
    part: Sequence[T],
    grade: Callable[[Sequence[T]], Iterator[bytes]],
    counts: Callable[[], Any],
    scratch: Path | None,
    pipe: int,
) -> None:
    """The child's whole life: grade ``part``, write its lines, send its counts, leave."""
    code = 0
    try:
        try:
            if scratch is None:
                for _ in grade(part):
                    pass
            else:
                with scratch.open("wb") as out:
                    for chunk in grade(part):
                        out.write(chunk)
            message: tuple[str, Any] = ("counted", counts())
        except (OSError, ValueError) as exc:  # a full disk, --strict's refusal: the parent's
            message = ("raised", exc)
        except BaseException:
            message = ("crashed", traceback.format_exc())
        data = pickle.dumps(message)
        with os.fdopen(pipe, "wb") as writer:
            writer.write(data)
    except BaseException:
        code = 70  # EX_SOFTWARE: the parent reports a child that sent nothing
    finally:
        os._exit(code)


def sliced(
    items: Sequence[T],
    jobs: int,
    here: Callable[[Sequence[T]], Iterator[bytes]],
    there: Callable[[Sequence[T]], Iterator[bytes]],
    counts: Callable[[], Any],
    absorb: Callable[[Any], None],
    output: Path | None,
    finished: Callable[[Sequence[T]], None],
) -> Generator[bytes, None, None]:
    """Every slice's output lines, in order, graded ``jobs`` slices at a time.

    ``here(part)`` grades the first slice in this process and ``there(part)`` each other slice
    in a child (the same grading; ``there`` shows no progress), each yielding its output
    chunks; ``counts()`` is what a child sends back once its slice is graded, and
    ``absorb(counts)`` adds it here, in slice order, before that slice's lines are yielded.
    ``output``: the file the lines go to (the children's scratch files are made beside it);
    None when no lines are kept. ``finished(part)`` is told each child's slice once it is
    added. Must be consumed to the end (or closed): that is when children are
    reaped and scratch files removed.
    """
    parts = split(items, jobs)
    children: list[_Child] = []
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        for index, part in enumerate(parts[1:], start=1):
            scratch = None if output is None else _scratch_beside(output, index)
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child
                os.close(read)
                _run_child(part, there, counts, scratch, write)
            os.close(write)
            children.append(_Child(pid, read, scratch))
        yield from here(parts[0])
        for child, part in zip(children, parts[1:], strict=True):
            absorb(child.result())
            if child.scratch is not None:
                with child.scratch.open("rb") as lines:
                    while block := lines.read(_BLOCK):
                        yield block
            finished(part)
            child.close()
    finally:
        for child in children:
            child.close()
