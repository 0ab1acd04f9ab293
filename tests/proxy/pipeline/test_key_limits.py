"""Per-key limits (``auth.keys[].rpm``, ``auth.keys[].tpm``), per process: the windows
(proxy/pipeline/limits.py) on a clock of the test's, the tokens a response reported
(proxy/pipeline/tokens.py), and the proxy on real loopback sockets: under many concurrent
clients no request over ``rpm`` passes, and the request after the one that spent the ``tpm``
budget is refused, each a 429 in OpenAI's shape with ``Retry-After``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import openai
import orjson
import pytest
from aiohttp.test_utils import TestServer

from proxy.demo.answers import SAMPLE_TASKS_PATH, load_demo_tasks
from proxy.demo.backend import make_demo_backend
from proxy.pipeline.guard import KEY_HEADER
from proxy.pipeline.limits import KeyLimits, Limiters, Refusal
from proxy.pipeline.tokens import reported_tokens
from tests.support.live import Live, live_proxy

DEMO_TASK = {t.id: t for t in load_demo_tasks(SAMPLE_TASKS_PATH)}["tickets.duration_format.01"]
PROMPT: Any = [{"role": "user", "content": DEMO_TASK.prompt}]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# Steps: ("admit", expected refusal or None) | ("spend", tokens) | ("wait", seconds)
Step = tuple[str, Any]


@pytest.mark.parametrize(
    ("rpm", "tpm", "steps"),
    [
        pytest.param(
            2, None,
            [("admit", None), ("admit", None), ("admit", Refusal("rpm", 60)),
             ("wait", 59.5), ("admit", Refusal("rpm", 1)), ("wait", 0.5), ("admit", None),
             ("admit", None), ("admit", Refusal("rpm", 60))],
            id="rpm_a_sliding_minute",
        ),
        pytest.param(
            3, None,
            [("admit", None), ("wait", 30), ("admit", None), ("admit", None),
             ("admit", Refusal("rpm", 30)), ("wait", 30), ("admit", None),
             ("admit", Refusal("rpm", 30))],
            id="rpm_room_when_the_oldest_leaves",
        ),
        pytest.param(
            None, 100,
            [("admit", None), ("spend", 99), ("admit", None), ("spend", 1),
             ("admit", Refusal("tpm", 60)), ("wait", 60), ("admit", None)],
            id="tpm_the_request_after_the_spending_one_is_refused",
        ),
        pytest.param(
            None, 100,
            [("admit", None), ("spend", 500), ("admit", Refusal("tpm", 60)),
             ("admit", Refusal("tpm", 60))],
            id="tpm_one_response_over_the_whole_budget",
        ),
        pytest.param(
            None, 100,
            [("spend", 60), ("wait", 20), ("spend", 50), ("admit", Refusal("tpm", 40)),
             ("wait", 40), ("admit", None), ("spend", 60), ("admit", Refusal("tpm", 20))],
            id="tpm_room_when_enough_spends_leave",
        ),
        pytest.param(
            None, 10,
            [("spend", 0), ("spend", -5), ("admit", None)],
            id="tpm_nothing_reported_spends_nothing",
        ),
        pytest.param(
            1, 100,
            [("admit", None), ("spend", 100), ("admit", Refusal("tpm", 60)), ("wait", 60),
             ("admit", None), ("admit", Refusal("rpm", 60))],
            id="both_limits_a_tpm_refusal_is_not_counted_as_a_request",
        ),
    ],
)  # fmt: skip
def test_the_windows(rpm: int | None, tpm: int | None, steps: list[Step]) -> None:
    clock = Clock()
    limits = KeyLimits(rpm, tpm, clock)
    for number, (step, value) in enumerate(steps):
        if step == "admit":
            assert limits.admit() == value, f"step {number}"
        elif step == "spend":
            limits.spend(value)
        else:
            clock.now += value


def test_a_reload_keeps_the_windows_of_the_ids_that_stay() -> None:
    clock = Clock()
    limiters = Limiters(clock)
    limiters.configure([("a", 1, None), ("b", 5, None), ("c", None, None)])
    assert limiters.get("c") is None
    assert limiters.get(None) is None
    a = limiters.get("a")
    assert a is not None
    assert a.admit() is None
    assert a.admit() is not None
    limiters.configure([("a", 2, None)])
    assert limiters.get("a") is a
    assert a.rpm == 2
    assert a.admit() is None
    assert limiters.get("b") is None


def _sse(*payloads: Any) -> list[bytes]:
    body = b"".join(b"data: " + orjson.dumps(p) + b"\n\n" for p in payloads)
    return [body[i : i + 7] for i in range(0, len(body), 7)] + [b"data: [DONE]\n\n"]


CHUNK = {"id": "c1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}}]}


@pytest.mark.parametrize(
    ("parts", "stream", "tokens"),
    [
        pytest.param(
            [orjson.dumps({"usage": {"prompt_tokens": 80, "completion_tokens": 19}})], False, 99,
            id="chat_body",
        ),
        pytest.param(
            [orjson.dumps({"object": "response", "usage": {"input_tokens": 7,
                                                           "output_tokens": 5}})],
            False, 12, id="responses_body",
        ),
        pytest.param(
            [orjson.dumps({"object": "list", "usage": {"prompt_tokens": 8, "total_tokens": 8}})],
            False, 8, id="embeddings_body",
        ),
        pytest.param(
            _sse({**CHUNK, "usage": None},
                 {**CHUNK, "choices": [], "usage": {"prompt_tokens": 30, "completion_tokens": 4}}),
            True, 34, id="chat_stream_include_usage_cut_anywhere",
        ),
        pytest.param(
            [b'event: response.created\ndata: {"type":"response.created","response":'
             b'{"usage":null}}\n\nevent: response.completed\r\ndata: {"type":'
             b'"response.completed","response":{"usage":{"input_tokens":11,'
             b'"output_tokens":3}}}\r\n\r\n'],
            True, 14, id="responses_stream_completed_crlf",
        ),
        pytest.param(_sse(CHUNK, CHUNK), True, 0, id="chat_stream_without_usage"),
        pytest.param([b'{"usage": '], False, 0, id="truncated_body"),
        pytest.param([b'{"error": {"message": "x"}}'], False, 0, id="error_body"),
        pytest.param([], False, 0, id="nothing_captured"),
    ],
)  # fmt: skip
def test_reported_tokens(parts: list[bytes], stream: bool, tokens: int) -> None:
    assert reported_tokens(parts, stream) == tokens


@pytest.fixture
async def demo(aiohttp_server: Any) -> TestServer:
    server: TestServer = await aiohttp_server(make_demo_backend(SAMPLE_TASKS_PATH))
    return server


def _auth(monkeypatch: pytest.MonkeyPatch, **limits: int) -> dict[str, Any]:
    monkeypatch.setenv("LIMITED_KEY", "sk-limited")
    monkeypatch.setenv("FREE_KEY", "sk-free")
    return {
        "keys": [
            {"id": "limited", "secret_env": "LIMITED_KEY", **limits},
            {"id": "free", "secret_env": "FREE_KEY"},
        ]
    }


@pytest.fixture
async def rpm_proxy(demo: TestServer, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Live]:
    async with live_proxy(
        str(demo.make_url("/v1")), None, None, auth=_auth(monkeypatch, rpm=RPM)
    ) as live:
        yield live


RPM = 25
CLIENTS = 120


async def _one_client(live: Live, secret: str, start: asyncio.Event) -> tuple[int, Any, str]:
    """A client of its own (its own connection) that waits for the start, then asks once."""
    body = {"model": "gradeproxy-demo", "messages": PROMPT}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as session:
        await start.wait()
        async with session.post(
            live.base + "/v1/chat/completions", json=body, headers={KEY_HEADER: secret}
        ) as response:
            return response.status, await response.json(), response.headers.get("Retry-After", "")


async def test_no_request_over_the_rpm_limit_passes_under_concurrency(
    rpm_proxy: Live, demo: TestServer
) -> None:
    start = asyncio.Event()
    clients = [asyncio.create_task(_one_client(rpm_proxy, "sk-limited", start))
               for _ in range(CLIENTS)]  # fmt: skip
    await asyncio.sleep(0.2)  # every client has its session; they all ask at once
    start.set()
    answers = await asyncio.gather(*clients)
    statuses = [status for status, _, _ in answers]
    assert statuses.count(200) == RPM
    assert statuses.count(429) == CLIENTS - RPM
    for status, body, retry_after in answers:
        if status == 429:
            assert body["error"]["code"] == "rate_limit_exceeded"
            assert body["error"]["type"] == "requests"
            assert set(body["error"]) == {"message", "type", "param", "code"}
            assert 1 <= int(retry_after) <= 60
    assert rpm_proxy.metric("gradeproxy_rate_limited_total", key="limited", limit="rpm") == (
        CLIENTS - RPM
    )
    assert rpm_proxy.metric("gradeproxy_requests_total", key="limited") == RPM
    # Another key has a window of its own (none at all: it is not limited).
    more = await asyncio.gather(*(_one_client(rpm_proxy, "sk-free", start) for _ in range(30)))
    assert {status for status, _, _ in more} == {200}


@pytest.mark.parametrize(
    ("api", "stream"),
    [
        pytest.param("chat", False, id="chat"),
        pytest.param("chat", True, id="chat_stream_include_usage"),
        pytest.param("responses", False, id="responses"),
        pytest.param("responses", True, id="responses_stream"),
    ],
)
async def test_the_request_after_the_one_that_spent_the_budget_is_refused(
    demo: TestServer, monkeypatch: pytest.MonkeyPatch, api: str, stream: bool
) -> None:
    async with (
        live_proxy(str(demo.make_url("/v1")), None, None, auth=_auth(monkeypatch, tpm=60)) as live,
        openai.AsyncOpenAI(
            base_url=f"{live.base}/v1", api_key="sk-limited", max_retries=0
        ) as client,
    ):
        spent = 0
        refused: openai.RateLimitError | None = None
        for _ in range(20):  # far more than 60 tokens' worth: the demo reports > 10 each
            try:
                spent += await _tokens_of(client, api, stream)
            except openai.RateLimitError as error:
                refused = error
                break
        assert refused is not None
        assert spent >= 60  # refused only once the budget was spent ...
        assert spent - await _last_spend(client, api, stream, live) < 60  # ... by the last one
        assert refused.status_code == 429
        assert refused.body is not None
        assert refused.code == "rate_limit_exceeded"
        assert refused.type == "tokens"
        assert 1 <= int(refused.response.headers["Retry-After"]) <= 60
        assert live.metric("gradeproxy_rate_limited_total", key="limited", limit="tpm") >= 1
        async with openai.AsyncOpenAI(
            base_url=f"{live.base}/v1", api_key="sk-free", max_retries=0
        ) as free:
            assert await _tokens_of(free, api, stream) > 0  # another key is not refused


async def _last_spend(client: openai.AsyncOpenAI, api: str, stream: bool, live: Live) -> int:
    """What one answer spends (the demo answers the same prompt alike), asked with the free
    key: the limited one is refused now."""
    async with openai.AsyncOpenAI(
        base_url=f"{live.base}/v1", api_key="sk-free", max_retries=0
    ) as free:
        return await _tokens_of(free, api, stream)


async def _tokens_of(client: openai.AsyncOpenAI, api: str, stream: bool) -> int:
    """Ask once; the input plus output tokens the answer reported."""
    if api == "responses":
        if stream:
            events = await client.responses.create(
                model="gradeproxy-demo", input=PROMPT, stream=True
            )
            [done] = [e async for e in events if e.type == "response.completed"]
            usage: Any = done.response.usage
        else:
            usage = (await client.responses.create(model="gradeproxy-demo", input=PROMPT)).usage
        return int(usage.input_tokens + usage.output_tokens)
    if stream:
        chunks = await client.chat.completions.create(
            model="gradeproxy-demo", messages=PROMPT, stream=True,
            stream_options={"include_usage": True},
        )  # fmt: skip
        [usage] = [c.usage async for c in chunks if c.usage is not None]
    else:
        usage = (
            await client.chat.completions.create(model="gradeproxy-demo", messages=PROMPT)
        ).usage
    return int(usage.prompt_tokens + usage.completion_tokens)


async def test_a_stream_that_reports_no_usage_spends_nothing(
    demo: TestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with (
        live_proxy(str(demo.make_url("/v1")), None, None, auth=_auth(monkeypatch, tpm=1)) as live,
        openai.AsyncOpenAI(
            base_url=f"{live.base}/v1", api_key="sk-limited", max_retries=0
        ) as client,
    ):
        for _ in range(3):  # without include_usage the stream says nothing of its tokens
            chunks = await client.chat.completions.create(
                model="gradeproxy-demo", messages=PROMPT, stream=True
            )
            [_ async for _ in chunks]
        # A body that reports them does spend: the request after it is refused.
        await client.chat.completions.create(model="gradeproxy-demo", messages=PROMPT)
        with pytest.raises(openai.RateLimitError):
            await client.chat.completions.create(model="gradeproxy-demo", messages=PROMPT)


async def test_with_request_usage_a_stream_that_did_not_ask_spends_its_tokens(
    demo: TestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with (
        live_proxy(
            str(demo.make_url("/v1")),
            None,
            None,
            auth=_auth(monkeypatch, tpm=1),
            grading={"request_usage": True},
        ) as live,
        openai.AsyncOpenAI(
            base_url=f"{live.base}/v1", api_key="sk-limited", max_retries=0
        ) as client,
    ):
        chunks = await client.chat.completions.create(
            model="gradeproxy-demo", messages=PROMPT, stream=True
        )
        assert all([chunk.usage is None async for chunk in chunks])  # none reached the client
        with pytest.raises(openai.RateLimitError):
            await client.chat.completions.create(
                model="gradeproxy-demo", messages=PROMPT, stream=True
            )
