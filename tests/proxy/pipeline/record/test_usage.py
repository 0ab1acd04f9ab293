"""Token usage: read once from chat completions and the Responses API (body, streamed final
chunk with ``include_usage``, ``response.completed``) into every live answer row and into
``gradeproxy_tokens_total``; the openai SDK is the client, the backends speak OpenAI's exact
wire format (recorded fixtures with cached and reasoning counts set, and the demo backend)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
from aiohttp.test_utils import TestServer
from hypothesis import given
from hypothesis import strategies as st

from grader import parse_task
from grader.usage import token_usage
from proxy.demo.answers import SAMPLE_TASKS_PATH, load_demo_tasks
from proxy.demo.backend import make_demo_backend
from proxy.pipeline.record.metrics import ModelLabels, ProxyMetrics
from proxy.pipeline.record.recording import Recorder, RecordOptions, recording
from tests.support import responses_wire as rw
from tests.support.backend import JSON, SSE, Reply, ScriptedBackend, awkward_cuts, wire
from tests.support.live import live_proxy
from tests.support.metrics import exposition_value, metric_value
from tests.support.proxy import ProxyFactory, read_rows, rows_of

CHAT = "gpt-4.1-mini-2025-04-14"
FULL = {"prompt_tokens": 80, "completion_tokens": 19, "total_tokens": 99}

# (the usage object as the backend sent it, the row's usage)
READ = [
    pytest.param(
        {
            **FULL,
            "prompt_tokens_details": {"cached_tokens": 64, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 7, "audio_tokens": 0},
        },
        {"input_tokens": 80, "output_tokens": 19, "cached_input_tokens": 64,
         "reasoning_tokens": 7},
        id="chat_with_details",
    ),
    pytest.param(
        {"completion_tokens": 24, "prompt_tokens": 312, "total_tokens": 336},
        {"input_tokens": 312, "output_tokens": 24, "cached_input_tokens": None,
         "reasoning_tokens": None},
        id="llamacpp_no_details_are_not_zero",
    ),
    pytest.param(
        {"input_tokens": 81, "input_tokens_details": {"cached_tokens": 5},
         "output_tokens": 30, "output_tokens_details": {"reasoning_tokens": 11},
         "total_tokens": 111},
        {"input_tokens": 81, "output_tokens": 30, "cached_input_tokens": 5,
         "reasoning_tokens": 11},
        id="responses",
    ),
    pytest.param(
        {"prompt_tokens": 0, "completion_tokens": 0},
        {"input_tokens": 0, "output_tokens": 0, "cached_input_tokens": None,
         "reasoning_tokens": None},
        id="zero_is_a_count",
    ),
    pytest.param(
        {"prompt_tokens": -3, "completion_tokens": 2.5, "prompt_tokens_details": None,
         "completion_tokens_details": {"reasoning_tokens": True}},
        None,
        id="nothing_countable_is_no_usage",
    ),
    pytest.param(
        {"prompt_tokens": "80", "completion_tokens": 4},
        {"input_tokens": None, "output_tokens": 4, "cached_input_tokens": None,
         "reasoning_tokens": None},
        id="a_string_count_is_not_read",
    ),
    pytest.param(None, None, id="no_usage_object"),
    pytest.param([80, 19], None, id="not_an_object"),
]  # fmt: skip


@pytest.mark.parametrize(("reported", "expected"), READ)
def test_token_usage_reads_chat_and_responses_alike(reported: Any, expected: Any) -> None:
    assert token_usage(reported) == expected


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=30), inner),
    max_leaves=12,
)
KEYS = st.sampled_from(
    ["prompt_tokens", "completion_tokens", "input_tokens", "output_tokens",
     "prompt_tokens_details", "completion_tokens_details", "input_tokens_details",
     "output_tokens_details", "cached_tokens", "reasoning_tokens"]
)  # fmt: skip


@given(st.dictionaries(KEYS, JSONISH | st.dictionaries(KEYS, JSONISH)) | JSONISH)
def test_token_usage_never_raises_and_holds_only_counts(value: Any) -> None:
    usage = token_usage(value)
    if usage is not None:
        assert set(usage) == {
            "input_tokens", "output_tokens", "cached_input_tokens", "reasoning_tokens"
        }  # fmt: skip
        assert all(v is None or (type(v) is int and v >= 0) for v in usage.values()), usage
        assert any(v is not None for v in usage.values())


def _counted(body: bytes) -> bytes:
    """The recorded bytes with cached and reasoning counts a backend with a cache reports."""
    body = re.sub(rb'("cached_tokens":\s*)0', rb"\g<1>64", body)
    return re.sub(rb'("reasoning_tokens":\s*)0', rb"\g<1>7", body)


def _without_usage_chunk(body: bytes) -> bytes:
    """The stream as OpenAI sends it without ``include_usage``: no ``choices: []`` chunk."""
    frames = body.split(b"\n\n")
    return b"\n\n".join(f for f in frames if b'"choices":[]' not in f)


CACHED = {"cached_input_tokens": 64, "reasoning_tokens": 7}
CHAT_USAGE = {"input_tokens": 80, "output_tokens": 19, **CACHED}
RESPONSES_USAGE = {"input_tokens": 81, "output_tokens": 19, **CACHED}
MESSAGES: Any = [{"role": "user", "content": "Weather in Zürich, in celsius?"}]

# (api, stream, the upstream's bytes, the row's usage)
WIRE = [
    pytest.param("chat", False, _counted(wire("openai_single_tool.json")), CHAT_USAGE,
                 id="chat_json"),
    pytest.param("chat", True, _counted(wire("openai_single_tool.sse")), CHAT_USAGE,
                 id="chat_stream_include_usage"),
    pytest.param("chat", True, _without_usage_chunk(wire("openai_single_tool.sse")), None,
                 id="chat_stream_without_usage_chunk"),
    pytest.param("chat", False, wire("llamacpp_single_tool.json"),
                 {"input_tokens": 312, "output_tokens": 24, "cached_input_tokens": None,
                  "reasoning_tokens": None},
                 id="llamacpp_reports_no_details"),
    pytest.param("responses", False, _counted(rw.body(rw.CASES["single_tool"])),
                 RESPONSES_USAGE, id="responses_json"),
    pytest.param("responses", True, _counted(rw.stream(rw.CASES["single_tool"])),
                 RESPONSES_USAGE, id="responses_stream_completed_event"),
]  # fmt: skip


async def _sdk(base_url: str, api: str, stream: bool) -> Any:
    """One call through the openai SDK: the usage object it handed its caller, or None."""
    headers = {"X-Grade-Task": "weather.single"}
    async with openai.AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0) as client:
        if api == "responses":
            if stream:
                events = await client.responses.create(
                    model=rw.MODEL,
                    input=MESSAGES,
                    stream=True,
                    extra_headers=headers,
                )
                done = [e async for e in events if e.type == "response.completed"]
                final: Any = done[0].response.usage if done else None
                return None if final is None else final.model_dump()
            answer = await client.responses.create(
                model=rw.MODEL,
                input=MESSAGES,
                extra_headers=headers,
            )
            return answer.usage.model_dump() if answer.usage else None
        if stream:
            chunks = await client.chat.completions.create(
                model=CHAT, messages=MESSAGES, stream=True,
                stream_options={"include_usage": True}, extra_headers=headers,
            )  # fmt: skip
            usages = [c.usage.model_dump() async for c in chunks if c.usage is not None]
            return usages[-1] if usages else None
        completion = await client.chat.completions.create(
            model=CHAT,
            messages=MESSAGES,
            extra_headers=headers,
        )
        return completion.usage.model_dump() if completion.usage else None


@pytest.mark.e2e
@pytest.mark.parametrize(("api", "stream", "body", "expected"), WIRE)
async def test_the_row_and_the_token_counter_hold_the_usage_the_sdk_received(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    results_path: Path,
    api: str,
    stream: bool,
    body: bytes,
    expected: dict[str, int | None] | None,
) -> None:
    backend.replies.append(
        Reply(body=body, content_type=SSE if stream else JSON, split_at=awkward_cuts(body))
    )
    client = await make_proxy()
    received = await _sdk(str(client.make_url("/v1")), api, stream)
    [row] = await rows_of(client, results_path)
    assert row["usage"] == expected
    # What the client was told is what the row says: one reading of one object.
    assert token_usage(received) == expected
    text = await (await client.get("/metrics")).text()
    series = {"task": "weather.single", "variant": "primary", "model": row["model"]}
    for kind, key in (
        ("input", "input_tokens"),
        ("output", "output_tokens"),
        ("cached_input", "cached_input_tokens"),
        ("reasoning", "reasoning_tokens"),
    ):
        reported = None if expected is None else expected[key]
        value = exposition_value(text, "gradeproxy_tokens_total", type=kind, **series)
        assert value == (None if not reported else float(reported)), kind


async def test_a_response_with_n_choices_is_counted_once_and_each_row_repeats_its_usage(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path
) -> None:
    # OpenAI's reply to n=2: two choices, one usage for both.
    completion = orjson.loads(_counted(wire("openai_single_tool.json")))
    completion["choices"].append({**completion["choices"][0], "index": 1})
    body = orjson.dumps(completion)
    backend.replies.append(Reply(body=body, content_type=JSON))
    client = await make_proxy()
    response = await client.post(
        "/v1/chat/completions",
        json={"model": "m", "messages": MESSAGES, "n": 2},
        headers={"X-Grade-Task": "weather.single"},
    )
    assert response.status == 200
    rows = await rows_of(client, results_path)
    assert sorted(r["choice"] for r in rows) == [0, 1]
    reported = token_usage(orjson.loads(body)["usage"])
    assert reported is not None
    assert [r["usage"] for r in rows] == [reported, reported]
    text = await (await client.get("/metrics")).text()
    assert metric_value(text, "gradeproxy_tokens_total", type="output") == reported["output_tokens"]


async def test_the_shadow_leg_is_counted_apart_from_the_primary(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    backend_server: TestServer,
    results_path: Path,
) -> None:
    body = _counted(wire("openai_single_tool.json"))
    backend.replies.extend([Reply(body=body, content_type=JSON)] * 2)
    shadow = {"url": str(backend_server.make_url("/v1")), "sample_rate": 1.0}
    client = await make_proxy(upstream={"shadow": shadow})
    response = await client.post(
        "/v1/chat/completions",
        json={"model": CHAT, "messages": MESSAGES},
        headers={"X-Grade-Task": "weather.single"},
    )
    assert response.status == 200
    rows = await rows_of(client, results_path)
    for _ in range(100):  # the shadow leg's row comes after the primary's
        if len(rows) == 2:
            break
        await asyncio.sleep(0.02)
        rows = read_rows(results_path)
    assert sorted(r["variant"] for r in rows) == ["primary", "shadow"]
    text = await (await client.get("/metrics")).text()
    for variant in ("primary", "shadow"):
        assert metric_value(text, "gradeproxy_tokens_total", type="input", variant=variant) == 80
        assert (
            metric_value(text, "gradeproxy_tokens_total", type="cached_input", variant=variant)
            == 64
        )
    assert metric_value(text, "gradeproxy_tokens_total", type="input") == 160


DEMO_TASK = {t.id: t for t in load_demo_tasks(SAMPLE_TASKS_PATH)}["tickets.duration_format.01"]


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("api", "stream"),
    [
        pytest.param("chat", False, id="chat"),
        pytest.param("chat", True, id="chat_stream_include_usage"),
        pytest.param("responses", False, id="responses"),
        pytest.param("responses", True, id="responses_stream"),
    ],
)
async def test_the_demo_backends_usage_reaches_the_row_through_the_sdk(
    aiohttp_server: Any, tmp_path: Path, api: str, stream: bool
) -> None:
    demo = await aiohttp_server(make_demo_backend(SAMPLE_TASKS_PATH))
    results = tmp_path / "grades.jsonl"
    async with live_proxy(str(demo.make_url("/v1")), SAMPLE_TASKS_PATH, results) as proxy:
        headers = {"X-Grade-Task": DEMO_TASK.id}
        prompt: Any = [{"role": "user", "content": DEMO_TASK.prompt}]
        async with openai.AsyncOpenAI(
            base_url=f"{proxy.base}/v1", api_key="sk-test", max_retries=0
        ) as client:
            if api == "responses":
                if stream:
                    events = await client.responses.create(
                        model="gradeproxy-demo",
                        input=prompt,
                        stream=True,
                        extra_headers=headers,
                    )
                    [done] = [e async for e in events if e.type == "response.completed"]
                    usage: Any = done.response.usage
                else:
                    usage = (
                        await client.responses.create(
                            model="gradeproxy-demo",
                            input=prompt,
                            extra_headers=headers,
                        )
                    ).usage
            elif stream:
                chunks = await client.chat.completions.create(
                    model="gradeproxy-demo", messages=prompt, stream=True,
                    stream_options={"include_usage": True}, extra_headers=headers,
                )  # fmt: skip
                [usage] = [c.usage async for c in chunks if c.usage is not None]
            else:
                usage = (
                    await client.chat.completions.create(
                        model="gradeproxy-demo",
                        messages=prompt,
                        extra_headers=headers,
                    )
                ).usage
        await proxy.drained()
        [row] = read_rows(results)
        sent = usage.model_dump()
        assert row["usage"] == token_usage(sent)
        assert row["usage"]["input_tokens"] > 0
        assert row["usage"]["cached_input_tokens"] == 0  # the demo reports its zeros
        assert (
            proxy.metric(
                "gradeproxy_tokens_total",
                type="output",
                task=DEMO_TASK.id,
                variant="primary",
                model="gradeproxy-demo",
            )
            == row["usage"]["output_tokens"]
        )


def _row(model: str) -> dict[str, Any]:
    return {
        "kind": "answer", "result": "pass", "model": model, "choice": 0, "checks": [],
        "timings": {}, "task_id": "weather.single",
        "usage": {"input_tokens": 3, "output_tokens": 2, "cached_input_tokens": None,
                  "reasoning_tokens": 1},
    }  # fmt: skip


def test_ten_thousand_models_stay_under_the_cardinality_guard() -> None:
    metrics = ProxyMetrics(ModelLabels(cap=20))
    recorder = Recorder(metrics, None, None)
    task = parse_task({"id": "weather.single", "expected": {"name": "f", "arguments": {}}})
    for number in range(10_000):
        done = recording(task, [_row(f"model-{number}")], 0.0, RecordOptions())
        assert recorder.record_many([("weather.single", "primary", done)]) == [None]
    models = {
        sample.labels["model"]
        for family in metrics.registry.collect()
        if family.name == "gradeproxy_tokens"
        for sample in family.samples
    }
    assert models == {f"model-{n}" for n in range(20)} | {"other"}
    other = metrics.registry.get_sample_value(
        "gradeproxy_tokens_total",
        {
            "type": "input",
            "task": "weather.single",
            "variant": "primary",
            "model": "other",
            "key": "none",
        },
    )
    assert other == 3 * (10_000 - 20)  # nothing lost, nothing guessed: the rest is "other"
    total = sum(
        metrics.registry.get_sample_value(
            "gradeproxy_tokens_total",
            {
                "type": "reasoning",
                "task": "weather.single",
                "variant": "primary",
                "model": m,
                "key": "none",
            },
        )
        or 0
        for m in models
    )
    assert total == 10_000
