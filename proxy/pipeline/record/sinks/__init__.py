"""Where result rows go when ``results.sink`` is set: a shared store, never at the client's cost.

A store (:class:`RowStore`: PostgreSQL today, proxy/pipeline/record/sinks/postgres.py; a
ClickHouse store would implement the same three methods) takes batches of rows, idempotently
on ``row_id``. :class:`~proxy.pipeline.record.sinks.writer.SinkWriter` stands where the JSONL
writer stands (the grade queue's writer thread hands it rows): it batches them on a thread of
its own, spills them to a local file the moment the store cannot take them, and backfills the
spill once the store answers again. Nothing here ever blocks or fails a request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Protocol

from proxy.errors import ProxyError
from proxy.pipeline.record.results import ResultsWriteError

FailureReason = Literal["unavailable", "timeout", "schema", "rejected"]
SchemaState = Literal["ok", "missing", "old", "newer"]


class StoreError(ProxyError, RuntimeError):
    """A batch the store did not take; ``reason`` is the metric's label."""

    def __init__(self, reason: FailureReason, message: str) -> None:
        super().__init__(message)
        self.reason: FailureReason = reason
        self.message = message


class RowStore(Protocol):
    """A shared row store. Called from one thread (the sink's) only.

    ``open`` connects and reports the store's schema (only ``ok`` is written to); ``write``
    stores rows given as JSON lines, keeping a row whose ``row_id`` it holds already (so a
    batch written twice is stored once) and returning the lines it refuses for good (a row
    the store cannot hold: kept aside by the caller, never retried); it raises
    :class:`StoreError` when the batch may not be stored. ``close`` lets go of connections.
    """

    name: str

    def open(self) -> SchemaState: ...

    def write(self, lines: list[bytes]) -> list[bytes]: ...

    def close(self) -> None: ...


class RowWriter(Protocol):
    """What the grade queue's recorder writes rows through: the JSONL file or a sink."""

    path: Path
    rows_written: int

    def append_many(
        self, jobs: list[tuple[list[bytes], int]]
    ) -> list[ResultsWriteError | None]: ...

    def reopen(self) -> None:
        """SIGHUP: look at the path again before the next append (a moved or deleted file)."""
        ...

    def close(self) -> None: ...
