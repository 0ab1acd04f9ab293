"""A real Prometheus server scrapes the proxy every second with the shipped rule files; every
dashboard panel expression and recording rule returns data, and the stale-schema alert is
pending or firing for the stale-heavy task while the healthy task's alerts stay quiet."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp.test_utils import TestServer

from tests.support.backend import Reply, ScriptedBackend, wire
from tests.support.episodes import completion
from tests.support.paths import REPO
from tests.support.process import free_port, wait_ready
from tests.support.proxy import ProxyFactory, rows_of
from tests.support.tasks import task_line
from tests.support.tools import require_tool
from tests.support.workers import supervised, wait_until

pytestmark = [pytest.mark.prometheus, pytest.mark.e2e, pytest.mark.timeout(240)]
DASHBOARD = REPO / "deploy" / "grafana" / "dashboards" / "gradeproxy.json"
RULES = sorted((REPO / "deploy" / "prometheus" / "rules").glob("*.yml"))
PASS_BODY = wire("openai_single_tool.json")
STALE_BODY = PASS_BODY.replace(b'\\"unit\\":\\"celsius\\"', b'\\"units\\":\\"C\\"')
# The shadow answers with a model the price table does not know: the cost panels then show both
# a priced variant (primary) and responses without a price (shadow).
UNPRICED = b'"model": "gpt-4.1-mini-2025-04-14"', b'"model": "unpriced-candidate"'
SHADOW_PASS_BODY = PASS_BODY.replace(*UNPRICED)
SHADOW_STALE_BODY = STALE_BODY.replace(*UNPRICED)
EPISODE_TASK = next(
    line
    for line in (REPO / "config" / "tasks" / "episodes.jsonl").read_bytes().splitlines()
    if b'"id": "episodes.cause"' in line
)
EPISODE_BODY = completion({"role": "assistant", "content": "The card had expired."})
VARIABLES = {
    "$job": "gradeproxy",
    "$instance": ".*",
    "$task": ".*",
    "$model": ".*",
    "$__rate_interval": "1m",
}


def dashboard_expressions() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []

    def walk(panel: dict[str, Any]) -> None:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name, value in VARIABLES.items():
                expr = expr.replace("${" + name[1:] + "}", value).replace(name, value)
            found.append((panel["title"], expr))
        for child in panel.get("panels", []):
            walk(child)

    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        walk(panel)
    return found


def observed(line: bytes) -> bytes:
    """The task line with an ``observe`` enforce entry on its stale flag: its stale answers
    are counted in gradeproxy_enforced_total (the enforcement panel) and delivered as sent."""
    task = json.loads(line)
    task["enforce"] = {"mode": "observe", "checks": ["tool_call"], "budget_ms": 10_000}
    return json.dumps(task).encode()


def recording_rules() -> list[str]:
    return [
        rule["record"]
        for path in RULES
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
        if "record" in rule
    ]


@contextlib.asynccontextmanager
async def start_prometheus(tmp_path: Path, *targets: str) -> AsyncIterator[str]:
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(path) for path in RULES],
                "scrape_configs": [
                    {"job_name": "gradeproxy", "static_configs": [{"targets": list(targets)}]}
                ],
            }
        )
    )
    process = await asyncio.create_subprocess_exec(
        require_tool("prometheus"),
        f"--config.file={config}",
        f"--storage.tsdb.path={tmp_path / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        await wait_ready(f"{base}/-/ready", attempts=300, interval_s=0.1)
        yield base
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 20)


async def query(session: aiohttp.ClientSession, base: str, expr: str) -> list[Any]:
    async with session.get(f"{base}/api/v1/query", params={"query": expr}) as response:
        body = await response.json()
    assert body["status"] == "success", (expr, body)
    result: list[Any] = body["data"]["result"]
    return result


async def empty_among(session: aiohttp.ClientSession, base: str, exprs: list[str]) -> list[str]:
    """The expressions that return no data, after up to 30 s for rules to evaluate."""
    empty = list(exprs)
    for _ in range(30):
        empty = [expr for expr in empty if not await query(session, base, expr)]
        if not empty:
            break
        await asyncio.sleep(1.0)
    return empty


async def test_dashboard_rules_and_alerts_against_real_prometheus(
    tmp_path: Path,
    aiohttp_server: Callable[..., Awaitable[TestServer]],
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    tasks_file: Path,
    results_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    require_tool("prometheus")
    # Named keys: the traffic's (its `key` label) and one limited to a request a minute, whose
    # further requests are refused (the Inbound keys row's refusals panel).
    monkeypatch.setenv("E2E_KEY", "sk-e2e")
    monkeypatch.setenv("E2E_BURST_KEY", "sk-burst")
    keyed, burst = {"X-Gradeproxy-Key": "sk-e2e"}, {"X-Gradeproxy-Key": "sk-burst"}
    await asyncio.to_thread(
        tasks_file.write_bytes,
        b"\n".join(
            [
                task_line(
                    "healthy.task",
                    "get_weather",
                    {"city": "Zürich", "unit": "celsius"},
                    stale={"city": "Zürich", "units": "C"},
                    kind="field_renamed",
                ),
                observed(
                    task_line(
                        "stale.task",
                        "get_weather",
                        {"city": "Zürich", "unit": "celsius"},
                        stale={"city": "Zürich", "units": "C"},
                        kind="unit_changed",
                    )
                ),
                EPISODE_TASK,
            ]
        )
        + b"\n",
    )
    candidate = ScriptedBackend()  # the shadow leg: mostly right, sometimes stale (wins and losses)
    shadow = await aiohttp_server(candidate.app())
    prices = tmp_path / "prices.yaml"
    prices.write_text("models:\n  gpt-4.1-mini:\n    input: 0.40\n    output: 1.60\n")
    proxy = await make_proxy(
        upstream={"shadow": {"url": str(shadow.make_url("/v1")), "sample_rate": 1.0}},
        pricing={"path": str(prices)},
        auth={
            "keys": [
                {"id": "e2e", "secret_env": "E2E_KEY"},
                {"id": "burst", "secret_env": "E2E_BURST_KEY", "rpm": 1},
            ],
            "protect_metrics": False,
        },
    )
    assert proxy.server.port is not None
    async with (
        start_prometheus(tmp_path, f"127.0.0.1:{proxy.server.port}") as base,
        aiohttp.ClientSession() as session,
    ):
        for _ in range(200):  # until the first scrape of the proxy succeeded
            if await query(session, base, 'up{job="gradeproxy"} == 1'):
                break
            await asyncio.sleep(0.1)
        backend.replies.append(Reply(body=PASS_BODY))  # the burst key's one request a minute
        assert (await proxy.post("/v1/chat/completions", data=b"{}", headers=burst)).status == 200
        for _ in range(6):  # traffic over several scrapes: a counter's first sample has no rate
            refused = await proxy.post("/v1/chat/completions", data=b"{}", headers=burst)
            assert refused.status == 429
            # One agent episode that ends in its first turn (episodes.cause: the cause stated).
            candidate.replies.append(Reply(body=EPISODE_BODY))
            backend.replies.append(Reply(body=EPISODE_BODY))
            await proxy.post(
                "/v1/chat/completions",
                json={"messages": [{"role": "user", "content": "Why did it fail?"}]},
                headers={"X-Grade-Task": "episodes.cause", "X-Grade-Episode": "e", **keyed},
            )
            candidate.replies.extend(
                [Reply(body=SHADOW_STALE_BODY), *[Reply(body=SHADOW_PASS_BODY)] * 5]
            )
            for task, body in (("healthy.task", PASS_BODY), ("stale.task", STALE_BODY)):
                for _ in range(3):
                    backend.replies.append(Reply(body=body))
                    await proxy.post(
                        "/v1/chat/completions", data=b"{}", headers={"X-Grade-Task": task, **keyed}
                    )
            backend.replies.append(Reply(body=b'{"error":{"message":"boom"}}', status=500))
            await proxy.post("/v1/chat/completions", data=b"{}", headers=keyed)
            await asyncio.sleep(1.0)
        rows = await rows_of(proxy, results_path)
        assert sum(r["result"] == "stale" and r["variant"] == "primary" for r in rows) == 18
        assert sum(r["variant"] == "shadow" for r in rows) == 36
        assert sum(r.get("kind") == "episode" and r["result"] == "pass" for r in rows) == 6
        assert await empty_among(session, base, recording_rules()) == []
        panels = dashboard_expressions()
        empty = await empty_among(session, base, [expr for _, expr in panels])
        assert sorted({title for title, expr in panels if expr in empty}) == [], empty
        alerts: list[dict[str, Any]] = []
        for _ in range(40):
            async with session.get(f"{base}/api/v1/alerts") as response:
                alerts = (await response.json())["data"]["alerts"]
            if any(a["labels"].get("alertname") == "GradeproxyStaleSchemaRateHigh" for a in alerts):
                break
            await asyncio.sleep(0.5)
        stale = [
            a for a in alerts if a["labels"].get("alertname") == "GradeproxyStaleSchemaRateHigh"
        ]
        assert [a["labels"].get("task") for a in stale] == ["stale.task"]
        assert stale[0]["state"] in ("pending", "firing")
        healthy = [
            a["labels"]["alertname"] for a in alerts if a["labels"].get("task") == "healthy.task"
        ]
        assert healthy == []


async def test_prometheus_sums_the_workers_to_the_traffic_sent(
    tmp_path: Path,
    aiohttp_server: Callable[..., Awaitable[TestServer]],
    backend: ScriptedBackend,
    tasks_file: Path,
) -> None:
    """``--workers 2``: each worker is its own target (its admin port); the sums over both are
    exactly the traffic sent, however the kernel spread the connections."""
    require_tool("prometheus")
    upstream = await aiohttp_server(backend.app())
    graded, failed = 10, 3
    async with supervised(tmp_path, str(upstream.make_url("/v1")), tasks_file) as run:
        targets = [f"127.0.0.1:{port}" for port in run.admin_ports]
        async with (
            start_prometheus(tmp_path, *targets) as base,
            aiohttp.ClientSession() as prometheus,
        ):

            async def scraped(expected: int) -> bool:
                up = await query(prometheus, base, 'count(up{job="gradeproxy"} == 1)')
                return bool(up) and up[0]["value"][1] == str(expected)

            await wait_until(lambda: scraped(2), "both workers scraped")
            backend.replies.extend(
                [Reply(body=b'{"error":{"message":"boom"}}', status=500)] * failed
            )
            for number in range(graded + failed):  # a connection each: spread by the kernel
                async with (
                    aiohttp.ClientSession() as client,
                    client.post(
                        f"{run.base}/v1/chat/completions",
                        data=b"{}",
                        headers={"X-Grade-Task": "weather.single"},
                    ) as response,
                ):
                    assert response.status == (500 if number < failed else 200)
                    await response.read()
            sums = {
                "sum(gradeproxy_requests_total)": graded + failed,
                'sum(gradeproxy_requests_total{code="500"})': failed,
                'sum(gradeproxy_grades_total{result="pass"})': graded,
                "sum(gradeproxy_grading_skipped_total)": failed,
                "count(gradeproxy_build_info)": 2,
            }
            for expr, expected in sums.items():

                async def equal(expr: str = expr, expected: int = expected) -> bool:
                    found = await query(prometheus, base, expr)
                    return bool(found) and float(found[0]["value"][1]) == expected

                await wait_until(equal, f"{expr} == {expected}")


def test_variables_cover_every_placeholder() -> None:
    """Each $variable the dashboard uses is substituted above, so no query is sent half-built."""
    for title, expr in dashboard_expressions():
        assert not re.search(r"\$\w+", expr), (title, expr)
