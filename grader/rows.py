"""The result row: one schema, built here and nowhere else, for every surface.

``gradeproxy grade --out``, ``grade_run``, ``POST /grading/v1/score``, MCP and the
proxy's ``grades.jsonl`` all write :func:`answer_row` (the proxy through :func:`live_row`): the
offline row is exactly the live row minus :data:`LIVE_FIELDS`. The README's "Result rows" table
lists every field (a test compares it with :data:`OFFLINE_FIELDS` + :data:`LIVE_FIELDS`).

Which field is the verdict: ``result`` (``pass | fail | stale | error``). ``passed`` and
``staleSchemaUsed`` are derived from it and can never disagree with it. ``score``, ``reason``,
``reason_code``, ``path`` and ``call`` are the tool-call column's own fields: they appear at the
top level only on rows of tasks *without* ``checks`` (where that column is the only one, so
they agree with ``result``); on tasks with checks they live inside their column in ``checks``.

Designed for what comes next: ``kind`` is ``"answer"`` (``"episode"`` rows will carry episode
columns), ``row_schema_version`` is bumped on any change of meaning (2: ``row_id``, the key the
rows database keeps a row once by; 3: the live ``usage`` and ``cost``), and new fields (run
metadata carried from answers, judge attempts, ``truncated``, trace ids) are added to the field
lists here, so the README test names any that is left undocumented.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any, Literal

from grader.engine import Outcome
from grader.rowids import live_row_id, offline_row_id
from grader.tasks import Task
from grader.values import value_type
from grader.version import GRADER_RULES_VERSION

ROW_KIND: Literal["answer"] = "answer"
ROW_SCHEMA_VERSION = 3
# v1 -> v2: ``row_id`` added; v2 -> v3: the live ``usage`` and ``cost`` (absent from older rows,
# read as unknown). A reader takes every version up to this one; a v1 row (no ``row_id``) gets
# its id from :func:`row_id_of` where one is needed (the rows database).
READ_SCHEMA_VERSIONS: frozenset[int] = frozenset({1, 2, 3})

# The tool-call column's own fields: top level only on rows of tasks without checks.
TOOL_CALL_FIELDS: tuple[str, ...] = ("score", "reason", "reason_code", "path", "call")
OFFLINE_FIELDS: tuple[str, ...] = (
    "kind",
    "row_schema_version",
    "row_id",
    "task_id",
    "mutationKind",
    "result",
    "passed",
    "staleSchemaUsed",
    *TOOL_CALL_FIELDS,
    "checks",
    "warnings",
    "tasks_digest",
    "grader_rules_version",
)
# The graded sample: on offline rows always (the answers file's answer, never cut), on live rows
# while ``results.capture_answer`` is on; ``sample_id`` joins the two (answers field / header).
SAMPLE_FIELDS: tuple[str, ...] = ("sample_id", "answer", "truncated", "tools")
LIVE_FIELDS: tuple[str, ...] = (
    "request_id",
    "upstream_request_id",
    "time",
    "model",
    "upstream",
    "stream",
    "variant",
    "pair_id",
    "choice",
    "finish_reason",
    "run",
    "meta",
    "timings",
    "usage",
    "cost",
    "enforcement",
    "key_id",
)
# An answers-file field with one of these names would overwrite what the grader wrote: refused.
RESERVED_FIELDS: frozenset[str] = frozenset(OFFLINE_FIELDS) | {"truncated"}
_CLASHING = RESERVED_FIELDS - {"task_id"}  # an answers row's own task_id is the row's


@value_type
class Live:
    """The live-traffic fields of a proxy row (what an offline row does not have).

    ``answer`` is None when ``results.capture_answer`` is off: the field (and ``truncated``)
    is then left out. ``answer_cap`` is ``results.max_answer_chars``: the row stores the answer
    cut there, with ``truncated: true``, so a 50 MB answer never becomes a 50 MB row.
    ``tools`` is the request's tool list, kept only when a ``from_request`` check read it (so
    ``gradeproxy regrade`` can grade the row again); ``sample_id`` is the sample-id header.
    """

    request_id: str
    time: str
    model: str | None
    upstream: str
    stream: bool
    variant: str
    pair_id: str | None
    choice: int
    finish_reason: str | None
    run: str | None
    meta: Mapping[str, str] = field(default_factory=dict)
    timings: Mapping[str, float] = field(default_factory=dict)
    answer: str | None = None
    answer_cap: int | None = None
    upstream_request_id: str | None = None
    sample_id: str | None = None
    tools: list[dict[str, Any]] | None = None
    # The response's token usage (grader/usage.py), None when the backend reported none.
    usage: Mapping[str, int | None] | None = None
    cost: float | None = None  # what ``usage`` cost by the price table (grader/pricing.py)
    # What enforce mode did with this answer (docs/enforce.md); None: no policy covered it.
    enforcement: Mapping[str, Any] | None = None
    key_id: str | None = None  # the named inbound key the request came with (auth.keys)

    def fields(self) -> dict[str, Any]:
        """The live fields alone, in the row's order."""
        out: dict[str, Any] = {}
        self.write_into(out)
        return out

    def write_into(self, row: dict[str, Any]) -> None:
        """Add the live fields to ``row`` in place, in the row's order: a live row is one dict
        written once, not three built and merged (it is built for every graded answer)."""
        row["sample_id"] = self.sample_id
        answer = self.answer
        if answer is not None:
            cap = self.answer_cap
            if cap is None or len(answer) <= cap:
                row["answer"] = answer
                row["truncated"] = False
            else:
                row["answer"] = answer[:cap]
                row["truncated"] = True
        if self.tools is not None:
            row["tools"] = self.tools
        row["row_id"] = live_row_id(
            row.get("kind", ROW_KIND), self.request_id, self.variant, self.choice, self.time
        )
        row["request_id"] = self.request_id
        row["upstream_request_id"] = self.upstream_request_id
        row["time"] = self.time
        row["model"] = self.model
        row["upstream"] = self.upstream
        row["stream"] = self.stream
        row["variant"] = self.variant
        row["pair_id"] = self.pair_id
        row["choice"] = self.choice
        row["finish_reason"] = self.finish_reason
        row["run"] = self.run
        row["meta"] = dict(self.meta)
        row["timings"] = dict(self.timings)
        row["usage"] = None if self.usage is None else dict(self.usage)
        row["cost"] = self.cost
        row["enforcement"] = None if self.enforcement is None else dict(self.enforcement)
        row["key_id"] = self.key_id


# ``passed`` of each result (None: no verdict was reached), as Outcome.passed derives it.
_PASSED: dict[str, bool | None] = {"pass": True, "fail": False, "stale": False, "error": None}


def answer_row(task: Task, outcome: Outcome, tasks_digest: str) -> dict[str, Any]:
    """The row of one graded answer: every surface's row, the live one minus its fields.

    ``result`` and what is derived from it, the tool-call column's own fields (tasks without
    checks), the columns. Written as one dict display per shape, in the row's field order: a
    row filled key by key grew its table twice on the way (every row of every surface)."""
    verdict = outcome.verdict
    result = outcome.result
    passed = _PASSED[result]  # Outcome.passed and .stale_schema_used, without two calls
    stale = result == "stale"
    columns = outcome.checks
    # Most tasks have one column: its form in a list display (a comprehension is a call).
    checks = (
        [columns[0].to_dict()] if len(columns) == 1 else [column.to_dict() for column in columns]
    )
    if verdict is None or outcome.has_checks:
        return {
            "kind": ROW_KIND,
            "row_schema_version": ROW_SCHEMA_VERSION,
            "row_id": offline_row_id(),  # a live row's is derived instead (Live.write_into)
            "task_id": task.id,
            "mutationKind": task.mutation_kind,
            "result": result,
            "passed": passed,
            "staleSchemaUsed": stale,
            "checks": checks,
            "warnings": [*outcome.warnings],
            "tasks_digest": tasks_digest,
            "grader_rules_version": GRADER_RULES_VERSION,
        }
    return {
        "kind": ROW_KIND,
        "row_schema_version": ROW_SCHEMA_VERSION,
        "row_id": offline_row_id(),
        "task_id": task.id,
        "mutationKind": task.mutation_kind,
        "result": result,
        "passed": passed,
        "staleSchemaUsed": stale,
        "score": verdict.score,
        "reason": verdict.reason,
        "reason_code": verdict.reason_code,
        "path": verdict.path,
        "call": verdict.call,
        "checks": checks,
        "warnings": [*outcome.warnings],
        "tasks_digest": tasks_digest,
        "grader_rules_version": GRADER_RULES_VERSION,
    }


def carried_conflicts(source: Mapping[str, Any]) -> list[str]:
    """The answers-row fields that would overwrite a result field (``file:line`` refusals)."""
    if _CLASHING.isdisjoint(source):  # one look-up per field of the row: run once a row
        return []
    return sorted(_CLASHING.intersection(source))


def offline_row(
    task: Task, outcome: Outcome, tasks_digest: str, source: Mapping[str, Any]
) -> dict[str, Any]:
    """An offline row: :func:`answer_row`, the answer, and every other field of the answers row.

    ``source`` is the answers row. Its ``task_id`` is the row's own; its ``answer`` is stored
    whole (``truncated: false``: offline nothing is cut); every other field (``sample_id``,
    ``model``, ``run``, ``attempt``, ``sampling``, ``tools`` …) rides along unchanged, so the
    rows join to run metadata by value, never by line order. A field that would overwrite a
    result field is refused before grading (:func:`carried_conflicts`).
    """
    row = answer_row(task, outcome, tasks_digest)
    answer = source.get("answer")
    row["sample_id"] = source.get("sample_id")
    if isinstance(answer, str):
        row["answer"] = answer
        row["truncated"] = False
    if not _SAMPLE_OWN.issuperset(source):  # fields to carry (most rows have none)
        _carry(row, source)
    return row


def live_row(task: Task, outcome: Outcome, tasks_digest: str, live: Live) -> dict[str, Any]:
    """The proxy's row: :func:`answer_row` plus the live-traffic fields."""
    row = answer_row(task, outcome, tasks_digest)
    live.write_into(row)
    return row


def input_error_row(
    task_id: object,
    task: Task | None,
    reason_code: str,
    reason: str,
    tasks_digest: str,
    source: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The row of an answers row that could not be graded (grader/intake.py): ``result:
    "error"``, no verdict, the input reason code and its ``file:line`` message.

    Written where the graded row would be, so an output has one row per input row; like a
    judge that did not answer, it is out of every pass rate. ``source`` is the answers row as
    far as it was readable (None for a line that is not JSON): its fields ride along as in
    :func:`offline_row`, so the row still joins to run metadata by ``sample_id``.
    """
    row: dict[str, Any] = {
        "kind": ROW_KIND,
        "row_schema_version": ROW_SCHEMA_VERSION,
        "task_id": task_id if isinstance(task_id, str) else None,
        "mutationKind": None if task is None else task.mutation_kind,
        "result": "error",
        "passed": None,
        "staleSchemaUsed": False,
        "score": None,
        "reason": reason,
        "reason_code": reason_code,
        "path": None,
        "call": None,
        "checks": [],
        "warnings": [],
        "tasks_digest": tasks_digest,
        "grader_rules_version": GRADER_RULES_VERSION,
    }
    source = source or {}
    row["sample_id"] = source.get("sample_id")
    answer = source.get("answer")
    if isinstance(answer, str):
        row |= {"answer": answer, "truncated": False}
    _carry(row, source)
    return row


# The answers-row fields a row writes itself (its task id, sample id and answer): not carried.
_SAMPLE_OWN = frozenset({"task_id", "answer", "sample_id"})


def _carry(row: dict[str, Any], source: Mapping[str, Any]) -> None:
    """Every other field of the answers row, unchanged (a reserved one was refused before)."""
    for key, value in source.items():
        if key not in _SAMPLE_OWN and key not in RESERVED_FIELDS:
            row[key] = value
