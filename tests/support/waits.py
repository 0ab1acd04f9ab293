"""Waiting for a state a test cannot be told about: poll it, fail with what never came."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest


async def until(condition: Callable[[], bool], what: str, polls: int = 2000) -> None:
    """Wait for ``condition``, polling every 10 ms; fails (after ~20 s of polls) if it never
    holds."""
    for _ in range(polls):
        if condition():
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"never reached: {what}")
