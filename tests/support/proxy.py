"""A proxy app for one test: its config from a few sections, its readiness, its rows.

Both fixture factories (``make_proxy`` against a :class:`ScriptedBackend`, ``make_shadow_proxy``
against a primary :class:`PlanBackend`) and :func:`tests.support.live.live_proxy` build their
config here, so a section means the same in every suite.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import ClientResponse, web
from aiohttp.test_utils import TestClient

from grader.json import loads_exact
from proxy.config import Config, load_config
from proxy.state import QUEUE, SHADOWS, TASKS
from tests.support.backend import SSE, Reply, ScriptedBackend, wire

Client = TestClient[web.Request, web.Application]
ProxyFactory = Callable[..., Awaitable[Client]]


def build_config(
    upstream_url: str,
    tasks: Path | None,
    results: Path | None,
    /,
    listen_port: int | None = None,
    **sections: Any,
) -> Config:
    """Defaults for tests (short timeouts, no drain delay), then ``sections``: a mapping is
    merged into its section, anything else (the ``routes`` list) replaces it. ``results`` None
    means no results file at all. Positional-only: ``tasks`` and ``results`` are sections too."""
    overrides: dict[str, Any] = {
        "upstream": {"url": upstream_url, "idle_timeout_s": 5.0},
        "tasks": {"path": str(tasks) if tasks else None},
        "results": {"path": str(results) if results else None},
        "shutdown": {"drain_delay_s": 0.0, "grace_period_s": 5.0},
    }
    if listen_port is not None:
        overrides["listen"] = {"port": listen_port}
    for name, values in sections.items():
        if isinstance(values, dict):
            overrides.setdefault(name, {}).update(values)
        else:
            overrides[name] = values
    config = load_config(None, overrides, environ={})
    if results is None:  # overrides cannot say null: None means "not given" there
        config = dataclasses.replace(config, results=dataclasses.replace(config.results, path=None))
    return config


async def tasks_loaded(app: web.Application) -> None:
    """Wait (up to two seconds) for the first task load; a broken file stays unready."""
    for _ in range(200):
        if app[TASKS].ready:
            return
        await asyncio.sleep(0.01)


async def rows_of(client: Client, path: Path) -> list[dict[str, Any]]:
    """Result rows once the grade queue is empty."""
    assert await client.app[QUEUE].drain(10)
    return await asyncio.to_thread(read_rows, path)


async def settle(client: Client, results: Path) -> list[dict[str, Any]]:
    """Rows once every shadow leg has ended and the grade queue is empty."""
    await client.app[SHADOWS].idle()
    return await rows_of(client, results)


def read_rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [loads_exact(line) for line in path.read_text().splitlines() if line.strip()]


async def held_streams(
    client: Client, backend: ScriptedBackend, count: int
) -> tuple[list[ClientResponse], asyncio.Event]:
    """``count`` streams relayed up to their first chunk and held there (the backend waits on
    the returned gate): relays in progress, until the test sets it."""
    gate = asyncio.Event()
    for _ in range(count):
        backend.replies.append(
            Reply(body=wire("openai_single_tool.sse"), content_type=SSE, split_at=[40], gate=gate)
        )
    responses = [await client.post("/v1/chat/completions", data=b"{}") for _ in range(count)]
    for response in responses:
        await response.content.readany()  # the first chunk arrived: the relay is in progress
    return responses, gate
