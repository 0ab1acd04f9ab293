"""The scoring requests the wire surfaces read: one item, a batch, and the digest they report.

HTTP (``POST /grading/v1/score``) and MCP (``score``/``score_run``) read their requests here,
so a bad request gets the same :class:`ScoreRequestError` (message, ``param`` naming the field
as the client wrote it, ``code``) on both. Apart from :mod:`grader.api` because this is the
wire's contract, not grading: unlike :func:`grader.score`, these reject a non-string answer,
since on a typed wire a non-string is a malformed request (grading.md failure mode 11), while
the Python API takes untyped JSON and scores it 0 with ``not_a_string``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grader.checks import CheckContext
from grader.engine import offline_context
from grader.errors import GraderError
from grader.loader import parse_task
from grader.tasks import Task, TaskLoadError, TaskSet, digest_of

__all__ = ["ScoreRequestError", "request_digest", "resolve_item", "resolve_items"]


class ScoreRequestError(GraderError, ValueError):
    """A scoring request read off a wire is unusable.

    ``param`` names the offending field as a client wrote it (``answer``, ``items[3].task_id``)
    and ``code`` is one of ``missing_required_parameter``, ``invalid_type``, ``invalid_value``,
    ``unknown_task``, ``invalid_task``, ``batch_too_large`` or ``no_task_set``.
    """

    def __init__(self, message: str, *, param: str | None, code: str) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


def _field(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def resolve_item(
    obj: object, tasks: TaskSet | None, *, where: str = ""
) -> tuple[Task, str, CheckContext]:
    """Read one ``{"task_id" | "task", "answer", "tools"?, "request"?}`` object.

    Returns ``(task, answer, context)``: the context is the offline one
    (:func:`grader.engine.offline_context`: the item's ``tools`` or ``request.tools``, else the
    task's). ``where`` prefixes every ``param`` (``items[2]``); ``tasks`` answers ``task_id``
    look-ups (``None``: no task set, so only inline tasks work).
    """
    if not isinstance(obj, dict):
        raise ScoreRequestError(
            f"{where or 'the request body'} must be an object "
            f'{{"task_id" or "task", "answer"}}, not {_json_type(obj)}',
            param=where or None,
            code="invalid_type",
        )
    has_id, has_task = "task_id" in obj, "task" in obj
    if has_id and has_task:
        raise ScoreRequestError(
            f"send either '{_field(where, 'task_id')}' or '{_field(where, 'task')}', not both",
            param=_field(where, "task"),
            code="invalid_value",
        )
    if not has_id and not has_task:
        raise ScoreRequestError(
            f"missing required parameter: '{_field(where, 'task_id')}' "
            f"(or an inline task definition as '{_field(where, 'task')}')",
            param=_field(where, "task_id"),
            code="missing_required_parameter",
        )
    if "answer" not in obj:
        raise ScoreRequestError(
            f"missing required parameter: '{_field(where, 'answer')}'",
            param=_field(where, "answer"),
            code="missing_required_parameter",
        )
    answer = obj["answer"]
    if not isinstance(answer, str):
        raise ScoreRequestError(
            f"'{_field(where, 'answer')}' must be a string (the raw model output), "
            f"not {_json_type(answer)}",
            param=_field(where, "answer"),
            code="invalid_type",
        )
    for key in ("tools", "request"):
        expected = list if key == "tools" else dict
        if key in obj and not isinstance(obj[key], expected):
            raise ScoreRequestError(
                f"'{_field(where, key)}' must be "
                + ("an array of tool definitions" if key == "tools" else "an object")
                + f", not {_json_type(obj[key])}",
                param=_field(where, key),
                code="invalid_type",
            )
    task = _inline_task(obj["task"], where) if has_task else _task_by_id(obj, tasks, where)
    return task, answer, offline_context(task, obj)


def _inline_task(definition: object, where: str) -> Task:
    try:
        return parse_task(definition, _field(where, "task"))
    except TaskLoadError as exc:
        raise ScoreRequestError(
            str(exc), param=_field(where, "task"), code="invalid_task"
        ) from None


def _task_by_id(obj: dict[str, Any], tasks: TaskSet | None, where: str) -> Task:
    task_id = obj["task_id"]
    param = _field(where, "task_id")
    if not isinstance(task_id, str):
        raise ScoreRequestError(
            f"'{param}' must be a string, not {_json_type(task_id)}",
            param=param,
            code="invalid_type",
        )
    if tasks is None:
        raise ScoreRequestError(
            f"'{param}' needs a loaded task set and none is configured; "
            f"send the task definition inline as '{_field(where, 'task')}'",
            param=param,
            code="no_task_set",
        )
    task = tasks.get(task_id)
    if task is None:
        raise ScoreRequestError(
            f"unknown task id {task_id!r} in '{param}' (the task set holds {len(tasks)} tasks)",
            param=param,
            code="unknown_task",
        )
    return task


def resolve_items(
    items: object, tasks: TaskSet | None, *, where: str = "items", max_batch: int | None = None
) -> list[tuple[Task, str, CheckContext]]:
    """Read a batch: every item is checked before any is graded (all or nothing)."""
    if not isinstance(items, list):
        raise ScoreRequestError(
            f'\'{where}\' must be an array of {{"task_id" or "task", "answer"}} objects, '
            f"not {_json_type(items)}",
            param=where,
            code="invalid_type",
        )
    if max_batch is not None and len(items) > max_batch:
        raise ScoreRequestError(
            f"'{where}' holds {len(items)} items; this server grades at most {max_batch} "
            "per request: split the batch",
            param=where,
            code="batch_too_large",
        )
    return [resolve_item(item, tasks, where=f"{where}[{i}]") for i, item in enumerate(items)]


def request_digest(pairs: Sequence[Sequence[Any]], tasks: TaskSet | None) -> str:
    """The digest a wire request's report carries.

    All tasks from the loaded set: that set's digest, the one ``gradeproxy grade`` prints and
    ``gradeproxy_build_info`` exports. Any inline task: the digest of the distinct tasks used.
    """
    if tasks is not None and all(tasks.get(pair[0].id) is pair[0] for pair in pairs):
        return tasks.digest
    return digest_of(pair[0] for pair in pairs)
