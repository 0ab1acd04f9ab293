"""Capture rows and their hashes (grader/capture.py): equal JSON hashes equal, whatever its key
order or spacing; a tool set hashes the same in any order; the row keeps, hashes or drops."""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grader.capture import (
    CAPTURE_FIELDS,
    answer_digest,
    calls_of,
    capture_row,
    prompt_hash,
    tools_hash,
)
from grader.json import loads_exact

# JSON values: finite floats, any strings (lone surrogates excluded: not JSON text).
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
)
JSON = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)


def shuffled(value: Any, rng: random.Random) -> Any:
    """The same JSON value with every object's keys in another order."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {key: shuffled(item, rng) for key, item in items}
    if isinstance(value, list):
        return [shuffled(item, rng) for item in value]
    return value


@settings(max_examples=200, deadline=None)
@given(JSON, st.integers(0, 2**32))
def test_key_order_never_changes_the_prompt_hash(value: Any, seed: int) -> None:
    assert prompt_hash(shuffled(value, random.Random(seed))) == prompt_hash(value)


@settings(max_examples=200, deadline=None)
@given(JSON, st.sampled_from([None, 1, 2]), st.booleans())
def test_json_text_read_back_hashes_like_its_value(
    value: Any, indent: int | None, ascii_: bool
) -> None:
    """Written with any spacing or escaping and read back: equal JSON, equal hash."""
    text = json.dumps(value, indent=indent, ensure_ascii=ascii_)
    assert prompt_hash(loads_exact(text)) == prompt_hash(value)


@settings(max_examples=200, deadline=None)
@given(JSON, JSON)
def test_different_json_hashes_differently(first: Any, second: Any) -> None:
    if json.dumps(first, sort_keys=True) != json.dumps(second, sort_keys=True) and not (
        _numbers_equal(first, second)
    ):
        assert prompt_hash(first) != prompt_hash(second)


def _numbers_equal(first: Any, second: Any) -> bool:
    """``1`` and ``1.0`` (and ``-0.0`` and ``0``) are the same JSON number to the hash."""
    return json.dumps(_ints(first), sort_keys=True) == json.dumps(_ints(second), sort_keys=True)


def _ints(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    return value


@settings(max_examples=100, deadline=None)
@given(st.lists(JSON, max_size=5), st.integers(0, 2**32))
def test_tool_order_never_changes_the_tools_hash(tools: list[Any], seed: int) -> None:
    rng = random.Random(seed)
    again = [shuffled(tool, rng) for tool in tools]
    rng.shuffle(again)
    assert tools_hash(again) == tools_hash(tools)


@pytest.mark.parametrize(
    ("first", "second", "equal"),
    [
        pytest.param(
            [{"role": "user", "content": "hi"}],
            [{"content": "hi", "role": "user"}],
            True,
            id="key_order",
        ),
        pytest.param({"n": 1}, {"n": 1.0}, True, id="integral_double_is_its_integer"),
        pytest.param(
            [{"role": "user", "content": "hi"}],
            [{"role": "user", "content": "hi "}],
            False,
            id="text_differs",
        ),
        pytest.param([1, 2], [2, 1], False, id="message_order_matters"),
        pytest.param(None, [], False, id="absent_is_not_empty"),
    ],
)
def test_prompt_hash_cases(first: Any, second: Any, equal: bool) -> None:
    assert (prompt_hash(first) == prompt_hash(second)) is equal


@pytest.mark.parametrize(
    ("tools", "same_as"),
    [
        pytest.param(None, [], id="absent_is_the_empty_set"),
        pytest.param("not a list", [], id="not_a_list_is_the_empty_set"),
        pytest.param([{"b": 1}, {"a": 2}], [{"a": 2}, {"b": 1}], id="order_ignored"),
    ],
)
def test_tools_hash_cases(tools: Any, same_as: Any) -> None:
    assert tools_hash(tools) == tools_hash(same_as)


def test_the_hash_is_sha256_of_canonical_json() -> None:
    expected = hashlib.sha256(b'[{"content":"hi","role":"user"}]').hexdigest()
    assert prompt_hash([{"role": "user", "content": "hi"}]) == expected


@pytest.mark.parametrize(
    ("answer", "calls"),
    [
        pytest.param("plain text", [], id="text_answer_has_no_calls"),
        pytest.param({"tool_calls": "x"}, [], id="tool_calls_not_a_list"),
        pytest.param(
            {"tool_calls": [{"function": {"name": "f", "arguments": '{"a": 1}'}}]},
            [{"name": "f", "arguments": {"a": 1}}],
            id="chat_call_arguments_parsed",
        ),
        pytest.param(
            {"tool_calls": [{"function": {"name": "f", "arguments": "{not json"}}]},
            [{"name": "f", "arguments": "{not json"}],
            id="arguments_not_json_kept_as_text",
        ),
        pytest.param(
            {"tool_calls": [{"function": {"name": "f", "arguments": ""}}]},
            [{"name": "f", "arguments": {}}],
            id="empty_arguments_are_an_empty_object",
        ),
        pytest.param(
            {"tool_calls": [{"name": "g", "arguments": {"b": [1]}}, 7, {"function": {"name": 3}}]},
            [{"name": "g", "arguments": {"b": [1]}}],
            id="odd_elements_skipped",
        ),
    ],
)
def test_calls_of(answer: Any, calls: list[dict[str, Any]]) -> None:
    assert calls_of(answer) == calls


LIVE: dict[str, Any] = {
    "request_id": "r1",
    "upstream_request_id": None,
    "time": "2026-12-04T18:00:00.000000Z",
    "model": "m",
    "upstream": "http://u/v1",
    "stream": False,
    "finish_reason": "tool_calls",
    "run": "demo",
    "sample_id": None,
    "meta": {},
}
ANSWER = {"tool_calls": [{"function": {"name": "f", "arguments": '{"a": 1}'}}]}
TEXT = json.dumps(ANSWER)
REQUEST = {"messages": [{"role": "user", "content": "secret"}], "tools": [{"type": "function"}]}


@pytest.mark.parametrize(
    ("mode", "cap", "messages", "answer", "truncated"),
    [
        pytest.param("keep", 10_000, REQUEST["messages"], TEXT, None, id="keep"),
        pytest.param("keep", 5, REQUEST["messages"], TEXT[:5], True, id="keep_cut"),
        pytest.param("hash", 5, None, answer_digest(TEXT), None, id="hash_never_cut"),
        pytest.param("drop", 5, None, None, None, id="drop"),
    ],
)
def test_capture_row_keeps_hashes_or_drops(
    mode: Any, cap: int, messages: Any, answer: str | None, truncated: bool | None
) -> None:
    row = capture_row(
        request=REQUEST,
        route="chat_completions",
        answer=ANSWER,
        text=TEXT,
        mode=mode,
        max_answer_chars=cap,
        live=LIVE,
        choice=0,
    )
    assert (row.get("messages"), row.get("answer"), row.get("truncated")) == (
        messages,
        answer,
        truncated,
    )
    assert row["calls"] == [{"name": "f", "arguments": {"a": 1}}]
    assert list(row) == [f for f in CAPTURE_FIELDS if f in row]  # the documented order
    assert ("secret" in json.dumps(row)) is (mode == "keep")


def test_a_full_capture_row_has_every_documented_field() -> None:
    row = capture_row(
        request=REQUEST,
        route="chat_completions",
        answer=ANSWER,
        text=TEXT,
        mode="keep",
        max_answer_chars=3,
        live=LIVE,
        choice=0,
    )
    assert tuple(row) == CAPTURE_FIELDS


def test_responses_input_is_the_prompt() -> None:
    request = {"input": "hello", "messages": "ignored"}
    row = capture_row(
        request=request,
        route="responses",
        answer="hi",
        text="hi",
        mode="keep",
        max_answer_chars=10,
        live=LIVE,
        choice=1,
    )
    assert (row["prompt_hash"], row["messages"], row["calls"]) == (
        prompt_hash("hello"),
        "hello",
        [],
    )
