"""``score(task, answer)``: grading.md's tool-call verdict for a task graded by that check alone.

A task with its own ``checks`` is graded on every one of them by :func:`grader.grade`; asking
it for the tool-call verdict alone would answer a different question than the task asks (a
forbidden call beside the right one would score 1), so :func:`score` refuses such a task with
:class:`TaskHasChecksError` instead of answering for one column.
"""

from __future__ import annotations

from grader.tasks import Task, TaskHasChecksError
from grader.toolcall.match import match_call
from grader.verdict import Verdict


def score(task: Task, answer: object) -> Verdict:
    """Score ``answer`` (normally the raw answer string) against a task without ``checks``.

    Never raises for any answer: untyped input scores 0 with ``not_a_string`` (failure mode
    11), and anything that holds no usable call scores 0 with ``no_call`` or ``too_deep``.
    Raises :class:`TaskHasChecksError` for a task with ``checks`` (grade it with ``grade()``).
    """
    if task.has_checks:
        raise TaskHasChecksError(
            f"task {task.id!r} has checks ({', '.join(c.name for c in task.checks)}): "
            "score() answers for the tool call alone, so grade it with grader.grade() "
            "(every check, one Outcome) or grader.grade_run()"
        )
    return match_call(task.expected, task.stale, answer)
