"""The rows database: one PostgreSQL table of result rows, shared by every replica.

What lives here, for the proxy's sink and the offline commands alike: the table's schema and
its migrations (``gradeproxy db migrate``), how a row becomes the table's typed columns, the
URL a user writes (``postgresql://host/db?run=nightly&since=…``: libpq's URL plus row filters
in its query) and the reading of rows back, in the order they were written.

The row is stored whole as ``doc`` (``json``: its text as written, so a row read back is the
row the file holds, key order and number spelling included; ``doc::jsonb`` queries it), with
the fields people filter and join on copied to typed columns. ``row_id`` is the primary key:
every write is ``ON CONFLICT (row_id) DO NOTHING``, so a retried batch never duplicates a row.

Never here: the proxy's threads, spill files or metrics (proxy/pipeline/record/sinks/), and no
import of psycopg at module level (it is the optional ``gradeproxy[postgres]`` extra).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from grader.json import JSONError, loads_exact
from grader.rowids import row_id_of
from proxy.errors import ProxyError

if TYPE_CHECKING:
    import psycopg

EXTRA_HINT = "the rows database needs psycopg: pip install 'gradeproxy[postgres]'"
SCHEMES = ("postgresql", "postgres")
TABLE = "gradeproxy_rows"
# The database schema's version (not the row schema's): serve writes only to this version.
DB_SCHEMA_VERSION = 1
FILTERS = ("run", "since", "until", "task", "variant")

# Each migration takes the schema from its index to index + 1; statements are idempotent so a
# migration that was cut half way runs again.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE IF NOT EXISTS gradeproxy_schema (
            id int PRIMARY KEY CHECK (id = 1),
            version int NOT NULL,
            migrated_at timestamptz NOT NULL DEFAULT now()
        )""",
        f"""CREATE TABLE IF NOT EXISTS {TABLE} (
            seq bigint GENERATED ALWAYS AS IDENTITY,
            row_id uuid PRIMARY KEY,
            kind text NOT NULL,
            time timestamptz,
            task_id text,
            run text,
            model text,
            variant text,
            sample_id text,
            episode_id text,
            request_id text,
            pair_id text,
            result text,
            score double precision,
            stale boolean,
            reason_code text,
            grader_rules_version text,
            row_schema_version int,
            written_at timestamptz NOT NULL DEFAULT now(),
            doc json NOT NULL
        )""",
        f"CREATE INDEX IF NOT EXISTS {TABLE}_seq ON {TABLE} (seq)",
        f"CREATE INDEX IF NOT EXISTS {TABLE}_run_time ON {TABLE} (run, time)",
        f"CREATE INDEX IF NOT EXISTS {TABLE}_time ON {TABLE} (time)",
        f"CREATE INDEX IF NOT EXISTS {TABLE}_task ON {TABLE} (task_id text_pattern_ops)",
        f"CREATE INDEX IF NOT EXISTS {TABLE}_request ON {TABLE} (request_id)",
    ),
)
assert len(MIGRATIONS) == DB_SCHEMA_VERSION

COLUMNS = (
    "row_id", "kind", "time", "task_id", "run", "model", "variant", "sample_id", "episode_id",
    "request_id", "pair_id", "result", "score", "stale", "reason_code", "grader_rules_version",
    "row_schema_version", "doc",
)  # fmt: skip
_TYPES = (
    "uuid", "text", "timestamptz", "text", "text", "text", "text", "text", "text",
    "text", "text", "text", "float8", "bool", "text", "text", "int4", "json",
)  # fmt: skip
# A batch goes through COPY into a per-connection staging table, then one INSERT … SELECT
# keeps the first write of every row_id (COPY alone cannot skip a conflict). psycopg's COPY
# rows are dumped in C; its array parameters (an ``unnest`` insert) are dumped in Python, 8x
# slower (bench/rowsdb_bench.py).
STAGING = "gradeproxy_staging"
CREATE_STAGING = (
    f"CREATE TEMP TABLE IF NOT EXISTS {STAGING} ("
    + ", ".join(f"{c} {t}" for c, t in zip(COLUMNS, _TYPES, strict=True))
    + ") ON COMMIT DELETE ROWS"
)
COPY = f"COPY {STAGING} ({', '.join(COLUMNS)}) FROM STDIN"
MERGE = (
    f"INSERT INTO {TABLE} ({', '.join(COLUMNS)}) SELECT {', '.join(COLUMNS)} FROM {STAGING}"
    " ON CONFLICT (row_id) DO NOTHING"
)
# The same insert with array parameters: one statement, for drivers with fast array encoding.
INSERT = (
    f"INSERT INTO {TABLE} ({', '.join(COLUMNS)}) SELECT * FROM unnest("
    + ", ".join(f"%s::{t}[]" for t in _TYPES)
    + ") ON CONFLICT (row_id) DO NOTHING"
)

SchemaState = Literal["ok", "missing", "old", "newer"]


class RowsDatabaseError(ProxyError, ValueError):
    """A bad URL or filter, or a database that cannot be read; the message says which."""


@dataclass(frozen=True, slots=True)
class RowsURL:
    """A rows-database URL: what libpq connects to, and the row filters from its query.

    ``str()`` is the URL with the password masked: safe for logs, output and error messages.
    """

    conninfo: str
    filters: Mapping[str, str] = field(default_factory=dict, hash=False)

    def __str__(self) -> str:
        return redact(self.conninfo) + (f"?{urlencode(dict(self.filters))}" if self.filters else "")


def is_url(text: str) -> bool:
    return text.split("://", 1)[0].lower() in SCHEMES and "://" in text


def redact(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[1]}"))


def parse_url(text: str) -> RowsURL:
    """Split the row filters (``run``, ``since``, ``until``, ``task`` prefix, ``variant``) off
    a PostgreSQL URL; every other query parameter is libpq's (``sslmode`` …)."""
    parts = urlsplit(text)
    if parts.scheme.lower() not in SCHEMES:
        raise RowsDatabaseError(f"{redact(text)}: not a postgresql:// URL")
    filters: dict[str, str] = {}
    kept: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in FILTERS:
            if key in filters:
                raise RowsDatabaseError(f"{redact(text)}: '{key}' given twice")
            filters[key] = value
        else:
            kept.append((key, value))
    for key in ("since", "until"):
        if key in filters:
            try:
                datetime.fromisoformat(filters[key].replace("Z", "+00:00"))
            except ValueError:
                raise RowsDatabaseError(
                    f"{redact(text)}: '{key}' must be an ISO 8601 time, got {filters[key]!r}"
                ) from None
    if filters.get("variant") not in (None, "primary", "shadow"):
        raise RowsDatabaseError(f"{redact(text)}: 'variant' must be primary or shadow")
    conninfo = urlunsplit(parts._replace(query=urlencode(kept)))
    return RowsURL(conninfo, filters)


def _text(value: Any) -> str | None:
    """A typed text column's value: strings as they are (NUL and lone surrogates, which
    PostgreSQL's text refuses, replaced: the row itself keeps them in ``doc``), numbers as
    their digits, anything else None."""
    if value is None or isinstance(value, bool):
        return None
    if not isinstance(value, str):
        return str(value) if isinstance(value, int | float) else None
    text: str = value
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    try:
        text.encode()
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode()
    return text


_ISO = re.compile(r"\d{4}-\d\d-\d\dT")


def _time(value: Any) -> str | None:
    if not isinstance(value, str) or not _ISO.match(value):
        return None
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value


def columns_of(row: Mapping[str, Any], doc: str) -> tuple[Any, ...]:
    """The typed columns of ``row`` (its JSON text ``doc``), in :data:`COLUMNS` order. Never
    raises on a row that is a JSON object: a value of the wrong type is NULL in its column."""
    score = row.get("score")
    version = row.get("row_schema_version")
    stale = row.get("staleSchemaUsed")
    return (
        row_id_of(row),
        _text(row.get("kind")) or "answer",
        _time(row.get("time")),
        _text(row.get("task_id")),
        _text(row.get("run")),
        _text(row.get("model")),
        _text(row.get("variant")),
        _text(row.get("sample_id")),
        _text(row.get("episode_id")),
        _text(row.get("request_id")),
        _text(row.get("pair_id")),
        _text(row.get("result")),
        float(score) if isinstance(score, int | float) and not isinstance(score, bool) else None,
        stale if isinstance(stale, bool) else None,
        _text(row.get("reason_code")),
        _text(row.get("grader_rules_version")),
        version if isinstance(version, int) and not isinstance(version, bool) else None,
        doc,
    )


def insert_params(batch: list[tuple[Any, ...]]) -> list[list[Any]]:
    """:data:`INSERT`'s parameters for rows given as :func:`columns_of` tuples."""
    return [list(column) for column in zip(*batch, strict=True)] if batch else []


def write_batch(conn: psycopg.Connection[Any], batch: list[tuple[Any, ...]]) -> None:
    """Store rows given as :func:`columns_of` tuples, each ``row_id`` once; commits. Raises
    what psycopg raises (the caller classifies it)."""
    with conn.cursor() as cur:
        cur.execute(CREATE_STAGING)
        with cur.copy(COPY) as copy:
            for row in batch:
                copy.write_row(row)
        cur.execute(MERGE)
    conn.commit()


def require_psycopg() -> None:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise RowsDatabaseError(EXTRA_HINT) from None


def connect(
    conninfo: str, password: str | None = None, timeout_s: float = 5.0
) -> psycopg.Connection[Any]:
    """A connection (autocommit off); the password, when given, never enters the URL."""
    require_psycopg()
    import psycopg

    extra: dict[str, Any] = {"connect_timeout": max(1, round(timeout_s))}
    if password is not None:
        extra["password"] = password
    return psycopg.connect(conninfo, application_name="gradeproxy", **extra)


def schema_version(conn: psycopg.Connection[Any]) -> int | None:
    """The migrated schema version, or None on a database never migrated."""
    with conn.cursor() as cur:
        cur.execute("SELECT to_regclass('gradeproxy_schema') IS NOT NULL")
        found = cur.fetchone()
        if not found or not found[0]:
            conn.rollback()
            return None
        cur.execute("SELECT version FROM gradeproxy_schema WHERE id = 1")
        got = cur.fetchone()
    conn.rollback()
    return None if got is None else int(got[0])


def schema_state(conn: psycopg.Connection[Any]) -> SchemaState:
    version = schema_version(conn)
    if version is None:
        return "missing"
    if version < DB_SCHEMA_VERSION:
        return "old"
    return "ok" if version == DB_SCHEMA_VERSION else "newer"


def migrate(conn: psycopg.Connection[Any]) -> tuple[int | None, int]:
    """Bring the schema to :data:`DB_SCHEMA_VERSION`, in one transaction under an advisory lock
    (two migrating jobs wait for each other); the version before and after."""
    with conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(4242420042)")
        before = None
        cur.execute("SELECT to_regclass('gradeproxy_schema') IS NOT NULL")
        row = cur.fetchone()
        if row and row[0]:
            cur.execute("SELECT version FROM gradeproxy_schema WHERE id = 1")
            got = cur.fetchone()
            before = None if got is None else int(got[0])
        if before is not None and before > DB_SCHEMA_VERSION:
            conn.rollback()
            raise RowsDatabaseError(
                f"the database's schema is version {before}, newer than this gradeproxy's "
                f"{DB_SCHEMA_VERSION}: upgrade gradeproxy"
            )
        for statements in MIGRATIONS[before or 0 :]:
            for statement in statements:
                cur.execute(statement)
        cur.execute(
            "INSERT INTO gradeproxy_schema (id, version) VALUES (1, %s) ON CONFLICT (id) "
            "DO UPDATE SET version = excluded.version, migrated_at = now()",
            (DB_SCHEMA_VERSION,),
        )
    conn.commit()
    return before, DB_SCHEMA_VERSION


def _where(filters: Mapping[str, str]) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    if "run" in filters:
        clauses.append("run = %s")
        params.append(filters["run"])
    if "variant" in filters:
        clauses.append("variant = %s")
        params.append(filters["variant"])
    if "task" in filters:
        prefix = filters["task"].replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        clauses.append("task_id LIKE %s")
        params.append(prefix + "%")
    if "since" in filters:
        clauses.append("coalesce(time, written_at) >= %s::timestamptz")
        params.append(filters["since"])
    if "until" in filters:
        clauses.append("coalesce(time, written_at) < %s::timestamptz")
        params.append(filters["until"])
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


def read_rows(
    url: RowsURL, batch: int = 2000, password: str | None = None
) -> Iterator[tuple[int, Any]]:
    """``(n, row)`` for every row the URL's filters select, in the order they were written
    (``seq``), streamed with a server-side cursor. Raises :class:`RowsDatabaseError`."""
    require_psycopg()
    import psycopg

    where, params = _where(url.filters)
    query = f"SELECT doc::text FROM {TABLE}{where} ORDER BY seq"
    try:
        with connect(url.conninfo, password) as conn:
            state = schema_state(conn)
            if state == "missing":
                raise RowsDatabaseError(f"{url}: no rows table: run 'gradeproxy db migrate URL'")
            with conn.cursor(name="gradeproxy_read") as cur:
                cur.itersize = batch
                cur.execute(query, params)
                for n, (doc,) in enumerate(cur, start=1):
                    try:
                        yield n, loads_exact(doc)
                    except JSONError as exc:
                        raise RowsDatabaseError(f"{url}: row {n}: not valid JSON: {exc}") from None
    except psycopg.Error as exc:
        raise RowsDatabaseError(f"{url}: {str(exc).strip() or type(exc).__name__}") from None
