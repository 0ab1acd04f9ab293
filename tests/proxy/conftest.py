"""Fixtures: a scripted backend and a proxy pointed at it, both on loopback sockets."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from grader._json import loads_exact
from proxy.app import make_app
from proxy.config import load_config
from proxy.logs import configure_logging
from proxy.state import QUEUE, TASKS
from tests.proxy.harness import ScriptedBackend, task_line

ProxyFactory = Callable[..., Awaitable[TestClient[web.Request, web.Application]]]

TASK_LINES = [
    task_line(
        "weather.single",
        "get_weather",
        {"city": "Zürich", "unit": "celsius"},
        stale={"city": "Zürich", "units": "C"},
    ),
    task_line("weather.city_only", "get_weather", {"city": "Zürich"}, kind="new_required_field"),
    task_line("time.tokyo", "get_time", {"timezone": "Asia/Tokyo"}, kind="enum_value_changed"),
]


@pytest.fixture(autouse=True)
def _quiet_logs() -> None:
    configure_logging("warning", "json", cache=False)


@pytest.fixture
def tasks_file(tmp_path: Path) -> Path:
    path = tmp_path / "tasks" / "tasks.jsonl"
    path.parent.mkdir()
    path.write_bytes(b"\n".join(TASK_LINES) + b"\n")
    return path


@pytest.fixture
def backend() -> ScriptedBackend:
    return ScriptedBackend()


@pytest.fixture
async def backend_server(
    backend: ScriptedBackend, aiohttp_server: Callable[..., Awaitable[TestServer]]
) -> TestServer:
    return await aiohttp_server(backend.app())


@pytest.fixture
def results_path(tmp_path: Path) -> Path:
    return tmp_path / "results" / "grades.jsonl"


@pytest.fixture
def make_proxy(
    backend_server: TestServer,
    tasks_file: Path,
    results_path: Path,
    aiohttp_client: Callable[..., Awaitable[TestClient[web.Request, web.Application]]],
) -> ProxyFactory:
    async def factory(**sections: dict[str, Any]) -> TestClient[web.Request, web.Application]:
        overrides: dict[str, dict[str, Any]] = {
            "upstream": {"url": str(backend_server.make_url("/v1")), "idle_timeout_s": 5.0},
            "tasks": {"path": str(tasks_file)},
            "results": {"path": str(results_path)},
            "shutdown": {"drain_delay_s": 0.0, "grace_period_s": 5.0},
        }
        for name, values in sections.items():
            overrides.setdefault(name, {}).update(values)
        config = load_config(None, overrides, environ={})
        client = await aiohttp_client(make_app(config))
        for _ in range(200):
            if client.app[TASKS].ready:
                break
            await asyncio.sleep(0.01)
        return client

    return factory


async def rows_of(
    client: TestClient[web.Request, web.Application], path: Path
) -> list[dict[str, Any]]:
    """Result rows once the grade queue is empty."""
    assert await client.app[QUEUE].drain(10)
    return await asyncio.to_thread(read_rows, path)


def read_rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [loads_exact(line) for line in path.read_text().splitlines() if line.strip()]
