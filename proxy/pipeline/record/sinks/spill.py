"""The spill file: rows the store could not take yet, kept on local disk until it can.

Append-only JSONL (whole rows or none, as the result file), never rotated; it is emptied only
when every row in it has been written to the store (:meth:`SpillFile.clear_if_read_to`), under
the lock that appends take, so a row appended meanwhile is never cut away. A process that
stops with rows in it leaves them there: the next start backfills them. Blocking I/O: called
from the sink's thread and the grade queue's writer thread, never the event loop.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from pathlib import Path

_MODE = 0o600  # rows may hold answers: the spill is the process's own, not for other users


class SpillFile:
    """``path`` opened for appends; reads for the backfill go through their own offsets."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, _MODE)
        self._lock = threading.Lock()
        stat = os.fstat(self._fd)
        self.size = stat.st_size
        if self.size and os.pread(self._fd, 1, self.size - 1) != b"\n":
            # A process killed mid-append left a torn row: end it, so the next row starts on a
            # line of its own (the torn one is refused by the store and set aside, not lost).
            self.size += os.write(self._fd, b"\n")
        # When the oldest row still in the file was spilled: the sink's lag. After a restart,
        # the file's last change is the best bound on it the file keeps.
        self.since: float | None = stat.st_mtime if self.size else None

    def append(self, pieces: list[bytes]) -> None:
        """Append whole rows or none of them; raises the ``OSError`` (ENOSPC …)."""
        with self._lock:
            start = self.size
            try:
                for piece in pieces:
                    view, written = memoryview(piece), 0
                    while written < len(piece):
                        written += os.write(self._fd, view[written:])
                    self.size += len(piece)
            except OSError:
                try:
                    os.ftruncate(self._fd, start)
                except OSError as exc:
                    if exc.errno not in (errno.EINVAL, errno.EBADF):
                        raise
                self.size = start
                raise
            if self.since is None and self.size:
                self.since = time.time()

    def read(self, offset: int, max_bytes: int) -> tuple[list[bytes], int]:
        """Whole lines from ``offset``, about ``max_bytes`` of them, and the offset after them."""
        data = os.pread(self._fd, max_bytes, offset)
        end = data.rfind(b"\n") + 1
        if end == 0 and len(data) == max_bytes:  # one row longer than max_bytes
            while True:
                more = os.pread(self._fd, max_bytes, offset + len(data))
                if not more:
                    break
                data += more
                cut = more.find(b"\n")
                if cut >= 0:
                    end = len(data) - len(more) + cut + 1
                    break
        lines = [line + b"\n" for line in data[:end].split(b"\n")[:-1] if line.strip()]
        return lines, offset + end

    def clear_if_read_to(self, offset: int) -> bool:
        """Empty the file when ``offset`` is its end (every row in it is stored); else False."""
        with self._lock:
            if offset != self.size:
                return False
            os.ftruncate(self._fd, 0)
            self.size = 0
            self.since = None
            return True

    def close(self) -> None:
        with self._lock:
            try:
                os.fsync(self._fd)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
            finally:
                os.close(self._fd)
