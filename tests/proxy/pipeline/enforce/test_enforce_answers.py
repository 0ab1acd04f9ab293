"""Enforce mode on non-streamed answers, through the live proxy on loopback (docs/enforce.md).

The backend is the scripted fake speaking the recorded OpenAI wire bodies (two parallel calls,
``get_weather`` and ``get_time``); a route policy forbids ``get_t*``. Per API and mode: the
client never receives a blocked call, ``strip`` keeps the other call, ``observe`` delivers the
upstream's bytes and counts, and the openai SDK parses every enforced answer.
"""

from __future__ import annotations

import asyncio
import gzip
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp
import openai
import orjson
import pytest

from grader.json import dumps
from proxy.pipeline.enforce.judge import Plan
from proxy.pipeline.forward import ENFORCED_HEADER
from proxy.state import TASKS
from tests.support.backend import JSON, Reply, ScriptedBackend, wire
from tests.support.enforce import (
    BODIES,
    BUDGET_MS,
    CHAT,
    PATHS,
    TIME_LINE,
    WEATHER_LINE,
    metrics_text,
    policy_file,
    proxied,
)
from tests.support.metrics import metric_value
from tests.support.process import free_port, serve_config, serving, spawn_serve
from tests.support.proxy import Client, ProxyFactory, rows_of
from tests.support.waits import until


def calls_of(api: str, payload: dict[str, Any]) -> list[str]:
    if api == "responses":
        return [item["name"] for item in payload["output"] if item["type"] == "function_call"]
    message = payload["choices"][0]["message"]
    return [call["function"]["name"] for call in message.get("tool_calls") or []]


def text_of(api: str, payload: dict[str, Any]) -> str:
    if api == "responses":
        return "".join(
            part["text"]
            for item in payload["output"]
            if item["type"] == "message"
            for part in item["content"]
        )
    return str(payload["choices"][0]["message"].get("content") or "")


async def post(
    client: Client,
    backend: ScriptedBackend,
    api: str,
    reply: bytes = b"",
    headers: dict[str, str] | None = None,
) -> tuple[bytes, Any]:
    backend.replies.append(Reply(body=reply or BODIES[api], content_type=JSON, chunked=False))
    response = await client.post(PATHS[api], data=b'{"model": "gpt-4.1-mini"}', headers=headers)
    assert response.status == 200
    return await response.read(), response.headers


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_off_and_observe_deliver_the_upstream_bytes_and_observe_counts(
    make_proxy: ProxyFactory, backend: ScriptedBackend, tmp_path: Path, api: str
) -> None:
    for mode, counted in (("off", 0), ("observe", 1)):
        client = await proxied(make_proxy, backend, tmp_path, mode)
        body, headers = await post(client, backend, api)
        assert body == BODIES[api]  # byte for byte
        assert ENFORCED_HEADER not in headers
        text = await metrics_text(client)
        labels = {"task": "route:tools", "check": "no_time", "action": "observe"}
        assert metric_value(text, "gradeproxy_enforced_total", **labels) == counted
        await client.close()


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_block_withholds_every_call_of_the_answer_and_says_why(
    make_proxy: ProxyFactory, backend: ScriptedBackend, tmp_path: Path, api: str
) -> None:
    client = await proxied(make_proxy, backend, tmp_path, "block")
    body, headers = await post(client, backend, api)
    payload = orjson.loads(body)
    assert calls_of(api, payload) == []  # the client never receives a blocked call
    answer = dumps(payload["output"] if api == "responses" else payload["choices"])
    said = answer.replace(TIME_LINE.encode(), b"").replace(WEATHER_LINE.encode(), b"")
    assert b"get_time" not in said  # nowhere but in the text that says it was withheld
    assert text_of(api, payload) == f"{WEATHER_LINE}\n{TIME_LINE}"
    assert headers[ENFORCED_HEADER] == "block; check=no_time"
    if api == "chat":
        assert payload["choices"][0]["finish_reason"] == "stop"
    else:
        assert payload["status"] == "completed"
        assert [i["type"] for i in payload["output"]] == ["reasoning", "message"]
    text = await metrics_text(client)
    labels = {"task": "route:tools", "check": "no_time"}
    assert metric_value(text, "gradeproxy_enforced_total", action="block", **labels) == 2


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_strip_removes_only_the_offending_call(
    make_proxy: ProxyFactory, backend: ScriptedBackend, tmp_path: Path, api: str
) -> None:
    client = await proxied(make_proxy, backend, tmp_path, "strip")
    body, headers = await post(client, backend, api)
    payload = orjson.loads(body)
    assert calls_of(api, payload) == ["get_weather"]
    assert b"get_time" not in dumps(payload["output"] if api == "responses" else payload["choices"])
    assert text_of(api, payload) == ""  # no text added, none removed
    assert headers[ENFORCED_HEADER] == "strip; check=no_time"
    if api == "chat":
        assert payload["choices"][0]["finish_reason"] == "tool_calls"  # a call remains
    text = await metrics_text(client)
    labels = {"task": "route:tools", "check": "no_time"}
    assert metric_value(text, "gradeproxy_enforced_total", action="strip", **labels) == 1


def _sdk(base_url: str, api: str) -> tuple[list[str], str]:
    """What the openai SDK makes of the answer: its call names and its text."""
    sdk = openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
    if api == "responses":
        response = sdk.responses.create(model="gpt-4.1-mini", input="weather?")
        calls = [item.name for item in response.output if item.type == "function_call"]
        return calls, response.output_text
    completion = sdk.chat.completions.create(
        model="gpt-4.1-mini", messages=[{"role": "user", "content": "weather?"}]
    )
    message = completion.choices[0].message
    names = [c.function.name for c in message.tool_calls or [] if c.type == "function"]
    return names, message.content or ""


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize(
    ("mode", "calls", "text"),
    [
        ("observe", ["get_weather", "get_time"], ""),
        ("block", [], f"{WEATHER_LINE}\n{TIME_LINE}"),
        ("strip", ["get_weather"], ""),
    ],
)
async def test_the_openai_sdk_parses_every_enforced_answer(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    tmp_path: Path,
    api: str,
    mode: str,
    calls: list[str],
    text: str,
) -> None:
    client = await proxied(make_proxy, backend, tmp_path, mode)
    backend.replies.append(Reply(body=BODIES[api], content_type=JSON, chunked=False))
    got = await asyncio.to_thread(_sdk, str(client.make_url("/v1")), api)
    assert got == (calls, text)


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_arguments_that_break_the_requests_declared_tool_are_blocked(
    make_proxy: ProxyFactory, backend: ScriptedBackend, tmp_path: Path, api: str
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(
        "policies:\n  - name: schema\n    checks:\n"
        "      - {type: json_schema, name: request_schema, schema: from_request}\n"
        f"    enforce: {{mode: strip, budget_ms: {BUDGET_MS}}}\n"
    )
    client = await make_proxy(enforce={"path": str(path)})
    # get_time's declared parameters want "tz"; the answer sends "timezone"
    parameters = {
        "type": "object",
        "properties": {"tz": {"type": "string"}},
        "required": ["tz"],
        "additionalProperties": False,
    }
    weather = {"type": "object", "properties": {"city": {"type": "string"}}}
    tools: list[dict[str, Any]] = [
        {"type": "function", "function": {"name": "get_weather", "parameters": weather}},
        {"type": "function", "function": {"name": "get_time", "parameters": parameters}},
    ]
    if api == "responses":
        tools = [{"type": "function", **tool["function"]} for tool in tools]
    request = dumps({"model": "gpt-4.1-mini", "tools": tools})
    backend.replies.append(Reply(body=BODIES[api], content_type=JSON, chunked=False))
    response = await client.post(PATHS[api], data=request)
    payload = orjson.loads(await response.read())
    assert calls_of(api, payload) == ["get_weather"]
    assert response.headers[ENFORCED_HEADER] == "strip; check=request_schema"


TASK = {
    "id": "weather.stale",
    "expected": {"name": "get_weather", "arguments": {"city": "Zürich", "scale": "celsius"}},
    # what openai_single_tool.json calls: the pre-migration schema
    "metadata": {
        "stale": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}
    },
    "enforce": {"mode": "block", "checks": ["tool_call"], "budget_ms": BUDGET_MS},
}


async def test_a_tasks_stale_schema_call_is_blocked_and_the_row_records_it(
    make_proxy: ProxyFactory, backend: ScriptedBackend, tmp_path: Path, results_path: Path
) -> None:
    tasks = tmp_path / "enforced.jsonl"
    tasks.write_bytes(dumps(TASK) + b"\n")
    client = await make_proxy(tasks={"path": str(tasks)})
    single = wire("openai_single_tool.json")
    body, headers = await post(
        client, backend, "chat", single, headers={"X-Grade-Task": "weather.stale"}
    )
    assert calls_of("chat", orjson.loads(body)) == []
    assert headers[ENFORCED_HEADER] == "block; check=tool_call"
    [row] = await rows_of(client, results_path)
    assert row["result"] == "stale"  # graded on what the model answered
    enforcement = row["enforcement"]
    assert enforcement["mode"] == "block"
    assert enforcement["action"] == "block"
    assert enforcement["check"] == "tool_call"
    assert enforcement["received"] == "blocked"
    assert enforcement["policies"] == ["weather.stale"]
    assert [c["name"] for c in enforcement["calls"]] == ["get_weather"]
    assert enforcement["failure"] is None
    text = await metrics_text(client)
    labels = {"task": "weather.stale", "check": "tool_call", "action": "block"}
    assert metric_value(text, "gradeproxy_enforced_total", **labels) == 1


async def test_a_request_no_policy_covers_has_a_null_enforcement_in_its_row(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path
) -> None:
    client = await make_proxy()
    body, _ = await post(client, backend, "chat", headers={"X-Grade-Task": "weather.single"})
    assert body == CHAT
    [row] = await rows_of(client, results_path)
    assert row["enforcement"] is None


def _raises(self: Plan, name: str, arguments: str) -> Any:
    raise RuntimeError("a bug in a check")


def _slow(self: Plan, name: str, arguments: str) -> Any:
    time.sleep(0.2)
    raise AssertionError("never decided: the budget is 1 ms")


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize(
    ("fault", "kind", "budget_ms"), [(_raises, "grader_error", BUDGET_MS), (_slow, "budget", 1)]
)
@pytest.mark.parametrize("fail_closed", [False, True])
async def test_a_grader_failure_or_an_overrun_fails_open_or_closed_and_is_counted(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    api: str,
    fault: Any,
    kind: str,
    budget_ms: int,
    fail_closed: bool,
) -> None:
    monkeypatch.setattr(Plan, "_decide", fault)
    client = await proxied(
        make_proxy, backend, tmp_path, "block", budget_ms=budget_ms, fail_closed=fail_closed
    )
    body, headers = await post(client, backend, api)
    if fail_closed:
        assert calls_of(api, orjson.loads(body)) == []
        assert headers[ENFORCED_HEADER] == f"block; check={kind}"
    else:
        assert body == BODIES[api]
        assert ENFORCED_HEADER not in headers
    text = await metrics_text(client)
    outcome = "closed" if fail_closed else "open"
    assert metric_value(text, "gradeproxy_enforce_failures_total", kind=kind, outcome=outcome) == 1
    assert metric_value(text, "gradeproxy_enforce_failures_total") == 1


async def test_a_policy_change_is_picked_up_by_watch_before_the_next_request(
    make_proxy: ProxyFactory, backend: ScriptedBackend, tmp_path: Path
) -> None:
    path = policy_file(tmp_path / "policy.yaml", "observe")
    client = await make_proxy(
        enforce={"path": str(path)}, tasks={"watch": True, "watch_interval_s": 0.02}
    )
    body, _ = await post(client, backend, "chat")
    assert body == CHAT
    store = client.app[TASKS]
    before = store.policies
    policy_file(path, "block")
    await until(lambda: store.policies is not before, "the watched policy file reloaded")
    body, headers = await post(client, backend, "chat")
    assert calls_of("chat", orjson.loads(body)) == []
    assert headers[ENFORCED_HEADER] == "block; check=no_time"
    # A broken edit keeps the policies in force.
    kept = store.policies
    path.write_text("policies: [{name: x}]")
    await until(lambda: store.error is not None, "the broken policy file refused")
    assert store.policies is kept
    assert "route policy 'x'" in (store.error or "")


@pytest.mark.e2e
async def test_sighup_reloads_the_policy_file_before_the_next_request(
    tmp_path: Path, backend_server: Any, backend: ScriptedBackend
) -> None:
    """The real ``serve`` process: SIGHUP turns an observe policy into a block."""
    policy = policy_file(tmp_path / "policy.yaml", "observe")
    port = free_port()
    config = serve_config(
        tmp_path / "config.yaml",
        upstream=str(backend_server.make_url("/v1")),
        port=port,
        tasks=tmp_path / "tasks.jsonl",
        results=tmp_path / "grades.jsonl",
        drain_delay_s=0.0,
        grace_period_s=2.0,
    )
    (tmp_path / "tasks.jsonl").write_bytes(dumps(TASK) + b"\n")
    config.write_text(config.read_text() + f"enforce:\n  path: {policy}\n")
    async with serving(config, port) as (process, base), aiohttp.ClientSession() as session:

        async def calls() -> list[str]:
            backend.replies.append(Reply(body=CHAT, content_type=JSON, chunked=False))
            async with session.post(f"{base}/v1/chat/completions", data=b"{}") as response:
                return calls_of("chat", orjson.loads(await response.read()))

        assert await calls() == ["get_weather", "get_time"]
        policy_file(policy, "block")
        process.send_signal(signal.SIGHUP)
        for _ in range(200):  # the reload runs off the signal handler: the next request after it
            if (names := await calls()) == []:
                break
            assert names == ["get_weather", "get_time"]
            await asyncio.sleep(0.05)
        assert names == []


async def test_serve_refuses_a_policy_file_that_cannot_enforce_naming_route_and_check(
    tmp_path: Path,
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "policies:\n  - name: p\n    checks:\n"
        "      - {type: json_schema, name: lit, schema: {type: object}}\n"
        "    enforce: {mode: block}\n"
    )
    config = tmp_path / "config.yaml"
    config.write_text(f"upstream:\n  url: http://127.0.0.1:9/v1\nenforce:\n  path: {policy}\n")
    process = await spawn_serve(config, stderr=asyncio.subprocess.PIPE)
    _, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 1
    assert (
        f"gradeproxy serve: enforce.path: {policy}: route policy 'p': enforce.checks[0]: "
        "check 'lit' (json_schema) may enforce only with 'schema': 'from_request'"
    ) in stderr.decode()


async def test_the_ui_inspector_shows_an_enforced_answer_whatever_its_grade(
    make_proxy: ProxyFactory, backend: ScriptedBackend, tmp_path: Path, results_path: Path
) -> None:
    """time.tokyo expects get_time: the answer passes, but the route policy blocked it."""
    client = await proxied(make_proxy, backend, tmp_path, "block")
    await post(client, backend, "chat", headers={"X-Grade-Task": "time.tokyo"})
    await post(client, backend, "chat", headers={"X-Grade-Task": "weather.city_only"})
    rows = await rows_of(client, results_path)
    assert [r["enforcement"]["action"] for r in rows] == ["block", "block"]
    failures = (await (await client.get("/ui/failures.json")).json())["failures"]
    assert [(f["task_id"], f["result"]) for f in failures] == [
        ("weather.city_only", "fail"),
        ("time.tokyo", "pass"),  # shown for its enforcement alone
    ]
    shown = failures[1]["enforcement"]
    assert (shown["action"], shown["check"], shown["received"]) == ("block", "no_time", "blocked")


async def test_an_answer_that_passes_and_was_not_enforced_stays_out_of_the_inspector(
    make_proxy: ProxyFactory, backend: ScriptedBackend, tmp_path: Path, results_path: Path
) -> None:
    client = await proxied(make_proxy, backend, tmp_path, "block")
    backend.replies.append(Reply(body=wire("openai_single_tool.json"), content_type=JSON))
    await client.post(PATHS["chat"], data=b"{}", headers={"X-Grade-Task": "weather.single"})
    [row] = await rows_of(client, results_path)
    assert (row["result"], row["enforcement"]["action"]) == ("pass", "pass")
    assert (await (await client.get("/ui/failures.json")).json())["failures"] == []


@pytest.mark.parametrize(("mode", "rewritten"), [("observe", False), ("block", True)])
async def test_a_compressed_answer_is_judged_decoded_and_a_rewrite_is_sent_plain(
    make_proxy: ProxyFactory, backend: ScriptedBackend, tmp_path: Path, mode: str, rewritten: bool
) -> None:
    client = await proxied(make_proxy, backend, tmp_path, mode)
    packed = gzip.compress(CHAT)
    backend.replies.append(
        Reply(body=packed, content_type=JSON, chunked=False, headers={"Content-Encoding": "gzip"})
    )
    response = await client.post(
        PATHS["chat"], data=b"{}", headers={"Accept-Encoding": "gzip"}, auto_decompress=False
    )
    raw = await response.read()
    if rewritten:
        assert "Content-Encoding" not in response.headers
        assert calls_of("chat", orjson.loads(raw)) == []
        assert response.headers[ENFORCED_HEADER] == "block; check=no_time"
    else:
        assert raw == packed  # the upstream's compressed bytes, untouched
        assert response.headers["Content-Encoding"] == "gzip"
    action = "block" if rewritten else "observe"
    text = await metrics_text(client)
    assert metric_value(text, "gradeproxy_enforced_total", action=action) >= 1
