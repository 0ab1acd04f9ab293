"""The sink writer: rows to a shared store in batches, through a spill file when it cannot.

It stands where the JSONL writer stands (:class:`~proxy.pipeline.record.sinks.RowWriter`): the
grade queue's writer thread hands it each batch's rows, already serialised, and gets on at once.
The rows wait in a buffer of at most ``buffer_bytes`` for the sink's own thread, which writes
them in batches of ``batch_rows``. Whenever the store cannot take rows (down, slow past its
timeout, its schema missing or older, the buffer full) they go to the spill file at once; the
thread tries the store again every ``retry_s`` and, once it answers, backfills the spill
between live batches, then empties it. Writes are idempotent on ``row_id``, so a batch that
may or may not have committed is simply written again. Closing flushes the buffer to the store
within its deadline and spills whatever is left. Rows are lost only when the spill itself
fails (a full disk): counted in ``gradeproxy_rows_dropped_total{reason}`` and logged.

Never here: the event loop (everything is blocking, on threads), the store's own protocol.
"""

from __future__ import annotations

import errno
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from proxy.logs import get_logger
from proxy.pipeline.record.results import ResultsWriteError
from proxy.pipeline.record.sinks import RowStore, StoreError
from proxy.pipeline.record.sinks.spill import SpillFile

if TYPE_CHECKING:
    from proxy.pipeline.record.metrics import ProxyMetrics

log = get_logger("gradeproxy.sink")

SinkState = Literal["starting", "ok", "spilling"]
BACKFILL_BYTES = 1024 * 1024  # one backfill step: about this much of the spill


@dataclass(frozen=True, slots=True)
class SinkSettings:
    batch_rows: int = 500
    buffer_bytes: int = 16 * 1024 * 1024
    retry_s: float = 2.0
    flush_s: float = 0.02  # how long a lone row may wait for others to share its batch
    close_timeout_s: float = 10.0


@dataclass(slots=True)
class _Waiting:
    pieces: list[bytes]
    rows: int
    since: float  # time.time() when handed over
    size: int


def _lines(pieces: list[bytes]) -> list[bytes]:
    return [line + b"\n" for piece in pieces for line in piece.split(b"\n")[:-1]]


class SinkWriter:
    """Rows to ``store``, spilled to ``spill_path`` when it cannot take them (module doc)."""

    def __init__(
        self,
        store: RowStore,
        spill_path: Path,
        metrics: ProxyMetrics,
        settings: SinkSettings | None = None,
    ) -> None:
        self.store = store
        self.path = spill_path
        self.metrics = metrics
        self.settings = settings or SinkSettings()
        self.rows_written = 0  # rows taken (stored or spilled): the final log line's count
        self._spill = SpillFile(spill_path)
        self._rejected = spill_path.with_name(spill_path.name + ".rejected")
        self._cond = threading.Condition()
        self._waiting: deque[_Waiting] = deque()
        self._waiting_bytes = 0
        self._in_flight: list[_Waiting] = []
        self._state: SinkState = "starting"
        self._reason: str | None = None
        self._stopping = False
        self._offset = 0  # how far the backfill has read the spill
        metrics.sink_spill_bytes.set(self._spill.size)
        if self._spill.size:
            log.warning("rows_sink_spill_found", path=str(spill_path), bytes=self._spill.size)
        self._thread = threading.Thread(target=self._run, name="gradeproxy-sink", daemon=True)
        self._thread.start()

    # The grade queue's writer thread -------------------------------------------------------

    def append_many(self, jobs: list[tuple[list[bytes], int]]) -> list[ResultsWriteError | None]:
        """Take each job's rows: into the buffer, or straight to the spill when the store is
        known down or the buffer is full. For each job None, or the error that lost its rows
        (the spill failed too)."""
        now = time.time()
        direct: list[tuple[int, list[bytes], int]] = []
        with self._cond:
            for index, (pieces, rows) in enumerate(jobs):
                size = sum(len(piece) for piece in pieces)
                full = self._waiting_bytes + size > self.settings.buffer_bytes
                if self._state == "spilling" or self._stopping or full:
                    direct.append((index, pieces, rows))
                else:
                    self._waiting.append(_Waiting(pieces, rows, now, size))
                    self._waiting_bytes += size
            self.rows_written += sum(rows for _, rows in jobs)
            self._cond.notify()
        outcomes: list[ResultsWriteError | None] = [None] * len(jobs)
        for index, pieces, rows in direct:
            outcomes[index] = self._to_spill(pieces, rows)
        return outcomes

    def health(self) -> dict[str, Any]:
        """The sink's state for ``/readyz``: ``ok``, ``starting`` or ``spilling`` (and why)."""
        return {
            "store": self.store.name,
            "state": self._state,
            "reason": self._reason,
            "spill_bytes": self._spill.size,
            "lag_s": round(self._lag(), 3),
        }

    def reopen(self) -> None:
        """SIGHUP asks every writer to reopen; the sink holds a database connection, not a file
        at a path, and its spill file is never rotated while it holds rows: nothing to do."""

    def close(self) -> None:
        """Flush the buffer to the store (within ``close_timeout_s``), spill what is left."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(self.settings.close_timeout_s)
        if self._thread.is_alive():  # the store hangs: spill what it holds (written twice
            with self._cond:  # at worst, and kept once: writes are idempotent on row_id)
                left = [*self._in_flight, *self._waiting]
                self._waiting.clear()
                self._waiting_bytes = 0
            for entry in left:
                self._to_spill(entry.pieces, entry.rows)
            log.warning("rows_sink_close_timeout", spilled_rows=sum(e.rows for e in left))
        self._spill.close()
        if not self._thread.is_alive():
            self.store.close()

    # The sink's thread ----------------------------------------------------------------------

    def _run(self) -> None:
        next_try = 0.0
        turns = 0
        while True:
            with self._cond:
                if not self._waiting and not self._stopping:
                    idle = self._state == "ok" and self._offset >= self._spill.size
                    self._cond.wait(self.settings.retry_s if idle else self.settings.flush_s)
                batch = self._take()
                stopping = self._stopping
                more = bool(self._waiting)
            if self._state != "ok" and not stopping and time.monotonic() >= next_try:
                self._open()
                next_try = time.monotonic() + self.settings.retry_s
            if self._state == "starting" and stopping:
                self._open()  # a stop right after start: one try before spilling
            if batch:
                self._write_live(batch)
            turns += 1
            if self._state == "ok" and not stopping and (not more or turns % 4 == 0):
                self._backfill_step()  # between live batches, even when they keep coming
            self.metrics.sink_lag.set(self._lag())
            if stopping and not batch and not more:
                return

    def _take(self) -> list[_Waiting]:
        """Up to ``batch_rows`` rows off the buffer (whole jobs); called under the lock."""
        batch: list[_Waiting] = []
        rows = 0
        while self._waiting and (
            not batch or rows + self._waiting[0].rows <= self.settings.batch_rows
        ):
            entry = self._waiting.popleft()
            self._waiting_bytes -= entry.size
            batch.append(entry)
            rows += entry.rows
        self._in_flight = batch
        return batch

    def _open(self) -> None:
        try:
            schema = self.store.open()
        except StoreError as exc:
            self._set_state("spilling", f"{exc.reason}: {exc.message}", exc.reason)
            return
        if schema != "ok":
            hint = "run 'gradeproxy db migrate'" if schema != "newer" else "upgrade gradeproxy"
            self._set_state("spilling", f"schema_{schema}: {hint}", "schema")
            return
        self._set_state("ok", None, None)

    def _set_state(self, state: SinkState, reason: str | None, failure: str | None) -> None:
        changed = (state, reason) != (self._state, self._reason)
        self._state, self._reason = state, reason
        if failure is not None:
            self.metrics.sink_write_failures.labels(failure).inc()
        if not changed:
            return
        if state == "ok":
            log.info("rows_sink_ready", store=self.store.name, spill_bytes=self._spill.size)
        else:
            log.warning("rows_sink_spilling", store=self.store.name, reason=reason,
                        spill=str(self.path))  # fmt: skip

    def _write_live(self, batch: list[_Waiting]) -> None:
        rows = sum(entry.rows for entry in batch)
        if self._state == "ok":
            lines = _lines([piece for entry in batch for piece in entry.pieces])
            try:
                refused = self.store.write(lines)
            except StoreError as exc:
                self._set_state("spilling", f"{exc.reason}: {exc.message}", exc.reason)
            else:
                self._set_aside(refused)
                self.metrics.sink_rows_written.inc(rows - len(refused))
                self._in_flight = []
                return
        for entry in batch:
            self._to_spill(entry.pieces, entry.rows)
        self._in_flight = []

    def _backfill_step(self) -> None:
        spill = self._spill
        if self._offset < spill.size:
            lines, offset = spill.read(self._offset, BACKFILL_BYTES)
            if lines:
                try:
                    refused = self.store.write(lines)
                except StoreError as exc:
                    self._set_state("spilling", f"{exc.reason}: {exc.message}", exc.reason)
                    return
                self._set_aside(refused)
                self.metrics.sink_rows_backfilled.inc(len(lines) - len(refused))
            self._offset = offset
        if spill.size and self._offset >= spill.size and spill.clear_if_read_to(self._offset):
            self._offset = 0
            self.metrics.sink_spill_bytes.set(0)
            log.info("rows_sink_backfilled", store=self.store.name)

    def _to_spill(self, pieces: list[bytes], rows: int) -> ResultsWriteError | None:
        try:
            self._spill.append(pieces)
        except OSError as exc:
            reason = "disk_full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else "spill_error"
            self.metrics.rows_dropped.labels(reason).inc(rows)
            log.error("rows_dropped", reason=reason, rows=rows, path=str(self.path),
                      error=exc.strerror or str(exc))  # fmt: skip
            return ResultsWriteError(rows, exc)
        self.metrics.sink_rows_spilled.inc(rows)
        self.metrics.sink_spill_bytes.set(self._spill.size)
        return None

    def _set_aside(self, refused: list[bytes]) -> None:
        """Rows the store refuses for good: kept beside the spill (``.rejected``), counted."""
        if not refused:
            return
        self.metrics.sink_write_failures.labels("rejected").inc()
        log.error("rows_sink_rejected", rows=len(refused), path=str(self._rejected))
        with self._rejected.open("ab") as handle:
            handle.write(b"".join(refused))

    def _lag(self) -> float:
        """Age of the oldest row not yet in the store (buffered, in flight or spilled)."""
        now = time.time()
        with self._cond:  # the buffer changes under other threads: read its head under the lock
            heads = [*self._in_flight[:1], *([self._waiting[0]] if self._waiting else [])]
        oldest = [entry.since for entry in heads]
        if self._spill.since is not None:
            oldest.append(self._spill.since)
        return max(0.0, now - min(oldest)) if oldest else 0.0
