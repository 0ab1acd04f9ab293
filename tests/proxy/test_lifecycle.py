"""Health, hot reload and graceful shutdown."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from grader.json import loads_exact
from proxy.pipeline.record.metrics import ProxyMetrics
from proxy.pipeline.record.results import ResultWriter
from proxy.state import LIFECYCLE, TASKS
from proxy.taskstore import TaskStore
from tests.support.backend import SSE, Reply, ScriptedBackend, wire
from tests.support.process import free_port, serve_config, serving
from tests.support.proxy import ProxyFactory
from tests.support.tasks import TASK_LINES


async def test_livez_and_readyz(make_proxy: ProxyFactory) -> None:
    client = await make_proxy()
    assert (await client.get("/livez")).status == 200
    ready = await client.get("/readyz")
    assert ready.status == 200
    assert (await ready.json())["tasks"] == 3
    client.app[LIFECYCLE].draining = True
    draining = await client.get("/readyz")
    assert (draining.status, (await draining.json())["status"]) == (503, "draining")
    assert (await client.get("/livez")).status == 200


async def test_not_ready_until_tasks_load(make_proxy: ProxyFactory, tasks_file: Path) -> None:
    await asyncio.to_thread(tasks_file.write_text, '{"id": "broken"}\n')
    client = await make_proxy()
    response = await client.get("/readyz")
    assert (response.status, (await response.json())["status"]) == (503, "loading_tasks")


async def test_refusing_after_drain_delay_is_503_with_retry_after(make_proxy: ProxyFactory) -> None:
    client = await make_proxy()
    client.app[LIFECYCLE].refusing = True
    response = await client.post("/v1/chat/completions", data=b"{}")
    assert response.status == 503
    assert response.headers["Retry-After"] == "5"
    assert (await response.json())["error"]["code"] == "server_draining"


async def test_bad_reload_keeps_the_old_task_set(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(b"\n".join(TASK_LINES))
    metrics = ProxyMetrics()
    store = TaskStore(path, metrics)
    assert await store.reload()
    good = store.current
    assert good is not None
    path.write_text('{"id": "x", "expected": {"name": 1}}\n')
    assert not await store.reload()
    assert store.current is good
    assert metrics.task_reloads.labels("error")._value.get() == 1
    path.write_bytes(TASK_LINES[0])
    assert await store.reload()
    assert store.current is not None
    assert list(store.current.tasks) == ["weather.single"]
    assert store.current.digest != good.digest


async def test_watch_picks_up_an_edited_file(make_proxy: ProxyFactory, tasks_file: Path) -> None:
    client = await make_proxy(tasks={"watch": True, "watch_interval_s": 0.05})
    store = client.app[TASKS]
    before = store.current
    assert before is not None
    await asyncio.to_thread(tasks_file.write_bytes, TASK_LINES[1])
    for _ in range(100):
        if store.current is not before:
            break
        await asyncio.sleep(0.05)
    assert store.current is not None
    assert list(store.current.tasks) == ["weather.city_only"]


def test_results_rotate_by_size(tmp_path: Path) -> None:
    path = tmp_path / "grades.jsonl"
    writer = ResultWriter(path, max_bytes=1024, backups=2)
    for number in range(40):
        writer.write([{"n": number, "pad": "x" * 90}])
    writer.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["grades.jsonl", "grades.jsonl.1", "grades.jsonl.2"]
    sizes = [p.stat().st_size for p in tmp_path.iterdir()]
    assert all(size <= 1024 for size in sizes)
    newest = [loads_exact(line)["n"] for line in path.read_text().splitlines()]
    assert newest[-1] == 39


@pytest.mark.slow
@pytest.mark.e2e
async def test_sigterm_finishes_streams_and_loses_no_graded_row(
    tmp_path: Path,
    tasks_file: Path,
    backend: ScriptedBackend,
    aiohttp_server: Callable[..., Awaitable[TestServer]],
) -> None:
    """SIGTERM mid-stream: readiness drops at once, the stream still completes, the process
    exits 0 and the graded row is in the results file."""
    server = await aiohttp_server(backend.app())
    body = wire("openai_single_tool.sse")
    backend.replies.append(
        Reply(body=body, content_type=SSE, split_at=range(60, len(body), 60), pause_s=0.1)
    )
    port, results = free_port(), tmp_path / "results.jsonl"
    config = serve_config(
        tmp_path / "config.yaml",
        upstream=str(server.make_url("/v1")),
        port=port,
        tasks=tasks_file,
        results=results,
        drain_delay_s=1.0,
        grace_period_s=20,
    )
    async with serving(config, port) as (process, base), aiohttp.ClientSession() as session:
        async with session.post(
            f"{base}/v1/chat/completions",
            data=b"{}",
            headers={"X-Grade-Task": "weather.single"},
        ) as response:
            first = await response.content.readexactly(60)
            process.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.2)
            async with aiohttp.ClientSession() as probe, probe.get(f"{base}/readyz") as ready:
                assert ready.status == 503
            rest = await response.read()
        assert first + rest == body
        assert await asyncio.wait_for(process.wait(), 30) == 0
    text = await asyncio.to_thread(results.read_text)
    rows = [loads_exact(line) for line in text.splitlines()]
    assert [(r["task_id"], r["result"]) for r in rows] == [("weather.single", "pass")]


async def test_admin_port_serves_health_and_metrics_apart(
    tasks_file: Path, backend_server: TestServer
) -> None:
    from proxy.app import make_app
    from proxy.config import load_config
    from proxy.serve import bound_port, start_sites

    config = load_config(
        None,
        {
            "upstream": {"url": str(backend_server.make_url("/v1"))},
            "tasks": {"path": str(tasks_file)},
            "listen": {"port": 0},
            "admin": {"port": 0},
            "results": {"path": None},
        },
        environ={},
    )
    app = make_app(config)
    runners, sites = await start_sites(config, app)
    try:
        proxy, admin = (f"http://127.0.0.1:{bound_port(site)}" for site in sites)
        async with aiohttp.ClientSession() as session:
            for _ in range(100):
                async with session.get(f"{admin}/readyz") as ready:
                    if ready.status == 200:
                        break
                await asyncio.sleep(0.02)
            async with session.get(f"{admin}/metrics") as metrics:
                assert metrics.status == 200
                assert "gradeproxy_build_info" in await metrics.text()
            async with session.get(f"{proxy}/metrics") as not_here:
                assert not_here.status == 404
            async with session.get(f"{proxy}/v1/models") as forwarded:
                assert forwarded.status == 200
    finally:
        for runner in runners:
            await runner.cleanup()
