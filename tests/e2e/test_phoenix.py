"""End to end into a real Arize Phoenix: traffic through the proxy with the official ``openai``
SDK, then the spans and their evaluation results read back through Phoenix's REST API and
compared with the proxy's result rows.

Phoenix keeps evaluation results sent over OTLP as span events (its *annotations* are written
only through its own API), and reads ``gen_ai.*`` into its OpenInference attributes: both are
what is checked here. Skipped only when scripts/phoenix-venv.sh has not been run (CI runs it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from aiohttp.test_utils import TestServer

from tests.support.backend import JSON, SSE, Reply, ScriptedBackend, wire
from tests.support.live import live_proxy
from tests.support.phoenix import EXECUTABLE, Phoenix, phoenix_server
from tests.support.proxy import read_rows
from tests.support.tasks import WEATHER_REQUEST

pytestmark = [
    pytest.mark.phoenix,
    pytest.mark.skipif(not EXECUTABLE.exists(), reason="run scripts/phoenix-venv.sh first"),
]

CLIENT_TRACE = "5bf92f3577b34da6a3ce929d0e0e4736"
REQUEST: dict[str, Any] = {**WEATHER_REQUEST, "model": "gpt-4.1-mini", "temperature": 0.0}


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    with phoenix_server(tmp_path_factory.mktemp("phoenix")) as server:
        yield server


def calls(base_url: str) -> None:
    client = openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
    try:
        headers = {"X-Grade-Task": "weather.single", "X-Grade-Run": "phoenix"}
        client.chat.completions.create(
            extra_headers={**headers, "traceparent": f"00-{CLIENT_TRACE}-00f067aa0ba902b7-01"},
            **REQUEST,
        )
        for _ in client.chat.completions.create(stream=True, extra_headers=headers, **REQUEST):
            pass
        client.chat.completions.create(extra_headers={"X-Grade-Task": "time.tokyo"}, **REQUEST)
        client.chat.completions.create(**REQUEST)  # not graded: a span without evaluations
    finally:
        client.close()


def label(column: dict[str, Any]) -> str:
    if column["passed"] is None:
        return "error"
    if column["passed"]:
        return "pass"
    return "stale" if column["reason_code"] == "stale_schema" else "fail"


async def annotations_of(phoenix: Phoenix, span_id: str, wanted: int) -> list[dict[str, Any]]:
    """The span's annotations, read through Phoenix's API (it inserts them in the background)."""
    notes: list[dict[str, Any]] = []
    path = f"/v1/projects/default/span_annotations?span_ids={span_id}&limit=100"
    for _ in range(200):
        notes = (await asyncio.to_thread(phoenix.get, path))["data"]
        if len(notes) >= wanted:
            break
        await asyncio.sleep(0.1)
    return notes


@pytest.mark.timeout(600)
async def test_phoenix_holds_each_request_span_and_one_evaluation_per_column(
    phoenix: Phoenix,
    backend: ScriptedBackend,
    backend_server: TestServer,
    tasks_file: Path,
    tmp_path: Path,
) -> None:
    json_reply = Reply(body=wire("openai_single_tool.json"), content_type=JSON)
    sse_reply = Reply(body=wire("openai_single_tool.sse"), content_type=SSE, split_at=[50, 400])
    backend.replies.extend([json_reply, sse_reply, json_reply, json_reply])
    results = tmp_path / "rows.jsonl"
    tracing = {
        "enabled": True,
        "endpoint": phoenix.base,
        "sample_ratio": 1.0,
        "schedule_delay_s": 0.05,
        "phoenix_url": phoenix.base,
    }
    upstream = str(backend_server.make_url("/v1"))
    async with live_proxy(upstream, tasks_file, results, tracing=tracing) as live:
        await asyncio.to_thread(calls, f"{live.base}/v1")
        await live.drained()
    # Shut down: every span is exported (or counted). Phoenix inserts them in the background.
    assert live.metric("gradeproxy_trace_exported_total", signal="spans") == 8
    columns = sum(len(row["checks"]) for row in read_rows(results))
    assert live.metric("gradeproxy_trace_exported_total", signal="annotations") == columns
    rows = read_rows(results)
    assert len(rows) == 3
    spans: list[dict[str, Any]] = []
    for _ in range(200):
        spans = await asyncio.to_thread(phoenix.spans)
        if len(spans) >= 8:
            break
        await asyncio.sleep(0.1)
    servers = {
        s["attributes"]["gradeproxy.request_id"]: s for s in spans if s["name"].startswith("POST")
    }
    children = {s["parent_id"]: s for s in spans if s["name"].startswith("chat")}
    assert len(servers) == 4
    assert len(children) == 4
    for row in rows:
        server = servers[row["request_id"]]
        call = children[server["context"]["span_id"]]
        assert server["attributes"]["gradeproxy.task"] == row["task_id"]
        assert call["span_kind"] == "LLM"  # Phoenix read the gen_ai.* attributes
        assert call["attributes"]["gen_ai.response.model"] == row["model"]
        assert call["attributes"]["llm.model_name"] == REQUEST["model"]
        assert call["attributes"]["gen_ai.response.finish_reasons"] == [row["finish_reason"]]
        assert call["attributes"]["llm.token_count.completion"] == 19
        events = [
            e["attributes"] for e in call["events"] if e["name"] == "gen_ai.evaluation.result"
        ]
        assert [
            (e["gen_ai.evaluation.name"], e["gen_ai.evaluation.score.label"]) for e in events
        ] == [(c["name"], label(c)) for c in row["checks"]]
        notes = await annotations_of(phoenix, call["context"]["span_id"], len(row["checks"]))
        assert sorted(
            (n["name"], n["result"]["label"], n["annotator_kind"], n["identifier"]) for n in notes
        ) == sorted(
            (c["name"], label(c), "CODE", f"gradeproxy:choice:{row['choice']}")
            for c in row["checks"]
        )
        assert {n["metadata"]["task_id"] for n in notes} == {row["task_id"]}
    continued = [s for s in servers.values() if s["context"]["trace_id"] == CLIENT_TRACE]
    assert len(continued) == 1
    assert continued[0]["parent_id"] == "00f067aa0ba902b7"
    ungraded = [s for s in servers.values() if "gradeproxy.task" not in s["attributes"]]
    assert len(ungraded) == 1
    assert children[ungraded[0]["context"]["span_id"]]["events"] == []
