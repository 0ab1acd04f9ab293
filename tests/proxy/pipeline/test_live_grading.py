"""Live grading through the proxy: every recorded backend format, split at awkward byte
boundaries (inside a multi-byte character, between CR and LF), lands as the right row and the
right metrics; responses that must not be graded are counted by reason. Every case runs through
both upstream transports (``upstream.client``: fast and aiohttp): the capture sees the same
bytes either way."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.backend import JSON, SSE, Reply, ScriptedBackend, awkward_cuts, wire
from tests.support.fixtures import by_client
from tests.support.metrics import metric_value
from tests.support.proxy import ProxyFactory, rows_of


@pytest.fixture(params=["fast", "aiohttp"])
def make_proxy(make_proxy: ProxyFactory, request: pytest.FixtureRequest) -> ProxyFactory:
    return by_client(make_proxy, request.param)


# (fixture, task header, result, reason_code)
GRADED = [
    ("openai_single_tool.json", "weather.single", "pass", "match"),
    ("openai_single_tool.sse", "weather.single", "pass", "match"),
    ("vllm_single_tool.json", "weather.single", "pass", "match"),
    ("vllm_single_tool.sse", "weather.single", "pass", "match"),
    ("llamacpp_single_tool.json", "weather.single", "pass", "match"),
    ("llamacpp_single_tool.sse", "weather.single", "pass", "match"),
    ("ollama_single_tool.json", "weather.single", "pass", "match"),
    ("ollama_single_tool.sse", "weather.single", "pass", "match"),
    ("llamacpppython_ping.sse", "weather.single", "pass", "match"),
    ("textgenwebui_crlf_ping.sse", "weather.single", "fail", "no_call"),
    ("openai_parallel_tools.sse", "time.tokyo", "pass", "match"),
    ("vllm_parallel_tools.json", "time.tokyo", "pass", "match"),
    ("llamacpp_parallel_tools.sse", "time.tokyo", "pass", "match"),
    ("ollama_parallel_tools.sse", "time.tokyo", "pass", "match"),
    ("ollama_parallel_one_chunk.sse", "weather.single", "fail", "missing"),
    ("openai_text.sse", "weather.single", "fail", "no_call"),
    ("vllm_text.json", "weather.single", "fail", "no_call"),
    ("ollama_text_json_call.sse", "weather.city_only", "pass", "match"),
    ("vllm_text_json_call.json", "weather.city_only", "pass", "match"),
    ("openai_legacy_function_call.sse", "weather.city_only", "pass", "match"),
    ("openai_legacy_function_call.json", "weather.city_only", "pass", "match"),
    ("openai_single_tool.json", "weather.city_only", "fail", "unexpected"),
]


@pytest.mark.parametrize(
    ("fixture", "task", "result", "code"), GRADED, ids=[f"{g[0]}->{g[1]}" for g in GRADED]
)
async def test_recorded_formats_grade_right(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    results_path: Path,
    fixture: str,
    task: str,
    result: str,
    code: str,
) -> None:
    body = wire(fixture)
    kind = SSE if fixture.endswith(".sse") else JSON
    backend.replies.append(Reply(body=body, content_type=kind, split_at=awkward_cuts(body)))
    client = await make_proxy()
    response = await client.post(
        "/v1/chat/completions",
        data=b'{"model":"req-model","messages":[{"role":"user","content":"hi"}]}',
        headers={"X-Grade-Task": task, "X-Grade-Run": "run-7", "X-Grade-Meta-Team": "search"},
    )
    assert await response.read() == body
    [row] = await rows_of(client, results_path)
    assert (row["task_id"], row["result"], row["reason_code"]) == (task, result, code), row[
        "reason"
    ]
    assert row["stream"] is (kind == SSE)
    assert row["run"] == "run-7"
    assert row["meta"] == {"team": "search"}
    assert row["request_id"] == response.headers["x-request-id"]
    assert row["answer"]
    assert row["tasks_digest"].startswith("sha256:")
    metrics = await (await client.get("/metrics")).text()
    assert (
        metric_value(
            metrics, "gradeproxy_grades_total", task=task, model=row["model"], result=result
        )
        == 1
    )


async def test_stale_answer_counts_stale(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path
) -> None:
    stale = wire("openai_single_tool.json").replace(
        b'\\"unit\\":\\"celsius\\"', b'\\"units\\":\\"C\\"'
    )
    backend.replies.append(Reply(body=stale))
    client = await make_proxy()
    await client.post(
        "/v1/chat/completions", data=b"{}", headers={"X-Grade-Task": "weather.single"}
    )
    [row] = await rows_of(client, results_path)
    assert (row["result"], row["staleSchemaUsed"]) == ("stale", True)
    metrics = await (await client.get("/metrics")).text()
    model = "gpt-4.1-mini-2025-04-14"
    assert (
        metric_value(metrics, "gradeproxy_stale_schema_total", task="weather.single", model=model)
        == 1
    )
    assert metric_value(metrics, "gradeproxy_grades_total", result="stale") == 1


async def test_every_choice_of_n_is_graded(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path
) -> None:
    backend.replies.append(Reply(body=wire("vllm_n2_text.sse"), content_type=SSE))
    client = await make_proxy()
    await client.post(
        "/v1/chat/completions", data=b"{}", headers={"X-Grade-Task": "weather.single"}
    )
    rows = await rows_of(client, results_path)
    assert [(r["choice"], r["reason_code"]) for r in rows] == [(0, "no_call"), (1, "no_call")]


@pytest.mark.parametrize(
    ("reply", "headers", "reason"),
    [
        pytest.param(Reply(), {}, "no_task_header", id="no_task_header"),
        pytest.param(Reply(), {"X-Grade-Task": "no.such.task"}, "unknown_task", id="unknown_task"),
        pytest.param(
            Reply(body=b'{"error":{"message":"x"}}', status=429),
            {"X-Grade-Task": "weather.single"},
            "upstream_error",
            id="upstream_error_status",
        ),
        pytest.param(
            Reply(body=wire("vllm_stream_error.sse"), content_type=SSE),
            {"X-Grade-Task": "weather.single"},
            "upstream_error",
            id="in_band_upstream_error",
        ),
        pytest.param(
            Reply(body=b"data: [DONE]\n\n", content_type=SSE),
            {"X-Grade-Task": "weather.single"},
            "empty_response",
            id="empty_stream",
        ),
        pytest.param(
            Reply(body=b"", content_type=SSE),
            {"X-Grade-Task": "weather.single"},
            "empty_response",
            id="empty_body",
        ),
    ],
)
async def test_not_graded_is_counted_by_reason(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    results_path: Path,
    reply: Reply,
    headers: dict[str, str],
    reason: str,
) -> None:
    backend.replies.append(reply)
    client = await make_proxy()
    await client.post("/v1/chat/completions", data=b"{}", headers=headers)
    assert await rows_of(client, results_path) == []
    metrics = await (await client.get("/metrics")).text()
    assert metric_value(metrics, "gradeproxy_grading_skipped_total", reason=reason) == 1
    assert metric_value(metrics, "gradeproxy_grading_skipped_total") == 1
    assert metric_value(metrics, "gradeproxy_grades_total") == 0


async def test_unreadable_capture_is_an_infrastructure_error(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path
) -> None:
    backend.replies.append(Reply(body=wire("vllm_truncated.sse"), content_type=SSE))
    client = await make_proxy()
    await client.post(
        "/v1/chat/completions", data=b"{}", headers={"X-Grade-Task": "weather.single"}
    )
    assert await rows_of(client, results_path) == []
    metrics = await (await client.get("/metrics")).text()
    assert metric_value(metrics, "gradeproxy_grading_errors_total", kind="capture") == 1
    assert metric_value(metrics, "gradeproxy_grades_total") == 0


@pytest.mark.parametrize(
    ("method", "path", "headers", "skipped"),
    [
        pytest.param(
            "POST", "/v1/embeddings", {"X-Grade-Task": "weather.single"}, 1, id="embeddings_task"
        ),
        pytest.param(
            "POST", "/v1/completions", {"X-Grade-Task": "weather.single"}, 1, id="legacy_task"
        ),
        pytest.param(
            "GET", "/v1/responses/resp_1", {"X-Grade-Task": "weather.single"}, 1, id="retrieve"
        ),
        pytest.param("GET", "/v1/chat/completions", {"X-Grade-Task": "nope"}, 1, id="chat_get"),
        pytest.param("POST", "/v1/embeddings", {}, 0, id="embeddings_no_task"),
    ],
)
async def test_a_task_on_a_route_that_cannot_be_captured_is_skipped_as_unsupported(
    make_proxy: ProxyFactory,
    results_path: Path,
    method: str,
    path: str,
    headers: dict[str, str],
    skipped: int,
) -> None:
    client = await make_proxy()
    await client.request(method, path, data=b"{}", headers=headers)
    assert await rows_of(client, results_path) == []
    metrics = await (await client.get("/metrics")).text()
    assert (
        metric_value(metrics, "gradeproxy_grading_skipped_total", reason="unsupported_route")
        == skipped
    )
    assert metric_value(metrics, "gradeproxy_grading_skipped_total") == skipped
    assert metric_value(metrics, "gradeproxy_requests_total", route="other", code="200") == 1


@pytest.mark.parametrize(("rate", "graded"), [(0.0, 0), (1.0, 1)])
async def test_sample_rate(
    make_proxy: ProxyFactory, results_path: Path, rate: float, graded: int
) -> None:
    client = await make_proxy(grading={"sample_rate": rate})
    await client.post(
        "/v1/chat/completions", data=b"{}", headers={"X-Grade-Task": "weather.single"}
    )
    assert len(await rows_of(client, results_path)) == graded
    metrics = await (await client.get("/metrics")).text()
    assert (
        metric_value(metrics, "gradeproxy_grading_skipped_total", reason="sampled_out")
        == 1 - graded
    )


async def test_answer_capture_can_be_turned_off(
    make_proxy: ProxyFactory, results_path: Path
) -> None:
    client = await make_proxy(results={"answer": "drop"})
    await client.post(
        "/v1/chat/completions", data=b"{}", headers={"X-Grade-Task": "weather.single"}
    )
    [row] = await rows_of(client, results_path)
    assert "answer" not in row


async def test_model_label_cap_folds_into_other(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path
) -> None:
    client = await make_proxy(metrics={"max_models": 1})
    for model in ("model-a", "model-b", "model-c"):
        body = wire("openai_single_tool.json").replace(b"gpt-4.1-mini-2025-04-14", model.encode())
        backend.replies.append(Reply(body=body))
        await client.post(
            "/v1/chat/completions", data=b"{}", headers={"X-Grade-Task": "weather.single"}
        )
    rows = await rows_of(client, results_path)
    assert [r["model"] for r in rows] == ["model-a", "model-b", "model-c"]
    metrics = await (await client.get("/metrics")).text()
    assert metric_value(metrics, "gradeproxy_grades_total", model="model-a") == 1
    assert metric_value(metrics, "gradeproxy_grades_total", model="other") == 2


async def test_client_disconnect_mid_stream_is_counted(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path
) -> None:
    import asyncio

    gate = asyncio.Event()
    body = wire("openai_single_tool.sse")
    backend.replies.append(Reply(body=body, content_type=SSE, split_at=[120, 240], gate=gate))
    client = await make_proxy()
    response = await client.post(
        "/v1/chat/completions", data=b"{}", headers={"X-Grade-Task": "weather.single"}
    )
    await response.content.readexactly(120)
    response.close()
    await asyncio.sleep(0.05)
    gate.set()
    for _ in range(100):
        metrics = await (await client.get("/metrics")).text()
        if (
            metric_value(metrics, "gradeproxy_grading_skipped_total", reason="client_disconnected")
            == 1
        ):
            break
        await asyncio.sleep(0.02)
    assert (
        metric_value(metrics, "gradeproxy_grading_skipped_total", reason="client_disconnected") == 1
    )
    assert await rows_of(client, results_path) == []
