"""What a test needs from outside Python (promtool, Prometheus, chromium, BFCL's checker, the
Agents SDK's venv): found, or the test skipped locally and failed under CI, which must have
installed it (scripts/install-ci-tools.sh). One rule, so no suite can skip silently in CI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

import pytest

from tests.support.paths import REPO


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in {"", "0", "false", "no"}


def unavailable(message: str) -> NoReturn:
    """Skip with ``message`` locally; under CI a missing prerequisite is a failure."""
    if in_ci():
        pytest.fail(f"{message} (CI is set, so a missing prerequisite is an error)")
    pytest.skip(message)


def find_tool(name: str) -> str | None:
    """PATH first, then the venv running the tests, then scripts/install-ci-tools.sh's cache."""
    for candidate in (
        shutil.which(name),
        shutil.which(name, path=str(Path(sys.executable).parent)),
        shutil.which(name, path=str(REPO / ".cache" / "prometheus" / "usr" / "bin")),
    ):
        if candidate:
            return candidate
    return None


def require_tool(name: str) -> str:
    """The tool's path, or :func:`unavailable`."""
    path = find_tool(name)
    if path is None:
        unavailable(f"{name} is not installed: run scripts/install-ci-tools.sh")
    return path


def run_tool(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=60, check=False)
