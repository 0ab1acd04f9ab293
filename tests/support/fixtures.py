"""The fixtures every suite shares, registered once (tests/conftest.py lists this plugin).

A scripted backend and a proxy pointed at it (``make_proxy``); a primary and a shadow
:class:`PlanBackend` and a proxy whose config may carry ``routes`` and ``shadow`` blocks
(``make_shadow_proxy``); a loopback ``listener`` no request may reach. All on real sockets.
``agents_python``: the OpenAI Agents SDK venv's interpreter (:mod:`tests.support.agents_sdk`).
The task file is :data:`TASK_LINES` unless the module marks another:
``pytestmark = pytest.mark.task_file(EPISODES)``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from proxy.app import make_app
from proxy.logs import configure_logging
from tests.support import agents_sdk
from tests.support.backend import Listener, ScriptedBackend
from tests.support.plan_backend import PlanBackend
from tests.support.proxy import Client, ProxyFactory, build_config, tasks_loaded
from tests.support.tasks import TASK_LINES

ServerFactory = Callable[..., Awaitable[TestServer]]
ClientFactory = Callable[[web.Application], Awaitable[Client]]


@pytest.fixture(autouse=True)
def _quiet_logs() -> None:
    configure_logging("warning", "json", cache=False)


@pytest.fixture
def tasks_file(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    marker = request.node.get_closest_marker("task_file")
    source: Path | None = marker.args[0] if marker else None
    path = tmp_path / "tasks" / (source.name if source else "tasks.jsonl")
    path.parent.mkdir()
    path.write_bytes(source.read_bytes() if source else b"\n".join(TASK_LINES) + b"\n")
    return path


@pytest.fixture
def results_path(tmp_path: Path) -> Path:
    return tmp_path / "results" / "grades.jsonl"


@pytest.fixture
def backend() -> ScriptedBackend:
    return ScriptedBackend()


@pytest.fixture
async def backend_server(backend: ScriptedBackend, aiohttp_server: ServerFactory) -> TestServer:
    return await aiohttp_server(backend.app())


def _factory(
    upstream_url: str, tasks: Path, results: Path, aiohttp_client: ClientFactory
) -> ProxyFactory:
    async def factory(**sections: Any) -> Client:
        config = build_config(upstream_url, tasks, results, **sections)
        client = await aiohttp_client(make_app(config))
        await tasks_loaded(client.app)
        return client

    return factory


@pytest.fixture
def make_proxy(
    backend_server: TestServer,
    tasks_file: Path,
    results_path: Path,
    aiohttp_client: ClientFactory,
) -> ProxyFactory:
    return _factory(str(backend_server.make_url("/v1")), tasks_file, results_path, aiohttp_client)


def by_client(make_proxy: ProxyFactory, client: str) -> ProxyFactory:
    """``make_proxy`` with ``upstream.client`` set: a module that wants its cases run through
    both upstream transports overrides ``make_proxy`` with this, parametrised by client."""

    async def factory(**sections: Any) -> Client:
        upstream = {**sections.pop("upstream", {}), "client": client}
        return await make_proxy(upstream=upstream, **sections)

    return factory


@pytest.fixture
def listener() -> Iterator[Listener]:
    """A loopback host that must never be reached (hostile schemas point at it)."""
    server = Listener()
    yield server
    server.close()


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


@pytest.fixture
def make_shadow_proxy(
    primary_url: str,
    tasks_file: Path,
    results_path: Path,
    aiohttp_client: ClientFactory,
) -> ProxyFactory:
    return _factory(primary_url, tasks_file, results_path, aiohttp_client)


@pytest.fixture(scope="session")
def agents_python() -> str:
    """Built (or found) once a session: a test that needs no SDK never waits for it."""
    return agents_sdk.agents_python()
