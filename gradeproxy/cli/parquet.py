"""Result rows as Parquet: typed columns, one canonical ``checks`` column, an optional wide view.

``gradeproxy grade --out x.parquet`` and ``gradeproxy export --parquet`` write through pyarrow,
an optional extra (``pip install 'gradeproxy[parquet]'``); without it they exit 2 naming the
extra, never JSONL under a Parquet name. Live rows stay JSONL: a Parquet file is readable only
once its footer is written, so a crash would lose a whole open file; export them afterwards.

The schema (docs/offline.md, "Parquet"):

* known row fields have fixed types (``passed`` bool, ``choice`` int64, ``time`` a UTC
  timestamp, ``meta`` map<string, string>, ``timings`` map<string, double> …);
* ``checks`` is a list of structs (name, type, passed, score, reason, reason_code, error,
  digest, warning, details as JSON text): the same column for any mix of tasks;
* ``call``, ``tools`` and every nested value (objects, arrays) are JSON text, queried with
  DuckDB's ``json_extract``; ``sample_id`` is text (an integer id as its decimal digits) so
  files whose ids differ in type still read together;
* a carried answers-file field is typed by its values in that file (all booleans: bool; all
  integers: int64; all numbers: double; all strings: string), else JSON text;
* ``--wide`` adds ``check.<name>.passed``, ``.score`` and ``.reason_code`` per column name, the
  name escaped by :func:`escape_name` (``%`` → ``%25``, ``.`` → ``%2E``), so a dot in a
  column name never reads as a path separator.

Files with different carried fields or checks differ in schema: read them together with
DuckDB's ``read_parquet([...], union_by_name = true)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gradeproxy.cli._io import InputError, Source, jsonl_bytes, write_atomically
from grader.json import dumps

if TYPE_CHECKING:
    from datetime import datetime

    import pyarrow as pa

EXTRA_HINT = "writing Parquet needs pyarrow: pip install 'gradeproxy[parquet]'"
SUFFIXES = (".parquet", ".pq")


def is_parquet(path: Path) -> bool:
    return path.suffix.lower() in SUFFIXES


def require_pyarrow() -> None:
    """Raise :class:`InputError` naming the extra when pyarrow is not installed."""
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise InputError(EXTRA_HINT) from None


def escape_name(name: str) -> str:
    """A check name as a wide-view column segment: ``%`` and ``.`` percent-escaped."""
    return name.replace("%", "%25").replace(".", "%2E")


def _json_text(value: Any) -> str | None:
    return None if value is None else dumps(value).decode()


def _timestamp(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    from datetime import datetime  # Parquet output only: JSONL rows never need it

    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _sample_id(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else _json_text(value)


def _schema() -> dict[str, tuple[Any, Any]]:
    """Known fields: (pyarrow type, conversion of the JSON value)."""
    import pyarrow as pa

    string, keep = pa.string(), (lambda v: v)
    check = pa.struct(
        [
            ("name", pa.string()),
            ("type", pa.string()),
            ("passed", pa.bool_()),
            ("score", pa.float64()),
            ("reason", pa.string()),
            ("reason_code", pa.string()),
            ("error", pa.string()),
            ("digest", pa.string()),
            ("warning", pa.string()),
            ("advisory", pa.bool_()),
            ("details", pa.string()),
        ]
    )

    def checks(value: Any) -> list[dict[str, Any]] | None:
        if not isinstance(value, list):
            return None
        return [
            {
                **{k: c.get(k) for k in check.names if k not in ("details", "advisory")},
                "advisory": bool(c.get("advisory", False)),
                "details": _json_text(c.get("details")),
            }
            for c in value
            if isinstance(c, dict)
        ]

    def number(value: Any) -> float | None:
        return float(value) if isinstance(value, int | float) and value is not True else None

    def str_map(value: Any) -> list[tuple[str, str]] | None:
        return [(str(k), str(v)) for k, v in value.items()] if isinstance(value, dict) else None

    def num_map(value: Any) -> list[tuple[str, float]] | None:
        if not isinstance(value, dict):
            return None
        return [(str(k), float(v)) for k, v in value.items() if isinstance(v, int | float)]

    return {
        "kind": (string, keep),
        "row_schema_version": (pa.int32(), keep),
        "row_id": (string, keep),
        "task_id": (string, keep),
        "mutationKind": (string, keep),
        "result": (string, keep),
        "passed": (pa.bool_(), keep),
        "staleSchemaUsed": (pa.bool_(), keep),
        "score": (pa.float64(), number),
        "reason": (string, keep),
        "reason_code": (string, keep),
        "path": (string, keep),
        "call": (string, _json_text),
        "checks": (pa.list_(check), checks),
        "warnings": (pa.list_(pa.string()), keep),
        "tasks_digest": (string, keep),
        "grader_rules_version": (string, keep),
        "sample_id": (string, _sample_id),
        "answer": (string, keep),
        "truncated": (pa.bool_(), keep),
        "tools": (string, _json_text),
        "request_id": (string, keep),
        "upstream_request_id": (string, keep),
        "time": (pa.timestamp("us", tz="UTC"), _timestamp),
        "model": (string, keep),
        "upstream": (string, keep),
        "stream": (pa.bool_(), keep),
        "variant": (string, keep),
        "pair_id": (string, keep),
        "choice": (pa.int64(), keep),
        "finish_reason": (string, keep),
        "run": (string, keep),
        "meta": (pa.map_(pa.string(), pa.string()), str_map),
        "timings": (pa.map_(pa.string(), pa.float64()), num_map),
    }


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _keep(value: Any) -> Any:
    return value


def _float(value: Any) -> float:
    return float(value)


def _carried_type(values: Sequence[Any]) -> tuple[Any, Any]:
    """A carried field's column: typed by its values when they agree, else JSON text."""
    import pyarrow as pa

    present = [v for v in values if v is not None]
    if not present or all(isinstance(v, str) for v in present):
        return pa.string(), _keep
    if all(isinstance(v, bool) for v in present):
        return pa.bool_(), _keep
    if all(_is_int(v) for v in present):
        return pa.int64(), _keep
    if all(_is_number(v) for v in present):
        return pa.float64(), _float
    return pa.string(), _json_text


def _wide(rows: Sequence[dict[str, Any]]) -> dict[str, list[Any]]:
    names: dict[str, None] = {}
    for row in rows:
        for column in row.get("checks") or ():
            names.setdefault(str(column.get("name")), None)
    out: dict[str, list[Any]] = {}
    for name in names:
        by_row = [
            next((c for c in row.get("checks") or () if c.get("name") == name), None)
            for row in rows
        ]
        base = f"check.{escape_name(name)}"
        for part in ("passed", "score", "reason_code"):
            out[f"{base}.{part}"] = [None if c is None else c.get(part) for c in by_row]
    return out


def to_table(rows: Sequence[dict[str, Any]], wide: bool = False) -> pa.Table:
    """Rows to one Arrow table: known fields typed, carried fields by their values, ``checks``."""
    import pyarrow as pa

    known = _schema()
    order: dict[str, None] = {}
    for row in rows:
        for key in row:
            order.setdefault(key, None)
    arrays: dict[str, Any] = {}
    for key in order:
        values = [row.get(key) for row in rows]
        kind, convert = known[key] if key in known else _carried_type(values)
        try:
            arrays[key] = pa.array([None if v is None else convert(v) for v in values], type=kind)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
            # A carried field under a known name with another type (``"model": 5``): JSON text.
            text = [v if isinstance(v, str) or v is None else _json_text(v) for v in values]
            arrays[key] = pa.array(text, type=pa.string())
    if wide:
        for key, values in _wide(rows).items():
            kind = pa.bool_() if key.endswith(".passed") else None
            if key.endswith(".score"):
                kind = pa.float64()
            elif key.endswith(".reason_code"):
                kind = pa.string()
            arrays[key] = pa.array(values, type=kind)
    return pa.table(arrays)


def write_parquet(path: Path, rows: Sequence[dict[str, Any]], wide: bool = False) -> None:
    """Write ``rows`` as one Parquet file, atomically and with the usual file mode."""
    write_table(path, to_table(rows, wide))


def write_table(path: Path, table: Any) -> None:
    """Write an Arrow table as one Parquet file through :func:`write_atomically`, as every
    other output: synced, renamed into place, nothing half-written or left behind."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    write_atomically(path, [sink.getvalue().to_pybytes()])


def write_rows(path: Path, rows: Sequence[dict[str, Any]], wide: bool = False) -> None:
    """JSONL, or Parquet for a ``.parquet``/``.pq`` name."""
    if is_parquet(path):
        require_pyarrow()
        write_parquet(path, rows, wide)
    else:
        write_atomically(path, jsonl_bytes(rows))


def with_rotations(paths: Iterable[Source]) -> list[Source]:
    """Each path preceded by its live rotations (``grades.jsonl.5`` … ``.1``), oldest first
    (a rows database has none)."""
    out: dict[Source, None] = {}
    for path in paths:
        if not isinstance(path, Path):
            out.setdefault(path, None)
            continue
        rotated = sorted(
            (
                p
                for p in path.parent.glob(f"{path.name}.*")
                if p.name[len(path.name) + 1 :].isdigit()
            ),
            key=lambda p: -int(p.name[len(path.name) + 1 :]),
        )
        for each in [*rotated, path]:
            out.setdefault(each, None)
    return list(out)
