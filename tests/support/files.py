"""Input files for the offline commands, written the way the project writes its own."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from grader.json import dumps


def write_jsonl(path: Path, rows: Iterable[object]) -> Path:
    """One exact-JSON object a line (the project's own writer), a newline after each."""
    path.write_bytes(b"".join(dumps(row) + b"\n" for row in rows))
    return path
