"""The PostgreSQL row store: a batch is one COPY and one ``INSERT … ON CONFLICT DO NOTHING``.

The table, its columns and its migrations are proxy/rowsdb.py's (``gradeproxy db migrate``
creates them; this store never does: replicas must not race to migrate). One connection, used
by the sink's thread alone, opened again after any failure. psycopg 3 (the ``postgres`` extra)
rather than asyncpg: the writes run on a thread of their own, never on the event loop, and
psycopg's synchronous API fits that with no loop to run (docs/rows-database.md has figures).

Failures map to the metric's reasons: the server gone or unreachable ``unavailable``; the
statement past ``sink_timeout_s`` ``timeout``; the table missing or changed ``schema``; a row
the server refuses (bad data) ``rejected``: the batch is then written row by row and only the
refused rows are set aside. The password is passed to libpq apart from the URL, never logged.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grader.json import JSONError, loads_exact_bytes
from proxy.pipeline.record.sinks import SchemaState, StoreError
from proxy.pipeline.record.sinks.writer import SinkSettings, SinkWriter
from proxy.rowsdb import columns_of, connect, redact, schema_state, write_batch

if TYPE_CHECKING:
    from proxy.pipeline.record.metrics import ProxyMetrics


def postgres_sink(
    url: str,
    password_env: str | None,
    password_file: Path | None,
    spill_path: Path,
    metrics: ProxyMetrics,
    settings: SinkSettings,
    timeout_s: float,
) -> SinkWriter:
    """``results.sink``'s writer: the password read here (from the environment variable or the
    file the config names; else libpq's own ``PGPASSWORD``/``PGPASSFILE``), kept out of URLs."""
    password = None
    if password_env is not None:
        password = os.environ[password_env]
    elif password_file is not None:
        password = password_file.read_text(encoding="utf-8").strip()
    return SinkWriter(PostgresStore(url, password, timeout_s), spill_path, metrics, settings)


class PostgresStore:
    """A :class:`~proxy.pipeline.record.sinks.RowStore` over psycopg 3."""

    name = "postgresql"

    def __init__(self, conninfo: str, password: str | None, timeout_s: float = 5.0) -> None:
        import psycopg  # the extra, checked when the config is loaded

        self._psycopg = psycopg
        self.conninfo = conninfo
        self.shown = redact(conninfo)
        self._password = password
        self.timeout_s = timeout_s
        self._conn: Any = None

    def open(self) -> SchemaState:
        self.close()
        try:
            conn = connect(self.conninfo, self._password, self.timeout_s)
            conn.execute(f"SET statement_timeout = {int(self.timeout_s * 1000)}")
            conn.commit()
            state = schema_state(conn)
        except self._psycopg.Error as exc:
            raise StoreError("unavailable", _message(exc)) from None
        self._conn = conn
        return state

    def write(self, lines: list[bytes]) -> list[bytes]:
        if self._conn is None:
            raise StoreError("unavailable", "not connected")
        rows = [_columns(line) for line in lines]
        try:
            self._insert([row for row in rows if row is not None])
        except self._psycopg.errors.DataError:  # one bad row fails the batch: find it
            self._conn.rollback()
        else:
            return [line for line, row in zip(lines, rows, strict=True) if row is None]
        refused: list[bytes] = []
        for line, row in zip(lines, rows, strict=True):
            if row is None:
                refused.append(line)
                continue
            try:
                self._insert([row])
            except self._psycopg.errors.DataError:
                self._conn.rollback()
                refused.append(line)
        return refused

    def _insert(self, rows: list[tuple[Any, ...]]) -> None:
        errors = self._psycopg.errors
        try:
            write_batch(self._conn, rows)
        except errors.DataError:
            raise
        except errors.QueryCanceled as exc:
            self._drop()
            raise StoreError("timeout", _message(exc)) from None
        except (errors.UndefinedTable, errors.UndefinedColumn) as exc:
            self._drop()
            raise StoreError("schema", _message(exc)) from None
        except self._psycopg.Error as exc:
            self._drop()
            raise StoreError("unavailable", _message(exc)) from None

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # a broken connection: nothing more to lose
                conn.close()

    def close(self) -> None:
        self._drop()


def _columns(line: bytes) -> tuple[Any, ...] | None:
    """The typed columns of one JSON line; None for a line that is not a JSON object."""
    try:
        row = loads_exact_bytes(line)
        text = line.rstrip(b"\n").decode()
    except (JSONError, UnicodeDecodeError):
        return None
    if not isinstance(row, dict):
        return None
    return columns_of(row, text)


def _message(exc: Exception) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
