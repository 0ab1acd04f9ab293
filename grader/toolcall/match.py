"""grading.md's tool-call grader on its own: ``match_call(expected, stale, answer) -> Verdict``.

Takes the two calls and the answer, never a task, so the tool-call check (``grader.checks``),
the task-level fast path and ``score()`` share one function and nothing here imports
``grader.tasks`` (the import cycle tasks → checks → tool_call → score → tasks is gone).

Order of comparisons (``../shared/GRADING-DECISIONS.md``): ``expected`` first, then ``stale``;
when the tool names differ the reason names ``name`` first, because a different tool makes its
arguments beside the point; otherwise the first differing path under ``arguments`` in canonical
order.
"""

from __future__ import annotations

from typing import Any

from grader.json import quote
from grader.toolcall.diff import first_difference
from grader.toolcall.extract import UNPARSED, Call, Extraction, extract
from grader.verdict import NO_CALL_REASON, Verdict

_SHOWN = 60
# The two verdicts of an answer without a usable call: constant, and a Verdict is immutable.
_NO_CALL = Verdict(0, False, NO_CALL_REASON, "no_call")
_TOO_DEEP = Verdict(0, False, "answer nests deeper than the grader follows", "too_deep")


def _quoted(name: str) -> str:
    text = quote(name)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


def no_call_verdict(found: Extraction) -> Verdict:
    """The verdict of an answer in which ``extract`` found no usable call (``too_deep`` when
    depth is what made a call unusable); for callers that extracted the answer already."""
    return _TOO_DEEP if found.too_deep else _NO_CALL


def match_call(
    expected: Call, stale: Call | None, answer: object, parsed: Any = UNPARSED
) -> Verdict:
    """Score ``answer`` (normally the raw answer string) against ``expected`` and ``stale``
    (``parsed``: the value ``answer`` was written from, if any; see :func:`extract`).

    Never raises for any answer: untyped input scores 0 with ``not_a_string`` (failure mode
    11), and anything that holds no usable call scores 0 with ``no_call`` or ``too_deep``.
    """
    if not isinstance(answer, str):
        return Verdict(0, False, f"answer is {type(answer).__name__}, not a string", "not_a_string")
    found = extract(answer, parsed)
    call = found.call
    if call is None:
        return no_call_verdict(found)
    graded = {"name": call.name, "arguments": call.arguments}
    if call.canonical == expected.canonical:
        return Verdict(1, False, "matches the expected call", "match", None, graded)
    if stale is not None and call.canonical == stale.canonical:
        return Verdict(
            0,
            True,
            "staleSchemaUsed: the call matches the pre-migration schema",
            "stale_schema",
            None,
            graded,
        )
    if call.name != expected.name:
        reason = (
            f"name: name mismatch (expected {_quoted(expected.name)}, got {_quoted(call.name)})"
        )
        return Verdict(0, False, reason, "name_mismatch", "name", graded)
    diff = first_difference(expected.canonical, call.canonical)
    if diff is None:  # pragma: no cover - canonical inequality always has a first difference
        raise AssertionError("unequal canonical calls with no difference")
    return Verdict(0, False, diff.reason, diff.code, diff.path, graded)
