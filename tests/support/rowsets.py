"""Synthetic live result rows, built by the grader itself, for the commands that read rows.

Primary and shadow legs of the same requests (so ``compare`` finds pairs), passing, failing and
stale answers over the default three-task set, the answer kept (so ``regrade`` grades again).
:func:`as_v1` turns them into what a proxy before ``row_id`` wrote.
"""

from __future__ import annotations

from typing import Any

from grader import parse_task
from grader.engine import grade
from grader.json import dumps, loads_exact
from grader.rows import Live, live_row
from tests.support.tasks import TASK_LINES

TASKS = [parse_task(loads_exact(line.decode())) for line in TASK_LINES]
ANSWERS = {
    "weather.single": [
        {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}},
        {"name": "get_weather", "arguments": {"city": "Zürich", "units": "C"}},
    ],
    "weather.city_only": [
        {"name": "get_weather", "arguments": {"city": "Zürich"}},
        {"name": "get_weather", "arguments": {"city": "Bern"}},
    ],
    "time.tokyo": [
        {"name": "get_time", "arguments": {"timezone": "Asia/Tokyo"}},
        {"name": "get_clock", "arguments": {}},
    ],
}


def live_rows(
    count: int, run: str = "nightly", digest: str = "sha256:test"
) -> list[dict[str, Any]]:
    """``count`` requests, each graded as a primary and a shadow leg (two rows a request).

    The legs answer differently now and then, so ``compare`` sees wins, losses and ties."""
    rows: list[dict[str, Any]] = []
    for index in range(count):
        task = TASKS[index % len(TASKS)]
        answers = ANSWERS[task.id]
        for variant, pick in (("primary", index % 2), ("shadow", (index // 3) % 2)):
            call = answers[pick]
            text = dumps({"tool_calls": [{"function": {"name": call["name"],
                          "arguments": dumps(call["arguments"]).decode()}}]}).decode()  # fmt: skip
            outcome = grade(task, text)
            live = Live(
                request_id=f"req-{index}",
                time=f"2026-12-0{1 + index % 3}T10:{index % 60:02d}:00.{index:06d}Z",
                model="m-" + variant,
                upstream="http://backend",
                stream=False,
                variant=variant,
                pair_id=f"pair-{index}",
                choice=0,
                finish_reason="tool_calls",
                run=run,
                answer=text,
                sample_id=f"s-{index}",
            )
            rows.append(live_row(task, outcome, digest, live))
    return rows


def as_v1(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows as schema v1 wrote them: no ``row_id``, ``row_schema_version`` 1."""
    return [
        {k: (1 if k == "row_schema_version" else v) for k, v in row.items() if k != "row_id"}
        for row in rows
    ]


def jsonl(rows: list[dict[str, Any]]) -> bytes:
    return b"".join(dumps(row) + b"\n" for row in rows)
