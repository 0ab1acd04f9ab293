"""The demo backend's ``POST /v1/responses`` speaks OpenAI's Responses wire format, as recorded
in tests/fixtures/wire/openai_responses_*.{json,sse}, and follows the same answer plan as chat
(one counter per task for both routes)."""

from __future__ import annotations

import json
from itertools import groupby
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from proxy.demo.answers import SAMPLE_TASKS_PATH, load_demo_tasks, planned_message
from proxy.demo.backend import make_demo_backend
from tests.support.backend import wire

Client = TestClient[web.Request, web.Application]
TASKS = {task.id: task for task in load_demo_tasks(SAMPLE_TASKS_PATH)}
TOOL_TASK = TASKS["tickets.duration_format.01"]  # answers 0..5 include the expected call
SHOWCASE = TASKS["calendar.field_renamed.01"]  # its answer 1 is prose in a fence (text)


@pytest.fixture
async def backend(aiohttp_client: Any) -> Client:
    client: Client = await aiohttp_client(make_demo_backend(SAMPLE_TASKS_PATH))
    return client


def _events(body: bytes) -> list[dict[str, Any]]:
    """Each SSE event's data, checked against its ``event:`` line."""
    events = []
    for block in body.decode().strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        data = json.loads(fields["data"])
        assert fields["event"] == data["type"]
        events.append(data)
    return events


def _shape(events: list[dict[str, Any]]) -> list[str]:
    """The event types in order, a run of deltas counted once."""
    return [kind for kind, _ in groupby(event["type"] for event in events)]


async def _post(backend: Client, prompt: object, **extra: Any) -> Any:
    body = {"model": "gradeproxy-demo", "input": prompt, **extra}
    return await backend.post("/v1/responses", json=body)


@pytest.mark.parametrize(
    ("fixture", "task", "counter"),
    [
        pytest.param("openai_responses_single_tool.sse", TOOL_TASK, 0, id="tool_call"),
        pytest.param("openai_responses_text.sse", SHOWCASE, 1, id="text"),
    ],
)
async def test_a_stream_has_the_recorded_event_sequence(
    backend: Client, fixture: str, task: Any, counter: int
) -> None:
    for _ in range(counter):  # advance this task's plan to the answer wanted
        await (await _post(backend, task.prompt)).read()
    answer = await _post(backend, task.prompt, stream=True)
    assert answer.headers["Content-Type"].startswith("text/event-stream")
    events = _events(await answer.read())
    recorded = _events(wire(fixture))
    assert _shape(events) == _shape(recorded)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    final = events[-1]["response"]
    assert set(final) == set(recorded[-1]["response"])
    assert final["status"] == "completed"
    assert [set(item) for item in final["output"]] == [
        set(item) for item in recorded[-1]["response"]["output"]
    ]


async def test_the_whole_response_has_the_recorded_fields_and_the_planned_call(
    backend: Client,
) -> None:
    answer = await _post(backend, TOOL_TASK.prompt)
    body = await answer.json()
    recorded = json.loads(wire("openai_responses_single_tool.json"))
    assert set(body) == set(recorded)
    [item] = body["output"]
    assert set(item) == set(recorded["output"][0])
    [call] = planned_message(TOOL_TASK, 0)["tool_calls"]
    assert (item["type"], item["name"], item["arguments"]) == (
        "function_call",
        call["function"]["name"],
        call["function"]["arguments"],
    )
    assert body["usage"]["total_tokens"] == (
        body["usage"]["input_tokens"] + body["usage"]["output_tokens"]
    )


async def test_chat_and_responses_share_one_plan_per_task(backend: Client) -> None:
    """The 1st answer by chat, the 2nd by Responses: the plan's answers 0 and 1, in order."""
    chat = {"model": "gradeproxy-demo", "messages": [{"role": "user", "content": SHOWCASE.prompt}]}
    first = await (await backend.post("/v1/chat/completions", json=chat)).json()
    second = await (await _post(backend, SHOWCASE.prompt)).json()
    assert (
        first["choices"][0]["message"]["tool_calls"] == planned_message(SHOWCASE, 0)["tool_calls"]
    )
    [text] = second["output"]
    assert text["content"][0]["text"] == planned_message(SHOWCASE, 1)["content"]


@pytest.mark.parametrize(
    ("given", "answered"),
    [
        pytest.param([{"role": "user", "content": TOOL_TASK.prompt}], False, id="message_list"),
        pytest.param(
            [{"role": "user", "content": [{"type": "input_text", "text": TOOL_TASK.prompt}]}],
            False,
            id="input_text_parts",
        ),
        pytest.param(
            [
                {"role": "user", "content": TOOL_TASK.prompt},
                {"type": "function_call", "call_id": "c1", "name": "x", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "ok"},
            ],
            True,
            id="tool_result_follows",
        ),
    ],
)
async def test_input_items_are_read_like_a_chat_history(
    backend: Client, given: list[dict[str, Any]], answered: bool
) -> None:
    body = await (await _post(backend, given)).json()
    kinds = [item["type"] for item in body["output"]]
    assert kinds == (["message"] if answered else ["function_call"])


@pytest.mark.parametrize(
    ("body", "param"),
    [
        pytest.param({"model": "gradeproxy-demo"}, "input", id="no_input"),
        pytest.param({"model": "gradeproxy-demo", "input": 3}, "input", id="input_not_text"),
        pytest.param({"input": "hi"}, "model", id="no_model"),
        pytest.param({"model": "m", "input": "hi", "stream": "yes"}, "stream", id="bad_stream"),
    ],
)
async def test_bad_requests_get_openai_errors(
    backend: Client, body: dict[str, Any], param: str
) -> None:
    answer = await backend.post("/v1/responses", json=body)
    error = (await answer.json())["error"]
    assert (answer.status, error["param"], error["type"]) == (400, param, "invalid_request_error")
