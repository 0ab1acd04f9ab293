"""Helpers shared by the check tables: answers in the proxy's wire shape, one-line runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from grader.checks import Check, CheckContext, CheckResult, Sample, build_check
from grader.json import dumps


def wire(*calls: Mapping[str, Any]) -> str:
    """Calls as the proxy hands them to the grader: ``{"tool_calls": [...]}``."""
    return dumps(
        {
            "tool_calls": [
                {
                    "id": f"call_{i}",
                    "type": "function",
                    "function": {"name": c["name"], "arguments": dumps(c["arguments"]).decode()},
                }
                for i, c in enumerate(calls)
            ]
        }
    ).decode()


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def run(
    definition: Mapping[str, Any] | Check,
    answer: str,
    item: Mapping[str, Any] | None = None,
    context: CheckContext | None = None,
) -> CheckResult:
    check = definition if not isinstance(definition, Mapping) else build_check(definition)
    return check.run(Sample.from_answer(answer), item or {}, context or CheckContext())
