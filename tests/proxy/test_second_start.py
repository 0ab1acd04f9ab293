"""A second start, by mistake, beside a running demo: one line, exit 1, and the running one's rows
untouched.

One real ``gradeproxy demo`` serves for the whole module (its proxy port, backend port and
results file known); each case starts a second ``serve``, ``demo`` or ``demo-backend`` that
cannot start (its port taken, its tasks missing or broken, its config bad, its results file
claimed) and checks the first one's results file byte for byte, and that it still serves and
still writes rows. Background-started ``demo-backend`` and ``demo`` stop on SIGINT and SIGTERM.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from proxy.demo.answers import SAMPLE_TASKS_PATH
from tests.support.paths import REPO
from tests.support.process import free_port

pytestmark = pytest.mark.e2e

START_S = 60.0
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
SAMPLE_LINE = SAMPLE_TASKS_PATH.read_text().splitlines()[0]
SAMPLE = orjson.loads(SAMPLE_LINE)
TASK = '{"id": "t", "prompt": "p", "expected": {"name": "f", "arguments": {}}}\n'


def gradeproxy(*args: str, **kwargs: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-m", "gradeproxy.cli", *args], env=ENV, **kwargs
    )


@dataclass(frozen=True)
class Running:
    port: int
    backend_port: int
    results: Path
    process: subprocess.Popen[bytes]

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _rows(running: Running) -> int:
    return len(running.results.read_bytes().splitlines()) if running.results.exists() else 0


@pytest.fixture(scope="module")
def first(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """A demo that keeps serving, as ``scripts/demo.sh`` leaves it."""
    folder = tmp_path_factory.mktemp("first")
    port, backend_port = free_port(), free_port()
    results = folder / "demo.jsonl"
    process = gradeproxy(
        "demo",
        "--port",
        str(port),
        "--backend-port",
        str(backend_port),
        "--rounds",
        "1",
        "--results",
        str(results),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    running = Running(port, backend_port, results, process)
    try:
        _wait_line(process, b"Serving.")
        yield running
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(START_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        assert process.stdout is not None
        process.stdout.close()


def _second(case: str, running: Running, tmp: Path) -> list[str]:
    """The second start's command line for ``case``."""
    missing = str(tmp / "missing.jsonl")
    broken = tmp / "broken.jsonl"
    broken.write_text(SAMPLE_LINE + '\n{"id": "broken"}\n')
    good = tmp / "tasks.jsonl"
    good.write_text(TASK)
    results = str(running.results)
    port, backend = str(running.port), str(running.backend_port)

    def config(port: int | str, tasks: str, extra: str = "") -> str:
        path = tmp / f"config{len(list(tmp.glob('config*')))}.yaml"
        path.write_text(
            "upstream:\n  url: http://127.0.0.1:9/v1\n"
            f"listen:\n  port: {port}\n{extra}"
            f"tasks:\n  path: {tasks}\n"
            f"results:\n  path: {results}\n"
        )
        return str(path)

    demo = ["demo", "--results", results]
    return {
        "serve_busy_port": ["serve", "--config", config(port, str(good))],
        "serve_missing_tasks": ["serve", "--config", config(free_port(), missing)],
        "serve_broken_tasks": ["serve", "--config", config(free_port(), str(broken))],
        "serve_bad_config": ["serve", "--config", config(70000, str(good))],
        "serve_busy_admin_port": [
            "serve",
            "--config",
            config(free_port(), str(good), f"admin:\n  port: {port}\n"),
        ],
        "demo_busy_port": [*demo, "--port", port],
        "demo_busy_backend_port": [*demo, "--port", "0", "--backend-port", backend],
        "demo_results_in_use": [*demo, "--port", "0"],
        "demo_missing_tasks": [*demo, "--port", port, "--tasks", missing],
        "demo_broken_tasks": [*demo, "--port", "0", "--tasks", str(broken)],
        "demo_bad_port": [*demo, "--port", "70000"],
        "demo_bad_backend_port": [*demo, "--port", "0", "--backend-port", "-1"],
        "backend_busy_port": ["demo-backend", "--port", backend],
        "backend_busy_proxy_port": ["demo-backend", "--port", port],
        "backend_missing_tasks": ["demo-backend", "--port", "0", "--tasks", missing],
        "backend_broken_tasks": ["demo-backend", "--port", "0", "--tasks", str(broken)],
        "backend_bad_port": ["demo-backend", "--port", "70000"],
    }[case]


CASES = [
    ("serve_busy_port", "gradeproxy serve: cannot listen on http://127.0.0.1:{port}"),
    ("serve_busy_admin_port", "gradeproxy serve: cannot listen on http://127.0.0.1:{port}"),
    ("serve_missing_tasks", "gradeproxy serve: tasks.path: "),
    ("serve_broken_tasks", "broken.jsonl:2"),
    ("serve_bad_config", "listen.port: must be 0..65535"),
    ("demo_busy_port", "gradeproxy demo: --port: cannot listen on http://127.0.0.1:{port}"),
    ("demo_busy_backend_port", "gradeproxy demo: --backend-port: cannot listen on"),
    ("demo_results_in_use", "gradeproxy demo: --results: {results} is in use"),
    ("demo_missing_tasks", "gradeproxy demo: --tasks: "),
    ("demo_broken_tasks", "broken.jsonl:2"),
    (
        "demo_bad_port",
        "gradeproxy demo: config error: listen.port: must be 0..65535 (from flag --port)",
    ),
    ("demo_bad_backend_port", "gradeproxy demo: --backend-port: must be 0..65535"),
    ("backend_busy_port", "gradeproxy demo-backend: --port: cannot listen on"),
    ("backend_busy_proxy_port", "gradeproxy demo-backend: --port: cannot listen on"),
    ("backend_missing_tasks", "gradeproxy demo-backend: --tasks: "),
    ("backend_broken_tasks", "broken.jsonl:2"),
    ("backend_bad_port", "gradeproxy demo-backend: --port: must be 0..65535"),
]


@pytest.mark.parametrize(("case", "expected"), [pytest.param(*c, id=c[0]) for c in CASES])
def test_a_second_start_fails_in_one_line_and_loses_no_row(
    first: Running, tmp_path: Path, case: str, expected: str
) -> None:
    before = first.results.read_bytes()
    assert before.count(b"\n") > 0
    second = gradeproxy(
        *_second(case, first, tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, stderr = second.communicate(timeout=START_S)
    lines = stderr.decode().strip().splitlines()
    assert second.returncode == 1, stderr
    assert len(lines) == 1, stderr
    assert expected.format(port=first.port, results=first.results) in lines[0]
    assert first.results.read_bytes() == before
    # The first still serves and writes after the second's attempt.
    body = {"model": "gradeproxy-demo", "messages": [{"role": "user", "content": SAMPLE["prompt"]}]}
    request = urllib.request.Request(
        f"{first.base}/v1/chat/completions",
        data=orjson.dumps(body),
        headers={"X-Grade-Task": SAMPLE["id"], "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=START_S) as answer:
        assert answer.status == 200
    deadline = time.monotonic() + 10
    while first.results.read_bytes() == before and time.monotonic() < deadline:
        time.sleep(0.05)
    after = first.results.read_bytes()
    assert after.startswith(before)
    assert len(after) > len(before)


def _wait_line(process: subprocess.Popen[bytes], prefix: bytes) -> None:
    out = process.stdout
    assert out is not None
    for line in out:
        if line.startswith(prefix):
            return
    pytest.fail(f"no line starting {prefix!r}")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("command", ["demo-backend", "demo"])
def test_started_in_the_background_it_stops_on_a_signal(
    tmp_path: Path, command: str, sig: signal.Signals
) -> None:
    """As ``cmd &`` in a script: the shell starts it with SIGINT ignored."""
    args = ["--port", "0"]
    if command == "demo":
        args += ["--rounds", "1", "--results", str(tmp_path / "r.jsonl")]
    process = gradeproxy(
        command,
        *args,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        _wait_line(process, b"demo backend on" if command == "demo-backend" else b"Serving.")
        process.send_signal(sig)
        assert process.wait(START_S) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        assert process.stdout is not None
        process.stdout.close()
