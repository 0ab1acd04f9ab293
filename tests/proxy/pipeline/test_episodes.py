"""proxy/pipeline/episodes.py without sockets: which response ends an episode, what counts as an
incomplete history, and that no request or answer, however odd, makes it raise."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.pipeline.episodes import EpisodeTurn, grade_turn, turn_of
from tests.support.episodes import GOOD_BILLING, GOOD_BILLING_FINAL, chat, responses, task

BILLING = task("billing.duplicate_charge.episode")
GRADING = SimpleNamespace(
    episode_header="X-Grade-Episode",
    role_header="X-Grade-Role",
    trust_role_header=True,
    episode_end_header="X-Grade-Episode-End",
    episode_max_turns=50,
    episode_max_calls=50,
    episode_max_bytes=1 << 20,
)
TURN = EpisodeTurn(None, None, False, 50, 50, 1 << 20)
TEXT = GOOD_BILLING_FINAL
CALL = {
    "tool_calls": [{"id": "c", "type": "function", "function": {"name": "x", "arguments": "{}"}}]
}


def body(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def test_turn_of_reads_the_headers_only_for_tasks_with_a_record() -> None:
    headers = {"X-Grade-Episode": "e" * 300, "X-Grade-Role": "lead", "X-Grade-Episode-End": "True"}
    turn = turn_of(headers, BILLING, GRADING)
    assert turn is not None
    assert (len(turn.episode_id or ""), turn.role, turn.ends) == (256, "lead", True)
    assert turn_of(headers, None, GRADING) is None
    untrusted = SimpleNamespace(**{**vars(GRADING), "trust_role_header": False})
    turn = turn_of(headers, BILLING, untrusted)
    assert turn is not None
    assert turn.role is None  # the record's role decides, not the client's header


@pytest.mark.parametrize(
    ("request_body", "answer", "api", "skip"),
    [
        pytest.param(
            {"messages": chat(GOOD_BILLING, None)},
            CALL,
            "chat_completions",
            "episode_turn",
            id="tool_calls_continue_the_episode",
        ),
        pytest.param(
            {"messages": chat(GOOD_BILLING, None)},
            TEXT,
            "chat_completions",
            None,
            id="text_ends_it",
        ),
        pytest.param(
            {"input": responses(GOOD_BILLING, None)},
            TEXT,
            "responses",
            None,
            id="responses_input_items",
        ),
        pytest.param(
            {"input": "hi", "previous_response_id": "resp_1"},
            TEXT,
            "responses",
            "episode_incomplete",
            id="previous_response_id",
        ),
        pytest.param(
            {"input": [], "conversation": "conv_1"},
            TEXT,
            "responses",
            "episode_incomplete",
            id="conversation",
        ),
        pytest.param(
            {"input": responses(GOOD_BILLING, None)[2:]},
            TEXT,
            "responses",
            "episode_incomplete",
            id="trimmed_responses_history",
        ),
        pytest.param(
            {"messages": "no"}, TEXT, "chat_completions", "episode_incomplete", id="no_list"
        ),
    ],
)
def test_when_an_episode_is_graded(
    request_body: Any, answer: Any, api: str, skip: str | None
) -> None:
    outcome = grade_turn(BILLING, TURN, body(request_body), answer, api, "d")
    assert outcome.skip == skip
    assert (outcome.row is not None) == (skip is None)


def test_the_byte_limit_is_checked_before_parsing() -> None:
    small = EpisodeTurn(None, None, False, 50, 50, 10)
    outcome = grade_turn(BILLING, small, b"{" * 11, TEXT, "chat_completions", "d")
    assert (outcome.skip, outcome.limit) == ("episode_limit", "bytes")


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "role",
                    "content",
                    "tool_calls",
                    "type",
                    "call_id",
                    "name",
                    "arguments",
                    "output",
                    "function",
                    "id",
                    "tool_call_id",
                ]
            ),
            inner,
            max_size=5,
        )
    ),
    max_leaves=25,
)


@given(
    st.sampled_from(["messages", "input"]),
    st.lists(JSON, max_size=6),
    JSON,
    st.sampled_from(["chat_completions", "responses"]),
)
def test_no_history_or_answer_makes_grading_raise(
    key: str, items: Any, answer: Any, api: str
) -> None:
    outcome = grade_turn(BILLING, TURN, body({key: items}), answer, api, "d")
    assert (outcome.row is None) == (outcome.skip is not None)


@given(st.binary(max_size=64))
def test_any_request_bytes_are_safe(raw: bytes) -> None:
    assert grade_turn(BILLING, TURN, raw, TEXT, "chat_completions", "d").skip in (
        None,
        "episode_incomplete",
    )
