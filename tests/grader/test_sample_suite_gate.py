"""The seed's good-answers gate on the sample suite: every expected call scores 1 and every
stale call scores 0 with staleSchemaUsed, in every wire shape the proxy hands the grader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from grader import Task, load_tasks, score
from grader._json import dumps

# Episode tasks (config/tasks/episodes.jsonl) grade whole agent runs and have no expected call:
# tests/episodes holds their gate.
SUITE = [t for t in load_tasks(Path(__file__).parents[2] / "config" / "tasks") if t.episode is None]


def as_wire(call: Any) -> str:
    return dumps(
        {
            "tool_calls": [
                {
                    "id": "c",
                    "type": "function",
                    "function": {"name": call.name, "arguments": dumps(call.arguments).decode()},
                }
            ]
        }
    ).decode()


@pytest.mark.parametrize("task", SUITE, ids=lambda t: t.id)
def test_expected_scores_one_and_stale_scores_zero_flagged(task: Task) -> None:
    expected = (
        dumps(task.raw["expected"]).decode()
        if not isinstance(task.raw["expected"], str)
        else (task.raw["expected"])
    )
    assert score(task, expected).score == 1
    assert score(task, as_wire(task.expected)).score == 1
    assert task.stale is not None, "every sample task records its pre-migration call"
    stale = score(task, as_wire(task.stale))
    assert (stale.score, stale.stale_schema_used, stale.reason_code) == (0, True, "stale_schema")
