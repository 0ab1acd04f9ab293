"""The OpenAI Agents SDK as the tests drive it: its own venv, and one agent script run in it.

The SDK pins openai and mcp, so it never shares the project's venv: scripts/agents-venv.sh builds
it once in .cache/agents-venv and prints its interpreter, and each agent script
(tests/support/billing_agent.py, tests/support/enforce_agent.py) runs there as a subprocess that
takes a JSON config and prints one JSON object. Without network the venv cannot be built: the
test is skipped locally, a failure under CI=true (:func:`tests.support.tools.unavailable`).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from typing import Any

from tests.support.paths import REPO
from tests.support.tools import unavailable

AGENTS = REPO / "tests" / "support"
RUN_TIMEOUT_S = 120


def agents_python() -> str:
    """The SDK venv's interpreter, built first if it is missing or stale (about a minute from
    PyPI; a cached one only checks its stamp); :func:`unavailable` when it cannot be built."""
    built = subprocess.run(
        [str(REPO / "scripts" / "agents-venv.sh")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if built.returncode != 0:
        unavailable(f"cannot build the Agents SDK venv: {built.stderr[-2000:]}")
    return built.stdout.strip().splitlines()[-1]


async def run_agent(python: str, script: str, config: dict[str, Any]) -> dict[str, Any]:
    """Runs tests/support/``script`` with ``config`` and returns the JSON object it printed last.

    The environment is bare but for PATH: tracing off (the SDK would post traces to OpenAI) and a
    dummy key, so nothing of the caller's, a real key included, reaches the agent.
    """
    proc = await asyncio.create_subprocess_exec(
        python,
        str(AGENTS / script),
        json.dumps(config),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={
            "PATH": os.environ.get("PATH", ""),
            "OPENAI_AGENTS_DISABLE_TRACING": "1",
            "OPENAI_API_KEY": "sk-test",
        },
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(), RUN_TIMEOUT_S)
    assert proc.returncode == 0, stderr.decode()[-3000:]
    result: dict[str, Any] = json.loads(stdout.decode().strip().splitlines()[-1])
    return result
