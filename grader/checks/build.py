"""Check definitions to checks: the type registry, task-level validation and the pass rule.

OpenAI's grader JSON is accepted as it is for the types OpenAI defines; our own types
(``tool_call``, ``json_schema``, ``policy``) follow the same conventions. Code execution is
refused outright: it would run model-written code, which needs an isolation boundary the grader
cannot provide or verify (seed 002).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from grader.checks._base import Check, CheckDefinitionError
from grader.checks.json_schema import JsonSchemaCheck
from grader.checks.model_graded import JudgeCheck
from grader.checks.multi import MultiCheck
from grader.checks.policy import PolicyCheck
from grader.checks.similarity import SimilarityCheck
from grader.checks.string_check import StringCheck
from grader.checks.tool_call import ToolCallCheck, call_of, default_check
from grader.toolcall.extract import Call

PASS_RULES = ("all", "any")
_REFUSED = {
    "python": (
        "runs model-written code; gradeproxy has no code-execution checks (seed 002: that "
        "needs a sandbox boundary the grader cannot verify)"
    ),
    "endpoint": "calls out to an arbitrary service; use a judge check instead",
}


def _builders(
    expected: Call | None, stale: Call | None
) -> dict[str, Callable[[Mapping[str, Any], str], Check]]:
    def multi(definition: Mapping[str, Any], where: str) -> Check:
        return MultiCheck.build(definition, where, sub)

    def tool_call(definition: Mapping[str, Any], where: str) -> Check:
        return ToolCallCheck.build(definition, where, expected, stale)

    def sub(definition: Mapping[str, Any], where: str) -> Check:
        return build_check(definition, where, expected=expected, stale=stale)

    return {
        "string_check": StringCheck.build,
        "text_similarity": SimilarityCheck.build,
        "label_model": JudgeCheck.build,
        "score_model": JudgeCheck.build,
        "multi": multi,
        "tool_call": tool_call,
        "json_schema": JsonSchemaCheck.build,
        "policy": PolicyCheck.build,
    }


def build_check(
    definition: Mapping[str, Any],
    where: str = "",
    *,
    expected: Call | None = None,
    stale: Call | None = None,
) -> Check:
    """Validate one definition and build its check; ``expected``/``stale`` serve ``tool_call``."""
    label = f"{where}: " if where else ""
    if not isinstance(definition, Mapping):
        raise CheckDefinitionError(f"{label}a check must be a JSON object")
    kind = definition.get("type")
    builders = _builders(expected, stale)
    if kind in _REFUSED:
        raise CheckDefinitionError(f"{label}check type {kind!r} is not supported: {_REFUSED[kind]}")
    if kind not in builders:
        known = ", ".join(sorted(builders))
        raise CheckDefinitionError(f"{label}unknown check type {kind!r} (known: {known})")
    return builders[kind](definition, where)


def columns_of(check: Check) -> tuple[str, ...]:
    """The result columns a check yields (a policy check yields one per behaviour)."""
    columns: tuple[str, ...] = getattr(check, "columns", (check.name,))
    return columns


def build_checks(task_raw: Mapping[str, Any]) -> tuple[Check, ...]:
    """A task's checks: its ``checks`` list, or grading.md's tool-call check when it has none.

    Also validates the task's ``pass_rule`` against the columns the checks yield.
    """
    metadata = task_raw.get("metadata")
    expected = call_of(task_raw["expected"]) if "expected" in task_raw else None
    stale_raw = metadata.get("stale") if isinstance(metadata, Mapping) else None
    stale = call_of(stale_raw) if stale_raw is not None else None
    raw = task_raw.get("checks")
    if raw is None:
        checks: tuple[Check, ...] = (default_check(expected, stale),)
    else:
        if not isinstance(raw, list) or not raw:
            raise CheckDefinitionError("'checks' must be a non-empty list of check definitions")
        checks = tuple(
            build_check(d, f"checks[{i}]", expected=expected, stale=stale)
            for i, d in enumerate(raw)
        )
    names = {check.name for check in checks}
    columns: set[str] = set()
    for column in (c for check in checks for c in columns_of(check)):
        if column in columns:
            raise CheckDefinitionError(f"two checks yield the column {column!r}: names are columns")
        columns.add(column)
    rule = task_raw.get("pass_rule", "all")
    if not isinstance(rule, str) or (rule not in PASS_RULES and rule not in names | columns):
        raise CheckDefinitionError(
            f"'pass_rule' must be 'all', 'any' or a check or column name, got {rule!r}"
        )
    return checks
