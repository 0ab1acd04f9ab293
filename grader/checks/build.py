"""Check definitions to checks: the type registry, task-level validation and the pass rule.

OpenAI's grader JSON is accepted as it is for the types OpenAI defines; our own types
(``tool_call``, ``json_schema``, ``policy``) follow the same conventions. Code execution is
refused outright: it would run model-written code, which needs an isolation boundary the grader
cannot provide or verify (seed 002).

A check kind's module is imported when a definition of that kind is first built (the registry
names modules, not classes): a task set of tool-call checks never imports rapidfuzz, the policy
rules or the judge's checks, and the command line starts without them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from grader.checks._base import Check, CheckDefinitionError
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


# Check type -> (module, class) of the kinds whose ``build(definition, where)`` is all they need;
# ``tool_call`` and ``multi`` take more and are built below.
_KINDS: dict[str, tuple[str, str]] = {
    "string_check": ("grader.checks.string_check", "StringCheck"),
    "text_similarity": ("grader.checks.similarity", "SimilarityCheck"),
    "label_model": ("grader.checks.model_graded", "JudgeCheck"),
    "score_model": ("grader.checks.model_graded", "JudgeCheck"),
    "json_schema": ("grader.checks.json_schema", "JsonSchemaCheck"),
    "policy": ("grader.checks.policy", "PolicyCheck"),
}
KNOWN_TYPES = frozenset({*_KINDS, "multi", "tool_call"})


def _kind(kind: str) -> Callable[[Mapping[str, Any], str], Check]:
    """The ``build`` of a plain kind, its module imported on first use."""
    module, name = _KINDS[kind]
    builder: Callable[[Mapping[str, Any], str], Check] = getattr(
        importlib.import_module(module), name
    ).build
    return builder


def build_check(
    definition: Mapping[str, Any],
    where: str = "",
    *,
    expected: Call | None = None,
    stale: Call | None = None,
    parsed: bool = False,
) -> Check:
    """Validate one definition and build its check; ``expected``/``stale`` serve ``tool_call``
    (``parsed``: the definition was read from JSON text, see ``ToolCallCheck.build``)."""
    label = f"{where}: " if where else ""
    # A dict is told apart by its type first: an ABC's isinstance runs Python code.
    if type(definition) is not dict and not isinstance(definition, Mapping):
        raise CheckDefinitionError(f"{label}a check must be a JSON object")
    kind = definition.get("type")
    if kind == "tool_call":
        return ToolCallCheck.build(definition, where, expected, stale, parsed)
    if kind in _REFUSED:
        raise CheckDefinitionError(f"{label}check type {kind!r} is not supported: {_REFUSED[kind]}")
    if kind not in KNOWN_TYPES:
        known = ", ".join(sorted(KNOWN_TYPES))
        raise CheckDefinitionError(f"{label}unknown check type {kind!r} (known: {known})")
    if kind == "multi":
        from grader.checks.multi import MultiCheck

        def sub(definition: Mapping[str, Any], where: str) -> Check:
            return build_check(definition, where, expected=expected, stale=stale)

        return MultiCheck.build(definition, where, sub)
    return _kind(kind)(definition, where)


def columns_of(check: Check) -> tuple[str, ...]:
    """The result columns a check yields (a policy check yields one per behaviour)."""
    columns: tuple[str, ...] = getattr(check, "columns", (check.name,))
    return columns


def build_checks(
    task_raw: Mapping[str, Any],
    calls: tuple[Call | None, Call | None] | None = None,
    *,
    parsed: bool = False,
) -> tuple[Check, ...]:
    """A task's checks: its ``checks`` list, or grading.md's tool-call check when it has none.

    Also validates the task's ``pass_rule`` against the columns the checks yield. ``calls``:
    the task's expected and stale calls when the caller has read them already (the loader),
    so they are not extracted and canonicalised a second time. ``parsed``: ``task_raw`` was
    read from JSON text by :mod:`grader.json` (the loader's), so the checks' digests are
    written from it directly (:func:`grader.checks.check_digest`).
    """
    if calls is None:
        metadata = task_raw.get("metadata")
        expected = call_of(task_raw["expected"]) if "expected" in task_raw else None
        stale_raw = metadata.get("stale") if isinstance(metadata, Mapping) else None
        stale = call_of(stale_raw) if stale_raw is not None else None
    else:
        expected, stale = calls
    raw = task_raw.get("checks")
    if raw is None:
        checks: tuple[Check, ...] = (default_check(expected, stale),)
    else:
        if not isinstance(raw, list) or not raw:
            raise CheckDefinitionError("'checks' must be a non-empty list of check definitions")
        made = []  # a loop, not a generator: a task has one or two checks
        for i, d in enumerate(raw):
            made.append(
                build_check(d, f"checks[{i}]", expected=expected, stale=stale, parsed=parsed)
            )
        checks = tuple(made)
    names: set[str] = set()
    columns: set[str] = set()
    for check in checks:
        names.add(check.name)
        for column in columns_of(check):
            if column in columns:
                raise CheckDefinitionError(
                    f"two checks yield the column {column!r}: names are columns"
                )
            columns.add(column)
    rule = task_raw.get("pass_rule", "all")
    if not isinstance(rule, str) or (rule not in PASS_RULES and rule not in names | columns):
        raise CheckDefinitionError(
            f"'pass_rule' must be 'all', 'any' or a check or column name, got {rule!r}"
        )
    return checks
