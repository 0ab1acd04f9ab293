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


_BATCH = 256  # ids drawn a read of the kernel's random bytes
_TEXT = 37  # an id's text (8-4-4-4-12 digits and dashes) and the space after it in a batch
_DASHES = (8, 13, 18, 23)  # where uuid4's text has its dashes
_VERSION, _VARIANT = 14, 19  # the digit that is always 4; the one whose top bits are ``10``
# A random byte's hex digit: that of its low four bits (uniform, as the byte is).
_HEX_DIGIT = bytes.maketrans(bytes(range(256)), b"0123456789abcdef" * 16)
# A hex digit's variant digit: its two low bits under ``10`` (8, 9, a or b).
_VARIANT_DIGIT = bytes.maketrans(b"0123456789abcdef", b"89ab89ab89ab89ab")
_DASH_COLUMN, _FOUR_COLUMN, _SPACES = b"-" * _BATCH, b"4" * _BATCH, b" " * (_BATCH - 1)
# The ids drawn and not yet handed out. A forked child starts with none: an id left here at
# the fork would otherwise be handed out by both processes (``gradeproxy grade --jobs`` forks
# its graders).
_drawn: list[str] = []
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_drawn.clear)


def _draw() -> list[str]:
    """:data:`_BATCH` ids from one ``os.urandom`` read: a random byte for each character.

    The batch's text holds the ids side by side, :data:`_TEXT` bytes apart, each byte turned
    into the hex digit of its low four bits by one table (in C); then each column that is not
    random is written into every id at once (one strided copy each): the dashes, the
    version's ``4``, the variant digit (through a table) and the spaces between the ids. One
    split hands out the ids. A byte a digit (not a nibble) costs the kernel a few more bytes
    and saves writing hex and copying 31 digit columns into place."""
    text = bytearray(os.urandom(_TEXT * _BATCH - 1)).translate(_HEX_DIGIT)
    for dash in _DASHES:
        text[dash::_TEXT] = _DASH_COLUMN
    text[_VERSION::_TEXT] = _FOUR_COLUMN
    text[_VARIANT::_TEXT] = text[_VARIANT::_TEXT].translate(_VARIANT_DIGIT)
    text[_TEXT - 1 :: _TEXT] = _SPACES
    return text.decode("ascii").split(" ")


def offline_row_id() -> str:
    """An offline row's id: a random UUID (offline rows have no request to derive one from).

    ``str(uuid.uuid4())``'s text, written from ``os.urandom``'s bytes directly: 122 random
    bits, the version digit 4 and the variant's two top bits ``10`` (a digit of 8, 9, a or
    b), as uuid4 sets them. The ids are drawn :data:`_BATCH` at a time (:func:`_draw`): a read each
    was a system call for every row of ``gradeproxy grade``, and formatting each apart was
    most of an id's cost (docs/performance.md)."""
    try:
        return _drawn.pop()
    except IndexError:
        _drawn.extend(_draw())
        return _drawn.pop()


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
