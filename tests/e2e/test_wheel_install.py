"""The built wheel runs its own demo in a fresh virtual environment, outside the source tree.

A wheel has no ``config/`` folder, so this is the test that the sample suite really is package
data and that optional dependencies are imported only where used: ``demo-backend`` runs without
the ``[demo]`` extra, ``gradeproxy demo`` without it says in one line what to install, and with it
``gradeproxy demo --exit`` grades the sample traffic and exits 0.

Dependencies come from a wheel cache (``.cache/wheels``, git-ignored): filled from the package
index the first time (``pip download``), then every install is ``--no-index --find-links``, so a
run does not resolve the world again. Marked ``wheel``; about a minute with a warm cache.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.process import free_port

pytestmark = [pytest.mark.wheel, pytest.mark.timeout(600)]

CACHE = REPO / ".cache" / "wheels"


def pip(python: Path | str, *args: str) -> None:
    command = [str(python), "-m", "pip", "--disable-pip-version-check", "-q", *args]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stdout}\n{done.stderr}"


def requirements() -> list[str]:
    """What a wheel install needs: the build backend, the dependencies and the [demo] extra."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    build: list[str] = project["build-system"]["requires"]
    runtime: list[str] = project["project"]["dependencies"]
    demo: list[str] = project["project"]["optional-dependencies"]["demo"]
    return [*build, *runtime, *demo, "wheel"]


def fill_cache() -> None:
    """Download into the cache only what it cannot already satisfy."""
    CACHE.mkdir(parents=True, exist_ok=True)
    offline = ["download", "--no-index", "--find-links", str(CACHE), "-d", str(CACHE)]
    check = subprocess.run(
        [sys.executable, "-m", "pip", "-q", *offline, *requirements()],
        capture_output=True,
        check=False,
    )
    if check.returncode != 0:
        pip(sys.executable, "download", "-d", str(CACHE), *requirements())


def gradeproxy(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADEPROXY_")}
    return subprocess.run(
        [str(venv / "bin" / "gradeproxy"), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=180,
        check=False,
    )


def serve_backend_once(venv: Path, cwd: Path) -> bytes:
    """Start ``demo-backend``, read /v1/models, stop it with Ctrl-C; return the models body."""
    port = free_port()
    log = cwd / "demo-backend.log"
    with (
        log.open("wb") as out,
        subprocess.Popen(
            [str(venv / "bin" / "gradeproxy"), "demo-backend", "--port", str(port)],
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
        ) as process,
    ):
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    url = f"http://127.0.0.1:{port}/v1/models"
                    with urllib.request.urlopen(url, timeout=2) as response:
                        body: bytes = response.read()
                        break
                except OSError:
                    assert process.poll() is None, log.read_text()
                    assert time.monotonic() < deadline, "demo-backend did not answer in 60 s"
                    time.sleep(0.2)
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=30) == 0, log.read_text()
            return body
        finally:
            if process.poll() is None:
                process.kill()


def test_wheel_runs_its_demo_outside_the_source_tree(tmp_path: Path) -> None:
    fill_cache()
    dist = tmp_path / "dist"
    pip(
        sys.executable,
        "wheel",
        "--no-deps",
        "--no-index",
        "--find-links",
        str(CACHE),
        "-w",
        str(dist),
        str(REPO),
    )
    (wheel,) = dist.glob("gradeproxy-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    work = tmp_path / "elsewhere"
    work.mkdir()
    offline = ["install", "--no-index", "--find-links", str(CACHE)]

    pip(python, *offline, str(wheel))
    assert b"gradeproxy-demo" in serve_backend_once(venv, work)
    without_sdk = gradeproxy(venv, "demo", "--exit", "--port", "0", cwd=work)
    assert (without_sdk.returncode, without_sdk.stderr.count("\n")) == (1, 1)
    assert "pip install 'gradeproxy[demo]'" in without_sdk.stderr

    pip(python, *offline, f"{wheel}[demo]")
    demo = gradeproxy(venv, "demo", "--exit", "--port", "0", cwd=work)
    assert demo.returncode == 0, demo.stderr
    assert "scoreboard (read back from /metrics)" in demo.stdout
    assert "graded 144 answers" in demo.stdout
    assert (work / "results" / "demo.jsonl").is_file()
    schema = gradeproxy(venv, "config-schema", cwd=work)
    assert (schema.returncode, '"title": "gradeproxy config"' in schema.stdout) == (0, True)
    # The live page is package data too (proxy/surfaces/ui.html), read from the installed wheel.
    page = subprocess.run(
        [
            str(python),
            "-c",
            "import proxy.surfaces.ui, sys; sys.stdout.buffer.write(proxy.surfaces.ui.PAGE)",
        ],
        capture_output=True,
        cwd=work,
        check=True,
    )
    assert b"/ui/scoreboard.json" in page.stdout
