"""The cyclic collector while the proxy serves (proxy/app.py's ``_collector``): the heap built at
start frozen and a young threshold above what the requests in flight swing by, then CPython's
own settings back once the app has shut down."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from grader.collector import GC_YOUNG_THRESHOLD
from proxy.app import make_app
from tests.support.proxy import build_config


@pytest.fixture
def collector_settings() -> Iterator[tuple[int, int, int]]:
    """The settings before the test, put back after it whatever it did."""
    before = gc.get_threshold()
    yield before
    gc.set_threshold(*before)
    gc.unfreeze()


@pytest.mark.parametrize(
    ("when", "tuned"),
    [
        ("serving", True),  # young threshold GC_YOUNG_THRESHOLD, the start-up heap frozen
        ("shut_down", False),  # the process's own threshold back, nothing frozen
    ],
)
async def test_collector_tuned_while_serving_and_restored_after(
    tmp_path: Path, collector_settings: tuple[int, int, int], when: str, tuned: bool
) -> None:
    gc.unfreeze()
    app = make_app(build_config("http://127.0.0.1:9/v1", None, tmp_path / "grades.jsonl"))
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        if when == "shut_down":
            await runner.cleanup()
        serving = (GC_YOUNG_THRESHOLD, *collector_settings[1:])
        assert gc.get_threshold() == (serving if tuned else collector_settings)
        assert (gc.get_freeze_count() > 0) is tuned
    finally:
        if when == "serving":
            await runner.cleanup()
