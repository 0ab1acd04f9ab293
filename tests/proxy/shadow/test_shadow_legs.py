"""The shadow leg: the client's response is the primary's, byte for byte, whatever the shadow
does; the shadow gets its own copy (model override, stream mode, its own credentials), is
graded like the primary, and every way it can end is counted."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from grader.json import loads_exact
from proxy.state import METRICS, SHADOWS
from tests.support.metrics import scraped
from tests.support.plan_backend import Mode, PlanBackend, plan_request, plan_responses_request
from tests.support.proxy import ProxyFactory, settle

TASK = {"X-Grade-Task": "weather.single"}


def shadow_section(url: str, **fields: Any) -> dict[str, Any]:
    return {"shadow": {"url": url, **fields}}


# (shadow backend mode, shadow url override, shadow timeout, expected shadow result,
#  shadow rows, unpaired reason)
FAILURES = [
    pytest.param("plan", "http://127.0.0.1:9/v1", 5.0, "error", 0, "ungraded", id="shadow_down"),
    pytest.param("gated", None, 0.2, "timeout", 0, "ungraded", id="shadow_slower_than_timeout"),
    pytest.param("garbage", None, 5.0, "ok", 0, "ungraded", id="shadow_returns_garbage"),
    pytest.param("status_500", None, 5.0, "error", 0, "ungraded", id="shadow_returns_500"),
    pytest.param("empty", None, 5.0, "ok", 0, "ungraded", id="shadow_returns_empty_body"),
    pytest.param("plan", None, 5.0, "ok", 1, None, id="shadow_healthy_control"),
]


@pytest.mark.parametrize("shadow_client", ["fast", "aiohttp"])  # shadow.client
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize(
    ("mode", "url", "timeout_s", "result", "shadow_rows", "unpaired"), FAILURES
)
async def test_primary_bytes_unchanged_whatever_the_shadow_does(
    make_shadow_proxy: ProxyFactory,
    primary: PlanBackend,
    shadow: PlanBackend,
    shadow_url: str,
    results_path: Path,
    stream: bool,
    mode: Mode,
    url: str | None,
    timeout_s: float,
    result: str,
    shadow_rows: int,
    unpaired: str | None,
    shadow_client: str,
) -> None:
    shadow.mode = mode
    client = await make_shadow_proxy(
        upstream=shadow_section(url or shadow_url, timeout_s=timeout_s, client=shadow_client)
    )
    request = plan_request("pass", "fail", stream=stream)
    response = await client.post("/v1/chat/completions", data=request, headers=TASK)
    assert response.status == 200
    assert await response.read() == primary.sent[0]
    assert primary.seen[0].body == request  # the primary's request bytes are the client's
    rows = await settle(client, results_path)  # a gated shadow ends by its own timeout
    shadow.gate.set()
    assert [r["variant"] for r in rows].count("primary") == 1
    assert [r["variant"] for r in rows].count("shadow") == shadow_rows
    assert await scraped(client, "gradeproxy_shadow_requests_total", result=result) == 1
    assert await scraped(client, "gradeproxy_shadow_requests_total") == 1
    pairs = await scraped(client, "gradeproxy_shadow_pairs_total")
    if unpaired is None:
        assert pairs == 1
        assert await scraped(client, "gradeproxy_shadow_unpaired_total") == 0
    else:
        assert pairs == 0
        assert await scraped(client, "gradeproxy_shadow_unpaired_total", reason=unpaired) == 1
    assert client.app[SHADOWS].in_flight == 0


async def test_the_shadow_starts_together_with_the_primary(
    make_shadow_proxy: ProxyFactory,
    primary: PlanBackend,
    shadow: PlanBackend,
    shadow_url: str,
    results_path: Path,
) -> None:
    """The primary backend answers only once the shadow backend has its copy: a shadow sent
    after the primary's relay would never arrive (the guard turns that hang into a failure)."""
    primary.mode = "gated"
    primary.gate = shadow.received
    client = await make_shadow_proxy(upstream=shadow_section(shadow_url))
    response = await asyncio.wait_for(
        client.post("/v1/chat/completions", data=plan_request("pass", "pass"), headers=TASK), 10
    )
    assert response.status == 200
    await settle(client, results_path)
    assert (
        await scraped(client, "gradeproxy_shadow_pairs_total", primary="pass", shadow="pass") == 1
    )


@pytest.mark.parametrize(
    ("stream_mode", "client_streams", "shadow_streams"),
    [
        pytest.param("same", True, True, id="sse_primary_sse_shadow"),
        pytest.param("never", True, False, id="sse_primary_json_shadow"),
        pytest.param("same", False, False, id="json_primary_json_shadow"),
        pytest.param("never", False, False, id="json_primary_never_is_a_no_op"),
    ],
)
async def test_stream_modes(
    make_shadow_proxy: ProxyFactory,
    primary: PlanBackend,
    shadow: PlanBackend,
    shadow_url: str,
    results_path: Path,
    stream_mode: str,
    client_streams: bool,
    shadow_streams: bool,
) -> None:
    client = await make_shadow_proxy(upstream=shadow_section(shadow_url, stream=stream_mode))
    request = plan_request("pass", "stale", stream=client_streams)
    response = await client.post("/v1/chat/completions", data=request, headers=TASK)
    assert await response.read() == primary.sent[0]
    rows = {r["variant"]: r for r in await settle(client, results_path)}
    assert (rows["primary"]["stream"], rows["shadow"]["stream"]) == (client_streams, shadow_streams)
    assert (rows["primary"]["result"], rows["shadow"]["result"]) == ("pass", "stale")
    sent = loads_exact(shadow.seen[0].body.decode())
    assert sent.get("stream", False) is shadow_streams
    assert ("stream_options" in sent) is shadow_streams
    if stream_mode == "same" or not client_streams:
        assert shadow.seen[0].body == request  # nothing to change: the same bytes
    assert primary.seen[0].body == request
    assert await scraped(
        client, "gradeproxy_shadow_pairs_total", task="weather.single", primary="pass",
        shadow="stale",
    ) == 1  # fmt: skip


@pytest.mark.parametrize(
    ("stream_mode", "client_streams", "shadow_streams"),
    [
        pytest.param("same", True, True, id="sse_primary_sse_shadow"),
        pytest.param("never", True, False, id="sse_primary_json_shadow"),
        pytest.param("same", False, False, id="json_primary_json_shadow"),
    ],
)
async def test_a_responses_request_is_shadowed_and_both_legs_graded(
    make_shadow_proxy: ProxyFactory,
    primary: PlanBackend,
    shadow: PlanBackend,
    shadow_url: str,
    results_path: Path,
    stream_mode: str,
    client_streams: bool,
    shadow_streams: bool,
) -> None:
    client = await make_shadow_proxy(upstream=shadow_section(shadow_url, stream=stream_mode))
    request = plan_responses_request("pass", "stale", stream=client_streams)
    response = await client.post("/v1/responses", data=request, headers=TASK)
    assert await response.read() == primary.sent[0]
    rows = {r["variant"]: r for r in await settle(client, results_path)}
    assert (rows["primary"]["stream"], rows["shadow"]["stream"]) == (client_streams, shadow_streams)
    assert (rows["primary"]["result"], rows["shadow"]["result"]) == ("pass", "stale")
    assert await scraped(
        client, "gradeproxy_shadow_pairs_total", task="weather.single", primary="pass",
        shadow="stale",
    ) == 1  # fmt: skip


async def test_model_override_rewrites_only_the_shadow_copy(
    make_shadow_proxy: ProxyFactory,
    primary: PlanBackend,
    shadow: PlanBackend,
    shadow_url: str,
    results_path: Path,
) -> None:
    client = await make_shadow_proxy(upstream=shadow_section(shadow_url, model="candidate-7"))
    # Bytes a re-serialiser would change: the primary must still get exactly these.
    request = plan_request("pass", "pass", temperature=1.0e0, seed=123456789012345678901234567890)
    request = request.replace(b'"temperature":1.0', b'"temperature":1.0e0')
    response = await client.post("/v1/chat/completions", data=request, headers=TASK)
    assert await response.read() == primary.sent[0]
    assert primary.seen[0].body == request
    sent = loads_exact(shadow.seen[0].body.decode())
    assert sent["model"] == "candidate-7"
    assert sent["seed"] == 123456789012345678901234567890  # exact, not a float
    rows = {r["variant"]: r for r in await settle(client, results_path)}
    assert (rows["primary"]["model"], rows["shadow"]["model"]) == ("prod-model", "candidate-7")
    assert rows["primary"]["pair_id"] == rows["shadow"]["pair_id"]
    assert rows["primary"]["request_id"] == rows["shadow"]["request_id"]
    assert (
        await scraped(client, "gradeproxy_grades_total", variant="shadow", model="candidate-7") == 1
    )


@pytest.mark.parametrize(
    ("shadow_key_env", "want"),
    [
        pytest.param(None, None, id="no_shadow_key_no_authorization"),
        pytest.param("SHADOW_TEST_KEY", "Bearer sk-shadow", id="shadow_key_from_env"),
    ],
)
async def test_client_credentials_never_reach_the_shadow(
    make_shadow_proxy: ProxyFactory,
    primary: PlanBackend,
    shadow: PlanBackend,
    shadow_url: str,
    results_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    shadow_key_env: str | None,
    want: str | None,
) -> None:
    monkeypatch.setenv("SHADOW_TEST_KEY", "sk-shadow")
    client = await make_shadow_proxy(
        upstream=shadow_section(shadow_url, api_key_env=shadow_key_env)
    )
    headers = {**TASK, "Authorization": "Bearer sk-client", "OpenAI-Organization": "org-1",
               "X-Request-Id": "req-42", "X-Custom": "kept"}  # fmt: skip
    await client.post("/v1/chat/completions", data=plan_request("pass", "pass"), headers=headers)
    await settle(client, Path("/nonexistent"))
    assert primary.seen[0].headers["Authorization"] == "Bearer sk-client"
    seen = shadow.seen[0].headers
    assert seen.get("Authorization") == want
    assert "OpenAI-Organization" not in seen
    assert "X-Grade-Task" not in seen
    assert (seen["X-Request-Id"], seen["X-Custom"]) == ("req-42", "kept")


async def test_concurrency_limit_skips_and_counts(
    make_shadow_proxy: ProxyFactory,
    primary: PlanBackend,
    shadow: PlanBackend,
    shadow_url: str,
    results_path: Path,
) -> None:
    """With one slot held by a stuck shadow, later requests are not shadowed (never queued),
    and their primaries are answered and graded as usual."""
    shadow.mode = "gated"
    client = await make_shadow_proxy(upstream=shadow_section(shadow_url, max_concurrency=1))
    for number in range(3):
        response = await client.post(
            "/v1/chat/completions", data=plan_request("pass", "fail"), headers=TASK
        )
        assert await response.read() == primary.sent[number]
    assert client.app[SHADOWS].in_flight == 1
    assert (
        await scraped(client, "gradeproxy_shadow_requests_total", result="skipped_concurrency") == 2
    )
    shadow.mode = "plan"
    shadow.gate.set()
    rows = await settle(client, results_path)
    assert sorted(r["variant"] for r in rows) == ["primary", "primary", "primary", "shadow"]
    assert sorted(r["pair_id"] is None for r in rows) == [False, False, True, True]
    assert await scraped(client, "gradeproxy_shadow_requests_total", result="ok") == 1
    assert (
        await scraped(client, "gradeproxy_shadow_pairs_total", primary="pass", shadow="fail") == 1
    )
    # The slot came back: the next request is shadowed again.
    await client.post("/v1/chat/completions", data=plan_request("pass", "fail"), headers=TASK)
    await settle(client, results_path)
    assert await scraped(client, "gradeproxy_shadow_requests_total", result="ok") == 2


@pytest.mark.parametrize(
    ("grading_rate", "shadow_rate", "headers", "result"),
    [
        pytest.param(1.0, 0.0, TASK, "sampled_out", id="shadow_rate_zero"),
        pytest.param(0.0, 1.0, TASK, "sampled_out", id="ungraded_requests_are_never_shadowed"),
        pytest.param(1.0, 1.0, TASK, "ok", id="both_rates_one"),
        pytest.param(1.0, 1.0, {"X-Grade-Task": "no.such"}, None, id="unknown_task_not_eligible"),
        pytest.param(1.0, 1.0, {}, None, id="no_task_header_not_eligible"),
    ],
)
async def test_only_sampled_graded_requests_are_shadowed(
    make_shadow_proxy: ProxyFactory,
    shadow: PlanBackend,
    shadow_url: str,
    results_path: Path,
    grading_rate: float,
    shadow_rate: float,
    headers: dict[str, str],
    result: str | None,
) -> None:
    client = await make_shadow_proxy(
        upstream=shadow_section(shadow_url, sample_rate=shadow_rate),
        grading={"sample_rate": grading_rate},
    )
    await client.post("/v1/chat/completions", data=plan_request("pass", "pass"), headers=headers)
    await settle(client, results_path)
    total = await scraped(client, "gradeproxy_shadow_requests_total")
    if result is None:
        assert total == 0
    else:
        assert (
            total,
            await scraped(client, "gradeproxy_shadow_requests_total", result=result),
        ) == (
            1,
            1,
        )
    assert len(shadow.seen) == (result == "ok")


async def test_other_routes_are_never_shadowed(
    make_shadow_proxy: ProxyFactory, shadow: PlanBackend, shadow_url: str, results_path: Path
) -> None:
    client = await make_shadow_proxy(upstream=shadow_section(shadow_url))
    await client.get("/v1/models", headers=TASK)
    await settle(client, results_path)
    assert shadow.seen == []
    assert await scraped(client, "gradeproxy_shadow_requests_total") == 0


async def test_primary_failure_leaves_the_pair_ungraded(
    make_shadow_proxy: ProxyFactory, shadow: PlanBackend, shadow_url: str, results_path: Path
) -> None:
    """The primary is down: the client gets the proxy's 502, the shadow still runs and is
    graded, and the pair is counted as unpaired (ungraded), not as a pair."""
    client = await make_shadow_proxy(
        upstream={"url": "http://127.0.0.1:9/v1", **shadow_section(shadow_url)}
    )
    response = await client.post(
        "/v1/chat/completions", data=plan_request("pass", "pass"), headers=TASK
    )
    assert response.status == 502
    rows = await settle(client, results_path)
    assert [r["variant"] for r in rows] == ["shadow"]
    assert await scraped(client, "gradeproxy_shadow_unpaired_total", reason="ungraded") == 1
    assert await scraped(client, "gradeproxy_shadow_pairs_total") == 0


async def test_shutdown_cancels_stuck_shadows_within_the_grace_period(
    make_shadow_proxy: ProxyFactory, shadow: PlanBackend, shadow_url: str
) -> None:
    shadow.mode = "gated"
    client = await make_shadow_proxy(upstream=shadow_section(shadow_url, timeout_s=600))
    await client.post("/v1/chat/completions", data=plan_request("pass", "pass"), headers=TASK)
    runner = client.app[SHADOWS]
    assert runner.in_flight == 1
    await runner.close(timeout_s=0)
    assert runner.in_flight == 0
    metrics = client.app[METRICS]
    assert metrics.shadow_requests.labels("error")._value.get() == 1
    shadow.gate.set()
