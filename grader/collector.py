"""The cyclic collector while one process grades many answers.

Grading an answer builds and frees a few hundred small containers and keeps almost none. At
CPython's default young threshold (700 net allocations) a young collection then runs every few
answers, and every tenth one a pass over the middle generation, each walking objects that are
garbage an answer later anyway. Above what one answer (or, in the proxy, the requests in
flight) swings by, collections become rare; cyclic garbage is still collected, only later
(docs/performance.md measures both).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

GC_YOUNG_THRESHOLD = 10_000


@contextmanager
def grading_collector() -> Iterator[None]:
    """Young collections every :data:`GC_YOUNG_THRESHOLD` net allocations while the block runs,
    the process's own thresholds back after it. A threshold already higher, or 0 (automatic
    collection off), is the caller's choice and is left as it is."""
    threshold = gc.get_threshold()
    if threshold[0] == 0 or threshold[0] >= GC_YOUNG_THRESHOLD:
        yield
        return
    gc.set_threshold(GC_YOUNG_THRESHOLD, *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
