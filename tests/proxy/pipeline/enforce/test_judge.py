"""The request's plan (proxy/pipeline/enforce/judge.py): which policies cover a request, in what
order they decide a call, and how a failure becomes the fail-open or fail-closed decision."""

from __future__ import annotations

import json
from typing import Any

import pytest

from grader.json import dumps
from grader.loader import parse_task
from grader.route_policy import parse_policies
from proxy.pipeline.enforce.decision import PASS, Decision
from proxy.pipeline.enforce.judge import Plan, plan_for
from proxy.pipeline.record.enforced import enforcement_record
from tests.support.paths import REPO

ROUTE = parse_policies(
    {
        "policies": [
            {
                "name": "watch",
                "checks": [
                    {"type": "policy", "name": "no_delete", "forbidden_calls": ["delete_*"]}
                ],
                "enforce": {"mode": "observe"},
            },
            {
                "name": "minis",
                "models": ["mini-*"],
                "checks": [{"type": "json_schema", "name": "schema", "schema": "from_request"}],
                "enforce": {"mode": "strip", "budget_ms": 5},
            },
        ]
    }
)
TASK = parse_task(
    {
        "id": "refunds",
        "expected": {"name": "refund", "arguments": {"id": "pay_1"}},
        "checks": [{"type": "policy", "name": "no_wipe", "forbidden_calls": ["delete_*"]}],
        "enforce": {"mode": "block", "checks": ["no_wipe"], "fail_closed": True},
    }
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "refund",
            "parameters": {"type": "object", "required": ["id"], "properties": {}},
        },
    }
]


def request(model: str) -> bytes:
    return dumps({"model": model, "tools": TOOLS})


def test_no_policy_no_plan() -> None:
    assert plan_for("chat_completions", None, None, request("m"), None) is None
    assert plan_for(None, TASK, ROUTE, request("m"), None) is None  # not a graded route


@pytest.mark.parametrize(
    ("task", "model", "labels", "mode", "budget_s", "fail_closed"),
    [
        (None, "gpt-4.1", ["route:watch"], "observe", 0.02, False),
        (None, "mini-1", ["route:minis", "route:watch"], "strip", 0.005, False),
        (TASK, "mini-1", ["refunds", "route:minis", "route:watch"], "block", 0.005, True),
    ],
)
def test_the_strictest_policy_comes_first_and_the_plan_takes_the_tightest_terms(
    task: Any, model: str, labels: list[str], mode: str, budget_s: float, fail_closed: bool
) -> None:
    plan = plan_for("chat_completions", task, ROUTE, request(model), None)
    assert plan is not None
    assert [s.label for s in plan.sources] == labels
    assert (plan.mode, plan.budget_s, plan.fail_closed) == (mode, budget_s, fail_closed)


@pytest.mark.parametrize(
    ("name", "arguments", "decision"),
    [
        ("refund", '{"id": "pay_1"}', PASS),
        # both the task (block) and the route (observe) forbid it: the block decides
        ("delete_all", "{}", Decision("block", "no_wipe", "forbidden call 'delete_all' "
                                                          "(matches 'delete_*')")),
        # the request's declared tool wants "id": strip
        ("refund", "{}", Decision("strip", "schema",
                                  "call #0 (refund): arguments: 'id' is a required property")),
    ],
)  # fmt: skip
def test_a_call_is_decided_by_the_first_check_that_fires(
    name: str, arguments: str, decision: Decision
) -> None:
    plan = plan_for("chat_completions", TASK, ROUTE, request("mini-1"), None)
    assert plan is not None
    plan.budget_s = 60.0  # a loaded test machine must not fall open here
    assert plan(name, arguments) == decision


def test_an_observe_policy_says_what_a_block_would_do() -> None:
    plan = plan_for("responses", None, ROUTE, request("gpt"), None)
    assert plan is not None
    plan.budget_s = 60.0
    assert plan("delete_x", "{}") == Decision(
        "observe", "no_delete", "forbidden call 'delete_x' (matches 'delete_*')", would="block"
    )


def _raise(self: Plan, name: str, arguments: str) -> Decision:
    raise RuntimeError("bug")


@pytest.mark.parametrize(
    ("task", "expected"),
    [
        (None, PASS),  # the route policies fail open
        (TASK, Decision("block", "grader_error", "the enforced checks failed; failing closed")),
    ],
)
def test_a_check_that_raises_becomes_the_fail_decision_and_is_recorded(
    monkeypatch: pytest.MonkeyPatch, task: Any, expected: Decision
) -> None:
    monkeypatch.setattr(Plan, "_decide", _raise)
    plan = plan_for("chat_completions", task, ROUTE, request("mini-1"), None)
    assert plan is not None
    assert plan("refund", "{}") == expected
    assert plan("refund", "{}") == expected  # every later call too
    assert plan.failure == "grader_error"
    record = enforcement_record(plan, changed=False)
    assert (record["failure"], record["fail_closed"]) == ("grader_error", task is not None)


EPISODE_TASK = next(
    json.loads(line)
    for line in (REPO / "config" / "tasks" / "episodes.jsonl").read_text().splitlines()
    if "allowed_actions" in (json.loads(line).get("episode") or {})
)


def test_episode_authority_withholds_an_action_the_record_does_not_allow() -> None:
    raw = {**EPISODE_TASK, "enforce": {"mode": "strip", "checks": ["episode.authority_ok"]}}
    task = parse_task(raw)
    plan = plan_for("chat_completions", task, None, request("m"), None)
    assert plan is not None
    plan.budget_s = 60.0
    assert plan("list_payments", '{"customer": "cus_42"}') == PASS
    decision = plan("delete_payment", '{"payment_id": "pay_1001"}')
    assert (decision.action, decision.check) == ("strip", "episode.authority_ok")
    assert decision.reason == "'delete_payment' is not an allowed action"
