"""Rows and drafts for the review queue's tests: judged rows, a judge parse error, an advisory
row, rows the queue must pass over, and drafts, with hostile strings where a person reads them.

Row ids are fixed UUIDs so a split or a sample is the same on every run.
"""

from __future__ import annotations

import uuid
from typing import Any

HOSTILE = '<script>window.pwned=1</script>"><img src=x onerror="window.pwned=2">'
UNICODE = "caf\u00e9 \u202etxt.exe \U0001f600 \u0000\u200b"
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "create_ticket",
            "parameters": {
                "type": "object",
                "properties": {
                    "title": {"type": "string"},
                    "priority": {"type": "string", "enum": ["low", "high"]},
                },
                "required": ["title"],
                "additionalProperties": False,
            },
        },
    },
    {"type": "function", "function": {"name": "close_ticket"}},
]


def rid(n: int) -> str:
    return str(uuid.UUID(int=n))


def judge_column(passed: bool | None, code: str, advisory: bool = False) -> dict[str, Any]:
    column = {"name": "tone", "type": "label_model", "passed": passed, "reason_code": code}
    column["reason"] = f"the judge said {code} {HOSTILE}"
    if advisory:
        column["advisory"] = True
    return column


def answer_row(n: int, task: str, columns: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "kind": "answer",
        "row_schema_version": 3,
        "row_id": rid(n),
        "task_id": task,
        "result": "pass",
        "passed": True,
        "checks": columns,
        "answer": extra.pop("answer", f"an answer {UNICODE}"),
        "model": "m-1",
        **extra,
    }


def seeded_rows() -> list[dict[str, Any]]:
    """Three judged rows (one with a hostile task id and answer), a parse error, an advisory
    row, and two the queue must not offer (no judge; an episode row)."""
    return [
        answer_row(1, "judged.pass.01", [judge_column(True, "judge_pass")]),
        answer_row(
            2, f"judged.{HOSTILE}", [judge_column(False, "judge_fail")], answer=HOSTILE + UNICODE
        ),
        answer_row(3, "judged.pass.03", [judge_column(True, "judge_pass")]),
        answer_row(4, "parse.error.01", [judge_column(None, "judge_parse_error")]),
        answer_row(5, "advisory.01", [judge_column(True, "judge_pass", advisory=True)]),
        answer_row(6, "no.judge.01", [{"name": "call", "type": "tool_call", "passed": True}]),
        {"kind": "episode", "row_id": rid(7), "task_id": "episode.01"},
    ]


OFFERED = [rid(1), rid(2), rid(3), rid(4), rid(5)]  # in file order, after the drafts


def drafts() -> list[dict[str, Any]]:
    """Two drafts in the task format (``gradeproxy tasks draft``), one with a hostile id."""
    return [
        {
            "id": "draft.0a1b2c3d.4e5f6a7b",
            "status": "draft",
            "prompt": f"Open a ticket: {HOSTILE}",
            "tools": TOOLS,
            "expected": {"name": "create_ticket", "arguments": {"title": "Printer jam"}},
            "metadata": {"draft": {"rows": [rid(1)], "count": 3}},
        },
        {
            "id": f"draft.{HOSTILE}",
            "status": "draft",
            "tools": TOOLS,
            "expected": {"name": "close_ticket", "arguments": {}},
            "metadata": {"draft": {"rows": [rid(2)], "count": 1}},
        },
    ]
