"""Result rows: one JSON line per graded answer, flushed as written, rotated by size.

Rows are flushed per batch, so a crash loses at most the row being written; shutdown drains the
grading queue before the writer closes, so a graceful stop loses none.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any

from grader._json import dumps


class ResultWriter:
    """Append-only JSONL with size rotation (``grades.jsonl`` → ``grades.jsonl.1`` …)."""

    def __init__(self, path: Path, max_bytes: int, backups: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        self.rows_written = 0
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[bytes] | None = path.open("ab")
        self._size = self._file.tell()

    def write(self, rows: list[dict[str, Any]]) -> None:
        """Write and flush rows; rotates first when the file would pass ``max_bytes``."""
        if self._file is None:
            raise RuntimeError("result writer is closed")
        data = b"".join(dumps(row) + b"\n" for row in rows)
        if self._size and self._size + len(data) > self.max_bytes:
            self._rotate()
        assert self._file is not None
        self._file.write(data)
        self._file.flush()
        self._size += len(data)
        self.rows_written += len(rows)

    def _rotate(self) -> None:
        assert self._file is not None
        self._file.close()
        if self.backups == 0:
            self.path.unlink(missing_ok=True)
        else:
            for index in range(self.backups - 1, 0, -1):
                older = self.path.with_name(f"{self.path.name}.{index}")
                if older.exists():
                    os.replace(older, self.path.with_name(f"{self.path.name}.{index + 1}"))
            os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        self._file = self.path.open("ab")
        self._size = 0

    def close(self) -> None:
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None
