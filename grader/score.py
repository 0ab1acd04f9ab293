"""Grade one answer against one task (grading.md "What scores what")."""

from __future__ import annotations

from grader.compare import first_difference
from grader.extract import extract
from grader.tasks import Task
from grader.verdict import NO_CALL_REASON, Verdict


def score(task: Task, answer: object) -> Verdict:
    """Score ``answer`` (normally the raw answer string) against ``task``.

    Never raises for any answer: untyped input scores 0 with ``not_a_string`` (failure mode
    11), and anything that holds no usable call scores 0 with ``no_call`` or ``too_deep``.
    """
    if not isinstance(answer, str):
        return Verdict(0, False, f"answer is {type(answer).__name__}, not a string", "not_a_string")
    found = extract(answer)
    call = found.call
    if call is None:
        if found.too_deep:
            return Verdict(0, False, "answer nests deeper than the grader follows", "too_deep")
        return Verdict(0, False, NO_CALL_REASON, "no_call")
    graded = {"name": call.name, "arguments": call.arguments}
    if call.canonical == task.expected.canonical:
        return Verdict(1, False, "matches the expected call", "match", None, graded)
    if task.stale is not None and call.canonical == task.stale.canonical:
        return Verdict(
            0,
            True,
            "staleSchemaUsed: the call matches the pre-migration schema",
            "stale_schema",
            None,
            graded,
        )
    diff = first_difference(task.expected.canonical, call.canonical)
    if diff is None:  # pragma: no cover - canonical inequality always has a first difference
        raise AssertionError("unequal canonical calls with no difference")
    return Verdict(0, False, diff.reason, diff.code, diff.path, graded)
