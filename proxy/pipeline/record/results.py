"""Result rows: one JSON line per graded answer, appended whole, rotated by size.

Each batch of rows (the writer thread's: every job handed over together) is serialised first
and then appended with ``os.write`` on an ``O_APPEND`` descriptor, so there is no buffer that
could flush half a batch later. A write that fails part
way (a full disk) is cut back to where the batch began: the file holds whole rows or nothing,
and :class:`ResultsWriteError` says how many rows were lost, so the loss is counted once.
Shutdown drains the grading queue before the writer closes, so a graceful stop loses none.

The file is the operator's: before each append the writer checks that its path still names the
file it holds open (one ``stat``), and reopens the path when the file was moved or deleted
(logrotate without ``copytruncate``, an ``rm``), so no row goes into an unlinked inode. SIGHUP
asks for a reopen at the next append as well (as nginx's USR1 does). A row that cannot be
written because the path cannot be opened again fails with :class:`ResultsWriteError` and is
counted, like a row a full disk refused.

The writer does blocking I/O; the grade queue calls it from its writer thread, never from the
event loop.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from grader.json import dumps_line
from proxy.errors import ProxyError
from proxy.logs import get_logger

log = get_logger("gradeproxy.results")

_MODE = 0o644  # rows are data for other tools (and other users) to read, as any log file


def worker_path(path: Path, index: int) -> Path:
    """Worker ``index``'s file when ``listen.workers`` > 1: ``grades.jsonl`` → ``grades.w0.jsonl``.

    Processes never share a file (appends from two writers could interleave, and each rotates
    on its own), so each worker writes its own; ``'grades.w*.jsonl'`` reads them all back.
    """
    return path.with_name(f"{path.stem}.w{index}{path.suffix}")


PIECE_BYTES = 256 * 1024


def jsonl_pieces(rows: list[dict[str, Any]]) -> list[bytes]:
    """Rows as the file holds them (one JSON object a line), in pieces of about
    ``PIECE_BYTES``: 10,000 rows are megabytes, and no single copy of them may hold a GIL or
    the event loop (the grading process sends them piece by piece)."""
    return _joined(map(dumps_line, rows))


def regrouped(pieces: list[bytes]) -> list[bytes]:
    """Several jobs' pieces joined into pieces of about ``PIECE_BYTES``: one write for many
    small jobs, and still no copy of megabytes at once."""
    return pieces if len(pieces) < 2 else _joined(pieces)


def _joined(parts: Iterable[bytes]) -> list[bytes]:
    """``parts`` joined, in order, into pieces of about ``PIECE_BYTES`` (never cut inside one)."""
    pieces: list[bytes] = []
    piece: list[bytes] = []
    size = 0
    for part in parts:
        piece.append(part)
        size += len(part)
        if size >= PIECE_BYTES:
            pieces.append(_one(piece))
            piece, size = [], 0
    if piece:
        pieces.append(_one(piece))
    return pieces


def _one(parts: list[bytes]) -> bytes:
    """``parts`` as one piece; a lone part as it is (most jobs are one row: no copy)."""
    return parts[0] if len(parts) == 1 else b"".join(parts)


class ResultsWriteError(ProxyError, OSError):
    """A batch of rows could not be appended; none of it is in the file."""

    def __init__(self, rows: int, cause: OSError) -> None:
        message = f"{rows} row(s) not written: {cause.strerror or cause}"
        OSError.__init__(self, cause.errno, message)  # errno and strerror, as an OSError has
        self.message = message
        self.rows = rows


class ResultWriter:
    """Append-only JSONL with size rotation (``grades.jsonl`` → ``grades.jsonl.1`` …)."""

    def __init__(self, path: Path, max_bytes: int, backups: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        self.rows_written = 0
        self.reopens = 0  # the path named another file, or none, or SIGHUP asked
        self._reopen = False
        self._closed = False
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = None
        self._identity = (0, 0)  # (st_dev, st_ino) of the open file
        self._size = 0
        self._fd = self._open()

    def _open(self) -> int:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, _MODE)
        stat = os.fstat(fd)
        self._identity = (stat.st_dev, stat.st_ino)
        self._size = stat.st_size
        return fd

    def reopen(self) -> None:
        """Open the path again before the next append (SIGHUP): safe from any thread."""
        self._reopen = True

    def _moved(self) -> bool:
        """Whether the path no longer names the open file (moved away, deleted, replaced)."""
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return True
        except OSError:  # cannot tell (a permission changed): keep the file we hold
            return False
        return (stat.st_dev, stat.st_ino) != self._identity

    def _follow(self) -> None:
        """Reopen the path if asked or if the file moved; raise OSError if it cannot be opened
        (then nothing is written into a file no one can read any more)."""
        asked, self._reopen = self._reopen, False
        if not asked and not self._moved():
            return
        assert self._fd is not None
        old, self._fd = self._fd, None
        os.close(old)
        self._fd = self._open()
        self.reopens += 1
        with contextlib.suppress(Exception):
            log.info("results_reopened", path=str(self.path), signal=asked)

    def write(self, rows: list[dict[str, Any]]) -> None:
        """Append rows whole, or none of them (:class:`ResultsWriteError`); rotates first when
        the file would pass ``max_bytes``."""
        self.append(jsonl_pieces(rows), len(rows))

    def append(self, pieces: list[bytes], rows: int) -> None:
        """Append ``rows`` already serialised (:func:`jsonl_pieces`), whole or not at all."""
        if self._closed:
            raise RuntimeError("result writer is closed")
        size = sum(len(piece) for piece in pieces)
        try:
            if self._fd is None:  # a reopen failed: try again, rows meanwhile counted lost
                self._fd = self._open()
            self._follow()
            if self._size and self._size + size > self.max_bytes:
                self._rotate()
        except OSError as exc:
            raise ResultsWriteError(rows, exc) from exc
        assert self._fd is not None
        try:
            for piece in pieces:
                view, written = memoryview(piece), 0
                while written < len(piece):
                    written += os.write(self._fd, view[written:])
        except OSError as exc:
            self._cut_back()
            raise ResultsWriteError(rows, exc) from exc
        self._size += size
        self.rows_written += rows

    def append_many(self, jobs: list[tuple[list[bytes], int]]) -> list[ResultsWriteError | None]:
        """Append several jobs' rows (each its pieces and row count), each whole or not at all,
        with as few writes as rotation allows: consecutive jobs share one append while the file
        stays within ``max_bytes``, so files rotate where appending the jobs one by one would
        rotate them. For each job, None or the error that kept its rows out."""
        outcomes: list[ResultsWriteError | None] = []
        group: list[tuple[list[bytes], int]] = []
        size = 0
        for pieces, rows in jobs:
            job_size = sum(len(piece) for piece in pieces)
            if group and self._size + size + job_size > self.max_bytes:
                outcomes += self._append_group(group)
                group, size = [], 0
            group.append((pieces, rows))
            size += job_size
        if group:
            outcomes += self._append_group(group)
        return outcomes

    def _append_group(self, group: list[tuple[list[bytes], int]]) -> list[ResultsWriteError | None]:
        try:
            self.append(
                regrouped([piece for pieces, _ in group for piece in pieces]),
                sum(rows for _, rows in group),
            )
        except ResultsWriteError as failed:  # none of the group's rows is in the file
            cause = failed.__cause__ if isinstance(failed.__cause__, OSError) else failed
            return [ResultsWriteError(rows, cause) for _, rows in group]
        return [None] * len(group)

    def _cut_back(self) -> None:
        """Drop a partly appended batch, so no torn row is ever followed by another row."""
        assert self._fd is not None
        try:
            os.ftruncate(self._fd, self._size)
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.EBADF):  # not a regular file (/dev/full)
                raise

    def _rotate(self) -> None:
        assert self._fd is not None
        os.close(self._fd)
        self._fd = None
        if self.backups == 0:
            self.path.unlink(missing_ok=True)
        else:
            for index in range(self.backups - 1, 0, -1):
                older = self.path.with_name(f"{self.path.name}.{index}")
                if older.exists():
                    os.replace(older, self.path.with_name(f"{self.path.name}.{index + 1}"))
            with contextlib.suppress(FileNotFoundError):  # moved away meanwhile
                os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        self._fd = self._open()

    def close(self) -> None:
        self._closed = True
        if self._fd is not None:
            try:
                os.fsync(self._fd)
            except OSError as exc:
                if exc.errno != errno.EINVAL:  # fsync on a device that cannot sync
                    raise
            finally:
                os.close(self._fd)
                self._fd = None
