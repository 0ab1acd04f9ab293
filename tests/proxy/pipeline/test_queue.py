"""The grading pipeline cannot die: hostile bytes reach rows, logs and labels escaped, a job that
raises is counted and the worker goes on, a worker that ends is restarted, and a queue that stops
moving is reported unhealthy.

Before this, a byte 0x80-0xFF in ``X-Grade-Run`` or a lone surrogate from an upstream killed a
worker in the row serialiser; two such requests ended grading silently.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from proxy.pipeline.record.results import ResultWriter
from proxy.state import QUEUE
from tests.support.backend import Reply, ScriptedBackend, wire
from tests.support.metrics import metric_value
from tests.support.proxy import ProxyFactory, rows_of

Client = TestClient[web.Request, web.Application]
BIG = b"12345678901234567890123"  # 23 digits: the capture parses with the exact stdlib path


async def raw_post(client: Client, headers: list[tuple[bytes, bytes]], body: bytes) -> bytes:
    """POST with header bytes as a hostile client sends them (obs-text included)."""
    assert client.port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    head = [b"POST /v1/chat/completions HTTP/1.1", b"Host: x", b"Connection: close"]
    head += [name + b": " + value for name, value in headers]
    head += [b"Content-Type: application/json", b"Content-Length: " + str(len(body)).encode()]
    writer.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
    await writer.drain()
    reply = await reader.read()
    writer.close()
    return reply


def with_model(model: bytes) -> bytes:
    """The recorded OpenAI body with another model string and a 23-digit usage number."""
    body = wire("openai_single_tool.json")
    body = body.replace(b'"gpt-4.1-mini-2025-04-14"', b'"' + model + b'"')
    return body.replace(b'"total_tokens": 99', b'"total_tokens": ' + BIG)


def with_tool_name(name: bytes) -> bytes:
    """The recorded body with another tool-call name and a 23-digit usage number."""
    body = wire("openai_single_tool.json")
    body = body.replace(b'"total_tokens": 99', b'"total_tokens": ' + BIG)
    return body.replace(b'"name": "get_weather"', b'"name": "' + name + b'"')


def with_argument(value: bytes) -> bytes:
    body = wire("openai_single_tool.json")
    return body.replace(b'"total_tokens": 99', b'"total_tokens": ' + BIG).replace(b"celsius", value)


# (id, request headers, upstream body, (row field path, value expected in the row))
Field = Callable[[dict[str, Any]], Any]
HOSTILE: list[tuple[str, list[tuple[bytes, bytes]], bytes, Field, Any]] = [
    ("run_header_obs_text", [(b"X-Grade-Run", b"run-\xff")], b"", lambda r: r["run"], "run-\udcff"),
    (
        "meta_header_obs_text",
        [(b"X-Grade-Meta-Team", b"caf\xe9")],
        b"",
        lambda r: r["meta"]["team"],
        "caf\udce9",
    ),
    (
        "upstream_model_lone_surrogate",
        [],
        with_model(b"gpt-\\ud800"),
        lambda r: r["model"],
        "gpt-\ud800",
    ),
    (
        "upstream_argument_lone_surrogate",
        [],
        with_argument(b"cel\\udfffsius"),
        lambda r: r["reason_code"],
        "value_mismatch",
    ),
    (
        # Red team round 3: counted as a grader error with no row (the name reached orjson).
        "upstream_tool_name_lone_surrogate",
        [],
        with_tool_name(b"get_\\ud800weather"),
        lambda r: (r["result"], r["reason_code"], r["reason"]),
        (
            "fail",
            "name_mismatch",
            'name: name mismatch (expected "get_weather", got "get_\\ud800weather")',
        ),
    ),
]


@pytest.mark.parametrize(
    ("headers", "upstream", "field", "expected"),
    [h[1:] for h in HOSTILE],
    ids=[h[0] for h in HOSTILE],
)
async def test_hostile_values_reach_rows_escaped_and_grading_goes_on(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    results_path: Path,
    headers: list[tuple[bytes, bytes]],
    upstream: bytes,
    field: Callable[[dict[str, Any]], Any],
    expected: Any,
) -> None:
    client = await make_proxy(grading={"workers": 1})
    # Three hostile requests: with one worker, the old serialiser died at the first.
    for _ in range(3):
        if upstream:
            backend.replies.append(Reply(body=upstream))
        reply = await raw_post(client, [(b"X-Grade-Task", b"weather.single"), *headers], b"{}")
        assert reply.startswith(b"HTTP/1.1 200")
    await client.post(
        "/v1/chat/completions", data=b"{}", headers={"X-Grade-Task": "weather.single"}
    )
    rows = await rows_of(client, results_path)
    assert len(rows) == 4
    assert [field(r) for r in rows[:3]] == [expected] * 3
    assert rows[3]["result"] == "pass"
    raw = await asyncio.to_thread(results_path.read_bytes)
    raw.decode("utf-8")  # every row is valid UTF-8 text
    metrics = await client.get("/metrics")
    assert metrics.status == 200
    text = await metrics.text()
    assert metric_value(text, "gradeproxy_grading_errors_total") == 0
    assert metric_value(text, "gradeproxy_grades_total") == 4


async def test_a_job_that_raises_is_counted_and_the_worker_goes_on(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path
) -> None:
    client = await make_proxy(grading={"workers": 1})
    queue = client.app[QUEUE]
    assert isinstance(queue.writer, ResultWriter)
    real_append = queue.writer.append
    calls = 0

    def flaky(pieces: list[bytes], rows: int) -> None:
        nonlocal calls
        calls += 1
        if calls <= 2:
            raise ValueError("a bug outside the grader")
        real_append(pieces, rows)

    queue.writer.append = flaky  # type: ignore[method-assign]
    for _ in range(3):  # one at a time: a batch's jobs share one append
        await client.post(
            "/v1/chat/completions", data=b"{}", headers={"X-Grade-Task": "weather.single"}
        )
        assert await queue.drain(5)
    rows = await rows_of(client, results_path)
    assert len(rows) == 1
    text = await (await client.get("/metrics")).text()
    assert metric_value(text, "gradeproxy_grading_errors_total", kind="worker") == 2
    assert metric_value(text, "gradeproxy_grading_healthy") == 1


async def test_a_killed_worker_is_restarted_and_counted(
    make_proxy: ProxyFactory, results_path: Path
) -> None:
    client = await make_proxy(grading={"workers": 2})
    queue = client.app[QUEUE]
    victim = queue._workers[0]
    victim.cancel()
    await asyncio.sleep(0.01)
    assert victim.done()
    assert queue._workers[0] is not victim
    assert queue.health().workers_alive == 2
    for _ in range(4):
        await client.post(
            "/v1/chat/completions", data=b"{}", headers={"X-Grade-Task": "weather.single"}
        )
    assert len(await rows_of(client, results_path)) == 4
    text = await (await client.get("/metrics")).text()
    assert metric_value(text, "gradeproxy_grade_worker_restarts_total") == 1


async def test_a_stuck_queue_is_reported_and_recovers(
    make_proxy: ProxyFactory, results_path: Path
) -> None:
    client = await make_proxy(grading={"workers": 1, "stuck_after_s": 0.2})
    queue = client.app[QUEUE]
    release = asyncio.Event()
    real_record = queue.writes.record_many

    async def blocked(entries: Any) -> Any:  # a result file that stopped taking writes
        await release.wait()
        return await real_record(entries)

    queue.writes.record_many = blocked  # type: ignore[method-assign]
    for _ in range(2):  # one held by the worker, one waiting behind it
        await client.post(
            "/v1/chat/completions", data=b"{}", headers={"X-Grade-Task": "weather.single"}
        )
    await asyncio.sleep(0.3)
    health = await client.get("/healthz/grading")
    assert health.status == 503
    assert (await health.json())["status"] == "queue_stuck"
    ready = await client.get("/readyz")
    assert ready.status == 200  # forwarding still works: the replica stays in service
    assert (await ready.json())["grading"]["status"] == "queue_stuck"
    text = await (await client.get("/metrics")).text()
    assert metric_value(text, "gradeproxy_grading_healthy") == 0
    release.set()
    assert len(await rows_of(client, results_path)) == 2
    health = await client.get("/healthz/grading")
    assert health.status == 200
    assert json.loads(await health.text())["workers"] == "1/1"


async def test_workers_gone_while_stopping_is_unhealthy(make_proxy: ProxyFactory) -> None:
    client = await make_proxy(grading={"workers": 2})
    queue = client.app[QUEUE]
    queue._stopping = True  # as during shutdown: the supervisor no longer restarts
    queue._workers[1].cancel()
    await asyncio.sleep(0.01)
    health = queue.health()
    assert (health.healthy, health.reason, health.workers_alive) == (False, "workers_gone", 1)
    queue._stopping = False


def test_rows_written_by_hostile_requests_read_back_exactly(tmp_path: Path) -> None:
    """The escape in a row is lossless: the stdlib reads back the very code points."""
    from grader.json import dumps

    row = {"run": "run-\udcff", "model": "gpt-\ud800", "big": 10**30, "text": "Zürich \\ok"}
    path = tmp_path / "rows.jsonl"
    path.write_bytes(dumps(row) + b"\n")
    assert json.loads(path.read_text()) == row
    assert b"\\udcff" in path.read_bytes()


SCHEMA_TASK = {
    "id": "weather.schema_checked",
    "expected": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}},
    "checks": [{"type": "json_schema", "name": "schema", "schema": {"type": "object"}}],
    "metadata": {"mutationKind": "none"},
}


@pytest.mark.parametrize(
    ("task", "isolation", "graded_in"),
    [
        ("weather.single", "process", ["MainThread"]),
        ("weather.single", "thread", ["MainThread"]),
        ("weather.schema_checked", "process", ["grading process"]),
        ("weather.schema_checked", "thread", ["gradeproxy-grade"]),
    ],
    ids=[
        "tool_call_only_inline",
        "tool_call_only_inline_thread_mode",
        "schema_check_in_the_grading_process",
        "schema_check_in_the_grading_thread",
    ],
)
async def test_checks_whose_cost_grows_run_off_the_event_loop(
    make_proxy: ProxyFactory,
    tasks_file: Path,
    results_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    task: str,
    isolation: str,
    graded_in: list[str],
) -> None:
    """A small response is graded inline only when its task runs nothing but the tool-call
    check; schema, similarity, formula and policy checks always run off the loop: in the
    grading process, or with ``isolation: thread`` in the grading thread."""
    import threading

    from grader.json import dumps
    from proxy.pipeline import grade as jobs
    from proxy.pipeline import queue as grading
    from proxy.pipeline.record import recording as reduce

    with tasks_file.open("ab") as out:
        out.write(dumps(SCHEMA_TASK) + b"\n")
    seen: list[str] = []

    def spy(real: Any) -> Any:
        def where(*args: Any) -> Any:
            seen.append(threading.current_thread().name.split("_")[0])
            return real(*args)

        return where

    # The queue calls them by these names: inline, and in the grading thread.
    monkeypatch.setattr(grading, "grade_job", spy(jobs.grade_job))
    monkeypatch.setattr(grading, "grade_and_reduce", spy(reduce.grade_and_reduce))
    client = await make_proxy(grading={"isolation": isolation})
    await client.post("/v1/chat/completions", data=b"{}", headers={"X-Grade-Task": task})
    [row] = await rows_of(client, results_path)
    assert row["result"] == "pass"
    process = client.app[QUEUE].process
    sent = process.jobs_sent if process is not None else 0
    assert seen + ["grading process"] * sent == graded_in
