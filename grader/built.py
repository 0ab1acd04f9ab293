"""Built checks, cached by the task's ``checks_digest``: a task holds only definitions.

A task (grader/tasks.py) is data, so the checks its definitions describe are built here, once
per process: the loader hands over the ones it built to validate a task, and the engine asks
:func:`checks_of` for the rest. Apart from the engine so that who *builds* behaviour and who
*runs* it are two modules, and so a reader of the grading loop does not wade through a cache.
"""

from __future__ import annotations

import dataclasses
import threading

from grader.checks import Check
from grader.checks.build import build_check
from grader.checks.json_schema import FROM_REQUEST
from grader.checks.tool_call import default_check
from grader.tasks import Task

__all__ = [
    "build_task_checks",
    "checks_of",
    "needs_judge",
    "reads_request_tools",
    "remember_checks",
]

# Bounded, oldest first out, for a proxy that reloads its task set forever.
_BUILT: dict[str, tuple[Check, ...]] = {}
_BUILT_MAX = 1 << 16
_BUILT_LOCK = threading.Lock()


def build_task_checks(task: Task) -> tuple[Check, ...]:
    """Build a task's checks from its definitions (digests as the definitions say)."""
    if not task.has_checks:  # grading.md's check, also for a task built by hand without any
        return (default_check(task.expected_call, task.stale),)
    built = (
        build_check(d.definition, d.where, expected=task.expected_call, stale=task.stale)
        for d in task.checks
    )
    return tuple(
        check if check.digest == d.digest else dataclasses.replace(check, digest=d.digest)  # type: ignore[type-var]
        for check, d in zip(built, task.checks, strict=True)
    )


def remember_checks(task: Task, checks: tuple[Check, ...]) -> None:
    """Keep a task's built checks for :func:`checks_of` (a task built by hand is never kept).

    Writers take a lock (the proxy grades in threads and may load a task set meanwhile);
    readers do not: a lookup is one dict read."""
    if not task.checks_digest:
        return
    with _BUILT_LOCK:
        if len(_BUILT) >= _BUILT_MAX:
            del _BUILT[next(iter(_BUILT))]
        _BUILT[task.checks_digest] = checks


def checks_of(task: Task) -> tuple[Check, ...]:
    """The task's built checks: from the cache, else built from its definitions and kept."""
    checks = _BUILT.get(task.checks_digest)
    if checks is None:
        checks = build_task_checks(task)
        remember_checks(task, checks)
    return checks


def needs_judge(task: Task) -> bool:
    return task.has_checks and any(check.needs_judge for check in task.checks)


def reads_request_tools(task: Task) -> bool:
    """Whether a check reads the request's tools (a ``from_request`` schema): a live row keeps
    them then, and a row without them cannot be graded again (``gradeproxy regrade``)."""
    return task.has_checks and any(
        check.type == "json_schema" and check.definition.get("schema") == FROM_REQUEST
        for check in task.checks
    )
