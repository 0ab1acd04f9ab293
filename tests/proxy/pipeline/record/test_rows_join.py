"""Live rows join the way offline rows do: the sample-id header, the upstream's request id, the
proxy's own id returned to the client, and the request's tools kept when a check read them."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import openai
import pytest

from gradeproxy.cli import main
from grader.engine import grade, offline_context
from grader.json import dumps, loads_exact
from grader.loader import load_tasks
from tests.support.backend import JSON, Reply, ScriptedBackend, wire
from tests.support.proxy import ProxyFactory, rows_of

REQUEST: dict[str, Any] = {
    "model": "req-model",
    "messages": [{"role": "user", "content": "weather?"}],
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ],
}
SCHEMA_TASK = {
    "id": "weather.schema",
    "checks": [{"type": "json_schema", "name": "args", "schema": "from_request"}],
}

CASES = [
    # (task, upstream headers, client headers, upstream id in the row, sample id, tools kept)
    pytest.param(
        "weather.single", {"x-request-id": "req_up_1"}, {"X-Grade-Sample-Id": "s-9"},
        "req_up_1", "s-9", False, id="upstream_id_and_sample_id",
    ),
    pytest.param(
        "weather.single", {}, {}, None, None, False, id="upstream_sends_no_id",
    ),
    pytest.param(
        "weather.schema", {"x-request-id": "req_up_2"}, {"X-Grade-Sample-Id": "42"},
        "req_up_2", "42", True, id="from_request_keeps_the_tools",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("task", "up", "sent", "upstream_id", "sample_id", "tools"), CASES)
async def test_a_client_finds_its_row_and_the_row_joins_by_sample_id(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    results_path: Path,
    tasks_file: Path,
    task: str,
    up: dict[str, str],
    sent: dict[str, str],
    upstream_id: str | None,
    sample_id: str | None,
    tools: bool,
) -> None:
    with tasks_file.open("ab") as handle:
        handle.write(dumps(SCHEMA_TASK) + b"\n")
    backend.replies.append(
        Reply(body=wire("openai_single_tool.json"), content_type=JSON, headers=up)
    )
    client = await make_proxy()
    response = await client.post(
        "/v1/chat/completions", data=dumps(REQUEST), headers={"X-Grade-Task": task, **sent}
    )
    assert response.status == 200
    [row] = await rows_of(client, results_path)
    assert row["request_id"] == response.headers["X-Gradeproxy-Request-Id"]
    assert row["upstream_request_id"] == upstream_id
    if upstream_id is not None:  # the upstream's id reaches the client as it was sent
        assert response.headers["x-request-id"] == upstream_id
    assert row["sample_id"] == sample_id
    assert "X-Grade-Sample-Id" not in backend.seen[-1].headers
    assert ("tools" in row) is tools
    if tools:
        assert row["tools"] == REQUEST["tools"]
    # The same definition has the same per-check digest live and offline.
    task_def = load_tasks(tasks_file).tasks[task]
    offline = grade(task_def, row["answer"], offline_context(task_def, row))
    assert [c["digest"] for c in row["checks"]] == [c.digest for c in offline.checks]
    assert [c["passed"] for c in row["checks"]] == [c.passed for c in offline.checks]


@pytest.mark.parametrize("capture", [True, False])
async def test_live_rows_regrade_offline_when_they_kept_the_answer_and_tools(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    results_path: Path,
    tasks_file: Path,
    tmp_path: Path,
    capture: bool,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with tasks_file.open("ab") as handle:
        handle.write(dumps(SCHEMA_TASK) + b"\n")
    backend.replies.append(Reply(body=wire("openai_single_tool.json"), content_type=JSON))
    client = await make_proxy(results={"answer": "keep" if capture else "drop"})
    headers = {"X-Grade-Task": "weather.schema"}
    await client.post("/v1/chat/completions", data=dumps(REQUEST), headers=headers)
    await rows_of(client, results_path)
    out = tmp_path / "diff.jsonl"
    args = ["regrade", "--results", str(results_path), "--tasks", str(tasks_file)]
    assert main([*args, "--out", str(out), "--json"]) == 0
    summary = loads_exact(capsys.readouterr().out)
    assert summary["regraded"] == (1 if capture else 0)
    assert summary["not_regradable"] == ({} if capture else {"no_answer": 1})
    assert out.read_text() == ""  # same tasks, same stored answer: nothing moved
    # A rotation beside the live file is read too (oldest first), unless told not to.
    rotated = results_path.with_name(results_path.name + ".1")
    await asyncio.to_thread(shutil.copyfile, results_path, rotated)
    assert main([*args, "--out", str(out), "--json"]) == 0
    assert loads_exact(capsys.readouterr().out)["rows"] == 2
    assert main([*args, "--out", str(out), "--json", "--no-rotations"]) == 0
    assert loads_exact(capsys.readouterr().out)["rows"] == 1


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("upstream_headers", "row_field"),
    [
        pytest.param({"x-request-id": "req_from_upstream"}, "upstream_request_id", id="upstream"),
        pytest.param({}, "request_id", id="upstream_sends_none"),
    ],
)
async def test_the_openai_sdk_request_id_finds_the_row(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    results_path: Path,
    upstream_headers: dict[str, str],
    row_field: str,
) -> None:
    """``response._request_id`` is the upstream's id (or, when it sent none, the proxy's);
    ``X-Gradeproxy-Request-Id`` is always the row's ``request_id``."""
    backend.replies.append(
        Reply(body=wire("openai_single_tool.json"), content_type=JSON, headers=upstream_headers)
    )
    client = await make_proxy()
    base_url = str(client.make_url("/v1"))
    async with openai.AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0) as sdk:
        raw = await sdk.chat.completions.with_raw_response.create(
            extra_headers={"X-Grade-Task": "weather.single", "X-Grade-Sample-Id": "s-17"},
            **REQUEST,
        )
        completion = raw.parse()
    [row] = await rows_of(client, results_path)
    assert row[row_field] == completion._request_id
    assert row["request_id"] == raw.headers["X-Gradeproxy-Request-Id"]
    assert row["sample_id"] == "s-17"
