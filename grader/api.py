"""The Python scoring API: the one engine behind every scoring surface.

The CLI (``gradeproxy grade``), the HTTP routes under ``/grading/v1/`` and the MCP server all
grade through :func:`grade_all`, so a verdict row and a run report have one shape everywhere
(grading.md: "per-mutation-kind breakdowns and the stale rate ride on every run report").

::

    score(task, answer)          -> Verdict     never raises; untyped input scores 0 (not_a_string)
    score_run(tasks, answers)    -> RunResult   verdict rows + Report; UnknownTaskError up front
    task_from_dict(obj)          -> Task        TaskLoadError naming the field
    load_tasks(path)             -> TaskSet     TaskLoadError naming file:line

The wire surfaces (HTTP, MCP) read their requests with :func:`resolve_item` and
:func:`resolve_items`, so a bad request gets the same :class:`ScoreRequestError` (message,
``param`` naming the field, ``code``) on both. Unlike :func:`score`, those reject a non-string
answer: on a typed wire a non-string is a malformed request (grading.md failure mode 11),
while the Python API takes untyped JSON and scores it 0 with ``not_a_string``.

Pure like the rest of ``grader/``: no I/O beyond :func:`load_tasks`, and never aiohttp.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from grader.canon import canonical_json
from grader.report import Report
from grader.score import score
from grader.tasks import (
    NoExpectedCallError,
    Task,
    TaskLoadError,
    TaskSet,
    build_task_set,
    load_tasks,
    parse_task,
    tasks_digest,
)
from grader.verdict import Verdict
from grader.version import GRADER_RULES_VERSION

__all__ = [
    "GradedAnswer",
    "RunResult",
    "ScoreRequestError",
    "UnknownTaskError",
    "digest_of",
    "grade_all",
    "load_tasks",
    "request_digest",
    "resolve_item",
    "resolve_items",
    "score",
    "score_run",
    "task_from_dict",
]


class UnknownTaskError(LookupError):
    """An answer names a task id the task set does not hold. Raised before anything is graded."""

    def __init__(self, task_id: object, index: int, known: int) -> None:
        self.task_id = task_id
        self.index = index
        super().__init__(
            f"answers[{index}]: unknown task id {task_id!r} (the task set holds {known} tasks)"
        )

    def __str__(self) -> str:  # LookupError would repr() a single argument like KeyError does not
        return str(self.args[0])


@dataclass(frozen=True, slots=True)
class GradedAnswer:
    """One graded answer: the task it was graded against and its verdict."""

    task: Task
    verdict: Verdict
    tasks_digest: str

    def to_dict(self) -> dict[str, Any]:
        """The result row: the same shape ``gradeproxy grade --out`` writes, on every surface."""
        return {
            "task_id": self.task.id,
            **self.verdict.to_dict(),
            "mutationKind": self.task.mutation_kind,
            "call": self.verdict.call,
            "tasks_digest": self.tasks_digest,
            "grader_rules_version": GRADER_RULES_VERSION,
        }


@dataclass(frozen=True, slots=True)
class RunResult:
    """A graded run: one row per answer, in input order, and the run report."""

    results: tuple[GradedAnswer, ...]
    report: Report

    def __len__(self) -> int:
        return len(self.results)

    @property
    def verdicts(self) -> tuple[Verdict, ...]:
        return tuple(row.verdict for row in self.results)

    def to_dict(self) -> dict[str, Any]:
        """``{"results": [row, ...], "report": {... perMutationKind, staleSchemaUsedRate ...}}``."""
        return {
            "results": [row.to_dict() for row in self.results],
            "report": self.report.to_dict(),
        }


def task_from_dict(obj: object, *, source: str = "<dict>") -> Task:
    """Validate one task definition (the JSONL line as a dict); raise ``TaskLoadError``."""
    return parse_task(obj, source)


def digest_of(tasks: Iterable[Task]) -> str:
    """The digest of the distinct task definitions graded against (inline tasks have no file).

    Copies of one definition count once, and the order they came in never changes the digest,
    so it equals ``load_tasks(...).digest`` for a file holding exactly those tasks.
    """
    distinct = {canonical_json(dict(task.raw)): task.raw for task in tasks}
    return tasks_digest(distinct[key] for key in sorted(distinct))


def grade_all(pairs: Iterable[tuple[Task, object]], tasks_digest: str) -> RunResult:
    """Grade ``(task, answer)`` pairs into a :class:`RunResult` stamped with ``tasks_digest``."""
    report = Report(tasks_digest)
    rows: list[GradedAnswer] = []
    for task, answer in pairs:
        verdict = score(task, answer)
        report.add(task, verdict)
        rows.append(GradedAnswer(task, verdict, tasks_digest))
    return RunResult(tuple(rows), report)


def score_run(tasks: TaskSet | Iterable[Task], answers: Iterable[tuple[str, object]]) -> RunResult:
    """Grade ``(task_id, answer)`` pairs against ``tasks``.

    Every task id is looked up before the first answer is graded, so an unknown id raises
    :class:`UnknownTaskError` (and a task graded only by its checks, with no expected call,
    ``NoExpectedCallError``) and nothing half-graded is returned. A plain iterable of tasks
    becomes a task set first (duplicate ids raise ``TaskLoadError``); the report carries that
    set's digest, the same digest ``gradeproxy grade`` prints for the same task file.
    """
    task_set = tasks if isinstance(tasks, TaskSet) else build_task_set(tasks)
    pairs: list[tuple[Task, object]] = []
    for index, (task_id, answer) in enumerate(answers):
        task = task_set.get(task_id) if isinstance(task_id, str) else None
        if task is None:
            raise UnknownTaskError(task_id, index, len(task_set))
        if task.expected_call is None:
            raise NoExpectedCallError(
                f"answers[{index}]: task {task.id!r} has no expected call, so no tool-call "
                "verdict: grade it with grader.checks.evaluate"
            )
        pairs.append((task, answer))
    return grade_all(pairs, task_set.digest)


class ScoreRequestError(ValueError):
    """A scoring request read off a wire is unusable.

    ``param`` names the offending field as a client wrote it (``answer``, ``items[3].task_id``)
    and ``code`` is one of ``missing_required_parameter``, ``invalid_type``, ``invalid_value``,
    ``unknown_task``, ``invalid_task``, ``no_expected_call``, ``batch_too_large`` or
    ``no_task_set``.
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


def resolve_item(obj: object, tasks: TaskSet | None, *, where: str = "") -> tuple[Task, str]:
    """Read one ``{"task_id" | "task", "answer"}`` object into ``(task, answer)``.

    ``where`` prefixes every ``param`` (``items[2]``); ``tasks`` answers ``task_id`` look-ups
    (``None``: no task set, so only inline tasks work).
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
    task = _inline_task(obj["task"], where) if has_task else _task_by_id(obj, tasks, where)
    if task.expected_call is None:
        param = _field(where, "task" if has_task else "task_id")
        raise ScoreRequestError(
            f"task {task.id!r} has no expected call, so it has no tool-call verdict; "
            "grade it with its checks (/grading/v1/graders/run, grader.checks.evaluate)",
            param=param,
            code="no_expected_call",
        )
    return task, answer


def _inline_task(definition: object, where: str) -> Task:
    try:
        return task_from_dict(definition, source=_field(where, "task"))
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
) -> list[tuple[Task, str]]:
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


def request_digest(pairs: Sequence[tuple[Task, object]], tasks: TaskSet | None) -> str:
    """The digest a wire request's report carries.

    All tasks from the loaded set: that set's digest, the one ``gradeproxy grade`` prints and
    ``gradeproxy_build_info`` exports. Any inline task: the digest of the distinct tasks used.
    """
    if tasks is not None and all(tasks.get(task.id) is task for task, _ in pairs):
        return tasks.digest
    return digest_of(task for task, _ in pairs)
