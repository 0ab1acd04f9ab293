"""``grading.request_usage``: the proxy asks a streamed chat answer for its usage when the
client did not, and the client still reads exactly the bytes it would have read with the
setting off (proxy/pipeline/streamusage.py), while the row and the token series get the usage.
The demo backend speaks OpenAI's exact chunk shapes (``"usage":null`` on every chunk, then the
``choices: []`` usage chunk); the openai SDK is the client."""

from __future__ import annotations

import itertools
import types
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

import proxy.demo.backend as demo_backend
from proxy.demo.answers import SAMPLE_TASKS_PATH, load_demo_tasks
from proxy.demo.backend import make_demo_backend
from proxy.pipeline.streamusage import UsageChunkFilter, ask_for_usage
from tests.support.live import live_proxy
from tests.support.proxy import read_rows

DEMO_TASK = {t.id: t for t in load_demo_tasks(SAMPLE_TASKS_PATH)}["tickets.duration_format.01"]
PROMPT: Any = [{"role": "user", "content": DEMO_TASK.prompt}]


@pytest.mark.parametrize(
    ("body", "added"),
    [
        pytest.param({"model": "m", "stream": True}, {"include_usage": True}, id="streamed"),
        pytest.param(
            {"model": "m", "stream": True, "stream_options": {}},
            {"include_usage": True},
            id="empty_options",
        ),
        pytest.param(
            {"model": "m", "stream": True, "stream_options": {"include_usage": False}},
            {"include_usage": True},
            id="include_usage_false",
        ),
        pytest.param(
            {"model": "m", "stream": True, "stream_options": {"x": 1}},
            {"x": 1, "include_usage": True},
            id="other_options_kept",
        ),
        pytest.param(
            {"model": "m", "stream": True, "stream_options": {"include_usage": True}},
            None,
            id="client_asked_itself",
        ),
        pytest.param({"model": "m"}, None, id="not_streamed"),
        pytest.param({"model": "m", "stream": False}, None, id="stream_false"),
        pytest.param({"model": "m", "stream": "yes"}, None, id="stream_not_a_bool"),
        pytest.param(
            {"model": "m", "stream": True, "stream_options": "on"}, None, id="options_not_a_map"
        ),
        pytest.param(["stream", True], None, id="not_an_object"),
    ],
)
def test_ask_for_usage(body: Any, added: dict[str, Any] | None) -> None:
    asked = ask_for_usage(orjson.dumps(body))
    if added is None:
        assert asked is None
    else:
        assert asked is not None
        assert orjson.loads(asked) == {**body, "stream_options": added}


def test_a_body_that_is_not_json_is_left_alone() -> None:
    assert ask_for_usage(b'{"stream": true, ') is None


BASE = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
USAGE = {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}


def _streams(contents: list[str], crlf: bool) -> tuple[bytes, bytes]:
    """(the stream without include_usage, the same stream with it), as OpenAI frames them."""
    end = b"\r\n\r\n" if crlf else b"\n\n"
    chunks = [
        {**BASE, "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
        for text in contents
    ]
    plain = [b"data: " + orjson.dumps(c) + end for c in chunks]
    extra = [b"data: " + orjson.dumps({**c, "usage": None}) + end for c in chunks]
    extra.append(b"data: " + orjson.dumps({**BASE, "choices": [], "usage": USAGE}) + end)
    done = b"data: [DONE]" + end
    return b"".join([*plain, done]), b"".join([*extra, done])


@given(
    contents=st.lists(st.text(max_size=20), max_size=6),
    cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=12),
    crlf=st.booleans(),
)
def test_the_filter_gives_back_the_stream_without_usage_however_it_is_cut(
    contents: list[str], cuts: list[int], crlf: bool
) -> None:
    contents = [*contents, '{"usage":null}', '", "usage": null, "']  # look-alikes in content
    plain, extra = _streams(contents, crlf)
    bounds = sorted({0, len(extra), *(c for c in cuts if c < len(extra))})
    usage = UsageChunkFilter()
    out = b"".join(usage.feed(extra[a:b]) for a, b in itertools.pairwise(bounds))
    assert out + usage.flush() == plain
    assert usage.dropped == 1
    assert usage.edited == len(contents)


@pytest.mark.parametrize(
    "event",
    [
        pytest.param(b'data: {"choices":[],"usage":{"x":1}', id="unended_event_kept_for_flush"),
        pytest.param(b'event: x\ndata: {"usage":null}\n\n', id="named_event_untouched"),
        pytest.param(b'data: {"usage":null,}\n\n', id="not_json_untouched"),
        pytest.param(b'data: {"choices":[{}],"usage":{"x":1}}\n\n', id="usage_beside_choices"),
        pytest.param(b'data: ["usage"]\n\n', id="not_an_object"),
        pytest.param(b'data: {"error":{"message":"usage"}}\n\n', id="an_error_event"),
    ],
)
def test_events_of_other_shapes_pass_unchanged(event: bytes) -> None:
    usage = UsageChunkFilter()
    assert usage.feed(event) + usage.flush() == event
    assert (usage.dropped, usage.edited) == (0, 0)


@pytest.fixture
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo's ``created`` fixed, so two answers to one request are the same bytes."""
    monkeypatch.setattr(demo_backend, "time", types.SimpleNamespace(time=lambda: 1_800_000_000))


async def _raw_stream(
    aiohttp_server: Any, tmp_path: Path, request_usage: bool, options: dict[str, Any] | None
) -> tuple[bytes, dict[str, Any]]:
    """The bytes the SDK read for one streamed request through a proxy with ``request_usage``
    on or off (a fresh demo backend each: same request, same answer), and the row."""
    demo = await aiohttp_server(make_demo_backend(SAMPLE_TASKS_PATH))
    results = tmp_path / f"rows-{request_usage}.jsonl"
    extra: dict[str, Any] = {} if options is None else {"stream_options": options}
    async with (
        live_proxy(
            str(demo.make_url("/v1")),
            SAMPLE_TASKS_PATH,
            results,
            grading={"request_usage": request_usage},
        ) as live,
        openai.AsyncOpenAI(base_url=f"{live.base}/v1", api_key="sk-x", max_retries=0) as client,
    ):
        async with client.chat.completions.with_streaming_response.create(
            model="gradeproxy-demo", messages=PROMPT, stream=True,
            extra_headers={"X-Grade-Task": DEMO_TASK.id, "Accept-Encoding": "gzip"}, **extra,
        ) as response:  # fmt: skip
            raw = b"".join([part async for part in response.iter_bytes()])
        await live.drained()
        [row] = read_rows(results)
        row["_tokens"] = live.metric("gradeproxy_tokens_total", type="output", task=DEMO_TASK.id)
    return raw, row


@pytest.mark.usefixtures("fixed_clock")
@pytest.mark.parametrize(
    ("options", "client_sees_usage"),
    [
        pytest.param(None, False, id="client_did_not_ask"),
        pytest.param({}, False, id="empty_stream_options"),
        pytest.param({"include_usage": False}, False, id="client_said_no"),
        pytest.param({"include_usage": True}, True, id="client_asked_itself"),
    ],
)
async def test_the_client_reads_the_same_bytes_and_the_row_gets_the_usage(
    aiohttp_server: Any, tmp_path: Path, options: dict[str, Any] | None, client_sees_usage: bool
) -> None:
    off, row_off = await _raw_stream(aiohttp_server, tmp_path, False, options)
    on, row_on = await _raw_stream(aiohttp_server, tmp_path, True, options)
    assert on == off  # byte for byte what the client would have read with the setting off
    assert (b'"usage"' in on) is client_sees_usage
    assert b"data: [DONE]" in on
    assert row_on["usage"] is not None
    assert row_on["usage"]["output_tokens"] > 0
    assert row_on["_tokens"] == row_on["usage"]["output_tokens"]
    assert row_on["answer"] == row_off["answer"]
    if not client_sees_usage:  # off, nobody asked: the row had no usage to read
        assert row_off["usage"] is None
        assert row_off["_tokens"] == 0


async def test_the_sdk_sees_no_usage_it_did_not_ask_for(
    aiohttp_server: Any, tmp_path: Path
) -> None:
    demo = await aiohttp_server(make_demo_backend(SAMPLE_TASKS_PATH))
    results = tmp_path / "rows.jsonl"
    async with (
        live_proxy(
            str(demo.make_url("/v1")), SAMPLE_TASKS_PATH, results, grading={"request_usage": True}
        ) as live,
        openai.AsyncOpenAI(base_url=f"{live.base}/v1", api_key="sk-x", max_retries=0) as client,
    ):
        chunks = await client.chat.completions.create(
            model="gradeproxy-demo", messages=PROMPT, stream=True,
            extra_headers={"X-Grade-Task": DEMO_TASK.id},
        )  # fmt: skip
        seen = [chunk async for chunk in chunks]
        await live.drained()
    assert seen
    assert all(chunk.choices for chunk in seen)
    assert all(chunk.usage is None for chunk in seen)
    assert "usage" not in seen[0].model_dump(exclude_unset=True)  # not even a null
    [row] = read_rows(results)
    assert row["usage"]["input_tokens"] > 0
