"""``server.event_loop`` / ``--loop``: the loop ``serve`` runs on, and a clear error for a
uvloop that is asked for and not installed (the test environment installs uvloop)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestServer

from gradeproxy.cli import main
from proxy.eventloop import EventLoop, EventLoopError, loop_factory
from tests.support.backend import Reply, ScriptedBackend, wire
from tests.support.process import free_port

ROOT = Path(__file__).resolve().parents[2]
CHAT = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'


async def _listening(process: asyncio.subprocess.Process) -> dict[str, object]:
    """The start-up line that says the proxy listens (with the loop it runs on)."""
    assert process.stdout is not None
    while True:
        line = await asyncio.wait_for(process.stdout.readline(), 30)
        assert line, "serve exited before it listened"
        if line.startswith(b"{") and b'"event":"listening"' in line:
            entry: dict[str, object] = orjson.loads(line)
            return entry


@pytest.mark.parametrize(
    ("config_line", "flags", "expected"),
    [
        pytest.param("", [], "uvloop", id="default_auto_takes_the_installed_uvloop"),
        pytest.param("server:\n  event_loop: auto\n", [], "uvloop", id="auto_in_config"),
        pytest.param("server:\n  event_loop: asyncio\n", [], "asyncio", id="asyncio_in_config"),
        pytest.param("", ["--loop", "asyncio"], "asyncio", id="asyncio_by_flag"),
        pytest.param("", ["--loop", "uvloop"], "uvloop", id="uvloop_by_flag"),
        pytest.param(
            "server:\n  event_loop: asyncio\n", ["--loop", "uvloop"], "uvloop", id="flag_wins"
        ),
    ],
)
async def test_serve_runs_and_relays_on_the_loop_asked_for(
    tmp_path: Path,
    backend: ScriptedBackend,
    backend_server: TestServer,
    config_line: str,
    flags: list[str],
    expected: str,
) -> None:
    backend.replies.append(Reply(body=wire("openai_single_tool.json"), chunked=False))
    port = free_port()
    config = tmp_path / "config.yaml"
    config.write_text(
        f"upstream:\n  url: {backend_server.make_url('/v1')}\nlisten:\n  port: {port}\n"
        "results:\n  path: null\nshutdown:\n  drain_delay_s: 0\n  grace_period_s: 1\n" + config_line
    )
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "gradeproxy.cli", "serve", "--config", str(config), *flags),
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert (await _listening(process))["event_loop"] == expected
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"http://127.0.0.1:{port}/v1/chat/completions", data=CHAT) as response,
        ):
            assert response.status == 200
            assert await response.read() == wire("openai_single_tool.json")
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 30) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


@pytest.mark.parametrize(
    ("choice", "installed", "expected"),
    [
        pytest.param("auto", True, "uvloop", id="auto_installed"),
        pytest.param("auto", False, None, id="auto_missing_falls_back_to_asyncio"),
        pytest.param("asyncio", True, None, id="asyncio_never_takes_uvloop"),
        pytest.param("uvloop", True, "uvloop", id="uvloop_installed"),
        pytest.param("uvloop", False, "error", id="uvloop_missing_is_an_error"),
    ],
)
def test_loop_factory_by_choice_and_install(
    monkeypatch: pytest.MonkeyPatch, choice: EventLoop, installed: bool, expected: str | None
) -> None:
    if not installed:
        monkeypatch.setitem(sys.modules, "uvloop", None)  # what an absent package imports as
    if expected == "error":
        with pytest.raises(EventLoopError, match=r"pip install 'gradeproxy\[uvloop\]'"):
            loop_factory(choice)
        return
    factory = loop_factory(choice)
    if expected is None:
        assert factory is None
        return
    assert factory is not None
    loop = factory()
    try:
        assert type(loop).__module__.startswith(expected)
    finally:
        loop.close()


def test_serve_without_uvloop_installed_fails_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)
    config = tmp_path / "config.yaml"
    config.write_text(
        "upstream:\n  url: http://127.0.0.1:9/v1\nresults:\n  path: null\n"
        "server:\n  event_loop: uvloop\n"
    )
    assert main(["serve", "--config", str(config)]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("gradeproxy serve: server.event_loop is uvloop but uvloop is not")
