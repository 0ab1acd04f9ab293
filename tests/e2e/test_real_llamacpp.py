"""End to end against a real backend: llama.cpp's OpenAI-compatible server (llama-cpp-python)
with SmolLM2-135M, through the proxy, with the official openai SDK.

The server is installed by ``scripts/real-backend.sh install`` (CI's test script runs it; the
build is cached) and started here on a free port. Run alone with ``pytest -m realbackend``.
Locally, ``GRADEPROXY_SKIP_REAL_BACKEND=1`` skips these tests; in CI they never skip.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState

from grader.json import dumps, loads_exact
from tests.support.metrics import metric_value
from tests.support.paths import REPO
from tests.support.process import free_port
from tests.support.proxy import ProxyFactory, rows_of
from tests.support.tools import unavailable

pytestmark = [pytest.mark.realbackend, pytest.mark.e2e, pytest.mark.timeout(300)]
SCRIPT = REPO / "scripts" / "real-backend.sh"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
            },
        },
    }
]
BASE: dict[str, Any] = {
    "model": "smollm2",
    "temperature": 0,
    "seed": 42,
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
}
FORCED: dict[str, Any] = {
    **BASE,
    "tools": TOOLS,
    "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
}
AUTO: dict[str, Any] = {**BASE, "tools": TOOLS, "tool_choice": "auto"}
PROSE: dict[str, Any] = {
    **BASE,
    "messages": [{"role": "user", "content": "Say hello in one word."}],
}


@pytest.fixture(scope="module")
def llama_url() -> Iterator[str]:
    if os.environ.get("GRADEPROXY_SKIP_REAL_BACKEND") and not os.environ.get("CI"):
        pytest.skip("GRADEPROXY_SKIP_REAL_BACKEND is set")
    env = {**os.environ, "LLAMA_PORT": str(free_port())}
    status = subprocess.run(
        [str(SCRIPT), "status"], env=env, capture_output=True, text=True, check=False
    )
    if "installed" not in status.stdout + status.stderr:
        unavailable("the real backend is not installed: scripts/real-backend.sh install")
    subprocess.run([str(SCRIPT), "start"], env=env, check=True, timeout=240)
    try:
        yield f"http://127.0.0.1:{env['LLAMA_PORT']}/v1"
    finally:
        subprocess.run([str(SCRIPT), "stop"], env=env, check=False, timeout=60)


def sdk(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url, api_key="none", max_retries=0, timeout=120)


def masked(completion: Any) -> Any:
    """A completion without what legitimately differs between two calls (ids, timestamps)."""
    data = completion.model_dump()
    data.pop("id", None)
    data.pop("created", None)
    for choice in data.get("choices") or []:
        for call in (choice.get("message") or {}).get("tool_calls") or []:
            call.pop("id", None)
    return data


def first_call(completion: Any) -> tuple[str, Any]:
    call = completion.choices[0].message.tool_calls[0]
    return call.function.name, loads_exact(call.function.arguments)


async def write_task(tasks_file: Path, task_id: str, name: str, arguments: Any) -> None:
    line = dumps(
        {
            "id": task_id,
            "expected": {"name": name, "arguments": arguments},
            "metadata": {"mutationKind": "real_backend"},
        }
    )
    await asyncio.to_thread(tasks_file.write_bytes, line + b"\n")


async def test_forced_call_same_objects_and_graded_pass(
    llama_url: str, make_proxy: ProxyFactory, tasks_file: Path, results_path: Path
) -> None:
    async with sdk(llama_url) as direct_client:
        direct = await direct_client.chat.completions.create(**FORCED)
    name, arguments = first_call(direct)
    await write_task(tasks_file, "real.forced", name, arguments)
    proxy = await make_proxy(upstream={"url": llama_url, "idle_timeout_s": 120})
    async with sdk(str(proxy.make_url("/v1"))) as client:
        proxied = await client.chat.completions.create(
            **FORCED, extra_headers={"X-Grade-Task": "real.forced"}
        )
    assert masked(proxied) == masked(direct)  # temperature 0 and a fixed seed: deterministic
    [row] = await rows_of(proxy, results_path)
    assert (row["result"], row["reason_code"], row["model"]) == ("pass", "match", "smollm2")
    metrics = await (await proxy.get("/metrics")).text()
    assert metric_value(metrics, "gradeproxy_grades_total", task="real.forced", result="pass") == 1


async def test_streamed_capture_equals_the_call_even_where_the_sdk_accumulator_is_wrong(
    llama_url: str, make_proxy: ProxyFactory, tasks_file: Path, results_path: Path
) -> None:
    async with sdk(llama_url) as direct_client:
        name, arguments = first_call(await direct_client.chat.completions.create(**FORCED))
    await write_task(tasks_file, "real.forced", name, arguments)
    proxy = await make_proxy(upstream={"url": llama_url, "idle_timeout_s": 120})
    state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
    async with sdk(str(proxy.make_url("/v1"))) as client:
        stream = await client.chat.completions.create(
            **FORCED, stream=True, extra_headers={"X-Grade-Task": "real.forced"}
        )
        async for chunk in stream:
            state.handle_chunk(chunk)
    sdk_call = state.current_completion_snapshot.choices[0].message.tool_calls[0]  # type: ignore[index]
    [row] = await rows_of(proxy, results_path)
    captured = loads_exact(row["answer"])["tool_calls"][0]["function"]
    assert captured["name"] == "get_weather"
    assert loads_exact(captured["arguments"]) == arguments
    assert loads_exact(sdk_call.function.arguments) == arguments
    # llama-cpp-python repeats the name in every chunk; the SDK concatenates it, we do not.
    assert sdk_call.function.name != "get_weather"
    assert sdk_call.function.name == "get_weather" * (
        len(sdk_call.function.name) // len("get_weather")
    )
    assert (row["result"], row["stream"]) == ("pass", True)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_auto_tool_choice_is_counted_never_crashes(
    llama_url: str, make_proxy: ProxyFactory, results_path: Path, stream: bool
) -> None:
    proxy = await make_proxy(upstream={"url": llama_url, "idle_timeout_s": 120})
    async with sdk(str(proxy.make_url("/v1"))) as client:
        response = await client.chat.completions.with_raw_response.create(
            **AUTO, stream=stream, extra_headers={"X-Grade-Task": "weather.single"}
        )
        assert response.status_code == 200
        await response.http_response.aread()
    rows = await rows_of(proxy, results_path)
    metrics = await (await proxy.get("/metrics")).text()
    skipped_empty = metric_value(
        metrics, "gradeproxy_grading_skipped_total", reason="empty_response"
    )
    assert len(rows) + skipped_empty == 1  # graded, or counted as an empty answer (llama.cpp quirk)
    assert metric_value(metrics, "gradeproxy_grading_errors_total") == 0
    for row in rows:
        assert (
            metric_value(
                metrics, "gradeproxy_grades_total", task="weather.single", result=row["result"]
            )
            == 1
        )


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_prose_answer_is_a_fail_not_a_crash(
    llama_url: str, make_proxy: ProxyFactory, results_path: Path, stream: bool
) -> None:
    proxy = await make_proxy(upstream={"url": llama_url, "idle_timeout_s": 120})
    async with sdk(str(proxy.make_url("/v1"))) as client:
        if stream:
            chunks = await client.chat.completions.create(
                **PROSE, stream=True, extra_headers={"X-Grade-Task": "weather.single"}
            )
            text = "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])
        else:
            completion = await client.chat.completions.create(
                **PROSE, extra_headers={"X-Grade-Task": "weather.single"}
            )
            text = completion.choices[0].message.content or ""
    [row] = await rows_of(proxy, results_path)
    assert (row["result"], row["reason_code"]) == ("fail", "no_call")
    assert row["answer"] == text


async def test_backend_errors_pass_through_untouched(
    llama_url: str, make_proxy: ProxyFactory
) -> None:
    proxy = await make_proxy(upstream={"url": llama_url, "idle_timeout_s": 120})
    bad = {**FORCED, "tool_choice": {"type": "function", "function": {"name": "no_such_tool"}}}
    async with sdk(llama_url) as direct_client, sdk(str(proxy.make_url("/v1"))) as client:
        with pytest.raises(openai.APIStatusError) as direct_error:
            await direct_client.chat.completions.create(**bad)
        with pytest.raises(openai.APIStatusError) as proxied_error:
            await client.chat.completions.create(
                **bad, extra_headers={"X-Grade-Task": "weather.single"}
            )
    assert proxied_error.value.status_code == direct_error.value.status_code
    assert proxied_error.value.body == direct_error.value.body
    metrics = await (await proxy.get("/metrics")).text()
    assert metric_value(metrics, "gradeproxy_grading_skipped_total", reason="upstream_error") == 1
