"""``POST /v1/responses`` through the proxy, as the OpenAI Agents SDK sends it: the official
SDK gets the same objects as direct, streamed and not, and every right, stale and wrong call
lands as the row and the metrics a chat completion would; task checks read the request's flat
tools; failures are counted by reason, as for chat completions. Every case runs through both
upstream transports (``upstream.client``: fast and aiohttp)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import openai
import pytest
import structlog
from aiohttp.test_utils import TestServer

from grader.json import dumps
from proxy.logs import configure_logging
from tests.support import responses_wire as rw
from tests.support.backend import JSON, SSE, Reply, ScriptedBackend, awkward_cuts
from tests.support.fixtures import by_client
from tests.support.metrics import metric_value
from tests.support.proxy import ProxyFactory, rows_of
from tests.support.tasks import CHECKED


@pytest.fixture(params=["fast", "aiohttp"])
def make_proxy(make_proxy: ProxyFactory, request: pytest.FixtureRequest) -> ProxyFactory:
    return by_client(make_proxy, request.param)


REQUEST: dict[str, Any] = {
    "model": rw.MODEL,
    "input": [{"role": "user", "content": "Weather in Zürich, in celsius?"}],
    "tools": [rw.WEATHER_TOOL],
}
HEADERS = {"X-Grade-Task": "weather.single", "X-Grade-Run": "responses-e2e"}


def answered(name: str, arguments: str) -> rw.Case:
    """A response whose one output item is this call."""
    return rw.Case(name, (rw.Call(name, arguments, f"call_{name}", f"fc_{name}"),))


# (what the model answered, the task, result, reason_code)
ANSWERS = [
    pytest.param(rw.CASES["single_tool"], "weather.single", "pass", "match", id="right"),
    pytest.param(
        answered("get_weather", '{"city":"Zürich","units":"C"}'),
        "weather.single",
        "stale",
        "stale_schema",
        id="stale",
    ),
    pytest.param(
        answered("get_weather", '{"city":"Bern","unit":"celsius"}'),
        "weather.single",
        "fail",
        "value_mismatch",
        id="wrong_arguments",
    ),
    pytest.param(rw.CASES["parallel_tools"], "time.tokyo", "pass", "match", id="parallel"),
    pytest.param(rw.CASES["text"], "weather.single", "fail", "no_call", id="text"),
    pytest.param(rw.CASES["incomplete"], "weather.single", "fail", "no_call", id="incomplete"),
]


def reply(case: rw.Case, stream: bool) -> Reply:
    body = rw.stream(case) if stream else rw.body(case)
    return Reply(body=body, content_type=SSE if stream else JSON, split_at=awkward_cuts(body))


async def sdk_call(base_url: str, stream: bool, task: str, flavour: str = "async") -> Any:
    headers = {**HEADERS, "X-Grade-Task": task}
    if flavour == "sync":
        return await asyncio.to_thread(sync_call, base_url, stream, headers)
    async with openai.AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0) as client:
        if stream:
            events = await client.responses.create(stream=True, extra_headers=headers, **REQUEST)
            return [event.model_dump() async for event in events]
        return (await client.responses.create(extra_headers=headers, **REQUEST)).model_dump()


def sync_call(base_url: str, stream: bool, headers: dict[str, str]) -> Any:
    with openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0) as client:
        if stream:
            events = client.responses.create(stream=True, extra_headers=headers, **REQUEST)
            return [event.model_dump() for event in events]
        return client.responses.create(extra_headers=headers, **REQUEST).model_dump()


@pytest.mark.e2e
@pytest.mark.parametrize("flavour", ["async", "sync"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize(("case", "task", "result", "reason_code"), ANSWERS)
async def test_sdk_responses_create_is_graded_like_a_chat_completion(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    backend_server: TestServer,
    results_path: Path,
    flavour: str,
    stream: bool,
    case: rw.Case,
    task: str,
    result: str,
    reason_code: str,
) -> None:
    backend.replies.extend([reply(case, stream)] * 2)
    client = await make_proxy()
    direct = await sdk_call(str(backend_server.make_url("/v1")), stream, task, flavour)
    proxied = await sdk_call(str(client.make_url("/v1")), stream, task, flavour)
    assert proxied == direct
    assert backend.seen[1].body == backend.seen[0].body  # the SDK's exact bytes forwarded
    assert backend.seen[1].path_qs == "/v1/responses"
    assert "X-Grade-Task" not in backend.seen[1].headers
    [row] = await rows_of(client, results_path)
    assert (row["task_id"], row["result"], row["stream"], row["run"], row["choice"]) == (
        task,
        result,
        stream,
        "responses-e2e",
        0,
    )
    assert (row["reason_code"], row["model"]) == (reason_code, rw.MODEL)
    metrics = await (await client.get("/metrics")).text()
    assert metric_value(metrics, "gradeproxy_grades_total", task=task, result=result) == 1
    stale = metric_value(metrics, "gradeproxy_stale_schema_total", task=task, model=rw.MODEL)
    assert stale == (result == "stale")
    assert metric_value(metrics, "gradeproxy_requests_total", route="responses", code="200") == 1
    assert metric_value(metrics, "gradeproxy_grading_skipped_total") == 0


@pytest.mark.parametrize(
    ("case", "finish_reason", "calls"),
    [
        pytest.param("single_tool", "tool_calls", ["get_weather"], id="one_call"),
        pytest.param("parallel_tools", "tool_calls", ["get_weather", "get_time"], id="two_calls"),
        pytest.param("text", "stop", [], id="text"),
        pytest.param("incomplete", "length", ["get_weather"], id="cut_by_max_output_tokens"),
    ],
)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_row_holds_the_answer_in_the_chat_shape(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    results_path: Path,
    case: str,
    finish_reason: str,
    calls: list[str],
    stream: bool,
) -> None:
    backend.replies.append(reply(rw.CASES[case], stream))
    client = await make_proxy()
    response = await client.post("/v1/responses", data=dumps(REQUEST), headers=HEADERS)
    await response.read()
    [row] = await rows_of(client, results_path)
    assert row["finish_reason"] == finish_reason
    answer = row["answer"]
    if calls:
        names = [c["function"]["name"] for c in json.loads(answer)["tool_calls"]]
        assert names == calls
    else:
        assert answer == "It’s 12°C and sunny in Zürich."


@pytest.fixture
async def checked_tasks(tasks_file: Path) -> Path:
    await asyncio.to_thread(tasks_file.write_bytes, dumps(CHECKED) + b"\n")
    return tasks_file


@pytest.mark.parametrize(
    ("arguments", "columns", "result"),
    [
        pytest.param(
            rw.ZURICH, {"call": True, "city_exact": True, "schema": True}, "pass", id="right"
        ),
        pytest.param(
            '{"city":"Zürich","units":"C"}',
            {"call": False, "city_exact": True, "schema": False},
            "stale",
            id="stale_breaks_the_flat_request_schema",
        ),
        pytest.param(
            '{"city":"Bern","unit":"celsius"}',
            {"call": False, "city_exact": False, "schema": True},
            "fail",
            id="wrong_city_fails_the_template",
        ),
    ],
)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_checks_read_flat_request_tools_and_chat_templates(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    checked_tasks: Path,
    results_path: Path,
    arguments: str,
    columns: dict[str, bool],
    result: str,
    stream: bool,
) -> None:
    # CHECKED's json_schema is "from_request" and its string_check reads
    # {{ sample.output_tools[0].function.arguments.city }}: both written for chat completions.
    backend.replies.append(reply(answered("get_weather", arguments), stream))
    client = await make_proxy()
    headers = {"X-Grade-Task": "weather.checked"}
    response = await client.post("/v1/responses", data=dumps(REQUEST), headers=headers)
    await response.read()
    [row] = await rows_of(client, results_path)
    assert {c["name"]: c["passed"] for c in row["checks"]} == columns
    assert row["result"] == result


@pytest.mark.parametrize(
    ("upstream", "headers", "reason"),
    [
        pytest.param(Reply(), {}, "no_task_header", id="no_task_header"),
        pytest.param(Reply(), {"X-Grade-Task": "no.such.task"}, "unknown_task", id="unknown_task"),
        pytest.param(
            Reply(body=b'{"error":{"message":"x","type":"server_error"}}', status=500),
            HEADERS,
            "upstream_error",
            id="upstream_error_status",
        ),
        pytest.param(
            Reply(body=rw.files()["openai_responses_failed.sse"], content_type=SSE),
            HEADERS,
            "upstream_error",
            id="response_failed_event",
        ),
        pytest.param(
            Reply(body=rw.files()["openai_responses_error_event.sse"], content_type=SSE),
            HEADERS,
            "upstream_error",
            id="error_event",
        ),
        pytest.param(
            Reply(body=dumps({**rw.response_json(rw.CASES["text"]), "status": "queued"})),
            HEADERS,
            "empty_response",
            id="background_queued",
        ),
        pytest.param(Reply(body=b"", content_type=SSE), HEADERS, "empty_response", id="empty"),
    ],
)
async def test_not_graded_is_counted_by_reason(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    results_path: Path,
    upstream: Reply,
    headers: dict[str, str],
    reason: str,
) -> None:
    backend.replies.append(upstream)
    client = await make_proxy()
    response = await client.post("/v1/responses", data=dumps(REQUEST), headers=headers)
    await response.read()
    assert await rows_of(client, results_path) == []
    metrics = await (await client.get("/metrics")).text()
    assert metric_value(metrics, "gradeproxy_grading_skipped_total", reason=reason) == 1
    assert metric_value(metrics, "gradeproxy_grading_skipped_total") == 1
    assert metric_value(metrics, "gradeproxy_grades_total") == 0


async def test_stream_cut_before_its_terminal_event_is_a_capture_error(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path
) -> None:
    cut = rw.sse(rw.events(rw.CASES["single_tool"])[:-1])
    backend.replies.append(Reply(body=cut, content_type=SSE))
    client = await make_proxy()
    response = await client.post("/v1/responses", data=dumps(REQUEST), headers=HEADERS)
    await response.read()
    assert await rows_of(client, results_path) == []
    metrics = await (await client.get("/metrics")).text()
    assert metric_value(metrics, "gradeproxy_grading_errors_total", kind="capture") == 1
    assert metric_value(metrics, "gradeproxy_grades_total") == 0


@pytest.mark.parametrize(
    ("path", "headers", "expected"),
    [
        pytest.param(
            "/v1/responses",
            HEADERS,
            {"route": "responses", "task": "weather.single", "graded": True, "skip": None},
            id="graded",
        ),
        pytest.param(
            "/v1/responses",
            {},
            {"route": "responses", "task": None, "graded": False, "skip": "no_task_header"},
            id="no_task_header",
        ),
        pytest.param(
            "/v1/embeddings",
            HEADERS,
            {
                "route": "other",
                "task": "weather.single",
                "graded": False,
                "skip": "unsupported_route",
            },
            id="unsupported_route",
        ),
    ],
)
async def test_request_log_line_says_whether_and_why_not_graded(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    results_path: Path,
    path: str,
    headers: dict[str, str],
    expected: dict[str, Any],
) -> None:
    backend.replies.append(reply(rw.CASES["single_tool"], stream=True))
    client = await make_proxy()
    configure_logging("info", "json", cache=False)
    with structlog.testing.capture_logs() as logs:
        response = await client.post(path, data=dumps(REQUEST), headers=headers)
        await response.read()
        rows = await rows_of(client, results_path)
    [line] = [entry for entry in logs if entry["event"] == "request"]
    assert {key: line[key] for key in expected} == expected
    assert len(rows) == int(expected["graded"])
