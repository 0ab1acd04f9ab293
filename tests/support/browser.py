"""Debian's chromium driven by Playwright, for the page tests (the live page, the review queue).

The browser is ``/usr/bin/chromium`` (``GRADEPROXY_CHROMIUM`` names another), started through
Playwright's ``executable_path``: never one ``playwright install`` downloads. A missing browser
or Playwright skips the test locally and fails it under ``CI=true`` (tests/support/tools.py).
Screenshots go to ``artifacts/`` (git-ignored; CI keeps them).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from tests.support.paths import REPO
from tests.support.tools import unavailable

ARTIFACTS = REPO / "artifacts"
CHROMIUM = Path(os.environ.get("GRADEPROXY_CHROMIUM", "/usr/bin/chromium"))
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _missing(what: str) -> NoReturn:
    unavailable(f"{what} is not installed: run scripts/install-ci-tools.sh")


@pytest.fixture(scope="module")
def browser_context(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A persistent chromium context with a fresh profile, for the module's pages."""
    if not CHROMIUM.is_file():
        _missing(f"Debian's chromium ({CHROMIUM})")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright (pip, in the [test] extra)")
    profile = tmp_path_factory.mktemp("chromium-profile")  # a fresh --user-data-dir
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=str(CHROMIUM), headless=True, args=FLAGS
        )
        try:
            yield context
        finally:
            context.close()
