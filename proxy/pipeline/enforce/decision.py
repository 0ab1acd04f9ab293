"""What enforcement does with one complete tool call: the interface of both enforce paths.

The judge (``proxy/pipeline/enforce/judge.py``) turns one call into a :class:`Decision`; the
non-streamed path (``answer.py``) and the streamed hold-back (``stream.py``) apply it. Both
record one :class:`Enforced` per call the judge saw. Kept exactly as the two #44 helpers agreed
(docs/enforce.md): change it only together with both paths.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

__all__ = ["PASS", "Action", "CallJudge", "Decision", "Enforced"]

Action = Literal["pass", "observe", "block", "strip"]


@dataclass(frozen=True, slots=True)
class Decision:
    """What enforcement does with one complete tool call."""

    action: Action  # pass: release unchanged; observe: release unchanged, but count/log
    # "would have been <would>"; block / strip: act
    check: str | None = None  # the check (task check name or route rule name) that fired
    reason: str | None = None  # short human reason, e.g. "forbidden call 'delete_payment'"
    would: Literal["block", "strip"] | None = None  # for observe: what block/strip mode would do


PASS = Decision("pass")

# One complete call in, a Decision out.  name = function name, arguments = the arguments JSON
# text exactly as the backend sent it (may be invalid JSON).  Synchronous, deterministic, never
# raises (the caller -- i44's judge -- applies budget_ms and fail-open/closed and turns a grader
# exception into a Decision itself).
CallJudge = Callable[[str, str], Decision]


@dataclass(frozen=True, slots=True)
class Enforced:
    """One call the judge saw: its function name and what was done with it."""

    name: str
    decision: Decision
