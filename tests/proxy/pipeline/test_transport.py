"""The upstream transport seam: the client each upstream uses, a real forward proxy
(tinyproxy) reached through ``HTTP(S)_PROXY`` when ``upstream.trust_env`` says so, an https
upstream with a CA of its own that demands a client certificate (mTLS), and the fast client's
per-origin connection cap with its metric. The byte-transparency and capture cases run through
both transports in test_forward, test_live_grading and test_responses_api."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from proxy.app import make_app
from proxy.config import ConfigError, load_config
from proxy.pipeline.transport import TRANSPORTS, AiohttpTransport, FastTransport, proxied
from tests.support.backend import SSE, Reply, ScriptedBackend, wire
from tests.support.fixtures import ClientFactory, ServerFactory
from tests.support.forward_proxy import VIA_NAME, tinyproxy
from tests.support.metrics import metric_value
from tests.support.pki import Pki, mint
from tests.support.proxy import Client, ProxyFactory, build_config, tasks_loaded

CLIENTS = ["fast", "aiohttp"]
PROXY_VARIABLES = ["HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY"]
BODY = b'{"model":"m","messages":[]}'


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return mint(tmp_path / "pki")


@pytest.fixture
def clean_proxy_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


@pytest.fixture
def forward_proxy(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    with tinyproxy(tmp_path) as running:
        yield running


@pytest.fixture
async def mtls_url(pki: Pki, backend: ScriptedBackend, aiohttp_server: ServerFactory) -> str:
    """An https backend that trusts only the test CA's client certificates."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=pki.ca)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    context.verify_mode = ssl.CERT_REQUIRED
    server: TestServer = await aiohttp_server(backend.app(), ssl=context)
    return str(server.make_url("/v1"))


async def proxy_to(
    aiohttp_client: ClientFactory, url: str, tasks_file: Path, **upstream: Any
) -> Client:
    config = build_config(url, tasks_file, None, upstream=upstream)
    client = await aiohttp_client(make_app(config))
    await tasks_loaded(client.app)
    return client


def tls_block(pki: Pki, *, ca: bool = True, cert: bool = True, **extra: Any) -> dict[str, Any]:
    block: dict[str, Any] = dict(extra)
    if ca:
        block["ca_file"] = str(pki.ca)
    if cert:
        block |= {"cert_file": str(pki.client_cert), "key_file": str(pki.client_key)}
    return block


# --- mTLS -------------------------------------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(
    ("tls", "status"),
    [
        pytest.param({}, 200, id="own_ca_and_client_certificate"),
        pytest.param({"cert": False}, 502, id="no_client_certificate_is_refused"),
        pytest.param({"ca": False}, 502, id="system_cas_do_not_know_the_upstream"),
        pytest.param({"ca": False, "verify": False}, 200, id="verify_false_skips_the_check"),
    ],
)
async def test_mtls_upstream(
    aiohttp_client: ClientFactory,
    tasks_file: Path,
    mtls_url: str,
    backend: ScriptedBackend,
    pki: Pki,
    client: str,
    tls: dict[str, Any],
    status: int,
) -> None:
    backend.replies.append(Reply(body=b'{"ok":1}'))
    proxy = await proxy_to(
        aiohttp_client, mtls_url, tasks_file, client=client, tls=tls_block(pki, **tls)
    )
    response = await proxy.post("/v1/chat/completions", data=BODY)
    assert response.status == status, await response.text()
    if status == 200:
        assert await response.read() == b'{"ok":1}'
        assert backend.seen[-1].body == BODY
    else:
        assert (await response.json())["error"]["code"] in (
            "upstream_unreachable",
            "upstream_protocol_error",
        )
        assert backend.seen == []  # nothing reached the handler


@pytest.mark.parametrize("client", CLIENTS)
async def test_a_route_has_a_tls_block_of_its_own(
    aiohttp_client: ClientFactory,
    tasks_file: Path,
    mtls_url: str,
    backend_server: TestServer,
    backend: ScriptedBackend,
    pki: Pki,
    client: str,
) -> None:
    """The default upstream is plain http; the route to the mTLS one carries the certificates."""
    route = {"match": "secure-*", "url": mtls_url, "client": client, "tls": tls_block(pki)}
    config = build_config(str(backend_server.make_url("/v1")), tasks_file, None, routes=[route])
    proxy = await aiohttp_client(make_app(config))
    plain = await proxy.post("/v1/chat/completions", data=BODY)
    secure = await proxy.post("/v1/chat/completions", data=b'{"model":"secure-1"}')
    assert (plain.status, secure.status) == (200, 200)
    assert [seen.body for seen in backend.seen] == [BODY, b'{"model":"secure-1"}']


# --- a forward proxy from the environment -----------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(
    ("trust_env", "no_proxy", "via_proxy"),
    [
        pytest.param(True, None, True, id="trust_env_goes_through_the_proxy"),
        pytest.param(True, "127.0.0.1", False, id="no_proxy_goes_direct"),
        pytest.param(False, None, False, id="without_trust_env_the_variables_are_ignored"),
    ],
)
async def test_http_proxy_from_the_environment(
    aiohttp_client: ClientFactory,
    tasks_file: Path,
    backend_server: TestServer,
    backend: ScriptedBackend,
    clean_proxy_env: pytest.MonkeyPatch,
    forward_proxy: tuple[str, Path],
    client: str,
    trust_env: bool,
    no_proxy: str | None,
    via_proxy: bool,
) -> None:
    clean_proxy_env.setenv("HTTP_PROXY", forward_proxy[0])
    if no_proxy is not None:
        clean_proxy_env.setenv("NO_PROXY", no_proxy)
    reply = Reply(body=wire("openai_single_tool.sse"), content_type=SSE, split_at=[7, 300])
    backend.replies.append(reply)
    url = str(backend_server.make_url("/v1"))
    proxy = await proxy_to(aiohttp_client, url, tasks_file, client=client, trust_env=trust_env)
    response = await proxy.post("/v1/chat/completions", data=BODY)
    assert response.status == 200
    assert await response.read() == reply.body  # byte for byte through the forward proxy
    assert (VIA_NAME in backend.seen[-1].headers.get("Via", "")) is via_proxy
    transport = proxy.app[TRANSPORTS]["upstream"]
    expected = AiohttpTransport if via_proxy or client == "aiohttp" else FastTransport
    assert type(transport) is expected


@pytest.mark.parametrize("client", CLIENTS)
async def test_https_upstream_through_the_proxy_tunnel_with_mtls(
    aiohttp_client: ClientFactory,
    tasks_file: Path,
    mtls_url: str,
    backend: ScriptedBackend,
    pki: Pki,
    clean_proxy_env: pytest.MonkeyPatch,
    forward_proxy: tuple[str, Path],
    client: str,
) -> None:
    """CONNECT through tinyproxy, then TLS with the test CA and the client certificate."""
    clean_proxy_env.setenv("HTTPS_PROXY", forward_proxy[0])
    backend.replies.append(Reply(body=b'{"tunnelled":true}'))
    proxy = await proxy_to(
        aiohttp_client, mtls_url, tasks_file, client=client, trust_env=True, tls=tls_block(pki)
    )
    response = await proxy.post("/v1/chat/completions", data=BODY)
    assert response.status == 200, await response.text()
    assert await response.read() == b'{"tunnelled":true}'
    assert "CONNECT" in forward_proxy[1].read_text()


@pytest.mark.parametrize(
    ("url", "environ", "expected"),
    [
        ("http://api.example/v1", {"HTTP_PROXY": "http://p:3128"}, True),
        ("http://api.example/v1", {"http_proxy": "http://p:3128"}, True),
        ("https://api.example/v1", {"HTTP_PROXY": "http://p:3128"}, False),
        ("https://api.example/v1", {"HTTPS_PROXY": "http://p:3128"}, True),
        ("http://api.example/v1", {"HTTP_PROXY": "http://p", "NO_PROXY": "api.example"}, False),
        ("http://a.api.example/v1", {"HTTP_PROXY": "http://p", "NO_PROXY": ".api.example"}, False),
        ("http://api.example:8000/v1", {"HTTP_PROXY": "http://p", "NO_PROXY": "*"}, False),
        ("http://other.example/v1", {"HTTP_PROXY": "http://p", "NO_PROXY": "api.example"}, True),
        ("http://api.example/v1", {"HTTP_PROXY": ""}, False),
        ("http://api.example/v1", {}, False),
    ],
    ids=[
        "http_proxy",
        "lower_case_name",
        "https_needs_https_proxy",
        "https_proxy",
        "no_proxy_host",
        "no_proxy_domain_suffix",
        "no_proxy_star",
        "no_proxy_other_host",
        "empty_variable",
        "no_variables",
    ],
)
def test_which_urls_go_through_a_proxy(url: str, environ: dict[str, str], expected: bool) -> None:
    assert proxied(url, environ) is expected


# --- the fast client's per-origin cap ---------------------------------------------------------


async def test_a_request_past_the_cap_waits_for_a_connection_and_is_counted(
    make_proxy: ProxyFactory, backend: ScriptedBackend
) -> None:
    gate = asyncio.Event()
    held = Reply(body=wire("openai_single_tool.sse"), content_type=SSE, split_at=[40], gate=gate)
    backend.replies.extend([held, Reply(body=b'{"second":1}')])
    client = await make_proxy(upstream={"max_connections_per_origin": 1})
    first = await client.post("/v1/chat/completions", data=BODY)
    await first.content.readany()  # the first holds the one connection
    second = asyncio.create_task(client.post("/v1/chat/completions", data=BODY))
    for _ in range(200):
        metrics = await (await client.get("/metrics")).text()
        if metric_value(metrics, "gradeproxy_upstream_connection_waits_total") == 1:
            break
        await asyncio.sleep(0.01)
    assert metric_value(metrics, "gradeproxy_upstream_connection_waits_total") == 1
    assert len(backend.seen) == 1  # the second is waiting, not sent
    gate.set()
    assert await first.read()
    answer = await second
    assert (answer.status, await answer.read()) == (200, b'{"second":1}')
    assert len(backend.seen) == 2


async def test_no_connection_free_within_connect_timeout_is_a_504(
    make_proxy: ProxyFactory, backend: ScriptedBackend
) -> None:
    gate = asyncio.Event()
    held = Reply(body=wire("openai_single_tool.sse"), content_type=SSE, split_at=[40], gate=gate)
    backend.replies.append(held)
    upstream = {"max_connections_per_origin": 1, "connect_timeout_s": 0.2}
    client = await make_proxy(upstream=upstream)
    first = await client.post("/v1/chat/completions", data=BODY)
    await first.content.readany()
    second = await client.post("/v1/chat/completions", data=BODY)
    error = (await second.json())["error"]
    assert (second.status, error["code"]) == (504, "upstream_timeout")
    assert "max_connections_per_origin" in error["message"]
    gate.set()
    assert await first.read()


async def test_without_a_cap_nothing_waits(
    make_proxy: ProxyFactory, backend: ScriptedBackend
) -> None:
    gate = asyncio.Event()
    held = Reply(body=wire("openai_single_tool.sse"), content_type=SSE, split_at=[40], gate=gate)
    backend.replies.extend([held, held])
    client = await make_proxy()
    responses = [await client.post("/v1/chat/completions", data=BODY) for _ in range(2)]
    for response in responses:
        await response.content.readany()  # both relaying at once: two connections
    metrics = await (await client.get("/metrics")).text()
    assert metric_value(metrics, "gradeproxy_upstream_connection_waits_total") == 0
    gate.set()
    for response in responses:
        assert await response.read()


# --- configuration ----------------------------------------------------------------------------


def _config(upstream: dict[str, Any], routes: list[dict[str, Any]] | None = None) -> None:
    overrides: dict[str, Any] = {"upstream": {"url": "https://api.example/v1", **upstream}}
    if routes is not None:
        overrides["routes"] = routes
    load_config(None, overrides, environ={})


@pytest.mark.parametrize(
    ("upstream", "routes", "message"),
    [
        pytest.param({"client": "curl"}, None, "upstream.client: must be one of fast|aiohttp",
                     id="unknown_client"),
        pytest.param({"max_connections_per_origin": -1}, None,
                     "upstream.max_connections_per_origin: must be >= 0", id="negative_cap"),
        pytest.param({"tls": {"key_file": "{pki}/client.key"}}, None,
                     "upstream.tls.key_file: needs cert_file", id="key_without_certificate"),
        pytest.param({"tls": {"ca_file": "{pki}/missing.pem"}}, None,
                     "upstream.tls.ca_file: cannot load", id="missing_ca_file"),
        pytest.param({"tls": {"ca_file": "{pki}/client.key"}}, None,
                     "upstream.tls.ca_file: cannot load", id="ca_file_not_a_certificate"),
        pytest.param({"tls": {"cert_file": "{pki}/client.pem", "key_file": "{pki}/server.key"}},
                     None, "upstream.tls.cert_file: cannot load", id="key_of_another_certificate"),
        pytest.param({"tls": {"verify": False, "ca_file": "{pki}/ca.pem"}}, None,
                     "upstream.tls.ca_file: has no use with verify: false", id="ca_without_verify"),
        pytest.param({"tls": {"ca": "x"}}, None, "upstream.tls.ca: unknown field",
                     id="unknown_tls_field"),
        pytest.param({}, [{"match": "m", "url": "https://b.example/v1", "client": "x"}],
                     "routes[0].client: must be one of", id="route_client"),
        pytest.param({}, [{"match": "m", "url": "https://b.example/v1",
                           "tls": {"cert_file": "{pki}/nope.pem"}}],
                     "routes[0].tls.cert_file: cannot load", id="route_tls"),
        pytest.param({"shadow": {"url": "https://s.example/v1",
                                 "tls": {"ca_file": "{pki}/nope.pem"}}}, None,
                     "upstream.shadow.tls.ca_file: cannot load", id="shadow_tls"),
    ],
)  # fmt: skip
def test_config_errors_name_the_field(
    pki: Pki, upstream: dict[str, Any], routes: list[dict[str, Any]] | None, message: str
) -> None:
    folder = str(pki.ca.parent)

    def fill(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: fill(item) for key, item in value.items()}
        if isinstance(value, list):
            return [fill(item) for item in value]
        return value.replace("{pki}", folder) if isinstance(value, str) else value

    with pytest.raises(ConfigError) as raised:
        _config(fill(upstream), fill(routes))
    assert str(raised.value).startswith(message), str(raised.value)


def test_the_defaults_change_nothing() -> None:
    config = load_config(None, {"upstream": {"url": "http://api.example/v1"}}, environ={})
    up = config.upstream
    assert (up.client, up.trust_env, up.max_connections_per_origin) == ("fast", False, 0)
    assert (up.tls.ca_file, up.tls.cert_file, up.tls.verify) == (None, None, True)


def test_tls_fields_come_from_the_file_and_the_environment(pki: Pki) -> None:
    environ = {"GRADEPROXY_UPSTREAM_TRUST_ENV": "true", "GRADEPROXY_UPSTREAM_CLIENT": "AIOHTTP"}
    overrides = {"upstream": {"url": "https://api.example/v1", "tls": {"ca_file": str(pki.ca)}}}
    up = load_config(None, overrides, environ=environ).upstream
    assert (up.client, up.trust_env, up.tls.ca_file) == ("aiohttp", True, pki.ca)
