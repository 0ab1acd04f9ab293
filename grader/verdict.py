"""The verdict: a frozen value, never an exception.

A failure to find or match a call is a *score* with a reason, as in inspect_ai's scorers;
exceptions are reserved for bugs and misconfiguration.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from grader.values import value_type

ReasonCode = Literal[
    "match",
    "stale_schema",
    "name_mismatch",
    "missing",
    "unexpected",
    "value_mismatch",
    "type_mismatch",
    "no_call",
    "not_a_string",
    "too_deep",
]
REASON_CODES: tuple[ReasonCode, ...] = get_args(ReasonCode)

NO_CALL_REASON = 'answer has no parseable {"name","arguments"} object'


@value_type
class Verdict:
    """The grade of one answer against one task."""

    score: Literal[0, 1]
    stale_schema_used: bool
    reason: str
    reason_code: ReasonCode
    path: str | None = None
    call: dict[str, Any] | None = None  # the graded call as {"name", "arguments"}, if any

    @property
    def result(self) -> Literal["pass", "fail", "stale"]:
        """The three-way outcome used as a metric label."""
        if self.score == 1:
            return "pass"
        return "stale" if self.stale_schema_used else "fail"

    def to_dict(self) -> dict[str, Any]:
        """The verdict fields of a result row (camelCase where grading.md names them)."""
        return {
            "score": self.score,
            "staleSchemaUsed": self.stale_schema_used,
            "reason": self.reason,
            "reason_code": self.reason_code,
            "path": self.path,
        }
