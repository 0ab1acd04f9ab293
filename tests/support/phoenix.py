"""A real Arize Phoenix for the ``phoenix`` tests: ``phoenix serve`` from its own venv
(scripts/phoenix-venv.sh), on loopback, its telemetry off, its SQLite in a temporary folder,
read back through its REST API only."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.otlp import refused_port
from tests.support.paths import REPO

VENV = REPO / ".cache" / "phoenix-venv"
EXECUTABLE = VENV / "bin" / "phoenix"
STARTUP_S = 240  # migrations and imports take a minute on a shared 2-core machine


@dataclass(frozen=True)
class Phoenix:
    port: int

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(f"{self.base}{path}", timeout=10) as response:
            return json.loads(response.read())

    def spans(self, project: str = "default") -> list[dict[str, Any]]:
        spans: list[dict[str, Any]] = []
        cursor = ""
        while True:
            page = self.get(f"/v1/projects/{project}/spans?limit=1000{cursor}")
            spans += page["data"]
            if not page.get("next_cursor"):
                return spans
            cursor = f"&cursor={page['next_cursor']}"


def _up(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@contextmanager
def phoenix_server(workdir: Path) -> Iterator[Phoenix]:
    port = refused_port()
    env = {
        **os.environ,
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(refused_port()),
        "PHOENIX_WORKING_DIR": str(workdir),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    for name in [n for n in env if n.startswith("OTEL_")]:
        del env[name]  # Phoenix's own instrumentation stays off
    log = (workdir / "phoenix.log").open("wb")
    process = subprocess.Popen(
        [str(EXECUTABLE), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + STARTUP_S
        while not _up(f"http://127.0.0.1:{port}/healthz"):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"phoenix serve did not start: {(workdir / 'phoenix.log').read_text()[-2000:]}"
                )
            time.sleep(0.5)
        yield Phoenix(port)
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        log.close()
