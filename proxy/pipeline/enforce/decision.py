from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

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
class Enforced:  # (in decision.py, shared by both paths)
    name: str
    decision: Decision
