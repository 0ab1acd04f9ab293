"""The one table every scoring surface is held to: same input, same verdict, same report.

Each case is an answer to one of :data:`TASKS` and the verdict grading.md gives it. The Python
API and ``gradeproxy grade`` take any JSON answer (a non-string scores 0 with ``not_a_string``,
failure mode 11); the HTTP and MCP surfaces are typed wires, so there a non-string answer is a
request error naming ``answer`` (``Case.on_wire`` says which cases reach their grader).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.json import dumps

BIG_ID = 12345678901234567890123  # wider than 64 bits: must never be compared as a double

TICKET: dict[str, Any] = {
    "name": "create_ticket",
    "arguments": {
        "title": "Printer jam",
        "priority": "high",
        "labels": ["hw", "office"],
        "amount": 4550,
        "customer": {"id": BIG_ID, "tier": "gold"},
    },
}
TICKET_STALE: dict[str, Any] = {
    "name": "create_ticket",
    "arguments": {**TICKET["arguments"], "severity": "high"},
}
del TICKET_STALE["arguments"]["priority"]

FORECAST: dict[str, Any] = {
    "name": "get_forecast",
    "arguments": {"city": "Lisbon", "days": 3, "units": "metric"},
}
FORECAST_STALE: dict[str, Any] = {
    "name": "get_forecast",
    "arguments": {"city": "Lisbon", "days": 3, "units": "celsius"},
}
EVENT: dict[str, Any] = {
    "name": "create_event",
    "arguments": {"summary": "Caf\u00e9 sync", "duration": "PT45M", "attendees": "ana,bo"},
}

TASKS: list[dict[str, Any]] = [
    {
        "id": "tickets.field_renamed.01",
        "expected": TICKET,
        "metadata": {"stale": TICKET_STALE, "mutationKind": "field_renamed"},
    },
    {
        "id": "weather.enum_value_changed.01",
        "expected": FORECAST,
        "metadata": {
            "stale": FORECAST_STALE,
            "mutationKind": "enum_value_changed",
            "description": "units moved from celsius to metric",
        },
    },
    {"id": "calendar.plain.01", "expected": EVENT},  # no mutation kind: reported as "(none)"
]
TASKS_BY_ID = {task["id"]: task for task in TASKS}

# Graded only by its checks (docs/checks-contract.md): it has no expected call, so no verdict.
CHECKS_ONLY_TASK: dict[str, Any] = {
    "id": "route.checks_only.01",
    "checks": [
        {
            "type": "string_check",
            "name": "route",
            "operation": "eq",
            "input": "{{sample.output_text}}",
            "reference": "BILLING",
        }
    ],
}


def text(value: Any) -> str:
    return dumps(value).decode()


def with_args(call: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {"name": call["name"], "arguments": {**call["arguments"], **changes}}


def nested(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


@dataclass(frozen=True, slots=True)
class Case:
    id: str
    task_id: str
    answer: object
    score: int
    stale: bool
    reason_code: str
    path: str | None = None

    @property
    def on_wire(self) -> bool:
        """Whether the typed surfaces (HTTP, MCP) grade it rather than reject the request."""
        return isinstance(self.answer, str)

    def expected(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "score": self.score,
            "staleSchemaUsed": self.stale,
            "reason_code": self.reason_code,
            "path": self.path,
        }


T, W, C = "tickets.field_renamed.01", "weather.enum_value_changed.01", "calendar.plain.01"
TOOL_CALLS = {
    "tool_calls": [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_forecast", "arguments": text(FORECAST["arguments"])},
        }
    ]
}

CASES: list[Case] = [
    Case("exact_call_scores_1", T, text(TICKET), 1, False, "match"),
    Case(
        "key_order_and_spacing_ignored",
        W,
        '{ "arguments": {"units": "metric", "days": 3, "city": "Lisbon"},\n'
        ' "name": "get_forecast" }',
        1,
        False,
        "match",
    ),
    Case("openai_tool_calls_envelope_unwrapped", W, text(TOOL_CALLS), 1, False, "match"),
    Case(
        "prose_and_fence_around_call",
        C,
        "Sure, booking it now:\n```json\n" + text(EVENT) + "\n```\nAnything else?",
        1,
        False,
        "match",
    ),
    Case(
        "comma_list_and_duration_equivalences",
        C,
        text(with_args(EVENT, duration="PT0H45M", attendees="ana, bo")),
        1,
        False,
        "match",
    ),
    Case(
        "number_forms_compare_by_value",
        T,
        text(TICKET).replace("4550", "4.55e3"),
        1,
        False,
        "match",
    ),
    Case("stale_field_name_flagged", T, text(TICKET_STALE), 0, True, "stale_schema"),
    Case("stale_enum_value_flagged", W, text(FORECAST_STALE), 0, True, "stale_schema"),
    Case(
        "half_adapted_is_plain_mismatch_not_stale",
        W,
        text(with_args(FORECAST_STALE, days=4)),
        0,
        False,
        "value_mismatch",
        "arguments.days",
    ),
    Case(
        "wrong_tool_name",
        W,
        text({"name": "get_air_quality", "arguments": FORECAST["arguments"]}),
        0,
        False,
        "name_mismatch",
        "name",
    ),
    Case(
        "string_number_is_a_type_error",
        T,
        text(with_args(TICKET, amount="4550")),
        0,
        False,
        "type_mismatch",
        "arguments.amount",
    ),
    Case(
        "big_integers_compared_exactly",
        T,
        text(with_args(TICKET, customer={"id": BIG_ID + 1, "tier": "gold"})),
        0,
        False,
        "value_mismatch",
        "arguments.customer.id",
    ),
    Case(
        "array_order_matters",
        T,
        text(with_args(TICKET, labels=["office", "hw"])),
        0,
        False,
        "value_mismatch",
        "arguments.labels[0]",
    ),
    Case(
        "last_call_wins",
        W,
        text(FORECAST_STALE) + "\nCorrection:\n" + text(FORECAST),
        1,
        False,
        "match",
    ),
    Case(
        "nfd_text_differs_from_nfc",
        C,
        text(with_args(EVENT, summary="Cafe\u0301 sync")),
        0,
        False,
        "value_mismatch",
        "arguments.summary",
    ),
    Case("refusal_has_no_call", W, "I can't check the weather, sorry.", 0, False, "no_call"),
    Case("empty_answer_has_no_call", W, "", 0, False, "no_call"),
    Case(
        "pathological_nesting_scores_0",
        W,
        '{"name": "get_forecast", "arguments": {"city": ' + nested(400) + "}}",
        0,
        False,
        "too_deep",
    ),
    Case("null_answer_not_a_string", W, None, 0, False, "not_a_string"),
    Case("object_answer_not_a_string", W, FORECAST, 0, False, "not_a_string"),
    Case("number_answer_not_a_string", T, 4550, 0, False, "not_a_string"),
]
CASE_IDS = [case.id for case in CASES]
WIRE_CASES = [case for case in CASES if case.on_wire]


def write_tasks(path: Path) -> Path:
    path.write_bytes(b"".join(dumps(task) + b"\n" for task in TASKS))
    return path


def write_answers(path: Path, cases: list[Case]) -> Path:
    rows = [{"task_id": case.task_id, "answer": case.answer} for case in cases]
    path.write_bytes(b"".join(dumps(row) + b"\n" for row in rows))
    return path


def verdict_fields(row: dict[str, Any]) -> dict[str, Any]:
    """The part of a result row a case pins down."""
    return {key: row[key] for key in ("task_id", "score", "staleSchemaUsed", "reason_code", "path")}
