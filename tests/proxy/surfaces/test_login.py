"""The live page behind inbound keys: a login form, a same-site HTTP-only session cookie that
opens the page's JSON and nothing else; /health and the icon open to all."""

from __future__ import annotations

from http.cookies import SimpleCookie
from typing import Any

import pytest

from proxy.app import make_admin_app
from proxy.pipeline.guard import KEY_HEADER
from proxy.uisession import COOKIE
from tests.support.proxy import Client, ProxyFactory

KEY = "k-page-secret"


async def _keyed_proxy(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch, **auth: object
) -> Client:
    monkeypatch.setenv("TEST_PAGE_KEYS", f"k-other,{KEY}")
    return await make_proxy(auth={"keys_env": "TEST_PAGE_KEYS", **auth})


async def _log_in(client: Client, key: str = KEY) -> tuple[int, SimpleCookie]:
    response = await client.post("/ui/login", data={"key": key}, allow_redirects=False)
    cookie: SimpleCookie = SimpleCookie()
    for header in response.headers.getall("Set-Cookie", []):
        cookie.load(header)
    return response.status, cookie


async def test_without_a_session_the_page_is_a_login_form(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = await _keyed_proxy(make_proxy, monkeypatch)
    answer = await client.get("/ui")
    text = await answer.text()
    assert answer.status == 200
    assert 'action="/ui/login"' in text
    assert "scoreboard.json" not in text  # the page's script is not served
    keyed = await (await client.get("/ui", headers={KEY_HEADER: KEY})).text()
    assert "scoreboard.json" in keyed


async def test_a_valid_key_logs_in_with_a_strict_http_only_cookie_not_the_key(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = await _keyed_proxy(make_proxy, monkeypatch)
    status, cookie = await _log_in(client)
    assert status == 303
    morsel = cookie[COOKIE]
    assert morsel["httponly"] is True
    assert morsel["samesite"] == "Strict"
    assert morsel["path"] == "/ui"
    assert KEY not in morsel.value
    page = await client.get("/ui", headers={"Cookie": f"{COOKIE}={morsel.value}"})
    assert "scoreboard.json" in await page.text()


@pytest.mark.parametrize(
    "given", [pytest.param("k-wrong", id="wrong_key"), pytest.param("", id="empty")]
)
async def test_a_wrong_key_gets_the_form_again_and_no_cookie(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    client = await _keyed_proxy(make_proxy, monkeypatch)
    status, cookie = await _log_in(client, given)
    assert status == 401
    assert COOKIE not in cookie


@pytest.mark.parametrize(
    ("method", "path", "with_session", "status"),
    [
        pytest.param("GET", "/ui/scoreboard.json", True, 200, id="board_with_session"),
        pytest.param("GET", "/ui/failures.json", True, 200, id="inspector_with_session"),
        pytest.param("GET", "/ui/scoreboard.json", False, 401, id="board_without"),
        pytest.param("GET", "/ui/failures.json", False, 401, id="inspector_without"),
        pytest.param("POST", "/v1/chat/completions", True, 401, id="api_ignores_the_cookie"),
        pytest.param("GET", "/v1/models", True, 401, id="models_ignore_the_cookie"),
        pytest.param("GET", "/metrics", True, 401, id="metrics_ignore_the_cookie"),
        pytest.param("GET", "/ui/worker.json", True, 401, id="worker_reading_ignores_it"),
        pytest.param("GET", "/health", False, 200, id="health_open_like_readyz"),
        pytest.param("GET", "/readyz", False, 200, id="readyz_open"),
        pytest.param("GET", "/favicon.ico", False, 200, id="icon_open"),
    ],
)
async def test_the_session_opens_the_page_json_and_nothing_else(
    make_proxy: ProxyFactory,
    monkeypatch: pytest.MonkeyPatch,
    method: str,
    path: str,
    with_session: bool,
    status: int,
) -> None:
    client = await _keyed_proxy(make_proxy, monkeypatch)
    headers = {}
    if with_session:  # (the test client keeps cookies: log in only where the case has one)
        _, cookie = await _log_in(client)
        headers = {"Cookie": f"{COOKIE}={cookie[COOKIE].value}"}
    answer = await client.request(method, path, headers=headers, data=b"{}" * (method == "POST"))
    assert answer.status == status


async def test_the_inspector_is_open_to_a_session_on_the_board(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = await _keyed_proxy(make_proxy, monkeypatch)
    _, cookie = await _log_in(client)
    board = await client.get(
        "/ui/scoreboard.json", headers={"Cookie": f"{COOKIE}={cookie[COOKIE].value}"}
    )
    assert (await board.json())["inspector"] is True


async def test_logging_out_clears_the_cookie(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = await _keyed_proxy(make_proxy, monkeypatch)
    _, cookie = await _log_in(client)
    answer = await client.post(
        "/ui/logout",
        headers={"Cookie": f"{COOKIE}={cookie[COOKIE].value}"},
        allow_redirects=False,
    )
    cleared: SimpleCookie = SimpleCookie()
    cleared.load(answer.headers["Set-Cookie"])
    assert answer.status == 303
    assert cleared[COOKIE].value == ""


async def test_without_keys_the_page_is_served_and_no_form_appears(
    make_proxy: ProxyFactory,
) -> None:
    client = await make_proxy()
    text = await (await client.get("/ui")).text()
    assert "scoreboard.json" in text
    assert 'action="/ui/login"' not in text


async def test_the_icon_is_an_svg(make_proxy: ProxyFactory) -> None:
    client = await make_proxy()
    answer = await client.get("/favicon.ico")
    assert answer.status == 200
    assert answer.content_type == "image/svg+xml"
    assert (await answer.read()).startswith(b"<svg")


async def test_the_admin_port_has_the_same_login(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch, aiohttp_client: Any
) -> None:
    """With admin.port the page lives there, behind the same form, even with /metrics open."""
    client = await _keyed_proxy(make_proxy, monkeypatch, protect_metrics=False)
    admin: Client = await aiohttp_client(make_admin_app(client.app))
    assert 'action="/ui/login"' in await (await admin.get("/ui")).text()
    assert (await admin.get("/ui/scoreboard.json")).status == 401
    assert (await admin.get("/health")).status == 200
    status, cookie = await _log_in(admin)
    assert status == 303
    board = await admin.get(
        "/ui/scoreboard.json", headers={"Cookie": f"{COOKIE}={cookie[COOKIE].value}"}
    )
    assert board.status == 200
