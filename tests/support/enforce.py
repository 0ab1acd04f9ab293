"""Enforce mode's shared test pieces: the route policy the suites load, its withheld-call lines.

The policy forbids ``get_t*``: in the recorded parallel-tools answers (``get_weather`` and
``get_time``) one call fires and one does not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grader.json import dumps
from proxy.state import TASKS
from tests.support.backend import ScriptedBackend, wire
from tests.support.proxy import Client, ProxyFactory

CHAT = wire("openai_parallel_tools.json")
RESPONSES = wire("openai_responses_parallel_tools.json")
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses"}
BODIES = {"chat": CHAT, "responses": RESPONSES}
TIME_LINE = (
    "[gradeproxy] withheld tool call get_time: forbidden call 'get_time' (matches 'get_t*') "
    "(check no_time)"
)
WEATHER_LINE = (
    "[gradeproxy] withheld tool call get_weather: withheld with the blocked call in the same "
    "answer (check no_time)"
)


# Generous, so a loaded test machine never falls open by accident (the budget tests set 1).
BUDGET_MS = 10_000


def policy_file(path: Path, mode: str, **enforce: Any) -> Path:
    enforce.setdefault("budget_ms", BUDGET_MS)
    policy = {
        "policies": [
            {
                "name": "tools",
                "checks": [{"type": "policy", "name": "no_time", "forbidden_calls": ["get_t*"]}],
                "enforce": {"mode": mode, **enforce},
            }
        ]
    }
    path.write_bytes(dumps(policy))  # JSON is YAML
    return path


async def proxied(
    make_proxy: ProxyFactory, backend: ScriptedBackend, tmp_path: Path, mode: str, **kw: Any
) -> Client:
    path = policy_file(tmp_path / "policy.yaml", mode, **kw)
    client = await make_proxy(enforce={"path": str(path)})
    assert client.app[TASKS].policies is not None
    return client


async def metrics_text(client: Client) -> str:
    return await (await client.get("/metrics")).text()
