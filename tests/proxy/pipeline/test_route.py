"""Routes: the request's `model` picks the upstream (first matching glob wins, `upstream` is
the default), each with its own credentials and shadow; every config error names its field;
without routes the body is never parsed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from proxy.config import ConfigError, load_config
from proxy.pipeline import route as routing
from tests.support.metrics import scraped
from tests.support.plan_backend import PlanBackend, plan_request
from tests.support.proxy import ProxyFactory, settle

TASK = {"X-Grade-Task": "weather.single"}
BASE = "upstream:\n  url: http://127.0.0.1:8000/v1\n"
ROUTE = "routes:\n  - match: 'gpt-*'\n    url: http://127.0.0.1:8001/v1\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(BASE + "routes: {}\n", "routes: must be a list", id="routes_not_a_list"),
        pytest.param(BASE + "routes: [3]\n", "routes[0]: must be a mapping", id="route_not_a_map"),
        pytest.param(
            BASE + ROUTE + "  - match: 'x'\n    url: ftp://nope\n",
            "routes[1].url: must be an http(s) URL",
            id="second_route_url",
        ),
        pytest.param(
            BASE + "routes:\n  - url: http://x/v1\n",
            "routes[0].match: must be a non-empty model name glob",
            id="route_without_match",
        ),
        pytest.param(
            BASE + ROUTE + "    idle_timeout_s: 0\n",
            "routes[0].idle_timeout_s: must be > 0",
            id="route_timeout",
        ),
        pytest.param(
            BASE + ROUTE + "    api_key_env: NOPE_ROUTE_KEY\n",
            "routes[0].api_key_env: environment variable NOPE_ROUTE_KEY is not set",
            id="route_secret_missing",
        ),
        pytest.param(
            BASE + ROUTE + "    modle: x\n", "routes[0].modle: unknown field", id="route_typo"
        ),
        pytest.param(
            BASE + "  shadow:\n    url: nope\n",
            "upstream.shadow.url: must be an http(s) URL",
            id="default_shadow_url",
        ),
        pytest.param(
            BASE + "  shadow:\n    url: http://s/v1\n    sample_rate: 1.5\n",
            "upstream.shadow.sample_rate: must be within 0..1",
            id="shadow_rate",
        ),
        pytest.param(
            BASE + ROUTE + "    shadow:\n      url: http://s/v1\n      max_concurrency: 0\n",
            "routes[0].shadow.max_concurrency: must be >= 1",
            id="route_shadow_concurrency",
        ),
        pytest.param(
            BASE + ROUTE + "    shadow:\n      url: http://s/v1\n      stream: sometimes\n",
            "routes[0].shadow.stream: must be one of same|never",
            id="route_shadow_stream",
        ),
        pytest.param(
            BASE + "  shadow:\n    url: http://s/v1\n    timeout_s: 0\n",
            "upstream.shadow.timeout_s: must be > 0",
            id="shadow_timeout",
        ),
        pytest.param(
            BASE + "  shadow:\n    url: http://s/v1\n    api_key_env: NOPE_SHADOW_KEY\n",
            "upstream.shadow.api_key_env: environment variable NOPE_SHADOW_KEY is not set",
            id="shadow_secret_missing",
        ),
        pytest.param(
            BASE + "  shadow:\n    url: http://s/v1\n    model: ''\n",
            "upstream.shadow.model: must not be empty",
            id="shadow_model_empty",
        ),
        pytest.param(
            BASE + "grading:\n  pair_ttl_s: 0\n",
            "grading.pair_ttl_s: must be > 0",
            id="pair_ttl",
        ),
    ],
)
def test_bad_route_and_shadow_config_names_the_field(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert message in str(caught.value)


def test_shadow_is_not_settable_from_a_scalar_environment_variable(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(BASE)
    with pytest.raises(ConfigError, match=r"upstream\.shadow: must be a mapping"):
        load_config(path, environ={"GRADEPROXY_UPSTREAM_SHADOW": "http://s/v1"})


def test_redacted_config_lists_routes_by_secret_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROUTE_KEY", "sk-route-secret")
    path = tmp_path / "config.yaml"
    path.write_text(
        BASE + ROUTE + "    api_key_env: ROUTE_KEY\n    shadow:\n      url: http://s/v1\n"
    )
    config = load_config(path, environ={})
    plain = config.redacted()
    assert plain["routes"][0]["api_key_env"] == "ROUTE_KEY"
    assert plain["routes"][0]["shadow"]["stream"] == "same"
    assert "sk-route-secret" not in repr(plain)


@pytest.mark.parametrize(
    ("body", "backend"),
    [
        pytest.param(b'{"model":"gpt-4o-mini","messages":[]}', "four_o", id="first_match_wins"),
        pytest.param(b'{"model":"gpt-3.5-turbo"}', "gpt", id="second_glob"),
        pytest.param(b'{"model":"GPT-4o"}', "default", id="globs_are_case_sensitive"),
        pytest.param(b'{"model":"llama-3"}', "default", id="no_match_goes_default"),
        pytest.param(b'{"messages":[]}', "default", id="no_model_goes_default"),
        pytest.param(b'{"model":7}', "default", id="non_string_model_goes_default"),
        pytest.param(b"not json", "default", id="non_json_goes_default"),
        pytest.param(b"", "default", id="empty_body_goes_default"),
        pytest.param(b'  \n{"model":"gpt-4o"}', "four_o", id="leading_whitespace"),
    ],
)
async def test_routes_pick_the_upstream_by_model_glob(
    make_shadow_proxy: ProxyFactory,
    aiohttp_server: Callable[..., Awaitable[TestServer]],
    primary: PlanBackend,
    monkeypatch: pytest.MonkeyPatch,
    body: bytes,
    backend: str,
) -> None:
    backends = {"default": primary, "four_o": PlanBackend("primary"), "gpt": PlanBackend("primary")}
    urls = {
        name: str((await aiohttp_server(b.app())).make_url("/v1"))
        for name, b in backends.items()
        if name != "default"
    }
    monkeypatch.setenv("FOUR_O_KEY", "sk-four-o")
    routes: list[dict[str, Any]] = [
        {"match": "gpt-4o*", "url": urls["four_o"], "api_key_env": "FOUR_O_KEY"},
        {"match": "gpt-*", "url": urls["gpt"]},
    ]
    client = await make_shadow_proxy(routes=routes)
    for b in backends.values():
        b.mode = "garbage"  # answer anything, JSON or not
    response = await client.post("/v1/chat/completions", data=body)
    assert response.status == 200
    hit = [name for name, b in backends.items() if b.seen]
    assert hit == [backend]
    assert backends[backend].seen[0].body == body
    auth = backends[backend].seen[0].headers.get("Authorization")
    assert auth == ("Bearer sk-four-o" if backend == "four_o" else None)


async def test_a_route_uses_its_own_shadow(
    make_shadow_proxy: ProxyFactory,
    aiohttp_server: Callable[..., Awaitable[TestServer]],
    primary: PlanBackend,
    primary_url: str,
    shadow: PlanBackend,
    shadow_url: str,
    results_path: Path,
) -> None:
    routed, default_shadow = PlanBackend("primary"), PlanBackend("shadow")
    routed_url = str((await aiohttp_server(routed.app())).make_url("/v1"))
    default_shadow_url = str((await aiohttp_server(default_shadow.app())).make_url("/v1"))
    client = await make_shadow_proxy(
        upstream={"shadow": {"url": default_shadow_url}},
        routes=[{"match": "cand-*", "url": routed_url, "shadow": {"url": shadow_url}}],
    )
    for model in ("cand-1", "prod-model"):
        response = await client.post(
            "/v1/chat/completions", data=plan_request("pass", "fail", model=model), headers=TASK
        )
        assert response.status == 200
    rows = await settle(client, results_path)
    by_pair: dict[str, dict[str, str]] = {}
    for r in rows:
        by_pair.setdefault(r["pair_id"], {})[r["variant"]] = r["upstream"]
    assert sorted((p["primary"], p["shadow"]) for p in by_pair.values()) == sorted(
        [(routed_url, shadow_url), (primary_url, default_shadow_url)]
    )
    assert [len(b.seen) for b in (routed, shadow, primary, default_shadow)] == [1, 1, 1, 1]
    assert (
        await scraped(client, "gradeproxy_shadow_pairs_total", primary="pass", shadow="fail") == 2
    )


async def test_without_routes_the_body_is_never_parsed(
    make_shadow_proxy: ProxyFactory, primary: PlanBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    def forbidden(body: bytes) -> str | None:
        raise AssertionError("the no-routes hot path parsed the request body")

    monkeypatch.setattr(routing, "request_model", forbidden)
    client = await make_shadow_proxy()
    response = await client.post("/v1/chat/completions", data=plan_request("pass", "pass"))
    assert response.status == 200


async def test_with_routes_the_body_is_parsed_once(
    make_shadow_proxy: ProxyFactory, primary: PlanBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control for the test above: the same spy does see routed requests."""
    calls: list[bytes] = []
    real = routing.request_model

    def spy(body: bytes) -> str | None:
        calls.append(body)
        return real(body)

    monkeypatch.setattr(routing, "request_model", spy)
    client = await make_shadow_proxy(
        routes=[{"match": "nothing-*", "url": "http://127.0.0.1:9/v1"}]
    )
    await client.post("/v1/chat/completions", data=plan_request("pass", "pass"))
    assert len(calls) == 1
