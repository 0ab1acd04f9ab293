"""The grader record: hand-written mistakes are refused with their path and ``file:line``;
no input, however odd, makes the parser or the event-log readers raise anything else."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grader.episodes.columns import cited_ids, evidence_f1
from grader.episodes.grade import episode_row
from grader.episodes.log import from_chat, from_events, from_responses
from grader.episodes.record import RecordError, parse_record
from grader.loader import load_tasks
from grader.tasks import TaskLoadError

SNAP = {"tickets": {"t_1": {"status": "open"}}}
TOOLS = {"close": {"effects": [{"op": "cancel", "table": "tickets", "id": "arguments.id"}]}}


def rec(**over: Any) -> dict[str, Any]:
    return {"schema_version": 1, "snapshot": SNAP, "tools": TOOLS, **over}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        pytest.param({"snapshot": SNAP}, "episode.schema_version: must be 1", id="no_version"),
        pytest.param(rec(), "configures no column", id="no_column"),
        pytest.param(rec(target=[]), "episode.target: unknown field", id="unknown_key"),
        pytest.param(
            {"schema_version": 1, "snapshot": SNAP, "target_state": []},
            "episode.tools: is required with a snapshot",
            id="snapshot_without_tools",
        ),
        pytest.param(
            rec(
                tools={
                    "close": {
                        "effects": [{"op": "merge", "table": "tickets", "id": "arguments.id"}]
                    }
                }
            ),
            "episode.tools.close.effects[0].op: must be one of create, update, delete, cancel",
            id="unknown_op",
        ),
        pytest.param(
            rec(
                tools={
                    "close": {
                        "effects": [{"op": "cancel", "table": "orders", "id": "arguments.id"}]
                    }
                }
            ),
            "episode.tools.close.effects[0].table: table 'orders' is not in the snapshot",
            id="unknown_table",
        ),
        pytest.param(
            rec(
                tools={
                    "close": {
                        "effects": [
                            {
                                "op": "update",
                                "table": "tickets",
                                "id": "arguments.id",
                                "fields": {"status": "closed"},
                            }
                        ]
                    }
                }
            ),
            "has no expressions",
            id="bare_literal_field",
        ),
        pytest.param(
            rec(
                tools={"close": {"effects": [{"op": "cancel", "table": "tickets", "id": "id + 1"}]}}
            ),
            "must be a path",
            id="id_not_a_path",
        ),
        pytest.param(
            rec(forbidden_changes=[{"table": "tickets", "id": "t_9"}]),
            "episode.forbidden_changes[0].id: tickets has no record 't_9'",
            id="forbidden_record_missing",
        ),
        pytest.param(
            rec(target_state=[{"table": "tickets", "id": "t_1"}]),
            "needs a non-empty 'fields' object",
            id="target_without_fields",
        ),
        pytest.param(
            rec(required_links=[{"from": "tickets", "to": "tickets.t_1"}]),
            "episode.required_links[0]: must be",
            id="link_without_field",
        ),
        pytest.param(
            rec(allowed_actions={"reopen": {}}),
            "episode.allowed_actions.reopen: is not in 'tools'",
            id="action_without_tool",
        ),
        pytest.param(
            rec(evidence_ids=["pay 1"]),
            "episode.evidence_ids[0]: must be one whole id token",
            id="evidence_not_a_token",
        ),
        pytest.param(
            rec(
                accepted_alternatives=[{"target_state": [{"table": "tickets", "match": {"a": 1}}]}]
            ),
            "needs an 'expected_outcome'",
            id="alternative_without_outcome",
        ),
        pytest.param(
            {"schema_version": 1, "root_cause": {"any": []}},
            "episode.root_cause: needs 'any' or 'all' phrases",
            id="empty_root_cause",
        ),
        pytest.param(
            rec(target_state=[{"table": "tickets", "id": "t_1", "fields": {"status": "open"}}]),
            "episode.target_state: already holds in the snapshot",
            id="target_that_holds_at_reset",
        ),
        pytest.param(
            rec(side_effects=[{"table": "tickets", "id": "t_1", "effect": "unchanged"}]),
            "episode.side_effects: already holds in the snapshot",
            id="side_effects_that_hold_at_reset",
        ),
        pytest.param(
            rec(
                expected_outcome={
                    "target_state": [{"table": "tickets", "match": {"status": "open"}}]
                }
            ),
            "episode.expected_outcome: already holds in the snapshot",
            id="outcome_that_holds_at_reset",
        ),
        pytest.param(
            rec(side_effects=[{"table": "tickets", "id": "t_1", "effect": "created"}]),
            "'created' takes a 'match' object",
            id="created_with_id",
        ),
    ],
)
def test_bad_records_are_refused_with_their_path(raw: Any, message: str) -> None:
    with pytest.raises(RecordError) as caught:
        parse_record(raw)
    assert message in str(caught.value)


def test_a_bad_record_in_a_task_file_names_file_line_and_task(tmp_path: Path) -> None:
    good = {"id": "a", "episode": rec(target_state=[{"table": "tickets", "match": {"x": 1}}])}
    bad = {"id": "b", "episode": rec(evidence_ids=[])}
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(TaskLoadError) as caught:
        load_tasks(path)
    assert str(caught.value) == (
        f"{path}:2: task 'b': episode.evidence_ids: must be a non-empty list"
    )


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=30,
)
KEYS = st.sampled_from(
    [
        "schema_version",
        "snapshot",
        "tools",
        "target_state",
        "forbidden_changes",
        "required_links",
        "allowed_actions",
        "side_effects",
        "expected_outcome",
        "accepted_alternatives",
        "root_cause",
        "evidence_ids",
        "role",
    ]
)


@given(st.dictionaries(KEYS, JSON, max_size=6))
def test_any_record_parses_or_raises_a_record_error(raw: dict[str, Any]) -> None:
    try:
        columns = parse_record({"schema_version": 1, **raw}).columns
    except RecordError as exc:
        message = str(exc)
        assert message.startswith("episode"), message
    else:
        assert columns  # a record that parses configures at least one column


@given(st.lists(JSON, max_size=8), st.none() | st.text(max_size=20))
def test_any_history_reads_into_a_log_and_grades_without_raising(
    items: list[Any], final: str | None
) -> None:
    record = parse_record(
        rec(
            target_state=[{"table": "tickets", "id": "t_1", "fields": {"status": "cancelled"}}],
            allowed_actions={"close": {}},
            evidence_ids=["t_1"],
        )
    )
    for log in (from_chat(items), from_responses(items), from_events(items, final)):
        row = episode_row("t", record, log, tasks_digest="d")
        assert row["result"] in ("pass", "fail", "error")


IDS = st.from_regex(r"[a-z]{1,4}_[0-9]{1,3}", fullmatch=True)
SEP = st.sampled_from([" ", ", ", ". ", "(", ")", "\n", ": ", "/"])


@given(IDS, st.lists(st.tuples(SEP, IDS), max_size=5), SEP)
def test_an_id_is_cited_only_as_a_whole_token(
    first: str, rest: list[tuple[str, str]], end: str
) -> None:
    text = first + "".join(sep + word for sep, word in rest) + end
    known = frozenset([first, first + "2", "x" + first] + [w for _, w in rest])
    assert first in cited_ids(text, known)
    assert (first + "2" in cited_ids(text, known)) == (first + "2" in {w for _, w in rest})


@pytest.mark.parametrize(
    ("text", "score"),
    [
        pytest.param("pay_1 and inv_2", 1.0, id="exact"),
        pytest.param("pay_1", 0.666667, id="half_recall"),
        pytest.param("pay_1 inv_2 pay_3 pay_4", 0.666667, id="half_precision"),
        pytest.param("pay_12 inv_21", 0.0, id="lookalikes_never_match"),
        pytest.param("pay_1 cus_unknown unknown_9", 0.666667, id="unknown_ids_do_not_count"),
        pytest.param("", 0.0, id="nothing_cited"),
    ],
)
def test_evidence_f1(text: str, score: float) -> None:
    known = frozenset({"pay_1", "inv_2", "pay_3", "pay_4", "pay_12", "inv_21"})
    assert evidence_f1(text, ("pay_1", "inv_2"), known) == score
