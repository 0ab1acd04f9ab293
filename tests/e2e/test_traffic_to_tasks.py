"""From traffic to tasks, end to end on loopback: the openai SDK sends untagged requests through
a proxy that captures them; ``tasks draft`` drafts tasks from its results file; ``tasks promote``
turns them into a task file; a proxy that loads it grades the same answer as a pass."""

from __future__ import annotations

import asyncio
from pathlib import Path

import openai
import pytest

from gradeproxy.cli import main
from grader.json import loads_exact
from proxy.state import QUEUE
from tests.support.backend import JSON, Reply, ScriptedBackend, wire
from tests.support.proxy import ProxyFactory, read_rows, rows_of
from tests.support.tasks import WEATHER_REQUEST


async def ask(base_url: str, content: str, headers: dict[str, str] | None = None) -> None:
    request = {**WEATHER_REQUEST, "messages": [{"role": "user", "content": content}]}
    async with openai.AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0) as client:
        await client.chat.completions.create(extra_headers=headers or {}, **request)


@pytest.mark.e2e
async def test_captured_traffic_becomes_tasks_that_grade_it(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    results_path: Path,
    tasks_file: Path,
    tmp_path: Path,
) -> None:
    answer = Reply(body=wire("openai_single_tool.json"), content_type=JSON)
    backend.replies.extend([answer] * 4)
    capturing = await make_proxy(results={"capture_untagged": 1.0, "answer": "hash"})
    url = str(capturing.make_url("/v1"))
    for content in ("Weather in Zürich?", "Weather in Zürich?", "How warm is Zürich?"):
        await ask(url, content)
    await rows_of(capturing, results_path)
    captures = capturing.app[QUEUE].captures
    assert captures is not None
    await captures.idle()
    assert len(await asyncio.to_thread(read_rows, results_path)) == 3

    drafts = tmp_path / "review" / "drafts.jsonl"
    draft = ["tasks", "draft", "--from", str(results_path), "--out", str(drafts)]
    assert main([*draft, "--tasks", str(tasks_file.parent)]) == 0
    lines = drafts.read_text().splitlines()
    counts = [loads_exact(line)["metadata"]["draft"]["count"] for line in lines]
    assert counts == [2, 1]  # one draft per prompt
    promoted = tmp_path / "promoted" / "tasks.jsonl"
    assert main(["tasks", "promote", str(drafts), "--out", str(promoted)]) == 0
    assert await asyncio.to_thread(main, ["validate-tasks", str(promoted), "--quiet"]) == 0
    task_id = loads_exact(promoted.read_text().splitlines()[0])["id"]

    grading = await make_proxy(
        tasks={"path": str(promoted)}, results={"path": str(tmp_path / "g.jsonl")}
    )
    await ask(str(grading.make_url("/v1")), "Weather in Zürich?", {"X-Grade-Task": task_id})
    [row] = await rows_of(grading, tmp_path / "g.jsonl")
    assert (row["task_id"], row["result"]) == (task_id, "pass")
