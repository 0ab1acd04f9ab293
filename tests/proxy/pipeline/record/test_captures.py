"""Capture rows (``results.capture_untagged``): untagged requests on the graded routes, sent
by the official ``openai`` SDK through a real loopback proxy, become ``kind: "capture"`` rows,
sampled by the grading sampling key; the client's objects are those of a direct call."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import openai
import pytest
from aiohttp.test_utils import TestClient, TestServer

from grader.capture import CAPTURE_KIND, prompt_hash, tools_hash
from grader.json import dumps
from proxy.pipeline.admit import sampled
from proxy.state import QUEUE
from tests.support import responses_wire as rw
from tests.support.backend import JSON, SSE, Reply, ScriptedBackend, awkward_cuts, wire
from tests.support.metrics import metric_value, scraped
from tests.support.postgres import PostgresServer
from tests.support.proxy import ProxyFactory, read_rows, rows_of
from tests.support.tasks import WEATHER_REQUEST

CHAT_REQUEST: dict[str, Any] = WEATHER_REQUEST
RESPONSES_REQUEST: dict[str, Any] = {
    "model": rw.MODEL,
    "input": [{"role": "user", "content": "Weather in Zürich, in celsius?"}],
    "tools": [rw.WEATHER_TOOL],
}
ZURICH = {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}


def reply(route: str, stream: bool) -> Reply:
    if route == "responses":
        case = rw.CASES["single_tool"]
        body = rw.stream(case) if stream else rw.body(case)
    else:
        body = wire("openai_single_tool.sse" if stream else "openai_single_tool.json")
    return Reply(body=body, content_type=SSE if stream else JSON, split_at=awkward_cuts(body))


async def sdk_call(
    base_url: str, route: str, stream: bool, headers: dict[str, str] | None = None
) -> Any:
    """What the SDK gives its caller: the objects, dumped."""
    async with openai.AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0) as client:
        extra = headers or {}
        if route == "responses":
            if stream:
                events = await client.responses.create(
                    stream=True, extra_headers=extra, **RESPONSES_REQUEST
                )
                return [event.model_dump() async for event in events]
            return (
                await client.responses.create(extra_headers=extra, **RESPONSES_REQUEST)
            ).model_dump()
        if stream:
            chunks = await client.chat.completions.create(
                stream=True, extra_headers=extra, **CHAT_REQUEST
            )
            return [chunk.model_dump() async for chunk in chunks]
        return (
            await client.chat.completions.create(extra_headers=extra, **CHAT_REQUEST)
        ).model_dump()


async def captured(client: TestClient[Any, Any], path: Path) -> list[dict[str, Any]]:
    """Every row once the grade queue and the capture writer are idle."""
    await rows_of(client, path)
    captures = client.app[QUEUE].captures
    if captures is not None:
        await captures.idle()
    return await asyncio.to_thread(read_rows, path)


def sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.e2e
@pytest.mark.parametrize("mode", ["keep", "hash", "drop"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("route", ["chat_completions", "responses"])
async def test_sampled_untagged_request_writes_one_capture_row(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    backend_server: TestServer,
    results_path: Path,
    route: str,
    stream: bool,
    mode: str,
) -> None:
    backend.replies.extend([reply(route, stream)] * 2)
    client = await make_proxy(results={"capture_untagged": 1.0, "answer": mode})
    direct = await sdk_call(str(backend_server.make_url("/v1")), route, stream)
    proxied = await sdk_call(str(client.make_url("/v1")), route, stream)
    assert proxied == direct  # the client's objects are a direct call's
    assert backend.seen[1].body == backend.seen[0].body
    [row] = await captured(client, results_path)
    request = RESPONSES_REQUEST if route == "responses" else CHAT_REQUEST
    prompt = request["input" if route == "responses" else "messages"]
    assert (row["kind"], row["route"], row["stream"], row["model"]) == (
        CAPTURE_KIND,
        route,
        stream,
        rw.MODEL,
    )
    assert row["calls"] == [ZURICH]
    assert row["tools"] == request["tools"]
    assert row["prompt_hash"] == prompt_hash(prompt)
    assert row["tools_hash"] == tools_hash(request["tools"])
    assert ("messages" in row, row.get("messages")) == (
        (True, prompt) if mode == "keep" else (False, None)
    )
    if mode == "keep":
        assert '"get_weather"' in row["answer"]
        assert "Zürich" in row["answer"]
    elif mode == "hash":
        assert row["answer"].startswith("sha256:")
        assert len(row["answer"]) == 71
        assert "in celsius?" not in dumps(row).decode()  # the prompt is not stored
    else:
        assert "answer" not in row
        assert "in celsius?" not in dumps(row).decode()  # the prompt is not stored
    assert await scraped(client, "gradeproxy_capture_rows_total") == 1
    assert await scraped(client, "gradeproxy_grading_skipped_total", reason="no_task_header") == 1


async def test_hash_mode_hashes_the_answer_a_keep_row_stores(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path, tmp_path: Path
) -> None:
    """The hash is of exactly the text ``keep`` stores: rows of both join on it."""
    backend.replies.extend([reply("chat_completions", False)] * 2)
    keep = await make_proxy(results={"capture_untagged": 1.0, "answer": "keep"})
    await sdk_call(str(keep.make_url("/v1")), "chat_completions", False)
    [kept] = await captured(keep, results_path)
    await asyncio.to_thread(results_path.unlink)
    hashed = await make_proxy(results={"capture_untagged": 1.0, "answer": "hash"})
    await sdk_call(str(hashed.make_url("/v1")), "chat_completions", False)
    [row] = await captured(hashed, results_path)
    assert row["answer"] == sha(kept["answer"])
    assert row["prompt_hash"] == kept["prompt_hash"]


def keys_sampled(rate: float) -> tuple[str, str]:
    """A sampling key sampled in at ``rate`` and one sampled out (the proxy's own hash)."""
    keys = [f"user-{n}" for n in range(200)]
    inside = next(k for k in keys if sampled(k, rate))
    outside = next(k for k in keys if not sampled(k, rate))
    return inside, outside


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_only_sampled_keys_are_captured(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    results_path: Path,
    stream: bool,
) -> None:
    inside, outside = keys_sampled(0.5)
    backend.replies.extend([reply("chat_completions", stream)] * 4)
    client = await make_proxy(
        results={"capture_untagged": 0.5}, grading={"sampling_header": "X-User"}
    )
    url = str(client.make_url("/v1"))
    for key in (inside, outside, inside, outside):
        await sdk_call(url, "chat_completions", stream, {"X-User": key})
    rows = await captured(client, results_path)
    assert len(rows) == 2
    assert {row["kind"] for row in rows} == {CAPTURE_KIND}
    assert await scraped(client, "gradeproxy_capture_rows_total") == 2
    assert await scraped(client, "gradeproxy_grading_skipped_total", reason="no_task_header") == 4
    assert "X-User" in backend.seen[0].headers  # forwarded as before


@pytest.mark.parametrize(
    ("settings", "headers", "kinds"),
    [
        pytest.param({}, {}, [], id="off_by_default_untagged_writes_nothing"),
        pytest.param({"capture_untagged": 0.0}, {}, [], id="rate_zero_untagged_writes_nothing"),
        pytest.param(
            {"capture_untagged": 1.0},
            {"X-Grade-Task": "weather.single"},
            ["answer"],
            id="tagged_request_is_graded_not_captured",
        ),
        pytest.param(
            {"capture_untagged": 1.0},
            {"X-Grade-Task": "no.such.task"},
            [],
            id="unknown_task_is_not_captured",
        ),
    ],
)
async def test_what_is_not_captured(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    results_path: Path,
    settings: dict[str, Any],
    headers: dict[str, str],
    kinds: list[str],
) -> None:
    backend.replies.append(reply("chat_completions", False))
    client = await make_proxy(results=settings)
    await sdk_call(str(client.make_url("/v1")), "chat_completions", False, headers)
    rows = await captured(client, results_path)
    assert [row["kind"] for row in rows] == kinds
    assert await scraped(client, "gradeproxy_capture_rows_total") == 0


@pytest.mark.parametrize(
    ("body", "content_type", "status", "reason"),
    [
        pytest.param(b"not json at all", JSON, 200, "unreadable", id="body_not_json"),
        pytest.param(b'{"choices": "x"}', JSON, 200, "unreadable", id="no_choices"),
        pytest.param(b"data: {\xff\xfe\n\n", SSE, 200, "unreadable", id="stream_not_utf8"),
        pytest.param(b'{"error": {"message": "x"}}', JSON, 500, None, id="upstream_error"),
    ],
)
async def test_odd_responses_write_nothing_and_the_client_gets_them_as_sent(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    results_path: Path,
    body: bytes,
    content_type: str,
    status: int,
    reason: str | None,
) -> None:
    backend.replies.append(Reply(body=body, content_type=content_type, status=status))
    client = await make_proxy(results={"capture_untagged": 1.0})
    response = await client.post(
        "/v1/chat/completions", data=dumps({**CHAT_REQUEST, "messages": [{"role": 1}]})
    )
    assert (response.status, await response.read()) == (status, body)
    assert await captured(client, results_path) == []
    assert await scraped(client, "gradeproxy_capture_rows_total") == 0
    if reason is not None:
        assert await scraped(client, "gradeproxy_capture_skipped_total", reason=reason) == 1
    else:
        assert await scraped(client, "gradeproxy_capture_skipped_total") == 0


async def test_a_request_body_that_is_not_json_is_captured_with_what_could_be_read(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path
) -> None:
    backend.replies.append(reply("chat_completions", False))
    client = await make_proxy(results={"capture_untagged": 1.0})
    response = await client.post("/v1/chat/completions", data=b"\x00 not a request")
    assert response.status == 200
    [row] = await captured(client, results_path)
    assert (row["calls"], row["tools"], row["prompt_hash"]) == ([ZURICH], None, prompt_hash(None))


async def test_graded_rows_store_the_answer_hash_with_answer_hash(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path
) -> None:
    """``results.answer: hash`` reaches graded rows too: the digest of the text ``keep`` stores."""
    backend.replies.append(reply("chat_completions", False))
    client = await make_proxy(results={"answer": "hash"})
    await sdk_call(
        str(client.make_url("/v1")), "chat_completions", False, {"X-Grade-Task": "weather.single"}
    )
    [row] = await rows_of(client, results_path)
    text = dumps(
        {
            "tool_calls": [
                {
                    "id": "call_qYmeTNXmU9FH9xPmYYuz0REm",
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "arguments": '{"city":"Zürich","unit":"celsius"}',
                    },
                }
            ]
        }
    ).decode()
    assert (row["kind"], row["result"], row["answer"]) == ("answer", "pass", sha(text))


async def test_capture_rows_reach_the_rows_database_sink(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    postgres: PostgresServer,
    pg_password: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gradeproxy.cli import main
    from proxy.rowsdb import parse_url
    from proxy.rowsdb import read_rows as db_rows

    url = postgres.database()
    assert await asyncio.to_thread(main, ["db", "migrate", url]) == 0
    monkeypatch.setenv("CAPTURE_TEST_PW", pg_password)
    backend.replies.extend([reply("responses", True), reply("chat_completions", False)])
    client = await make_proxy(
        results={"capture_untagged": 1.0, "sink": url, "sink_password_env": "CAPTURE_TEST_PW"}
    )
    await sdk_call(str(client.make_url("/v1")), "responses", True)
    await sdk_call(str(client.make_url("/v1")), "chat_completions", False)
    await captured(client, Path("/nonexistent"))
    await client.close()  # the sink's close writes what it holds
    rows = [row for _, row in await asyncio.to_thread(lambda: list(db_rows(parse_url(url))))]
    assert [(r["kind"], r["route"], r["calls"]) for r in rows] == [
        ("capture", "responses", [ZURICH]),
        ("capture", "chat_completions", [ZURICH]),
    ]


@pytest.mark.parametrize(
    ("read_all", "rows_written"),
    [
        pytest.param(True, 1, id="answered_then_left_is_captured"),
        pytest.param(False, 0, id="left_mid_answer_is_not"),
    ],
)
async def test_a_client_that_leaves_is_captured_only_when_it_had_the_whole_answer(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    results_path: Path,
    read_all: bool,
    rows_written: int,
) -> None:
    """The openai SDK closes at ``[DONE]``; an upstream may end its body later."""
    stream = wire("openai_single_tool.sse")
    events = [part + b"\n\n" for part in stream.split(b"\n\n") if part.strip()]
    head = b"".join(events if read_all else events[:2])
    gate = asyncio.Event()
    backend.replies.append(
        Reply(
            body=head + (b"" if read_all else b"".join(events[2:])),
            content_type=SSE,
            split_at=[] if read_all else [len(head)],
            gate=None if read_all else gate,
            tail_pause_s=0.4 if read_all else 0.0,  # the upstream lingers after [DONE]
        )
    )
    client = await make_proxy(results={"capture_untagged": 1.0})
    response = await client.post(
        "/v1/chat/completions", data=dumps({**CHAT_REQUEST, "stream": True})
    )
    for _ in range(len(events) if read_all else 2):
        await response.content.readuntil(b"\n\n")
    response.close()
    await asyncio.sleep(0.05)
    gate.set()
    for _ in range(100):  # the handler settles once the relay notices the client left
        text = await (await client.get("/metrics")).text()
        if "no_task_header" in text and metric_value(
            text, "gradeproxy_grading_skipped_total", reason="no_task_header"
        ):
            break
        await asyncio.sleep(0.02)
    rows = await captured(client, results_path)
    assert [(r["kind"], r["calls"]) for r in rows] == [(CAPTURE_KIND, [ZURICH])] * rows_written
    assert await scraped(client, "gradeproxy_capture_rows_total") == rows_written


@pytest.mark.parametrize(
    "inline_max_bytes", [0, 16384], ids=["built_on_the_writer_thread", "built_on_the_loop"]
)
@pytest.mark.parametrize(
    ("body", "rows_written", "unreadable"),
    [
        pytest.param(None, 1, 0, id="an_answer"),
        pytest.param(b"not json at all", 0, 1, id="not_json"),
    ],
)
async def test_capture_rows_are_the_same_wherever_they_are_built(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    results_path: Path,
    inline_max_bytes: int,
    body: bytes | None,
    rows_written: int,
    unreadable: int,
) -> None:
    backend.replies.append(
        reply("chat_completions", True) if body is None else Reply(body=body, content_type=JSON)
    )
    client = await make_proxy(
        results={"capture_untagged": 1.0}, grading={"inline_max_bytes": inline_max_bytes}
    )
    response = await client.post(
        "/v1/chat/completions", data=dumps({**CHAT_REQUEST, "stream": body is None})
    )
    assert response.status == 200
    await response.read()
    rows = await captured(client, results_path)
    assert [r["calls"] for r in rows] == [[ZURICH]] * rows_written
    assert await scraped(client, "gradeproxy_capture_rows_total") == rows_written
    assert await scraped(client, "gradeproxy_capture_skipped_total", reason="unreadable") == (
        unreadable
    )


async def test_captures_waiting_for_their_batch_are_written_at_shutdown(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path
) -> None:
    """A capture waits up to ``grading.batch_window_s`` for others; stopping never drops it."""
    backend.replies.extend([reply("chat_completions", False)] * 3)
    client = await make_proxy(results={"capture_untagged": 1.0}, grading={"batch_window_s": 1.0})
    for _ in range(3):
        response = await client.post("/v1/chat/completions", data=dumps(CHAT_REQUEST))
        await response.read()
    assert await asyncio.to_thread(read_rows, results_path) == []  # still in its window
    await client.close()
    rows = await asyncio.to_thread(read_rows, results_path)
    assert [row["kind"] for row in rows] == [CAPTURE_KIND] * 3
