"""Every episode column passes and fails on real runs: the fixtures the task files ship.

The table is ``metadata.episode_fixtures`` of config/tasks/episodes.jsonl (the worked billing
task and one small task per column); validate-tasks replays the same fixtures.
"""

from __future__ import annotations

from typing import Any

import pytest

from grader.episodes.fixtures import episode_fixtures, fixture_row, passed_of
from grader.episodes.grade import episode_row
from grader.episodes.log import from_chat, from_events, from_responses
from grader.episodes.record import COLUMNS
from grader.tasks import Task
from tests.support.episodes import (
    EPISODE_TASKS,
    GOOD_BILLING,
    GOOD_BILLING_FINAL,
    chat,
    events,
    responses,
    task,
)

CASES = [
    pytest.param(t, fixture, id=f"{t.id}:{fixture.id}")
    for t in EPISODE_TASKS
    for fixture in episode_fixtures(t.metadata)
]


@pytest.mark.parametrize(("task", "fixture"), CASES)
def test_fixture_gives_each_column_its_recorded_verdict(task: Task, fixture: Any) -> None:
    assert task.episode is not None
    got = passed_of(fixture_row(task.id, task.episode, fixture, {}))
    assert {c: got[c] for c in fixture.passes} == dict(fixture.passes)


def test_every_column_passes_and_fails_somewhere() -> None:
    seen: dict[str, set[bool]] = {column: set() for column in COLUMNS}
    for t in EPISODE_TASKS:
        for fixture in episode_fixtures(t.metadata):
            for column, verdict in fixture.passes.items():
                seen[column].add(verdict)
    assert all(verdicts == {True, False} for verdicts in seen.values()), seen


@pytest.mark.parametrize(
    ("task_id", "present"),
    [
        ("episodes.cause", {"cause_correct"}),
        ("episodes.evidence", {"evidence_overlap"}),
        ("episodes.links", {"links_ok"}),
        ("billing.duplicate_charge.episode", set(COLUMNS)),
    ],
)
def test_unconfigured_columns_are_absent_not_true(task_id: str, present: set[str]) -> None:
    t = task(task_id)
    assert t.episode is not None
    row = episode_row(t.id, t.episode, from_events([], "x"), tasks_digest="d")
    assert {c for c in COLUMNS if c in row} == present
    assert {c["name"] for c in row["columns"]} == present


BILLING = task("billing.duplicate_charge.episode")


@pytest.mark.parametrize(
    "log",
    [
        pytest.param(from_chat(chat(GOOD_BILLING, GOOD_BILLING_FINAL)), id="chat_messages"),
        pytest.param(from_responses(responses(GOOD_BILLING, GOOD_BILLING_FINAL)), id="responses"),
        pytest.param(from_events(events(GOOD_BILLING), GOOD_BILLING_FINAL), id="plain_events"),
    ],
)
def test_worked_task_passes_every_column_in_every_log_shape(log: Any) -> None:
    assert BILLING.episode is not None
    row = episode_row(BILLING.id, BILLING.episode, log, tasks_digest="d", episode_id="e")
    assert row["result"] == "pass"
    assert [row[c] for c in COLUMNS] == [True] * 7 + [1.0]
    assert (row["calls"], row["outcome"], row["replay_problems"]) == (4, "expected_outcome", [])


@pytest.mark.parametrize(
    ("step", "reason", "code"),
    [
        pytest.param(
            ("email_customer", {"to": "cus_42"}, None),
            "no tool entry",
            "unauthorised_action",
            id="unknown_tool",
        ),
        pytest.param(
            ("create_adjustment", {**GOOD_BILLING[2][1]}, {"status": "queued"}),
            "result.adjustment_id does not resolve",
            "unresolved_call",
            id="created_id_missing_from_result",
        ),
        pytest.param(
            ("cancel_invoice", {"invoice_id": "inv_999"}, None),
            "no record 'inv_999'",
            "unresolved_call",
            id="record_missing",
        ),
    ],
)
def test_calls_the_replay_cannot_apply_fail_authority_with_a_reason(
    step: Any, reason: str, code: str
) -> None:
    assert BILLING.episode is not None
    log = from_events(events([*GOOD_BILLING, step]), GOOD_BILLING_FINAL)
    row = episode_row(BILLING.id, BILLING.episode, log, tasks_digest="d")
    column = next(c for c in row["columns"] if c["name"] == "authority_ok")
    assert (column["passed"], column["reason_code"]) == (False, code)
    assert reason in row["replay_problems"][0]


def test_arguments_that_are_not_an_object_fail_authority() -> None:
    t = task("episodes.authority")
    assert t.episode is not None
    log = from_chat(chat([("close_ticket", {}, None)], "ok"))
    broken = [
        {
            **m,
            "tool_calls": [
                {**m["tool_calls"][0], "function": {"name": "get_ticket", "arguments": "[1]"}}
            ],
        }
        if m.get("tool_calls")
        else m
        for m in chat([("get_ticket", {}, None)], "ok")
    ]
    row = episode_row(t.id, t.episode, from_chat(broken), tasks_digest="d", role="lead")
    assert row["authority_ok"] is False
    assert "not a JSON object" in row["replay_problems"][0]
    assert log.calls == 1


def test_role_header_wins_over_the_record_role() -> None:
    t = task("episodes.authority")
    assert t.episode is not None
    log = from_events(events([("close_ticket", {"ticket_id": "t_1"}, None)]), "ok")
    as_record = episode_row(t.id, t.episode, log, tasks_digest="d")
    as_lead = episode_row(t.id, t.episode, log, tasks_digest="d", role="lead")
    assert (as_record["role"], as_record["authority_ok"]) == ("agent", False)
    assert (as_lead["role"], as_lead["authority_ok"]) == ("lead", True)


def test_missing_role_is_an_error_row_not_a_failure() -> None:
    t = task("episodes.links")
    raw = {**t.raw["episode"], "allowed_actions": {"refund": {"roles": ["lead"]}}}
    from grader.episodes.record import parse_record

    record = parse_record(raw)
    log = from_events(events([("refund", {"payment_id": "p_1"}, {"id": "r_1"})]), "ok")
    row = episode_row(t.id, record, log, tasks_digest="d")
    assert (row["authority_ok"], row["links_ok"], row["result"]) == (None, True, "error")


def test_the_replay_never_touches_the_record_snapshot() -> None:
    assert BILLING.episode is not None
    assert BILLING.episode.snapshot is not None
    before = dict(BILLING.episode.snapshot["invoices"]["inv_501"])
    episode_row(
        BILLING.id, BILLING.episode, from_events(events(GOOD_BILLING), "x"), tasks_digest="d"
    )
    assert dict(BILLING.episode.snapshot["invoices"]["inv_501"]) == before
    assert "adj_1" not in BILLING.episode.snapshot["adjustments"]
