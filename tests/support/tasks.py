"""Task lines the proxy suites load: the default three-task set, the checked task, the episodes.

Kept as bytes and dicts, not parsed tasks: the proxy reads them from a file like any user's.
"""

from __future__ import annotations

from typing import Any

from grader.json import dumps
from tests.support.paths import REPO


def task_line(
    task_id: str,
    name: str,
    arguments: dict[str, Any],
    stale: dict[str, Any] | None = None,
    kind: str = "field_renamed",
) -> bytes:
    metadata: dict[str, Any] = {"mutationKind": kind}
    if stale is not None:
        metadata["stale"] = {"name": name, "arguments": stale}
    return dumps(
        {"id": task_id, "expected": {"name": name, "arguments": arguments}, "metadata": metadata}
    )


# What the ``tasks_file`` fixture writes unless a module marks another file (``task_file``).
TASK_LINES = [
    task_line(
        "weather.single",
        "get_weather",
        {"city": "Zürich", "unit": "celsius"},
        stale={"city": "Zürich", "units": "C"},
    ),
    task_line("weather.city_only", "get_weather", {"city": "Zürich"}, kind="new_required_field"),
    task_line("time.tokyo", "get_time", {"timezone": "Asia/Tokyo"}, kind="enum_value_changed"),
]

# One task with a column per check type the live path must read from a request or an item.
CHECKED: dict[str, Any] = {
    "id": "weather.checked",
    "expected": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}},
    "item": {"city": "Zürich"},
    "checks": [
        {"type": "tool_call", "name": "call"},
        {
            "type": "string_check",
            "name": "city_exact",
            "operation": "eq",
            "input": "{{ sample.output_tools[0].function.arguments.city }}",
            "reference": "{{ item.city }}",
        },
        {"type": "json_schema", "name": "schema", "schema": "from_request"},
    ],
    "metadata": {
        "stale": {"name": "get_weather", "arguments": {"city": "Zürich", "units": "C"}},
        "mutationKind": "field_renamed",
    },
}

# The shipped episode task set and its worked billing task.
EPISODES = REPO / "config" / "tasks" / "episodes.jsonl"
BILLING = "billing.duplicate_charge.episode"


# The chat request the SDK suites send: a weather question with one declared tool.
WEATHER_REQUEST: dict[str, Any] = {
    "model": "gpt-4.1-mini-2025-04-14",
    "messages": [{"role": "user", "content": "Weather in Zürich, in celsius?"}],
    "tools": [
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    ],
}


# A label_model check the judge suites share (tests/support/judge.py answers it).
POLITE_JUDGE: dict[str, Any] = {
    "type": "label_model",
    "name": "polite",
    "model": "judge-model-2024-08-06",
    "criterion": "The reply is polite.",
    "pass_examples": ["Thank you!"],
    "fail_examples": ["Go away."],
}
