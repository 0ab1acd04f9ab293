"""End to end with the official ``openai`` SDK: the same objects through the proxy as direct,
sync and async, streamed and not; the proxy's rows and metrics agree with what was sent."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import openai
import pytest
from aiohttp.test_utils import TestServer

from tests.support.backend import JSON, SSE, Reply, ScriptedBackend, wire
from tests.support.metrics import metric_value
from tests.support.proxy import ProxyFactory, rows_of
from tests.support.tasks import WEATHER_REQUEST as REQUEST

HEADERS = {"X-Grade-Task": "weather.single", "X-Grade-Run": "e2e"}


def dump(value: Any) -> Any:
    return value.model_dump(exclude_none=False)


def sync_call(base_url: str, stream: bool) -> list[Any]:
    client = openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
    try:
        if stream:
            return [
                dump(c)
                for c in client.chat.completions.create(
                    stream=True, extra_headers=HEADERS, **REQUEST
                )
            ]
        return [dump(client.chat.completions.create(extra_headers=HEADERS, **REQUEST))]
    finally:
        client.close()


async def async_call(base_url: str, stream: bool) -> list[Any]:
    async with openai.AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0) as client:
        if stream:
            chunks = await client.chat.completions.create(
                stream=True, extra_headers=HEADERS, **REQUEST
            )
            return [dump(c) async for c in chunks]
        return [dump(await client.chat.completions.create(extra_headers=HEADERS, **REQUEST))]


@pytest.mark.e2e
@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_same_objects_through_the_proxy_as_direct(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    backend_server: TestServer,
    results_path: Path,
    flavour: str,
    stream: bool,
) -> None:
    fixture = wire("openai_single_tool.sse" if stream else "openai_single_tool.json")
    kind = SSE if stream else JSON
    backend.replies.extend(
        [Reply(body=fixture, content_type=kind, split_at=range(9, len(fixture), 9))] * 2
    )
    client = await make_proxy()
    direct_url, proxy_url = str(backend_server.make_url("/v1")), str(client.make_url("/v1"))
    if flavour == "sync":
        direct = await asyncio.to_thread(sync_call, direct_url, stream)
        proxied = await asyncio.to_thread(sync_call, proxy_url, stream)
    else:
        direct = await async_call(direct_url, stream)
        proxied = await async_call(proxy_url, stream)
    assert proxied == direct
    assert backend.seen[1].body == backend.seen[0].body  # the proxy forwarded the SDK's exact bytes
    assert "X-Grade-Task" not in backend.seen[1].headers
    [row] = await rows_of(client, results_path)
    assert (row["task_id"], row["result"], row["stream"], row["run"]) == (
        "weather.single",
        "pass",
        stream,
        "e2e",
    )
    metrics = await (await client.get("/metrics")).text()
    assert (
        metric_value(metrics, "gradeproxy_grades_total", task="weather.single", result="pass") == 1
    )
    assert (
        metric_value(metrics, "gradeproxy_requests_total", route="chat_completions", code="200")
        == 1
    )


@pytest.mark.e2e
async def test_sdk_sees_upstream_errors_as_typed_errors(
    make_proxy: ProxyFactory, backend: ScriptedBackend
) -> None:
    backend.replies.append(
        Reply(
            body=b'{"error":{"message":"Rate limit reached","type":"requests","param":null,'
            b'"code":"rate_limit_exceeded"}}',
            status=429,
            headers={"x-should-retry": "false"},
        )
    )
    client = await make_proxy()
    async with openai.AsyncOpenAI(
        base_url=str(client.make_url("/v1")), api_key="k", max_retries=0
    ) as sdk:
        with pytest.raises(openai.RateLimitError) as caught:
            await sdk.chat.completions.create(**REQUEST)
    assert caught.value.code == "rate_limit_exceeded"


@pytest.mark.e2e
async def test_sdk_sees_in_band_stream_error_as_api_error(
    make_proxy: ProxyFactory, backend: ScriptedBackend
) -> None:
    body = wire("openai_single_tool.sse")
    first_event = body.index(b"\n\n") + 2
    backend.replies.append(Reply(body=body, content_type=SSE, split_at=[first_event], fail_after=1))
    client = await make_proxy()
    async with openai.AsyncOpenAI(
        base_url=str(client.make_url("/v1")), api_key="k", max_retries=0
    ) as sdk:
        stream = await sdk.chat.completions.create(stream=True, **REQUEST)
        with pytest.raises(openai.APIError, match="upstream broke the stream"):
            async for _ in stream:
                pass


@pytest.mark.e2e
async def test_proxy_errors_are_typed_for_the_sdk(make_proxy: ProxyFactory) -> None:
    client = await make_proxy(upstream={"url": "http://127.0.0.1:9/v1"})
    async with openai.AsyncOpenAI(
        base_url=str(client.make_url("/v1")), api_key="k", max_retries=0
    ) as sdk:
        with pytest.raises(openai.InternalServerError) as caught:
            await sdk.chat.completions.create(**REQUEST)
    assert caught.value.status_code == 502
    assert caught.value.code == "upstream_unreachable"


@pytest.mark.e2e
async def test_models_route_through_sdk(make_proxy: ProxyFactory, backend: ScriptedBackend) -> None:
    backend.replies.append(
        Reply(
            body=b'{"object":"list","data":[{"id":"m1","object":"model","created":1,'
            b'"owned_by":"me"}]}'
        )
    )
    client = await make_proxy()
    async with openai.AsyncOpenAI(
        base_url=str(client.make_url("/v1")), api_key="k", max_retries=0
    ) as sdk:
        models = [m.id async for m in sdk.models.list()]
    assert models == ["m1"]
    assert backend.seen[-1].path_qs == "/v1/models"


@pytest.mark.e2e
@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_sdk_stream_is_graded_when_the_upstream_ends_its_body_late(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path, flavour: str
) -> None:
    """The SDK closes at ``[DONE]``; an upstream that ends its body 300 ms later (as llama.cpp's
    server can) must not turn 20 complete streams into ``client_disconnected`` skips."""
    fixture = wire("openai_single_tool.sse")
    count = 20
    backend.replies.extend(
        [Reply(body=fixture, content_type=SSE, split_at=[200], tail_pause_s=0.3)] * count
    )
    client = await make_proxy()
    proxy_url = str(client.make_url("/v1"))

    async def one() -> list[Any]:
        if flavour == "sync":
            return await asyncio.to_thread(sync_call, proxy_url, True)
        return await async_call(proxy_url, True)

    streams = await asyncio.gather(*(one() for _ in range(count)))
    assert all(chunks and chunks[-1]["usage"] for chunks in streams)
    await asyncio.sleep(0.5)  # every upstream body has ended by now
    rows = await rows_of(client, results_path)
    metrics = await (await client.get("/metrics")).text()
    assert (
        metric_value(metrics, "gradeproxy_grading_skipped_total", reason="client_disconnected") == 0
    )
    assert [r["result"] for r in rows] == ["pass"] * count
