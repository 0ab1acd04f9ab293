"""The OpenAI Agents SDK runs against the live proxy while a route policy blocks or strips a
non-streamed answer's forbidden call: the agent never executes it, and its run ends cleanly.

(Streamed answers: test_stream_sdk.py.) The SDK lives in its own venv (scripts/agents-venv.sh).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from grader.json import dumps
from tests.support.agents_sdk import run_agent
from tests.support.backend import JSON, Reply, ScriptedBackend
from tests.support.enforce import BUDGET_MS
from tests.support.proxy import ProxyFactory
from tests.support.responses_wire import Call, Case, Text, response_json

pytestmark = pytest.mark.e2e
WEATHER = ("get_weather", '{"city":"Paris"}')
DELETE = ("delete_payment", '{"payment_id":"pay_1002"}')
FINAL = "It is 12 C in Paris."


def chat(text: str | None, *calls: tuple[str, str]) -> bytes:
    tool_calls = [
        {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
        for i, (n, a) in enumerate(calls)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    finish = "tool_calls" if tool_calls else "stop"
    return dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-4.1-mini",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        }
    )


def turns(api: str) -> tuple[bytes, bytes]:
    """The model's first answer (the weather and the delete call) and its answer after them."""
    if api == "chat_completions":
        return chat(None, WEATHER, DELETE), chat(FINAL)
    first = Case("a1", (Call(*WEATHER, "call_w", "fc_w"), Call(*DELETE, "call_d", "fc_d")))
    return dumps(response_json(first)), dumps(response_json(Case("a2", (Text(FINAL, "msg"),))))


@pytest.mark.timeout(600)
@pytest.mark.parametrize("api", ["chat_completions", "responses"])
@pytest.mark.parametrize(
    ("mode", "executed", "final"),
    [
        ("strip", ["get_weather"], FINAL),  # the weather call runs; the forbidden one never does
        ("block", [], None),  # no tool runs; the turn ends with the notice as the final output
    ],
)
async def test_agents_sdk_runs_enforced_answers(
    agents_python: str,
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    tmp_path: Path,
    api: str,
    mode: str,
    executed: list[str],
    final: str | None,
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "policies:\n  - name: payments\n"
        "    checks: [{type: policy, name: no_delete, forbidden_calls: ['delete_*']}]\n"
        f"    enforce: {{mode: {mode}, budget_ms: {BUDGET_MS}}}\n"
    )
    client = await make_proxy(enforce={"path": str(policy)})
    for body in turns(api):
        backend.replies.append(Reply(body=body, content_type=JSON, chunked=False))
    config = {"base_url": str(client.make_url("/v1")), "api": api, "stream": False}
    result = await run_agent(agents_python, "enforce_agent.py", config)
    assert result["executed"] == executed
    if final is not None:
        assert result["final"] == final
    else:
        assert result["final"] == (
            "[gradeproxy] withheld tool call get_weather: withheld with the blocked call in the "
            "same answer (check no_delete)\n[gradeproxy] withheld tool call delete_payment: "
            "forbidden call 'delete_payment' (matches 'delete_*') (check no_delete)"
        )
        assert len(backend.seen) == 1  # the run ended with the blocked answer
