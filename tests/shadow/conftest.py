"""Fixtures: a primary and a shadow :class:`PlanBackend`, and a proxy factory whose config may
carry ``routes`` and ``shadow`` blocks (lists and nested mappings, unlike tests/proxy's)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from proxy.app import make_app
from proxy.config import Config, load_config
from proxy.logs import configure_logging
from proxy.state import QUEUE, SHADOWS, TASKS
from tests.proxy.conftest import TASK_LINES, read_rows
from tests.shadow.harness import PlanBackend

Client = TestClient[web.Request, web.Application]
ProxyFactory = Callable[..., Awaitable[Client]]
ServerFactory = Callable[..., Awaitable[TestServer]]

__all__ = ["Client", "ProxyFactory", "metric", "settle"]


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
def results_path(tmp_path: Path) -> Path:
    return tmp_path / "results" / "grades.jsonl"


@pytest.fixture
def primary() -> PlanBackend:
    return PlanBackend("primary")


@pytest.fixture
def shadow() -> PlanBackend:
    return PlanBackend("shadow")


@pytest.fixture
async def primary_url(primary: PlanBackend, aiohttp_server: ServerFactory) -> str:
    return str((await aiohttp_server(primary.app())).make_url("/v1"))


@pytest.fixture
async def shadow_url(shadow: PlanBackend, aiohttp_server: ServerFactory) -> str:
    return str((await aiohttp_server(shadow.app())).make_url("/v1"))


def build_config(primary_url: str, tasks: Path, results: Path, **sections: Any) -> Config:
    overrides: dict[str, Any] = {
        "upstream": {"url": primary_url, "idle_timeout_s": 5.0},
        "tasks": {"path": str(tasks)},
        "results": {"path": str(results)},
        "shutdown": {"drain_delay_s": 0.0, "grace_period_s": 5.0},
    }
    for name, values in sections.items():
        if isinstance(values, dict):
            overrides.setdefault(name, {}).update(values)
        else:
            overrides[name] = values
    return load_config(None, overrides, environ={})


@pytest.fixture
def make_proxy(
    primary_url: str,
    tasks_file: Path,
    results_path: Path,
    aiohttp_client: Callable[..., Awaitable[Client]],
) -> ProxyFactory:
    async def factory(**sections: Any) -> Client:
        config = build_config(primary_url, tasks_file, results_path, **sections)
        client = await aiohttp_client(make_app(config))
        for _ in range(200):
            if client.app[TASKS].ready:
                break
            await asyncio.sleep(0.01)
        return client

    return factory


async def settle(client: Client, results: Path) -> list[dict[str, Any]]:
    """Rows once every shadow leg has ended and the grade queue is empty."""
    await client.app[SHADOWS].idle()
    assert await client.app[QUEUE].drain(10)
    return await asyncio.to_thread(read_rows, results)


async def metric(client: Client, name: str, **labels: str) -> float:
    text = await (await client.get("/metrics")).text()
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total
