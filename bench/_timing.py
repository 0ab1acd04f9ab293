"""The two ways the in-process benchmarks time a callable, written once.

``timings`` calls it once per round (a call long enough to time alone: a stream, a page, a 1 MB
answer); ``per_call`` loops it for a slice of time per round (a call too short to time alone).
Both return every round, so a script reports the least disturbed one (``min``) or the typical
one (``statistics.median``) and says which; on a shared machine the spread is part of the figure.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def timings(fn: Callable[[], object], repeats: int) -> list[float]:
    """Seconds taken by each of ``repeats`` calls of ``fn``."""
    seen = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        seen.append(time.perf_counter() - started)
    return seen


def per_call(fn: Callable[[], object], seconds: float, rounds: int) -> list[float]:
    """Seconds per call in each of ``rounds`` rounds, each looping ``fn`` for seconds/rounds."""
    seen = []
    for _ in range(rounds):
        count, started = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - started) < seconds / rounds:
            fn()
            count += 1
        seen.append(elapsed / count)
    return seen
