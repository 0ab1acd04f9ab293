"""Every enforced stream parses in the official openai SDK, and a strip and a block run through
the Agents SDK: the transformed bytes are served by a real aiohttp server on loopback (cut at
awkward places) and the SDKs read them as they would read the proxy.

The openai SDK is read both raw (iterating ``create(stream=True)``) and through the helpers that
accumulate and validate (``chat.completions.stream``, ``responses.stream``): the Responses
helper raises on an event for an output index or content part it has not seen, so a wrong
``output_index`` fails here.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestServer
from openai import AsyncOpenAI

from tests.support.agents_sdk import run_agent
from tests.support.backend import SSE, Reply, ScriptedBackend, awkward_cuts
from tests.support.enforce_streams import (
    CHAT,
    CHAT_TABLE,
    DELETE_CALL,
    NOTICE,
    RESPONSES,
    RESPONSES_TABLE,
    WEATHER,
    WEATHER_CALL,
    calls_stream,
    forbid,
    run,
    sse,
)
from tests.support.responses_wire import Case, Text
from tests.support.responses_wire import stream as responses_stream
from tests.support.smuggling import (
    BAD,
    HELPER_RAISES,
    RELEASED,
    STREAMS,
    SURVIVORS,
    UNREADABLE,
    judge,
    judge_block,
)

pytestmark = pytest.mark.e2e


@pytest.fixture
async def client(backend_server: TestServer) -> AsyncIterator[AsyncOpenAI]:
    url = str(backend_server.make_url("/v1"))
    async with AsyncOpenAI(base_url=url, api_key="sk-test", max_retries=0) as sdk:
        yield sdk


def serve(backend: ScriptedBackend, body: bytes, times: int) -> None:
    for _ in range(times):
        backend.replies.append(Reply(body=body, content_type=SSE, split_at=awkward_cuts(body)))


MESSAGES: Any = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.mark.parametrize(
    ("stream", "forbidden", "mode", "calls", "finish", "notice"),
    CHAT_TABLE,
    ids=[f"{r[0]}-{r[2]}-{r[1]}" for r in CHAT_TABLE],
)
async def test_openai_sdk_parses_enforced_chat_stream(
    backend: ScriptedBackend,
    client: AsyncOpenAI,
    stream: str,
    forbidden: str,
    mode: str,
    calls: dict[int, list[str]],
    finish: dict[int, str | None],
    notice: list[str] | None,
) -> None:
    out, _ = run("chat", mode, forbid(forbidden), CHAT[stream])
    serve(backend, out, 2)

    raw = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    chunks = [chunk async for chunk in raw]
    assert chunks

    async with client.chat.completions.stream(model="m", messages=MESSAGES) as helper:
        async for _ in helper:
            pass
        final = await helper.get_final_completion()
    got = {c.index: [t.function.name for t in c.message.tool_calls or []] for c in final.choices}
    assert got.keys() == calls.keys()
    for index, names in got.items():
        # llama.cpp restates the name in every chunk, which the SDK concatenates (as it does
        # reading that server directly): a repeat of the expected name is that name
        assert len(names) == len(calls[index])
        for name, expected in zip(names, calls[index], strict=True):
            assert re.fullmatch(f"(?:{re.escape(expected)})+", name), (name, expected)
    assert {c.index: c.finish_reason for c in final.choices} == finish
    assert (NOTICE in (final.choices[0].message.content or "")) is (notice is not None)


@pytest.mark.parametrize(
    ("stream", "forbidden", "mode", "calls", "notice"),
    RESPONSES_TABLE,
    ids=[f"{r[0]}-{r[2]}-{r[1]}" for r in RESPONSES_TABLE],
)
async def test_openai_sdk_parses_enforced_responses_stream(
    backend: ScriptedBackend,
    client: AsyncOpenAI,
    stream: str,
    forbidden: str,
    mode: str,
    calls: list[str],
    notice: list[str] | None,
) -> None:
    out, _ = run("responses", mode, forbid(forbidden), RESPONSES[stream])
    serve(backend, out, 2)

    raw = await client.responses.create(model="m", input="Weather?", stream=True)
    events = [event async for event in raw]
    assert events[-1].type == "response.completed"

    async with client.responses.stream(model="m", input="Weather?") as helper:
        async for _ in helper:
            pass
        final = await helper.get_final_response()
    called = [i.name for i in final.output if i.type in ("function_call", "custom_tool_call")]
    assert called == calls
    assert (NOTICE in final.output_text) is (notice is not None)


@pytest.mark.parametrize("mode", ["strip", "block"])
@pytest.mark.parametrize(("name", "api", "stream"), STREAMS, ids=[r[0] for r in STREAMS])
async def test_openai_sdk_reads_an_enforced_red_team_stream_without_the_call(
    backend: ScriptedBackend, client: AsyncOpenAI, name: str, api: str, stream: bytes, mode: str
) -> None:
    """A hostile stream, stripped or blocked, is one the SDK reads, raw and accumulated, and
    the forbidden call is in neither (a block's notice names it, unless it was unreadable or
    came after its call was written); a harmless call beside it may stay (``SURVIVORS``)."""
    judged = judge if mode == "strip" else judge_block
    out, _ = run(api, mode, judged, stream)
    serve(backend, out, 2)
    named = mode == "block" and name not in UNREADABLE | RELEASED
    if api == "chat":
        raw: Any = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
        chunks = [chunk async for chunk in raw]
        deltas = [c.delta for chunk in chunks for c in chunk.choices]
        fragments = [t.function for d in deltas for t in d.tool_calls or [] if t.function]
        assert BAD not in "".join(f.name or "" for f in fragments)
        assert BAD not in "".join(d.function_call.name or "" for d in deltas if d.function_call)
        if name in HELPER_RAISES:
            return
        async with client.chat.completions.stream(model="m", messages=MESSAGES) as helper:
            async for _ in helper:
                pass
            final = await helper.get_final_completion()
        message = final.choices[0].message
        kept = [c.function.name for c in message.tool_calls or []]
        stays = (name in SURVIVORS and mode == "strip") or name in RELEASED
        assert BAD not in kept if stays else not kept
        assert message.function_call is None or message.function_call.name != BAD
        assert (BAD in (message.content or "")) is named
        return
    raw = await client.responses.create(model="m", input="Delete it", stream=True)
    events = [event async for event in raw]
    assert events[-1].type == "response.completed"
    items = [e.item for e in events if e.type.startswith("response.output_item.")]
    assert BAD not in [getattr(item, "name", None) for item in items]
    assert BAD not in [getattr(e, "name", None) for e in events]
    async with client.responses.stream(model="m", input="Delete it") as helper:
        async for _ in helper:
            pass
        response = await helper.get_final_response()
    called = [i.name for i in response.output if i.type in ("function_call", "custom_tool_call")]
    assert BAD not in called if name in SURVIVORS and mode == "strip" else not called
    assert (BAD in response.output_text) is named


@pytest.mark.parametrize(
    ("api", "stream"),
    [("chat", "cut_before_finish"), ("responses", "cut_before_item_done")],
)
async def test_openai_sdk_reads_a_cut_stream_after_enforcement_as_it_reads_the_cut(
    backend: ScriptedBackend, client: AsyncOpenAI, api: str, stream: str
) -> None:
    """A cut stream stays cut (nothing invented); the SDK's raw iteration reads it the same."""
    body = (CHAT if api == "chat" else RESPONSES)[stream]
    out, _ = run(api, "strip", forbid("delete_payment"), body)
    serve(backend, body, 1)
    serve(backend, out, 1)
    counts = []
    for _ in range(2):
        if api == "chat":
            raw: Any = await client.chat.completions.create(
                model="m", messages=MESSAGES, stream=True
            )
        else:
            raw = await client.responses.create(model="m", input="Weather?", stream=True)
        counts.append(len([event async for event in raw]))
    assert 0 < counts[1] < counts[0]


# -- the Agents SDK ------------------------------------------------------------------------

DELETE_ARGS = '{"payment_id":"pay_1002"}'


def agent_turns(api: str) -> tuple[bytes, bytes]:
    """The model's first answer (weather and delete calls) and its answer after the tools."""
    if api == "chat_completions":
        first = sse(*calls_stream([WEATHER, ("delete_payment", DELETE_ARGS)], text="On it."))
        return first, sse(*calls_stream([], text="It is 12 C in Paris."))
    first = responses_stream(Case("a1", (Text("On it.", "msg_a"), WEATHER_CALL, DELETE_CALL)))
    return first, responses_stream(Case("a2", (Text("It is 12 C in Paris.", "msg_b"),)))


@pytest.mark.timeout(600)
@pytest.mark.parametrize("api", ["chat_completions", "responses"])
@pytest.mark.parametrize(
    ("mode", "executed", "final"),
    [
        # strip: the weather call runs, the forbidden one never reaches the agent
        ("strip", ["get_weather"], "It is 12 C in Paris."),
        # block: no tool runs; the turn ends with the notice as the final output
        ("block", [], None),
    ],
)
async def test_agents_sdk_runs_enforced_streams(
    agents_python: str,
    backend: ScriptedBackend,
    backend_server: TestServer,
    api: str,
    mode: str,
    executed: list[str],
    final: str | None,
) -> None:
    first, second = agent_turns(api)
    wire_api = "chat" if api == "chat_completions" else "responses"
    out, outcomes = run(wire_api, mode, forbid("delete_payment"), first)
    assert [o.name for o in outcomes] == ["get_weather", "delete_payment"]
    serve(backend, out, 1)
    serve(backend, second, 1)
    config = {"base_url": str(backend_server.make_url("/v1")), "api": api, "stream": True}
    result = await run_agent(agents_python, "enforce_agent.py", config)
    assert result["executed"] == executed
    if final is not None:
        assert result["final"] == final
    else:
        assert NOTICE in result["final"]
        assert "delete_payment" in result["final"]
        assert len(backend.seen) == 1
