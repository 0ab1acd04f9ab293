"""The curated public API stays complete, sorted and free of the server stack."""

from __future__ import annotations

import subprocess
import sys

import grader


def test_all_is_sorted_and_importable() -> None:
    def isort_key(name: str) -> tuple[int, str]:  # ruff's RUF022 order: CONSTANTS, Classes, rest
        return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)

    assert grader.__all__ == sorted(grader.__all__, key=isort_key)
    for name in grader.__all__:
        assert hasattr(grader, name), name


def test_public_names_are_all_exported() -> None:
    public = {
        n
        for n in vars(grader)
        if not n.startswith("_") and not isinstance(getattr(grader, n), type(grader))
    }
    assert public <= set(grader.__all__) | {"annotations"}


def test_grader_never_imports_aiohttp() -> None:
    # The offline commands with a --judge reach proxy/judge_client.py (aiohttp) only when run.
    commands = ", ".join(f"gradeproxy.cli.{c}" for c in ("grade", "validate", "regrade", "replay"))
    code = f"import sys, grader, gradeproxy.cli, {commands}; print('aiohttp' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    assert out.strip() == "False"
