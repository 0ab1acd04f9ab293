"""``scripts/demo.sh`` from a fresh virtual environment: it says what it is doing on the cold
install (one line per step, no pip or setuptools noise), skips the install on the next run, and
installs again when pyproject.toml's hash no longer matches its stamp.

Marked ``wheel`` (a real install into a fresh venv, about a minute with pip's cache warm).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import REPO

pytestmark = [pytest.mark.wheel, pytest.mark.timeout(600)]


def run_demo(venv: Path, results: Path) -> list[str]:
    """The script's stderr lines (the demo's own output goes to stdout)."""
    script = str(REPO / "scripts" / "demo.sh")
    done = subprocess.run(
        [script, "--exit", "--port", "0", "--rounds", "1", "--results", str(results)],
        env={**os.environ, "GRADEPROXY_VENV": str(venv)},
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "scoreboard (read back from /metrics)" in done.stdout
    return done.stderr.splitlines()


def test_cold_install_shows_progress_then_warm_runs_skip_it(tmp_path: Path) -> None:
    venv, results = tmp_path / "venv", tmp_path / "demo.jsonl"
    cold = run_demo(venv, results)
    assert cold[0] == f"demo.sh: creating the virtual environment {venv} ..."
    assert cold[1].startswith("demo.sh: installing gradeproxy[demo]")
    assert any(line.startswith("demo.sh:   collecting ") for line in cold)
    assert "demo.sh:   done" in cold
    # Nothing but the script's own lines: no setuptools banner, no pip warnings.
    assert [line for line in cold if not line.startswith("demo.sh: ")] == []
    stamp = venv / ".gradeproxy-demo-stamp"
    assert (
        stamp.read_text().split()[0]
        in subprocess.run(
            ["sha256sum", str(REPO / "pyproject.toml")], capture_output=True, text=True, check=True
        ).stdout
    )

    warm = run_demo(venv, results)
    assert warm == [f"demo.sh: {venv} is up to date (pyproject.toml unchanged): no install"]

    stamp.write_text("an older pyproject.toml [demo]\n")
    changed = run_demo(venv, results)
    assert changed[0].startswith("demo.sh: installing gradeproxy[demo]")
    assert [line for line in changed if not line.startswith("demo.sh: ")] == []
