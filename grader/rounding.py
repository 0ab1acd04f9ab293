"""One rounding rule for every percentage a person reads: one decimal, exact halves up.

The live page (ui.html's ``pct``), the demo's terminal scoreboard and the offline reports
(``gradeproxy grade``) must show the same figure for the same counts. Formatting a float cannot
promise that: Python's ``format`` rounds an exact half to even (9/16 = 56.25 -> "56.2") while
JavaScript's ``toFixed`` rounds it up ("56.3"), and a binary fraction can land either side of a
half. So the rule works on the counts, in integers: ``tenths = floor((2000 * count + total) / (2
* total))``, the page's script doing the same sum.

Pure: no I/O.
"""

from __future__ import annotations


def percent(count: float, total: float) -> str:
    """``count`` of ``total`` as ``"56.3"`` (no sign); ``"–"`` when ``total`` is 0."""
    n, d = int(count), int(total)
    if d <= 0:
        return "–"
    tenths = (2000 * n + d) // (2 * d)
    return f"{tenths // 10}.{tenths % 10}"
