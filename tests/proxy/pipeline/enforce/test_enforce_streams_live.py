"""Enforce mode on streamed answers, through the live proxy on loopback (docs/enforce.md).

The hold-back itself is tested byte for byte in test_stream.py; here the relay is: the stream
the client gets, per API and mode, parsed by the openai SDK; the row and the counters; a
text-only stream under an active policy is the upstream's bytes.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import openai
import pytest

from grader.json import dumps
from proxy.pipeline.enforce.judge import Plan
from proxy.pipeline.forward import ENFORCED_HEADER
from tests.support.backend import SSE, Reply, ScriptedBackend, wire
from tests.support.enforce import (
    BUDGET_MS,
    PATHS,
    TIME_LINE,
    WEATHER_LINE,
    metrics_text,
    proxied,
)
from tests.support.metrics import metric_value
from tests.support.proxy import ProxyFactory, rows_of

STREAMS = {
    "chat": wire("openai_parallel_tools.sse"),
    "responses": wire("openai_responses_parallel_tools.sse"),
}
TEXT_STREAMS = {"chat": wire("openai_text.sse"), "responses": wire("openai_responses_text.sse")}


def _reply(body: bytes) -> Reply:
    return Reply(body=body, content_type=SSE, split_at=range(7, len(body), 97))


def _sdk_stream(base_url: str, api: str) -> tuple[list[str], str, str | None]:
    """What the openai SDK makes of the stream: call names, text, finish reason (chat)."""
    sdk = openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
    if api == "responses":
        names: list[str] = []
        text = ""
        with sdk.responses.create(model="gpt-4.1-mini", input="hi", stream=True) as events:
            for event in events:
                if event.type == "response.completed":
                    names = [i.name for i in event.response.output if i.type == "function_call"]
                    text = event.response.output_text
        return names, text, None
    calls: dict[int, str] = {}
    content, finish = "", None
    stream = sdk.chat.completions.create(
        model="gpt-4.1-mini", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    for chunk in stream:
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for call in choice.delta.tool_calls or []:
                if call.function is not None and call.function.name:
                    calls[call.index] = call.function.name
            finish = choice.finish_reason or finish
    return [calls[i] for i in sorted(calls)], content, finish


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize(
    ("mode", "calls", "text", "finish"),
    [
        ("observe", ["get_weather", "get_time"], "", "tool_calls"),
        ("block", [], f"{WEATHER_LINE}\n{TIME_LINE}", "stop"),
        ("strip", ["get_weather"], "", "tool_calls"),
    ],
)
async def test_the_openai_sdk_parses_every_enforced_stream(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    tmp_path: Path,
    api: str,
    mode: str,
    calls: list[str],
    text: str,
    finish: str,
) -> None:
    client = await proxied(make_proxy, backend, tmp_path, mode)
    backend.replies.append(_reply(STREAMS[api]))
    got = await asyncio.to_thread(_sdk_stream, str(client.make_url("/v1")), api)
    assert got == (calls, text, finish if api == "chat" else None)
    counted = await metrics_text(client)
    labels = {"task": "route:tools", "check": "no_time", "action": mode}
    # a block withholds (and counts) both calls of the answer, as the non-streamed path does
    withheld = 2 if mode == "block" else 1
    assert metric_value(counted, "gradeproxy_enforced_total", **labels) == withheld


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("mode", ["off", "observe", "block", "strip"])
async def test_a_text_stream_under_any_policy_is_the_upstreams_bytes(
    make_proxy: ProxyFactory, backend: ScriptedBackend, tmp_path: Path, api: str, mode: str
) -> None:
    client = await proxied(make_proxy, backend, tmp_path, mode)
    backend.replies.append(_reply(TEXT_STREAMS[api]))
    response = await client.post(PATHS[api], data=b'{"model": "gpt-4.1-mini", "stream": true}')
    assert await response.read() == TEXT_STREAMS[api]
    assert ENFORCED_HEADER not in response.headers


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_an_observed_stream_is_the_upstreams_bytes_and_a_blocked_one_has_no_call(
    make_proxy: ProxyFactory, backend: ScriptedBackend, tmp_path: Path, api: str
) -> None:
    for mode in ("observe", "block"):
        client = await proxied(make_proxy, backend, tmp_path, mode)
        backend.replies.append(_reply(STREAMS[api]))
        response = await client.post(PATHS[api], data=b'{"model": "m", "stream": true}')
        body = await response.read()
        assert ENFORCED_HEADER not in response.headers  # a stream's first byte came first
        if mode == "observe":
            assert body == STREAMS[api]
        else:
            # no call event at all (a Responses event echoes the request's tools: not a call)
            assert b'"type":"function_call"' not in body
            assert b'"tool_calls"' not in body
        await client.close()


TASK = {
    "id": "weather.stale",
    "expected": {"name": "get_weather", "arguments": {"city": "Zürich", "scale": "celsius"}},
    "metadata": {
        "stale": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}
    },
    "enforce": {"mode": "strip", "checks": ["tool_call"], "budget_ms": BUDGET_MS},
}


async def test_a_stripped_stream_is_graded_as_answered_and_its_row_says_what_was_sent(
    make_proxy: ProxyFactory, backend: ScriptedBackend, tmp_path: Path, results_path: Path
) -> None:
    tasks = tmp_path / "enforced.jsonl"
    tasks.write_bytes(dumps(TASK) + b"\n")
    client = await make_proxy(tasks={"path": str(tasks)})
    backend.replies.append(_reply(wire("openai_single_tool.sse")))
    response = await client.post(
        PATHS["chat"], data=b'{"stream": true}', headers={"X-Grade-Task": "weather.stale"}
    )
    body = await response.read()
    assert b"get_weather" not in body
    assert body.endswith(b"data: [DONE]\n\n")
    [row] = await rows_of(client, results_path)
    assert row["result"] == "stale"  # the model's answer is graded, not what was sent
    enforcement: dict[str, Any] = row["enforcement"]
    assert (enforcement["action"], enforcement["check"]) == ("strip", "tool_call")
    assert enforcement["received"] == "stripped"
    assert [c["name"] for c in enforcement["calls"]] == ["get_weather"]


def _raises(self: Plan, name: str, arguments: str) -> Any:
    raise RuntimeError("a bug in a check")


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("fail_closed", [False, True])
async def test_a_grader_failure_on_a_stream_fails_open_or_closed_and_is_counted(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    api: str,
    fail_closed: bool,
) -> None:
    monkeypatch.setattr(Plan, "_decide", _raises)
    client = await proxied(make_proxy, backend, tmp_path, "block", fail_closed=fail_closed)
    backend.replies.append(_reply(STREAMS[api]))
    got = await asyncio.to_thread(_sdk_stream, str(client.make_url("/v1")), api)
    if fail_closed:
        assert got[0] == []  # every call withheld
        assert "failing closed (check grader_error)" in got[1]
    else:
        assert got[0] == ["get_weather", "get_time"]  # through, as the upstream sent them
    text = await metrics_text(client)
    outcome = "closed" if fail_closed else "open"
    labels = {"kind": "grader_error", "outcome": outcome}
    assert metric_value(text, "gradeproxy_enforce_failures_total", **labels) == 1
