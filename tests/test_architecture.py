"""The layout's rules hold: `lint-imports` enforces them, and its contract covers every module.

pyproject.toml's import-linter contract lists the grader's core module by module (every grader
module but the console-script package ``grader.cli``). A module added to ``grader/`` and not to
that list would escape the purity rule silently, so this test keeps the list complete, and runs
the linter itself so a broken contract fails the suite as well as the CI step.
"""

from __future__ import annotations

import pkgutil
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grader

ROOT = Path(__file__).resolve().parents[1]


def contracts() -> list[dict[str, list[str] | str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    found: list[dict[str, list[str] | str]] = config["tool"]["importlinter"]["contracts"]
    return found


def test_the_pure_core_contract_lists_every_grader_module_but_the_cli() -> None:
    core = next(c for c in contracts() if str(c["name"]).startswith("grader's core is pure"))
    modules = {f"grader.{m.name}" for m in pkgutil.iter_modules(grader.__path__)}
    assert set(core["source_modules"]) == modules - {"grader.cli"}
    forbidden = set(core["forbidden_modules"])
    assert {"proxy", "aiohttp", "urllib", "socket", "grader.cli"} <= forbidden


def test_the_import_contracts_are_kept() -> None:
    linter = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    result = subprocess.run(
        [linter], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def test_a_task_holds_definitions_so_grader_tasks_imports_no_check_code() -> None:
    """Issue 12: the engine builds checks and the loader validates them, never the task model."""
    contract = next(c for c in contracts() if c["source_modules"] == ["grader.tasks"])
    forbidden = set(contract["forbidden_modules"])
    assert {"grader.checks", "grader.engine", "grader.loader"} <= forbidden
