"""UTC timestamps exactly as ``datetime.isoformat`` writes them, at a fraction of its cost.

Every request log line and every graded row carries one. ``datetime.fromtimestamp(t, UTC)
.isoformat()`` builds a datetime and renders all of it, on the event loop's core, for each
(docs/performance.md, "Figures behind the code"). The date and time of day change once a second,
so they are rendered once a second here; the microseconds, the part that changes, are one
integer format.
"""

from __future__ import annotations

import datetime

_UTC = datetime.UTC
# The last whole second rendered and its text, one tuple so a reader in another thread (the
# grading thread) never sees one second's number beside another's text.
_last: tuple[int, str] = (-1, "")


def utc_iso(seconds: float, zone: str = "+00:00") -> str:
    """``datetime.fromtimestamp(seconds, UTC).isoformat()`` with ``+00:00`` replaced by
    ``zone``: microseconds rounded half to even as ``fromtimestamp`` rounds them, and left out
    when zero, as ``isoformat`` leaves them out."""
    global _last
    second = int(seconds)
    micro = round((seconds - second) * 1_000_000)
    if micro >= 1_000_000:
        second, micro = second + 1, micro - 1_000_000
    last = _last
    if last[0] != second:
        text = datetime.datetime.fromtimestamp(second, _UTC).strftime("%Y-%m-%dT%H:%M:%S")
        last = _last = (second, text)
    return f"{last[1]}.{micro:06d}{zone}" if micro else f"{last[1]}{zone}"
