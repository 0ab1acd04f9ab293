"""``gradeproxy serve`` fails at start in one line naming the cause (exit 1, no traceback), and
/readyz says why it is not ready."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer

from proxy.cli import _warn_exposed_key
from proxy.config import load_config
from tests.support.process import free_port, reap, spawn_serve
from tests.support.proxy import ProxyFactory

BROKEN_TASKS = '{"id": "ok", "expected": {"name": "f", "arguments": {}}}\n{"id": "broken"}\n'


async def _serve(config: Path) -> tuple[int, str]:
    """Exit status and stderr of a ``serve`` that is expected to stop by itself."""
    process = await spawn_serve(
        config, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    try:
        _, stderr = await asyncio.wait_for(process.communicate(), 30)
    finally:
        await reap(process)
    assert process.returncode is not None
    return process.returncode, stderr.decode()


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        pytest.param("bad_tasks", "tasks.jsonl:2", id="bad_task_file_names_file_and_line"),
        pytest.param("missing_tasks", "missing.jsonl", id="missing_task_file"),
        pytest.param("port_in_use", "cannot listen on", id="port_in_use"),
        pytest.param("results_unwritable", "/file: ", id="results_path_unusable"),
        pytest.param("missing_config", "cannot read config", id="missing_config_file"),
        pytest.param("bad_config", "config.yaml:4: listen.port: must be 0..65535", id="bad_config"),
    ],
)
async def test_start_up_failures_are_one_line(tmp_path: Path, case: str, expected: str) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(BROKEN_TASKS if case == "bad_tasks" else BROKEN_TASKS.splitlines()[0] + "\n")
    port = free_port()
    blocker = socket.socket()
    if case == "port_in_use":
        blocker.bind(("127.0.0.1", port))
        blocker.listen()
    results = tmp_path / "grades.jsonl"
    if case == "results_unwritable":
        blocker_file = tmp_path / "file"
        blocker_file.write_text("")
        results = blocker_file / "grades.jsonl"  # a path under a regular file
    task_path = tmp_path / "missing.jsonl" if case == "missing_tasks" else tasks
    text = (
        "upstream:\n  url: http://127.0.0.1:9/v1\n"
        f"listen:\n  port: {70000 if case == 'bad_config' else port}\n"
        f"tasks:\n  path: {task_path}\n"
        f"results:\n  path: {results}\n"
        "shutdown:\n  drain_delay_s: 0\n  grace_period_s: 0\n"
    )
    try:
        config = tmp_path / ("nope.yaml" if case == "missing_config" else "config.yaml")
        if case != "missing_config":
            config.write_text(text)
        rc, stderr = await _serve(config)
    finally:
        blocker.close()
    lines = stderr.strip().splitlines()
    assert rc == 1
    assert len(lines) == 1, stderr
    assert expected in lines[0]
    assert "Traceback" not in stderr


async def test_readyz_says_why_tasks_did_not_load(
    make_proxy: ProxyFactory, tasks_file: Path
) -> None:
    await asyncio.to_thread(tasks_file.write_text, BROKEN_TASKS)
    client = await make_proxy()
    for _ in range(100):
        body = await (await client.get("/readyz")).json()
        if body.get("reason"):
            break
        await asyncio.sleep(0.02)
    assert body["status"] == "loading_tasks"
    assert "tasks.jsonl:2" in body["reason"]


async def test_allow_start_without_tasks_is_ready_and_says_so(
    make_proxy: ProxyFactory, tasks_file: Path
) -> None:
    await asyncio.to_thread(tasks_file.write_text, BROKEN_TASKS)
    client = await make_proxy(tasks={"allow_start_without": True})
    response = await client.get("/readyz")
    body = await response.json()
    assert (response.status, body["status"], body["tasks"]) == (200, "ready", 0)
    assert "tasks.jsonl:2" in body["tasks_error"]
    assert (await client.post("/v1/chat/completions", data=b"{}")).status == 200


@pytest.mark.parametrize(
    ("host", "upstream_key", "inbound", "warned"),
    [
        pytest.param("0.0.0.0", True, False, True, id="exposed"),
        pytest.param("0.0.0.0", True, True, False, id="inbound_keys_set"),
        pytest.param("127.0.0.1", True, False, False, id="loopback"),
        pytest.param("0.0.0.0", False, False, False, id="no_upstream_key"),
        pytest.param("0.0.0.0", "shadow", False, True, id="shadow_key_exposed"),
    ],
)
def test_loud_warning_when_the_upstream_key_is_exposed(
    backend_server: TestServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    host: str,
    upstream_key: bool | str,
    inbound: bool,
    warned: bool,
) -> None:
    monkeypatch.setenv("TEST_UP_KEY", "sk-x")
    monkeypatch.setenv("TEST_IN_KEYS", "k1")
    config = load_config(
        None,
        {
            "upstream": {
                "url": "http://127.0.0.1:9/v1",
                "api_key_env": "TEST_UP_KEY" if upstream_key is True else None,
                "shadow": (
                    {"url": "http://127.0.0.1:9/v1", "api_key_env": "TEST_UP_KEY"}
                    if upstream_key == "shadow"
                    else None
                ),
            },
            "listen": {"host": host},
            "auth": {"keys_env": "TEST_IN_KEYS" if inbound else None},
        },
        environ={},
    )
    _warn_exposed_key(config)
    err = capsys.readouterr().err
    assert ("WARNING" in err) is warned
    assert "sk-x" not in err
