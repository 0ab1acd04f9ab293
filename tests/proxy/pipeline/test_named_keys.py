"""Named inbound keys end to end: the guard sets the matched key's id on the request
(``KEY_ID``), rows carry it as ``key_id``, the request and token series as the bounded ``key``
label; the page's login session resolves to the key it was issued for; a SIGHUP re-reads a
rotated ``secret_file``. The demo backend answers in OpenAI's exact shapes, the openai SDK asks."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
from aiohttp.test_utils import TestServer, make_mocked_request

from proxy.app import GUARD, reload_keys
from proxy.config.keys import InboundKey
from proxy.demo.answers import SAMPLE_TASKS_PATH, load_demo_tasks
from proxy.demo.backend import make_demo_backend
from proxy.pipeline.guard import KEY_HEADER, KEY_ID, Guard
from proxy.pipeline.record.metrics import KeyLabels, ProxyMetrics
from proxy.uisession import COOKIE, Sessions
from tests.support.live import Live, live_proxy
from tests.support.process import free_port, serve_config, serving
from tests.support.proxy import read_rows

DEMO_TASK = {t.id: t for t in load_demo_tasks(SAMPLE_TASKS_PATH)}["tickets.duration_format.01"]
PROMPT: Any = [{"role": "user", "content": DEMO_TASK.prompt}]


@pytest.fixture
async def demo(aiohttp_server: Any) -> TestServer:
    server: TestServer = await aiohttp_server(make_demo_backend(SAMPLE_TASKS_PATH))
    return server


@pytest.fixture
def keyed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("TEAM_A_KEY", "sk-team-a")
    monkeypatch.setenv("OLD_KEYS", "sk-unnamed")
    (tmp_path / "team-b.key").write_text("sk-team-b\n", encoding="utf-8")
    return {
        "keys": [
            {"id": "team-a", "secret_env": "TEAM_A_KEY"},
            {"id": "team-b", "secret_file": str(tmp_path / "team-b.key")},
        ],
        "keys_env": "OLD_KEYS",
    }


@pytest.fixture
async def proxy(demo: TestServer, keyed: dict[str, Any], tmp_path: Path) -> AsyncIterator[Live]:
    results = tmp_path / "grades.jsonl"
    async with live_proxy(str(demo.make_url("/v1")), SAMPLE_TASKS_PATH, results, auth=keyed) as p:
        yield p


async def _ask(live: Live, secret: str, stream: bool = False) -> None:
    async with openai.AsyncOpenAI(
        base_url=f"{live.base}/v1", api_key=secret, max_retries=0
    ) as client:
        headers = {"X-Grade-Task": DEMO_TASK.id}
        if stream:
            chunks = await client.chat.completions.create(
                model="gradeproxy-demo", messages=PROMPT, stream=True,
                stream_options={"include_usage": True}, extra_headers=headers,
            )  # fmt: skip
            [_ async for _ in chunks]
        else:
            await client.chat.completions.create(
                model="gradeproxy-demo", messages=PROMPT, extra_headers=headers
            )


@pytest.mark.parametrize(
    ("secret", "stream", "key_id", "label"),
    [
        pytest.param("sk-team-a", False, "team-a", "team-a", id="named_from_env"),
        pytest.param("sk-team-b", True, "team-b", "team-b", id="named_from_file_streamed"),
        pytest.param("sk-unnamed", False, None, "none", id="unnamed_keys_env_key"),
    ],
)
async def test_the_key_id_reaches_the_row_and_the_key_label(
    proxy: Live, tmp_path: Path, secret: str, stream: bool, key_id: str | None, label: str
) -> None:
    await _ask(proxy, secret, stream)
    await proxy.drained()
    [row] = read_rows(tmp_path / "grades.jsonl")
    assert row["key_id"] == key_id
    assert list(row)[-1] == "key_id"  # the builder's order (docs/rows.md)
    assert proxy.metric("gradeproxy_requests_total", code="200", key=label) == 1
    assert proxy.metric("gradeproxy_requests_total", code="200") == 1  # no other label
    tokens = proxy.metric(
        "gradeproxy_tokens_total", type="output", task=DEMO_TASK.id, variant="primary", key=label
    )
    assert tokens == row["usage"]["output_tokens"] > 0


async def test_without_auth_the_row_has_no_key_and_the_label_is_none(
    demo: TestServer, tmp_path: Path
) -> None:
    results = tmp_path / "grades.jsonl"
    async with live_proxy(str(demo.make_url("/v1")), SAMPLE_TASKS_PATH, results) as live:
        await _ask(live, "sk-anything")
        await live.drained()
        [row] = read_rows(results)
        assert row["key_id"] is None
        assert live.metric("gradeproxy_requests_total", code="200", key="none") == 1


async def test_the_key_label_is_bounded_past_max_keys(
    demo: TestServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = [{"id": f"team-{n}", "secret_env": f"TEAM_{n}_KEY"} for n in range(4)]
    for n in range(4):
        monkeypatch.setenv(f"TEAM_{n}_KEY", f"sk-{n}")
    async with live_proxy(
        str(demo.make_url("/v1")), None, None, auth={"keys": keys}, metrics={"max_keys": 2}
    ) as live:
        for n in range(4):
            await _ask(live, f"sk-{n}")
        assert [live.metric("gradeproxy_requests_total", key=f"team-{n}") for n in range(4)] == [
            1, 1, 0, 0,
        ]  # fmt: skip
        assert live.metric("gradeproxy_requests_total", key="other") == 2


def test_key_labels_hold_10000_ids_to_the_cap() -> None:
    labels = KeyLabels(cap=50)
    seen = {labels(f"key-{n}") for n in range(10_000)}
    assert seen == {f"key-{n}" for n in range(50)} | {"other"}
    assert labels(None) == "none"


@pytest.mark.parametrize(
    ("issued_with", "key_id"),
    [
        pytest.param(b"sk-team-a", "team-a", id="named_key_session"),
        pytest.param(b"sk-team-b", "team-b", id="second_named_key_session"),
        pytest.param(b"sk-unnamed", None, id="unnamed_key_session_has_no_id"),
    ],
)
def test_a_login_session_resolves_to_the_key_it_was_issued_for(
    issued_with: bytes, key_id: str | None
) -> None:
    keys = (
        InboundKey("team-a", b"sk-team-a"),
        InboundKey("team-b", b"sk-team-b"),
        InboundKey(None, b"sk-unnamed"),
    )
    guard = Guard(keys, protect_metrics=True, max_body_bytes=1024, watchdog=None)
    cookie = guard.sessions.issue(issued_with.decode())
    assert Sessions(keys).key_of(cookie) == keys[[k.secret for k in keys].index(issued_with)]
    request = make_mocked_request(
        "GET", "/ui/scoreboard.json", headers={"Cookie": f"{COOKIE}={cookie}"}
    )
    assert guard.has_session(request)
    assert request.get(KEY_ID) == key_id
    assert Sessions(keys[2:]).key_of(cookie) is (keys[2] if key_id is None else None)


async def test_a_logged_in_page_acts_for_its_key(proxy: Live) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.post(
            proxy.base + "/ui/login", data={"key": "sk-team-b"}, allow_redirects=False
        ) as login:
            cookie = login.cookies[COOKIE].value
        assert proxy.app[GUARD].sessions.key_of(cookie) == InboundKey("team-b", b"sk-team-b")
        async with session.get(
            proxy.base + "/ui/scoreboard.json", headers={"Cookie": f"{COOKIE}={cookie}"}
        ) as page:
            assert page.status == 200


async def _status(live: Live, secret: str) -> int:
    async with (
        aiohttp.ClientSession() as session,
        session.get(live.base + "/v1/models", headers={KEY_HEADER: secret}) as response,
    ):
        return response.status


async def test_sighup_rereads_a_rotated_secret_file(proxy: Live, tmp_path: Path) -> None:
    assert await _status(proxy, "sk-team-b") == 200
    (tmp_path / "team-b.key").write_text("sk-team-b-rotated\n", encoding="utf-8")
    assert await _status(proxy, "sk-team-b-rotated") == 401  # read at start, not per request
    assert reload_keys(proxy.app)
    assert await _status(proxy, "sk-team-b-rotated") == 200
    assert await _status(proxy, "sk-team-b") == 401
    assert await _status(proxy, "sk-team-a") == 200  # the others stay


async def test_a_reload_that_cannot_read_a_secret_keeps_the_keys_in_use(
    proxy: Live, tmp_path: Path
) -> None:
    (tmp_path / "team-b.key").unlink()
    assert not reload_keys(proxy.app)
    assert await _status(proxy, "sk-team-b") == 200
    (tmp_path / "team-b.key").write_text("", encoding="utf-8")
    assert not reload_keys(proxy.app)
    assert await _status(proxy, "sk-team-b") == 200


@pytest.mark.parametrize(
    ("secret", "valid", "key_id"),
    [
        pytest.param("sk-team-a", True, "team-a", id="named"),
        pytest.param("sk-unnamed", True, None, id="unnamed"),
        pytest.param("sk-wrong", False, None, id="wrong"),
    ],
)
def test_a_page_route_checking_a_key_on_an_open_path_learns_its_id(
    secret: str, valid: bool, key_id: str | None
) -> None:
    keys = (InboundKey("team-a", b"sk-team-a"), InboundKey(None, b"sk-unnamed"))
    guard = Guard(keys, protect_metrics=True, max_body_bytes=1024, watchdog=None)
    request = make_mocked_request("GET", "/ui", headers={KEY_HEADER: secret})
    assert guard.has_valid_key(request) is valid
    assert request.get(KEY_ID) == key_id


def test_a_guard_without_keys_sets_no_key_id() -> None:
    request = make_mocked_request("GET", "/v1/models")
    guard = Guard((), protect_metrics=True, max_body_bytes=1024, watchdog=None)
    guard._authorise(request)
    assert KEY_ID not in request
    assert ProxyMetrics().key_label(request.get(KEY_ID)) == "none"


@pytest.mark.e2e
async def test_serve_rereads_the_secret_file_on_sighup(tmp_path: Path, demo: TestServer) -> None:
    """The real signal path: ``gradeproxy serve``, a rotated secret file, SIGHUP."""
    secret = tmp_path / "agents.key"
    secret.write_text("sk-before\n", encoding="utf-8")
    port = free_port()
    config = serve_config(
        tmp_path / "config.yaml",
        upstream=str(demo.make_url("/v1")),
        port=port,
        tasks=SAMPLE_TASKS_PATH,
        results=tmp_path / "grades.jsonl",
        drain_delay_s=0,
        grace_period_s=5,
    )
    with config.open("a", encoding="utf-8") as extra:
        extra.write(f"auth:\n  keys:\n    - id: agents\n      secret_file: {secret}\n")
    async with serving(config, port) as (process, base), aiohttp.ClientSession() as session:

        async def status(key: str) -> int:
            async with session.get(f"{base}/v1/models", headers={KEY_HEADER: key}) as response:
                return response.status

        assert (await status("sk-before"), await status("sk-after")) == (200, 401)
        secret.write_text("sk-after\n", encoding="utf-8")
        process.send_signal(signal.SIGHUP)
        for _ in range(200):  # the reload runs on the server's loop, after the signal
            if await status("sk-after") == 200:
                break
            await asyncio.sleep(0.05)
        assert (await status("sk-after"), await status("sk-before")) == (200, 401)
