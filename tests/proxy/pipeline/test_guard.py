"""The request guard: target hygiene, inbound keys, the early 413 and trace headers, through a
proxy on real loopback sockets (raw requests: HTTP clients normalise the targets tested)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestServer
from multidict import CIMultiDict

from proxy.logs import configure_logging
from proxy.pipeline.guard import dot_segment
from proxy.telemetry.tracecontext import trace_context
from tests.support.backend import ScriptedBackend
from tests.support.live import live_proxy, raw_exchange, status_of

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _request(target: bytes, method: bytes = b"GET", extra: bytes = b"") -> bytes:
    head = b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    return method + b" " + target + head + extra + b"\r\n"


@pytest.mark.parametrize(
    ("method", "target"),
    [
        pytest.param(b"GET", b"/v1/../metrics", id="dot_dot_to_metrics"),
        pytest.param(b"GET", b"/v1/%2e%2e/admin", id="encoded_dot_dot"),
        pytest.param(b"GET", b"/v1/%2E./x", id="mixed_case_half_encoded"),
        pytest.param(b"GET", b"/v1/..%2fmetrics", id="dot_dot_with_encoded_slash"),
        pytest.param(b"GET", b"/v1/..%5cmetrics", id="dot_dot_with_encoded_backslash"),
        pytest.param(b"GET", b"/v1/a/./models", id="single_dot"),
        pytest.param(b"GET", b"/v1/models/..", id="trailing_dot_dot"),
        pytest.param(b"GET", b"/v1/x/..?q=1", id="dot_dot_before_query"),
        pytest.param(b"GET", b"http://evil.example/v1/models", id="absolute_form"),
        pytest.param(b"POST", b"http://127.0.0.1:1/v1/chat/completions", id="absolute_form_post"),
        pytest.param(b"CONNECT", b"evil.example:443", id="authority_form"),
        pytest.param(b"OPTIONS", b"*", id="asterisk_form"),
    ],
)
async def test_unsafe_targets_are_400_and_never_forwarded(
    backend: ScriptedBackend, backend_server: TestServer, method: bytes, target: bytes
) -> None:
    async with live_proxy(str(backend_server.make_url("/v1")), None, None) as live:
        response = await raw_exchange(live.port, _request(target, method))
    assert status_of(response) == 400
    error = orjson.loads(response.partition(b"\r\n\r\n")[2])["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_request_target")
    assert backend.seen == []


@pytest.mark.parametrize(
    ("target", "forwarded"),
    [
        pytest.param(b"/v1/models/a.b", "/v1/models/a.b", id="dot_inside_a_segment"),
        pytest.param(b"/v1/files/..x", "/v1/files/..x", id="dots_prefix_a_name"),
        pytest.param(b"/v1/x%2e", "/v1/x%2e", id="encoded_dot_inside_a_segment"),
        pytest.param(b"/v1/models?next=../x", "/v1/models?next=../x", id="dots_in_the_query"),
    ],
)
async def test_dots_that_are_not_segments_pass(
    backend: ScriptedBackend, backend_server: TestServer, target: bytes, forwarded: str
) -> None:
    async with live_proxy(str(backend_server.make_url("/v1")), None, None) as live:
        response = await raw_exchange(live.port, _request(target))
    assert status_of(response) == 200
    assert backend.seen[-1].path_qs == forwarded


@pytest.mark.parametrize(
    ("path", "dotted"),
    [
        ("/v1/models", False),
        ("/v1/./x", True),
        ("/v1/%2e", True),
        ("/v1/%2e%2E", True),
        ("/v1\\..\\metrics", True),
        ("/v1/...", False),
        ("/v1/.well-known", False),
        ("/v1/x?a=/../", False),
    ],
)
def test_dot_segment_table(path: str, dotted: bool) -> None:
    assert dot_segment(path) is dotted


async def test_declared_oversized_body_is_413_before_it_is_read(
    backend: ScriptedBackend, backend_server: TestServer
) -> None:
    """100 MB declared, not one byte sent: the answer comes at once, and the socket closes."""
    async with live_proxy(
        str(backend_server.make_url("/v1")), None, None, limits={"max_body_bytes": 1024 * 1024}
    ) as live:
        head = _request(b"/v1/chat/completions", b"POST", b"Content-Length: 104857600\r\n").replace(
            b"Connection: close\r\n", b""
        )
        response = await asyncio.wait_for(raw_exchange(live.port, head, read_s=3), 5)
    assert status_of(response) == 413
    assert b"connection: close" in response.lower()
    assert b'"code":"request_too_large"' in response
    assert backend.seen == []


@pytest.mark.parametrize(
    ("headers", "path", "status", "upstream_authorization"),
    [
        pytest.param({}, "/v1/models", 401, None, id="no_key"),
        pytest.param({"Authorization": "Bearer wrong"}, "/v1/models", 401, None, id="wrong_key"),
        pytest.param(
            {"Authorization": "Bearer k2"}, "/v1/models", 200, None, id="bearer_key_not_forwarded"
        ),
        pytest.param(
            {"X-Gradeproxy-Key": "k1", "Authorization": "Bearer sk-client-upstream"},
            "/v1/models",
            200,
            "Bearer sk-client-upstream",
            id="proxy_key_header_keeps_client_authorization",
        ),
        pytest.param({"X-Gradeproxy-Key": "k1x"}, "/v1/models", 401, None, id="key_prefix"),
        pytest.param({}, "/livez", 200, None, id="livez_open"),
        pytest.param({}, "/readyz", 200, None, id="readyz_open"),
        pytest.param({}, "/metrics", 401, None, id="metrics_protected"),
        pytest.param({"X-Gradeproxy-Key": "k2"}, "/metrics", 200, None, id="metrics_with_key"),
    ],
)
async def test_inbound_keys(
    backend: ScriptedBackend,
    backend_server: TestServer,
    monkeypatch: pytest.MonkeyPatch,
    headers: dict[str, str],
    path: str,
    status: int,
    upstream_authorization: str | None,
) -> None:
    monkeypatch.setenv("TEST_INBOUND_KEYS", "k1, k2")
    async with (
        live_proxy(
            str(backend_server.make_url("/v1")), None, None, auth={"keys_env": "TEST_INBOUND_KEYS"}
        ) as live,
        aiohttp.ClientSession() as session,
        session.get(live.base + path, headers=headers) as response,
    ):
        assert response.status == status
        if status == 401:
            error = (await response.json())["error"]
            assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_api_key")
            assert "k1" not in error["message"]
    if path.startswith("/v1") and status == 200:
        seen = backend.seen[-1].headers
        assert seen.get("Authorization") == upstream_authorization
        assert "X-Gradeproxy-Key" not in seen
    if status == 401:
        assert backend.seen == []


async def test_metrics_can_be_left_open_with_inbound_keys(
    backend_server: TestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_INBOUND_KEYS", "k1")
    async with (
        live_proxy(
            str(backend_server.make_url("/v1")),
            None,
            None,
            auth={"keys_env": "TEST_INBOUND_KEYS", "protect_metrics": False},
        ) as live,
        aiohttp.ClientSession() as session,
    ):
        async with session.get(live.base + "/metrics") as metrics:
            assert metrics.status == 200
        async with session.get(live.base + "/v1/models") as models:
            assert models.status == 401


async def test_scoring_api_on_the_admin_port(backend_server: TestServer, tasks_file: Path) -> None:
    async with (
        live_proxy(
            str(backend_server.make_url("/v1")),
            tasks_file,
            None,
            admin={"port": 0},
            scoring={"enabled": True, "on_admin_port": True},
        ) as live,
        aiohttp.ClientSession() as session,
    ):
        body = {"task_id": "weather.single", "answer": "no call"}
        admin = f"http://127.0.0.1:{live.admin_port}/grading/v1/score"
        async with session.post(admin, json=body) as scored:
            assert scored.status == 200, await scored.text()
        async with session.post(live.base + "/grading/v1/score", json=body) as absent:
            assert absent.status == 404


@pytest.mark.parametrize(
    ("headers", "kept", "invalid"),
    [
        pytest.param({}, {}, (), id="none"),
        pytest.param({"traceparent": PARENT}, {"traceparent": PARENT}, (), id="valid_parent"),
        pytest.param(
            {"traceparent": PARENT, "tracestate": "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"},
            {"traceparent": PARENT, "tracestate": "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"},
            (),
            id="valid_state",
        ),
        pytest.param(
            {"traceparent": PARENT.replace("00-", "ff-", 1)}, {}, ("traceparent",), id="version_ff"
        ),
        pytest.param(
            {"traceparent": "00-" + "0" * 32 + "-00f067aa0ba902b7-01"},
            {},
            ("traceparent",),
            id="zero_trace_id",
        ),
        pytest.param(
            {"traceparent": PARENT.upper()}, {}, ("traceparent",), id="uppercase_hex_refused"
        ),
        pytest.param(
            {"traceparent": PARENT + "-extra"}, {}, ("traceparent",), id="v00_with_extra_field"
        ),
        pytest.param({"traceparent": "x" * 100_000}, {}, ("traceparent",), id="oversized_parent"),
        pytest.param(
            {"traceparent": "zz", "tracestate": "a=b"},
            {},
            ("traceparent", "tracestate"),
            id="state_dropped_with_bad_parent",
        ),
        pytest.param(
            {"traceparent": PARENT, "tracestate": "a=" + "b" * 600},
            {"traceparent": PARENT},
            ("tracestate",),
            id="oversized_state",
        ),
        pytest.param(
            {"baggage": "userId=alice,serverNode=DF%2028;meta=1"},
            {"baggage": "userId=alice,serverNode=DF%2028;meta=1"},
            (),
            id="valid_baggage",
        ),
        pytest.param(
            {"baggage": ",".join(f"k{i}=v" for i in range(65))},
            {},
            ("baggage",),
            id="too_many_baggage_members",
        ),
        pytest.param({"baggage": "k=\udcff"}, {}, ("baggage",), id="obs_text_baggage"),
        pytest.param(
            {"traceparent": PARENT, "tracestate": "0vendor=1"},
            {"traceparent": PARENT},
            ("tracestate",),
            id="simple_key_starting_with_a_digit",
        ),
        pytest.param(
            {"traceparent": PARENT, "tracestate": "0tenant@sys=1"},
            {"traceparent": PARENT, "tracestate": "0tenant@sys=1"},
            (),
            id="tenant_id_starting_with_a_digit",
        ),
        pytest.param(
            {"traceparent": PARENT, "tracestate": "t" * 242 + "@sys=1"},
            {"traceparent": PARENT},
            ("tracestate",),
            id="tenant_id_past_241_characters",
        ),
        pytest.param(
            {"traceparent": PARENT, "tracestate": "a=1,b=2,a=3"},
            {"traceparent": PARENT},
            ("tracestate",),
            id="duplicate_key",
        ),
        pytest.param(
            CIMultiDict([("traceparent", PARENT), ("tracestate", "a=1"), ("tracestate", "b=2")]),
            {"traceparent": PARENT, "tracestate": "a=1,b=2"},
            (),
            id="two_state_headers_one_list",
        ),
        pytest.param(
            CIMultiDict([("traceparent", PARENT), ("tracestate", "a=1"), ("tracestate", "b c")]),
            {"traceparent": PARENT},
            ("tracestate",),
            id="second_state_header_invalid",
        ),
    ],
)
def test_trace_headers_are_validated(
    headers: Mapping[str, str], kept: dict[str, str], invalid: tuple[str, ...]
) -> None:
    context = trace_context(headers)
    got = {
        name: value
        for name in ("traceparent", "tracestate", "baggage")
        if (value := getattr(context, name)) is not None
    }
    assert (got, context.invalid) == (kept, invalid)


@pytest.mark.parametrize(
    ("traceparent", "logged"),
    [
        pytest.param(PARENT, b'"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736"', id="valid"),
        pytest.param("00-zz-zz-01", b'"trace_id":null', id="malformed"),
    ],
)
async def test_only_a_valid_traceparent_reaches_the_log_line(
    backend: ScriptedBackend,
    backend_server: TestServer,
    capfdbinary: pytest.CaptureFixture[bytes],
    traceparent: str,
    logged: bytes,
) -> None:
    configure_logging("info", "json", cache=False)
    async with (
        live_proxy(str(backend_server.make_url("/v1")), None, None) as live,
        aiohttp.ClientSession() as session,
        session.get(live.base + "/v1/models", headers={"traceparent": traceparent}) as response,
    ):
        assert response.status == 200
    assert backend.seen[-1].headers["traceparent"] == traceparent  # forwarded as sent
    [line] = [x for x in capfdbinary.readouterr().out.splitlines() if b'"event":"request"' in x]
    assert logged in line


@pytest.mark.parametrize(
    ("extra", "status"),
    [
        pytest.param(
            b"Content-Length: 104857600\r\nAuthorization: Bearer k1\r\n", 413, id="early_413"
        ),
        pytest.param(b"Content-Length: 10\r\nAuthorization: Bearer wrong\r\n", 401, id="early_401"),
    ],
)
async def test_refused_unread_bodies_hold_nothing_once_the_client_is_gone(
    backend_server: TestServer, monkeypatch: pytest.MonkeyPatch, extra: bytes, status: int
) -> None:
    """aiohttp lingers up to 10 s reading a body the handler left unread, even after the
    connection is lost: a flood of refused uploads held every connection's buffers that long.
    The watchdog ends that read when the connection goes."""
    monkeypatch.setenv("TEST_INBOUND_KEYS", "k1")
    async with live_proxy(
        str(backend_server.make_url("/v1")),
        None,
        None,
        limits={"max_body_bytes": 1024 * 1024},
        auth={"keys_env": "TEST_INBOUND_KEYS", "protect_metrics": False},
    ) as live:
        baseline = len(asyncio.all_tasks())
        request = _request(b"/v1/chat/completions", b"POST", extra).replace(
            b"Connection: close\r\n", b""
        )
        responses = await asyncio.gather(*(raw_exchange(live.port, request) for _ in range(40)))
        assert {status_of(r) for r in responses} == {status}
        await asyncio.sleep(0.3)
        assert len(asyncio.all_tasks()) <= baseline + 2
