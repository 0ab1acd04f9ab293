"""enforce_body on built answers: what each mode leaves of a chat completion or a Responses body.

The live relay is tested in test_enforce_answers.py; here the rewrite rules, one case a row:
several choices, text beside the calls, indices, a body with no call, a body that is not JSON,
and that the non-streamed and streamed paths tell the client the same thing.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from grader.json import dumps
from proxy.pipeline.capture.sse import SSEDecoder
from proxy.pipeline.enforce.answer import enforce_body
from proxy.pipeline.enforce.decision import PASS, Decision
from proxy.pipeline.enforce.stream import StreamEnforcer
from tests.support.backend import wire


def forbid(*names: str, action: str = "block") -> Any:
    def judge(name: str, arguments: str) -> Decision:
        if name in names:
            return Decision(action, "no_x", f"forbidden call {name!r}")  # type: ignore[arg-type]
        return PASS

    return judge


def tool(name: str, index: int | None = None) -> dict[str, Any]:
    call: dict[str, Any] = {
        "id": f"call_{name}",
        "type": "function",
        "function": {"name": name, "arguments": "{}"},
    }
    if index is not None:
        call["index"] = index
    return call


def chat(*choices: tuple[str | None, list[dict[str, Any]]]) -> bytes:
    return dumps(
        {
            "object": "chat.completion",
            "choices": [
                {
                    "index": i,
                    "message": {"role": "assistant", "content": text, "tool_calls": calls},
                    "finish_reason": "tool_calls",
                }
                for i, (text, calls) in enumerate(choices)
            ],
        }
    )


def choices_of(body: bytes) -> list[tuple[str | None, list[str], str]]:
    return [
        (
            c["message"].get("content"),
            [t["function"]["name"] for t in c["message"].get("tool_calls", [])],
            c["finish_reason"],
        )
        for c in orjson.loads(body)["choices"]
    ]


NOTE = "[gradeproxy] withheld tool call {}: {} (check no_x)"
SIBLING = "withheld with the blocked call in the same answer"


@pytest.mark.parametrize(
    ("mode", "body", "expected"),
    [
        # a second choice is a second answer: only the offending one changes
        ("block", chat((None, [tool("a")]), (None, [tool("x")])),
         [(None, ["a"], "tool_calls"), (NOTE.format("x", "forbidden call 'x'"), [], "stop")]),
        # text beside the calls stays; the notice follows it
        ("block", chat(("Let me check.", [tool("a"), tool("x")]),),
         [("Let me check.\n" + NOTE.format("a", SIBLING) + "\n"
           + NOTE.format("x", "forbidden call 'x'"), [], "stop")]),
        ("strip", chat(("Let me check.", [tool("x"), tool("a")]),),
         [("Let me check.", ["a"], "tool_calls")]),
        ("strip", chat((None, [tool("x")]),), [(None, [], "stop")]),
    ],
)  # fmt: skip
def test_chat_rewrites(
    mode: Any, body: bytes, expected: list[tuple[str | None, list[str], str]]
) -> None:
    new, outcomes = enforce_body("chat", body, forbid("x"), mode)
    assert choices_of(new) == expected
    assert len(outcomes) == sum(len(c[1]) for c in choices_of(body))


def test_strip_renumbers_indices_contiguously_from_zero() -> None:
    body = chat((None, [tool("x", 0), tool("a", 1), tool("x", 2), tool("b", 3)]))
    new, _ = enforce_body("chat", body, forbid("x"), "strip")
    calls = orjson.loads(new)["choices"][0]["message"]["tool_calls"]
    assert [(c["function"]["name"], c["index"]) for c in calls] == [("a", 0), ("b", 1)]


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize(
    "body",
    [wire("openai_text.json"), wire("openai_responses_text.json"), b"not json", b"[1, 2]"],
)
@pytest.mark.parametrize("mode", ["observe", "block", "strip"])
def test_a_body_without_a_call_comes_back_as_the_same_object(
    api: Any, body: bytes, mode: Any
) -> None:
    new, outcomes = enforce_body(api, body, forbid("x"), mode)
    assert new is body
    assert outcomes == ()


@pytest.mark.parametrize("mode", ["observe", "block", "strip"])
def test_nothing_fired_leaves_the_upstream_bytes(mode: Any) -> None:
    body = wire("openai_parallel_tools.json")
    new, outcomes = enforce_body("chat", body, forbid("nothing"), mode)
    assert new is body
    assert [o.name for o in outcomes] == ["get_weather", "get_time"]


def test_observe_leaves_the_bytes_and_records_what_would_have_been_done() -> None:
    body = wire("openai_responses_parallel_tools.json")
    new, outcomes = enforce_body("responses", body, forbid("get_time", action="observe"), "observe")
    assert new is body
    assert [o.decision.action for o in outcomes] == ["pass", "observe"]


@pytest.mark.parametrize(
    ("mode", "types"),
    [
        ("block", ["reasoning", "message"]),
        ("strip", ["reasoning", "function_call"]),
    ],
)
def test_responses_rewrites_keep_the_items_order(mode: Any, types: list[str]) -> None:
    body = wire("openai_responses_parallel_tools.json")
    new, _ = enforce_body("responses", body, forbid("get_time"), mode)
    payload = orjson.loads(new)
    assert [item["type"] for item in payload["output"]] == types
    assert payload["status"] == "completed"
    if mode == "block":
        message = payload["output"][1]
        assert message["role"] == "assistant"
        assert message["content"][0]["type"] == "output_text"


def _stream_text(body: bytes) -> str:
    decoder = SSEDecoder()
    text = ""
    for event in decoder.feed(body):
        if event.data == "[DONE]":
            continue
        for choice in orjson.loads(event.data).get("choices", []):
            text += choice.get("delta", {}).get("content") or ""
    return text


def test_a_blocked_answer_says_the_same_streamed_or_not() -> None:
    judge = forbid("get_time")
    new, _ = enforce_body("chat", wire("openai_parallel_tools.json"), judge, "block")
    said = orjson.loads(new)["choices"][0]["message"]["content"]
    enforcer = StreamEnforcer("chat", judge, "block")
    streamed = enforcer.feed(wire("openai_parallel_tools.sse")) + enforcer.close()
    assert _stream_text(streamed) == said
