"""Row ids: the key the rows database keeps each row once by, below every row builder.

Kept apart from grader/rows.py so the episode rows (grader/episodes) and the rows database
(proxy/rowsdb.py) can take an id without importing the engine the row builders need.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from typing import Any

__all__ = ["ROW_ID_NAMESPACE", "live_row_id", "offline_row_id", "row_id_of"]

# The namespace of live row ids (uuid5): fixed forever, or ids of a retried write would change.
ROW_ID_NAMESPACE = uuid.UUID("5d1e0f3c-8a0e-4b8e-9a57-6a7c1e2b9f42")


def live_row_id(kind: str, request_id: str, variant: str, choice: int, time: str) -> str:
    """A live row's id: the same for the same row however often it is written (a retried
    write, a backfill after a half-committed batch), so the rows database keeps it once.

    The request id alone is not enough: a client may send its own ``x-request-id`` twice, so
    the arrival time (microseconds) is part of it, with the kind (an episode row and the answer
    row of the same turn are two rows), the variant (both legs of a shadowed request) and the
    choice.
    """
    name = "\x1f".join((kind, request_id, variant, str(choice), time))
    return str(uuid.uuid5(ROW_ID_NAMESPACE, name))


# uuid4's variant digit (its two top bits ``10``) for each hex digit, by that digit's two low bits.
_VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}
_BATCH = 256  # ids drawn a read of the kernel's random bytes
# The hex digits of ids drawn and not yet handed out. A forked child starts with none: an id
# left here at the fork would otherwise be handed out by both processes (``gradeproxy grade
# --jobs`` forks its graders).
_drawn: list[str] = []
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_drawn.clear)


def _draw() -> list[str]:
    """:data:`_BATCH` ids' worth of random hex digits, 32 an id, from one ``os.urandom`` read."""
    digits = os.urandom(16 * _BATCH).hex()
    return [digits[at : at + 32] for at in range(0, 32 * _BATCH, 32)]


def offline_row_id() -> str:
    """An offline row's id: a random UUID (offline rows have no request to derive one from).

    ``str(uuid.uuid4())``, written from 16 random bytes of ``os.urandom`` directly: the version
    nibble set to 4 and the variant's two top bits to ``10`` (a nibble of 8, 9, a or b), as
    uuid4 sets them. The bytes are read for :data:`_BATCH` ids at a time: a read each was a
    system call for every row of ``gradeproxy grade`` (docs/performance.md)."""
    try:
        digits = _drawn.pop()
    except IndexError:
        _drawn.extend(_draw())
        digits = _drawn.pop()
    variant = _VARIANT[digits[16]]
    return f"{digits[:8]}-{digits[8:12]}-4{digits[13:16]}-{variant}{digits[17:20]}-{digits[20:]}"


def row_id_of(row: Mapping[str, Any]) -> str:
    """The row's ``row_id``; for a v1 row (written before ids), the id it would have had when
    it is live (derived, so importing a file twice keeps each row once), else a random one."""
    given = row.get("row_id")
    if isinstance(given, str) and given:
        return given
    request_id, time = row.get("request_id"), row.get("time")
    if isinstance(request_id, str) and isinstance(time, str):
        choice = row.get("choice", 0)
        return live_row_id(
            str(row.get("kind", "answer")),
            request_id,
            str(row.get("variant", "primary")),
            choice if isinstance(choice, int) else 0,
            time,
        )
    return offline_row_id()
