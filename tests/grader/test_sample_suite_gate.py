"""The seed's good-answers gate on the sample suite: every expected call scores 1 and every
stale call scores 0 with staleSchemaUsed, in every wire shape the proxy hands the grader; a
task with checks passes every check on its expected call and is ``stale`` on its stale one."""

from __future__ import annotations

from typing import Any

import pytest

from grader import Task, grade, load_tasks, offline_context, score
from grader.json import dumps
from tests.support.paths import REPO

# Episode tasks (config/tasks/episodes.jsonl) grade whole agent runs and have no expected call:
# tests/grader/episodes holds their gate.
SUITE = [t for t in load_tasks(REPO / "config" / "tasks") if t.episode is None]


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


@pytest.mark.parametrize(
    "task", [t for t in SUITE if t.expected_call is not None], ids=lambda t: t.id
)
def test_expected_scores_one_and_stale_scores_zero_flagged(task: Task) -> None:
    assert task.stale is not None, "every sample task records its pre-migration call"
    context = offline_context(task)
    assert grade(task, as_wire(task.expected), context).result == "pass"
    assert grade(task, as_wire(task.stale), context).result == "stale"
    if task.has_checks:
        return
    expected = (
        dumps(task.raw["expected"]).decode()
        if not isinstance(task.raw["expected"], str)
        else (task.raw["expected"])
    )
    assert score(task, expected).score == 1
    assert score(task, as_wire(task.expected)).score == 1
    stale = score(task, as_wire(task.stale))
    assert (stale.score, stale.stale_schema_used, stale.reason_code) == (0, True, "stale_schema")
